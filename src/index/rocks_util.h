// Helpers shared by the RocksDB databases kvtier keeps (the block index and
// the shared tier's remote index): status mapping and big-endian key bytes
// (so that byte order is numeric order).
#ifndef KVTIER_SRC_INDEX_ROCKS_UTIL_H_
#define KVTIER_SRC_INDEX_ROCKS_UTIL_H_

#include <rocksdb/slice.h>
#include <rocksdb/status.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier {

// kvtier's Status for RocksDB's, the message prefixed by `context`.
Status FromRocks(const rocksdb::Status& s, std::string_view context);

void AppendBE32(std::string* out, uint32_t v);
void AppendBE64(std::string* out, uint64_t v);
uint64_t LoadBE64(const char* p);

inline std::string_view View(const rocksdb::Slice& s) { return {s.data(), s.size()}; }
// Lower-case hex of `bytes`, for messages.
std::string Hex(std::string_view bytes);

}  // namespace kvtier

#endif  // KVTIER_SRC_INDEX_ROCKS_UTIL_H_
