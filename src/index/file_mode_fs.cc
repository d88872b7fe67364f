#include "index/file_mode_fs.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kvtier {
namespace {

class FileModeFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  FileModeFileSystem(unsigned file_mode, unsigned dir_mode)
      : FileSystemWrapper(rocksdb::FileSystem::Default()), file_mode_(file_mode), dir_mode_(dir_mode) {}

  const char* Name() const override { return "kvtier::FileModeFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override {
    return Chmod(f, file_mode_, target()->NewWritableFile(f, o, r, d));
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* d) override {
    return Chmod(f, file_mode_, target()->ReopenWritableFile(f, o, r, d));
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old, const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* d) override {
    return Chmod(f, file_mode_, target()->ReuseWritableFile(f, old, o, r, d));
  }
  rocksdb::IOStatus NewRandomRWFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* r,
                                    rocksdb::IODebugContext* d) override {
    return Chmod(f, file_mode_, target()->NewRandomRWFile(f, o, r, d));
  }
  rocksdb::IOStatus NewLogger(const std::string& f, const rocksdb::IOOptions& o,
                              std::shared_ptr<rocksdb::Logger>* r, rocksdb::IODebugContext* d) override {
    return Chmod(f, file_mode_, target()->NewLogger(f, o, r, d));
  }
  rocksdb::IOStatus LockFile(const std::string& f, const rocksdb::IOOptions& o, rocksdb::FileLock** l,
                             rocksdb::IODebugContext* d) override {
    return Chmod(f, file_mode_, target()->LockFile(f, o, l, d));
  }
  rocksdb::IOStatus CreateDir(const std::string& f, const rocksdb::IOOptions& o,
                              rocksdb::IODebugContext* d) override {
    return Chmod(f, dir_mode_, target()->CreateDir(f, o, d));
  }
  rocksdb::IOStatus CreateDirIfMissing(const std::string& f, const rocksdb::IOOptions& o,
                                       rocksdb::IODebugContext* d) override {
    return Chmod(f, dir_mode_, target()->CreateDirIfMissing(f, o, d));
  }

 private:
  // Sets `mode` on what a successful call created or opened. Only a file this
  // process owns is changed: a group member opening another user's store
  // leaves the owner's modes alone.
  static rocksdb::IOStatus Chmod(const std::string& path, unsigned mode, rocksdb::IOStatus created) {
    if (!created.ok()) return created;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || st.st_uid != ::geteuid() || (st.st_mode & 07777) == mode)
      return created;
    if (::chmod(path.c_str(), static_cast<mode_t>(mode)) != 0)
      return rocksdb::IOStatus::IOError("chmod " + path, std::strerror(errno));
    return created;
  }

  const unsigned file_mode_, dir_mode_;
};

}  // namespace

std::unique_ptr<rocksdb::Env> NewFileModeEnv(unsigned file_mode, unsigned dir_mode) {
  return rocksdb::NewCompositeEnv(std::make_shared<FileModeFileSystem>(file_mode & 07777, dir_mode & 07777));
}

}  // namespace kvtier
