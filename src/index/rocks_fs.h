// RocksFileSystem: the index's RocksDB files through kvtier's FileSystem.
//
// Every file RocksDB keeps for the index (WAL, SST, MANIFEST, CURRENT,
// OPTIONS, LOCK, and its info LOG: index/rocks_log.h) is opened, written,
// synced, renamed and removed through the
// store's FileSystem, so that what wraps it - fault injection, the power-loss
// simulation - reaches the index too: a simulated power cut drops RocksDB's
// unsynced WAL bytes and undoes its unsynced renames exactly as it does the
// segments'. Files RocksDB creates get the store's file mode and folders its
// folder mode (the FileSystem sets them whatever the umask).
//
// What stays on RocksDB's own default file system, and why: metadata
// questions with no FileSystem counterpart (IsDirectory, modification
// times, absolute paths), which neither write nor lose data.
//
// Thread safety: as the wrapped FileSystem (RocksDB calls from several
// threads). A RocksDB file object is used by one thread at a time, as RocksDB
// promises; random-access reads may run concurrently (File is positional).
#ifndef KVTIER_SRC_INDEX_ROCKS_FS_H_
#define KVTIER_SRC_INDEX_ROCKS_FS_H_

#include <rocksdb/env.h>

#include <memory>

#include "kvtier/io.h"

namespace kvtier {

// An Env whose file system is `fs`, creating files `file_mode` and folders
// `dir_mode`. It must outlive the DB opened with it; `fs` is shared.
std::unique_ptr<rocksdb::Env> NewRocksEnv(std::shared_ptr<FileSystem> fs, unsigned file_mode, unsigned dir_mode);

}  // namespace kvtier

#endif  // KVTIER_SRC_INDEX_ROCKS_FS_H_
