#include "index/rocks_fs.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <rocksdb/file_system.h>

#include "index/rocks_log.h"

namespace kvtier {
namespace {

using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

// RocksDB tells "absent" from "failed" by the status's code: keep the codes
// it asks about (NotFound, NoSpace, Busy) and send the rest as IOError.
IOStatus ToRocks(const Status& st) {
  if (st.ok()) return IOStatus::OK();
  const std::string m = st.message();
  switch (st.code()) {
    case Code::kNotFound: return IOStatus::PathNotFound(m);
    case Code::kNoSpace: return IOStatus::NoSpace(m);
    case Code::kBusy: return IOStatus::IOError("While lock file", m);
    case Code::kNotSupported: return IOStatus::NotSupported(m);
    case Code::kInvalidArgument: return IOStatus::InvalidArgument(m);
    case Code::kCorruption: return IOStatus::Corruption(m);
    default: return IOStatus::IOError(m);
  }
}

Result<std::unique_ptr<File>> OpenForRead(FileSystem* fs, const std::string& path) {
  OpenFlags f;
  f.read_only = true;
  return fs->Open(path, f);
}

// A read of up to `n` bytes at `offset` of a file of `size` bytes: RocksDB
// expects short reads at the end of a file, kvtier's File never gives one.
IOStatus ReadUpTo(File* file, uint64_t size, uint64_t offset, size_t n, Slice* result, char* scratch) {
  const size_t avail = offset >= size ? 0 : static_cast<size_t>(std::min<uint64_t>(n, size - offset));
  if (avail > 0) {
    IOStatus s = ToRocks(file->ReadAt(offset, scratch, avail));
    if (!s.ok()) return s;
  }
  *result = Slice(scratch, avail);
  return IOStatus::OK();
}

class SequentialFile final : public rocksdb::FSSequentialFile {
 public:
  explicit SequentialFile(std::unique_ptr<File> f) : f_(std::move(f)) {}
  IOStatus Read(size_t n, const IOOptions&, Slice* result, char* scratch, IODebugContext*) override {
    // Asked each time: a WAL may still grow while a read-only opener reads it.
    auto size = f_->Size();
    if (!size.ok()) return ToRocks(size.status());
    IOStatus s = ReadUpTo(f_.get(), *size, pos_, n, result, scratch);
    if (s.ok()) pos_ += result->size();
    return s;
  }
  IOStatus Skip(uint64_t n) override {
    auto size = f_->Size();
    if (!size.ok()) return ToRocks(size.status());
    pos_ = std::min(pos_ + n, *size);
    return IOStatus::OK();
  }

 private:
  std::unique_ptr<File> f_;
  uint64_t pos_ = 0;
};

class RandomAccessFile final : public rocksdb::FSRandomAccessFile {
 public:
  RandomAccessFile(std::unique_ptr<File> f, uint64_t size) : f_(std::move(f)), size_(size) {}
  IOStatus Read(uint64_t offset, size_t n, const IOOptions&, Slice* result, char* scratch,
                IODebugContext*) const override {
    // Tables are immutable once written; the size is asked again only for a
    // read past the one seen at open.
    uint64_t size = size_;
    if (offset + n > size) {
      auto now = f_->Size();
      if (!now.ok()) return ToRocks(now.status());
      size = *now;
    }
    return ReadUpTo(f_.get(), size, offset, n, result, scratch);
  }

 private:
  std::unique_ptr<File> f_;
  const uint64_t size_;
};

class WritableFile final : public rocksdb::FSWritableFile {
 public:
  WritableFile(std::unique_ptr<File> f, uint64_t size) : f_(std::move(f)), size_(size) {}
  IOStatus Append(const Slice& data, const IOOptions&, IODebugContext*) override {
    IOStatus s = ToRocks(f_->WriteAt(size_, data.data(), data.size()));
    if (s.ok()) size_ += data.size();
    return s;
  }
  IOStatus Truncate(uint64_t size, const IOOptions&, IODebugContext*) override {
    IOStatus s = ToRocks(f_->Truncate(size));
    if (s.ok()) size_ = size;
    return s;
  }
  // Durability is asked for by Sync; closing only lets the file go.
  IOStatus Close(const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }
  IOStatus Flush(const IOOptions&, IODebugContext*) override { return IOStatus::OK(); }
  IOStatus Sync(const IOOptions&, IODebugContext*) override { return ToRocks(f_->Sync()); }
  // File::Sync covers what was written before it, whatever runs beside it;
  // RocksDB's SyncWAL (the checkpoint's) needs this.
  bool IsSyncThreadSafe() const override { return true; }
  uint64_t GetFileSize(const IOOptions&, IODebugContext*) override { return size_; }

