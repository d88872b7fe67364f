// The store folder's layout: every name in it, in one place (drawn in
// docs/format.md). The store opens, creates and checks these; the tools
// reach them only through the Store API.
//
//   DIR/SUPERBLOCK          format version, store id, segment size (2 copies)
//   DIR/LOCK                flock of the process that has the store open
//   DIR/segments/seg-NNNNNN.kvs   the log (SegmentTable::FileName)
//   DIR/index/              RocksDB: entries, segment rows, checkpoints
//   DIR/namespaces/<16 hex>.ns  one file per registered namespace
//   DIR/index.damaged-<ms>  an index repair moved aside
#ifndef KVTIER_SRC_STORE_LAYOUT_H_
#define KVTIER_SRC_STORE_LAYOUT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/namespace.h"
#include "kvtier/service.h"
#include "log/segment_table.h"

namespace kvtier::layout {

inline constexpr std::string_view kSuperblock = "SUPERBLOCK";
inline constexpr std::string_view kLock = "LOCK";
inline constexpr std::string_view kSegmentsDir = "segments";
inline constexpr std::string_view kIndexDir = "index";
inline constexpr std::string_view kNamespacesDir = "namespaces";
// Suffix of files written whole and renamed into place.
inline constexpr std::string_view kTempSuffix = ".tmp";

inline std::string In(const std::string& dir, std::string_view name) { return dir + "/" + std::string(name); }
inline std::string SuperblockPath(const std::string& dir) { return In(dir, kSuperblock); }
inline std::string LockPath(const std::string& dir) { return In(dir, kLock); }
inline std::string SegmentsDir(const std::string& dir) { return In(dir, kSegmentsDir); }
inline std::string IndexDir(const std::string& dir) { return In(dir, kIndexDir); }
inline std::string NamespacesDir(const std::string& dir) { return In(dir, kNamespacesDir); }
inline std::string SegmentPath(const std::string& dir, uint32_t id) {
  return SegmentsDir(dir) + "/" + SegmentTable::FileName(id);
}
inline std::string NamespacePath(const std::string& dir, NamespaceId id) {
  return NamespacesDir(dir) + "/" + NamespaceIdToHex(id) + ".ns";
}
inline std::string DamagedIndexPath(const std::string& dir, uint64_t unix_ms) {
  return IndexDir(dir) + ".damaged-" + std::to_string(unix_ms);
}
// Entries a folder may hold before it is made a store: what a crash during
// a store's creation leaves (the superblock is renamed into place last), and
// an auto: service's socket and log. A folder holding anything else is not
// made a store.
inline bool LeftByInterruptedCreation(std::string_view name) {
  return name == kLock || name == std::string(kSuperblock) + std::string(kTempSuffix) || name == kSegmentsDir ||
         name == kNamespacesDir || name == kServiceSocketName || name == kServiceLogName;
}

}  // namespace kvtier::layout

#endif  // KVTIER_SRC_STORE_LAYOUT_H_
