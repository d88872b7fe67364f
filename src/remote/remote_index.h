// The remote index: which blocks the shared tier holds, in a RocksDB of its
// own under <store>/remote/index (apart from the local index, which it never
// touches).
//
//   'K' ns(8 BE) key                 -> Location (where the record is in RADOS)
//   'O' base 0x00 ns(8 BE) key       -> ""   (the blocks of one upload, to drop them)
//   'N' ns(8 BE)                     -> NamespaceSpec::Encode() from the summary
//   'C' catalog key                  -> base (uploads imported)
//   'U' segment(4 BE) generation(4 BE) -> base (local segments this node uploaded)
//
// Losing it loses nothing: a node re-imports the catalog into an empty one.
// Thread-safe (RocksDB is); Import and Drop are atomic batches.
#ifndef KVTIER_SRC_REMOTE_REMOTE_INDEX_H_
#define KVTIER_SRC_REMOTE_REMOTE_INDEX_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/record.h"
#include "kvtier/io.h"
#include "kvtier/namespace.h"
#include "kvtier/status.h"
#include "remote/summary.h"

namespace kvtier::remote {

struct Location {
  std::string base;  // object base name (summary.h)
  uint64_t part_bytes = 0;
  uint32_t segment = 0, generation = 0;
  uint64_t offset = 0;  // record start in the uploaded segment
  uint64_t payload_len = 0, checksum = 0, sequence = 0;
  uint16_t key_len = 0;
  uint16_t flags = 0;  // the record's flags (format::kRecordDense)
  uint64_t PayloadOffset() const { return format::PayloadOffset(key_len, payload_len, flags); }
};

// Where the remote index lives, and the I/O seam its RocksDB files go
// through (index/rocks_fs.h), with the modes they are created with.
struct RemoteIndexFiles {
  std::string path;
  std::shared_ptr<FileSystem> fs;  // null: the kernel's
  unsigned file_mode = 0600, dir_mode = 0700;
};

class RemoteIndex {
 public:
  static Result<std::unique_ptr<RemoteIndex>> Open(const RemoteIndexFiles& files);
  ~RemoteIndex();

  Result<std::optional<Location>> Get(NamespaceId ns, std::string_view key);
  // The spec (Encode()) that summaries gave for `ns`, if any.
  Result<std::optional<std::string>> Spec(NamespaceId ns);

  // Adds every entry of `s` whose namespace spec fingerprints to its id,
  // and marks `catalog_key` imported. Returns the entries added.
  Result<uint64_t> Import(const SegmentSummary& s, const std::string& catalog_key);
  // Drops the blocks of upload `base` (entries that still point at it) and
  // its catalog mark.
  Status Drop(const std::string& catalog_key, const std::string& base);
  // Drops one entry if it still points at `base`.
  Status DropEntry(NamespaceId ns, std::string_view key, const std::string& base);
  // Imported catalog keys and their bases.
  Result<std::vector<std::pair<std::string, std::string>>> Imported();
  bool IsImported(const std::string& catalog_key);

  Status MarkUploaded(uint32_t segment, uint32_t generation, const std::string& base);
  bool IsUploaded(uint32_t segment, uint32_t generation);

 private:
  RemoteIndex();
  struct Rep;
  std::unique_ptr<Rep> rep_;
};

}  // namespace kvtier::remote

#endif  // KVTIER_SRC_REMOTE_REMOTE_INDEX_H_
