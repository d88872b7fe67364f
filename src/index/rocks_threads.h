// The background threads an index gives its RocksDB, of its own rather than
// the process-wide pool of rocksdb::Env::Default().
//
// Why: the index is written without a WAL (index.h), so a checkpoint, a
// Remove and Close wait for a memtable flush, which runs on a background
// thread. The default pool's threads are created once per process and do
// not survive fork(): in a child of a process that had opened a store, a
// flush was queued to threads that no longer exist and every wait for it
// hung. Threads owned by the Env of each open index are created by that
// open, in whichever process makes it.
//
// Ownership: the returned Env wraps `base` (file system and clock) and
// owns it; it must outlive the DB that uses it (the index deletes the DB
// first). Its threads are joined by its destructor; jobs still queued then
// are dropped (RocksDB unschedules its own before a DB closes).
//
// Thread safety: as rocksdb::Env.
#ifndef KVTIER_SRC_INDEX_ROCKS_THREADS_H_
#define KVTIER_SRC_INDEX_ROCKS_THREADS_H_

#include <rocksdb/env.h>

#include <memory>

namespace kvtier {

std::unique_ptr<rocksdb::Env> WithOwnThreads(std::unique_ptr<rocksdb::Env> base);

}  // namespace kvtier

#endif  // KVTIER_SRC_INDEX_ROCKS_THREADS_H_
