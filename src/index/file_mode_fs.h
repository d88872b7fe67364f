// A RocksDB FileSystem that gives every file and folder it creates one mode.
//
// RocksDB creates its files 0644 less the umask, whatever the store asked
// for: a private store's index would be world-readable, and a group store's
// (Options::group_access) would deny its group the write access it needs to
// open the index. This wrapper sets the store's mode explicitly (chmod, so
// the umask cannot take bits away) on each file RocksDB creates: WAL, SST,
// MANIFEST, CURRENT, OPTIONS, LOG and its LOCK.
//
// Thread safety: as the wrapped FileSystem (RocksDB calls it from several
// threads); the wrapper keeps no mutable state.
#ifndef KVTIER_SRC_INDEX_FILE_MODE_FS_H_
#define KVTIER_SRC_INDEX_FILE_MODE_FS_H_

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <memory>

namespace kvtier {

// An Env whose file system is RocksDB's default one with files created
// `file_mode` and folders `dir_mode`. It must outlive the DB opened with it.
std::unique_ptr<rocksdb::Env> NewFileModeEnv(unsigned file_mode, unsigned dir_mode);

}  // namespace kvtier

#endif  // KVTIER_SRC_INDEX_FILE_MODE_FS_H_
