// The index's info LOG (RocksDB's diagnostics), written through the store's
// FileSystem like every other file of the index.
//
// Why not RocksDB's own logger: on a failing disk its writer asserts on the
// line after a failed write (Debian's librocksdb is built with assertions),
// aborting the engine or service that embeds the store over a diagnostics
// file. This one never fails its caller: lines it cannot write are kept and
// tried again at the same offset with the next ones, and dropped past 1 MiB.
// Lines are written a few KiB at a time and whenever RocksDB flushes the
// logger, so a crash can take the last ones, as with RocksDB's own.
//
// Thread safety: Logv may be called from any thread (RocksDB's threads log
// at once).
#ifndef KVTIER_SRC_INDEX_ROCKS_LOG_H_
#define KVTIER_SRC_INDEX_ROCKS_LOG_H_

#include <rocksdb/env.h>

#include <memory>

#include "kvtier/io.h"

namespace kvtier {

// A logger appending to `file` from `size` (its length when opened).
// RocksDB's AutoRollLogger wraps it and rolls the LOG by its size.
std::shared_ptr<rocksdb::Logger> NewIndexInfoLog(std::unique_ptr<File> file, uint64_t size);

}  // namespace kvtier

#endif  // KVTIER_SRC_INDEX_ROCKS_LOG_H_