 private:
  std::unique_ptr<File> f_;
  uint64_t size_;
};

class Directory final : public rocksdb::FSDirectory {
 public:
  Directory(FileSystem* fs, std::string path) : fs_(fs), path_(std::move(path)) {}
  IOStatus Fsync(const IOOptions&, IODebugContext*) override { return ToRocks(fs_->SyncDir(path_)); }

 private:
  FileSystem* fs_;
  const std::string path_;
};

class Lock final : public rocksdb::FileLock {
 public:
  explicit Lock(std::unique_ptr<kvtier::FileLock> l) : held_(std::move(l)) {}

 private:
  std::unique_ptr<kvtier::FileLock> held_;
};

class RocksFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  RocksFileSystem(std::shared_ptr<kvtier::FileSystem> fs, unsigned file_mode, unsigned dir_mode)
      : FileSystemWrapper(rocksdb::FileSystem::Default()), fs_(std::move(fs)), file_mode_(file_mode),
        dir_mode_(dir_mode) {}

  const char* Name() const override { return "kvtier::RocksFileSystem"; }

  IOStatus NewSequentialFile(const std::string& path, const rocksdb::FileOptions&,
                             std::unique_ptr<rocksdb::FSSequentialFile>* out, IODebugContext*) override {
    auto f = OpenForRead(fs_.get(), path);
    if (!f.ok()) return ToRocks(f.status());
    *out = std::make_unique<SequentialFile>(std::move(f).value());
    return IOStatus::OK();
  }

  IOStatus NewRandomAccessFile(const std::string& path, const rocksdb::FileOptions&,
                               std::unique_ptr<rocksdb::FSRandomAccessFile>* out, IODebugContext*) override {
    auto f = OpenForRead(fs_.get(), path);
    if (!f.ok()) return ToRocks(f.status());
    auto size = (*f)->Size();
    if (!size.ok()) return ToRocks(size.status());
    *out = std::make_unique<RandomAccessFile>(std::move(f).value(), *size);
    return IOStatus::OK();
  }

  IOStatus NewWritableFile(const std::string& path, const rocksdb::FileOptions&,
                           std::unique_ptr<rocksdb::FSWritableFile>* out, IODebugContext*) override {
    return OpenWritable(path, /*truncate=*/true, out);
  }
  IOStatus ReopenWritableFile(const std::string& path, const rocksdb::FileOptions&,
                              std::unique_ptr<rocksdb::FSWritableFile>* out, IODebugContext*) override {
    return OpenWritable(path, /*truncate=*/false, out);
  }
  IOStatus ReuseWritableFile(const std::string& path, const std::string& old, const rocksdb::FileOptions&,
                             std::unique_ptr<rocksdb::FSWritableFile>* out, IODebugContext*) override {
    IOStatus s = ToRocks(fs_->Rename(old, path));
    return s.ok() ? OpenWritable(path, /*truncate=*/true, out) : s;
  }
  IOStatus NewRandomRWFile(const std::string& path, const rocksdb::FileOptions&,
                           std::unique_ptr<rocksdb::FSRandomRWFile>*, IODebugContext*) override {
    return IOStatus::NotSupported("kvtier's index does not update files in place: " + path);
  }
  IOStatus NewDirectory(const std::string& path, const IOOptions&, std::unique_ptr<rocksdb::FSDirectory>* out,
                        IODebugContext*) override {
    *out = std::make_unique<Directory>(fs_.get(), path);
    return IOStatus::OK();
  }

