#include "index/rocks_log.h"

#include <sys/time.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <string>

#include "util/thread_annotations.h"

namespace kvtier {
namespace {

class IndexInfoLog : public rocksdb::Logger {
 public:
  IndexInfoLog(std::unique_ptr<File> file, uint64_t size) : file_(std::move(file)), size_(size) {}
  ~IndexInfoLog() override { (void)!Close().ok(); }

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    std::string line = Stamp();
    char body[1024];
    va_list copy;
    va_copy(copy, ap);
    const int n = std::vsnprintf(body, sizeof body, format, copy);
    va_end(copy);
    if (n < 0) return;
    if (static_cast<size_t>(n) < sizeof body) {
      line.append(body, static_cast<size_t>(n));
    } else {
      std::string big(static_cast<size_t>(n) + 1, '\0');
      std::vsnprintf(big.data(), big.size(), format, ap);
      line.append(big.data(), static_cast<size_t>(n));
    }
    if (line.back() != '\n') line.push_back('\n');
    MutexLock l(&mu_);
    if (closed_) return;
    pending_ += line;
    if (pending_.size() >= kWriteAtBytes) WritePending();
  }

  // RocksDB flushes its logger after an open, a flush or a compaction, and
  // before it rolls or closes the file.
  void Flush() override {
    MutexLock l(&mu_);
    WritePending();
  }

  size_t GetLogFileSize() const override {
    MutexLock l(&mu_);
    return static_cast<size_t>(size_ + pending_.size());
  }

 protected:
  rocksdb::Status CloseImpl() override {
    MutexLock l(&mu_);
    WritePending();
    closed_ = true;
    return rocksdb::Status::OK();  // what could not be written is dropped: diagnostics only
  }

 private:
  // "2026/12/06-06:10:00.123456 1234 ", as RocksDB's own lines begin.
  static std::string Stamp() {
    timeval tv{};
    ::gettimeofday(&tv, nullptr);
    tm t{};
    ::localtime_r(&tv.tv_sec, &t);
    char s[64];
    std::snprintf(s, sizeof s, "%04d/%02d/%02d-%02d:%02d:%02d.%06ld %ld ", t.tm_year + 1900, t.tm_mon + 1,
                  t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, static_cast<long>(tv.tv_usec),
                  static_cast<long>(::gettid()));
    return s;
  }

  // Lines are gathered and written a few KiB at a time: an open logs
  // hundreds (RocksDB's options), which would each be a write of their own.
  static constexpr size_t kWriteAtBytes = 16 << 10;
  static constexpr size_t kDropAboveBytes = 1 << 20;  // a disk refusing every write

  void WritePending() REQUIRES(mu_) {
    if (pending_.empty()) return;
    if (file_->WriteAt(size_, pending_.data(), pending_.size()).ok()) {
      size_ += pending_.size();
      pending_.clear();
    } else if (pending_.size() >= kDropAboveBytes) {
      pending_.clear();  // tried again with the next lines until then, at the same offset
    }
  }

  const std::unique_ptr<File> file_;
  mutable Mutex mu_;
  uint64_t size_ GUARDED_BY(mu_);
  std::string pending_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
};

}  // namespace

std::shared_ptr<rocksdb::Logger> NewIndexInfoLog(std::unique_ptr<File> file, uint64_t size) {
  return std::make_shared<IndexInfoLog>(std::move(file), size);
}

}  // namespace kvtier
