#include "harness/trash.h"

#include <unistd.h>

#include <filesystem>
#include <vector>

namespace kvbench {

namespace fs = std::filesystem;

Trash::Trash(std::string dir) : root_(std::move(dir) + "/.trash") {
  thread_ = std::thread([this] { Loop(); });
}

Trash::~Trash() {
  Drain();
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Trash::Add(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return;
  fs::create_directories(root_, ec);
  std::string dst;
  {
    std::lock_guard<std::mutex> l(mu_);
    dst = root_ + "/" + std::to_string(++seq_);
  }
  fs::rename(path, dst, ec);
  if (ec) {  // e.g. another file system: delete here
    fs::remove_all(path, ec);
    return;
  }
  std::unique_lock<std::mutex> l(mu_);
  pending_.push_back(dst);
  cv_.notify_all();
  if (pending_.size() > kMaxPending) {
    // Bound the disk the trash holds: catch up now, holds or not.
    draining_ = true;
    cv_.wait(l, [&] { return pending_.size() <= kMaxPending; });
    draining_ = false;
  }
}

void Trash::Drain() {
  std::unique_lock<std::mutex> l(mu_);
  draining_ = true;
  cv_.notify_all();
  cv_.wait(l, [&] { return pending_.empty() && !busy_; });
  draining_ = false;
  l.unlock();
  std::error_code ec;
  fs::remove(root_, ec);  // only when empty
}

Trash::Guard Trash::Hold() {
  // Wait for the unlink in progress, so the caller's timed section starts
  // with the deleter stopped.
  std::unique_lock<std::mutex> l(mu_);
  ++holds_;
  cv_.wait(l, [&] { return !busy_ || draining_; });
  return Guard(this);
}

Trash::Guard::~Guard() {
  if (t_ == nullptr) return;
  {
    std::lock_guard<std::mutex> l(t_->mu_);
    --t_->holds_;
  }
  t_->cv_.notify_all();
}

uint64_t Trash::files_deleted() const {
  std::lock_guard<std::mutex> l(mu_);
  return files_;
}

bool Trash::WaitToWork(std::unique_lock<std::mutex>& l) {
  busy_ = false;
  cv_.notify_all();
  cv_.wait(l, [&] { return stop_ || (!pending_.empty() && (holds_ == 0 || draining_)); });
  if (stop_) return false;
  busy_ = true;
  return true;
}

void Trash::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (WaitToWork(l)) {
    const std::string top = pending_.front();
    l.unlock();
    // Unlink files one at a time, checking for holds between them; folders
    // (no data, no TRIM) go at the end in one remove_all.
    std::vector<std::string> files;
    std::error_code ec;
    if (fs::is_directory(fs::symlink_status(top, ec))) {
      for (auto it = fs::recursive_directory_iterator(top, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (!it->is_directory(ec)) files.push_back(it->path().string());
    }
    for (const std::string& f : files) {
      ::unlink(f.c_str());
      l.lock();
      ++files_;
      if (holds_ > 0 && !draining_ && !stop_) {
        busy_ = false;
        cv_.notify_all();
        cv_.wait(l, [&] { return holds_ == 0 || draining_ || stop_; });
        busy_ = true;
      }
      l.unlock();
    }
    fs::remove_all(top, ec);
    l.lock();
    pending_.pop_front();
  }
}

}  // namespace kvbench