  IOStatus FileExists(const std::string& path, const IOOptions&, IODebugContext*) override {
    auto e = fs_->Exists(path);
    if (!e.ok()) return ToRocks(e.status());
    return *e ? IOStatus::OK() : IOStatus::NotFound(path);
  }
  IOStatus GetChildren(const std::string& dir, const IOOptions&, std::vector<std::string>* out,
                       IODebugContext*) override {
    auto names = fs_->ListDir(dir);
    if (!names.ok()) return ToRocks(names.status());
    *out = std::move(names).value();
    return IOStatus::OK();
  }
  // The wrapper would ask the default file system; RocksDB's own fallback
  // asks GetChildren and GetFileSize, which come here.
  IOStatus GetChildrenFileAttributes(const std::string& dir, const IOOptions& o,
                                     std::vector<rocksdb::FileAttributes>* out, IODebugContext* d) override {
    return rocksdb::FileSystem::GetChildrenFileAttributes(dir, o, out, d);
  }
  IOStatus DeleteFile(const std::string& path, const IOOptions&, IODebugContext*) override {
    return ToRocks(fs_->Remove(path));
  }
  IOStatus DeleteDir(const std::string& path, const IOOptions&, IODebugContext*) override {
    return ToRocks(fs_->Remove(path));
  }
  IOStatus CreateDir(const std::string& path, const IOOptions&, IODebugContext*) override {
    return ToRocks(fs_->CreateDir(path, dir_mode_));
  }
  IOStatus CreateDirIfMissing(const std::string& path, const IOOptions&, IODebugContext*) override {
    return ToRocks(fs_->CreateDir(path, dir_mode_));
  }
  IOStatus GetFileSize(const std::string& path, const IOOptions&, uint64_t* size, IODebugContext*) override {
    auto f = OpenForRead(fs_.get(), path);
    if (!f.ok()) return ToRocks(f.status());
    auto s = (*f)->Size();
    if (!s.ok()) return ToRocks(s.status());
    *size = *s;
    return IOStatus::OK();
  }
  IOStatus Truncate(const std::string& path, size_t size, const IOOptions&, IODebugContext*) override {
    OpenFlags flags;
    auto f = fs_->Open(path, flags);
    if (!f.ok()) return ToRocks(f.status());
    return ToRocks((*f)->Truncate(size));
  }
  IOStatus RenameFile(const std::string& from, const std::string& to, const IOOptions&,
                      IODebugContext*) override {
    return ToRocks(fs_->Rename(from, to));
  }
  IOStatus LinkFile(const std::string& from, const std::string&, const IOOptions&, IODebugContext*) override {
    return IOStatus::NotSupported("kvtier's index does not hard-link files: " + from);
  }
  IOStatus LockFile(const std::string& path, const IOOptions&, rocksdb::FileLock** lock, IODebugContext*) override {
    auto l = fs_->Lock(path, /*exclusive=*/true, file_mode_);
    if (!l.ok()) return ToRocks(l.status());
    *lock = new Lock(std::move(l).value());
    return IOStatus::OK();
  }
  IOStatus UnlockFile(rocksdb::FileLock* lock, const IOOptions&, IODebugContext*) override {
    delete lock;
    return IOStatus::OK();
  }
  IOStatus GetFreeSpace(const std::string& path, const IOOptions&, uint64_t* free, IODebugContext*) override {
    auto f = fs_->FreeSpace(path);
    if (!f.ok()) return ToRocks(f.status());
    *free = *f;
    return IOStatus::OK();
  }

  // The info LOG, through the store's FileSystem too (index/rocks_log.h:
  // RocksDB's own logger aborts the process on a failing disk). Appended
  // to when it exists; RocksDB's AutoRollLogger renames it away when full.
  IOStatus NewLogger(const std::string& path, const IOOptions&, std::shared_ptr<rocksdb::Logger>* out,
                     IODebugContext*) override {
    std::unique_ptr<File> f;
    uint64_t size = 0;
    IOStatus s = OpenCreating(path, &f, &size);
    if (!s.ok()) return s;
    *out = NewIndexInfoLog(std::move(f), size);
    return IOStatus::OK();
  }

 private:
  IOStatus OpenWritable(const std::string& path, bool truncate, std::unique_ptr<rocksdb::FSWritableFile>* out) {
    std::unique_ptr<File> f;
    uint64_t size = 0;
    IOStatus s = OpenCreating(path, &f, &size);
    if (!s.ok()) return s;
    if (truncate && size != 0) {
      s = ToRocks(f->Truncate(0));
      if (!s.ok()) return s;
    }
    *out = std::make_unique<WritableFile>(std::move(f), truncate ? 0 : size);
    return IOStatus::OK();
  }

  // Opens `path`, created with the store's file mode when absent; *size is
  // its length.
  IOStatus OpenCreating(const std::string& path, std::unique_ptr<File>* file, uint64_t* size) {
    OpenFlags flags;
    flags.create = true;
    flags.mode = file_mode_;
    auto f = fs_->Open(path, flags);
    if (!f.ok()) return ToRocks(f.status());
    auto n = (*f)->Size();
    if (!n.ok()) return ToRocks(n.status());
    *file = std::move(f).value();
    *size = *n;
    return IOStatus::OK();
  }

  const std::shared_ptr<kvtier::FileSystem> fs_;
  const unsigned file_mode_, dir_mode_;
};

}  // namespace

std::unique_ptr<rocksdb::Env> NewRocksEnv(std::shared_ptr<FileSystem> fs, unsigned file_mode, unsigned dir_mode) {
  return rocksdb::NewCompositeEnv(std::make_shared<RocksFileSystem>(std::move(fs), file_mode & 07777, dir_mode & 07777));
}

}  // namespace kvtier
