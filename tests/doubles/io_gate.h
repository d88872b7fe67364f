// IoGate: holds the store's segment reads, or its segment writes, at the I/O
// seam until the test opens it, so a test can keep an I/O "on the device" for
// as long as it likes (FaultInjectionFileSystem::SetBeforeRead and
// SetBeforeWrite). The index's I/O passes.
#ifndef KVTIER_TESTS_DOUBLES_IO_GATE_H_
#define KVTIER_TESTS_DOUBLES_IO_GATE_H_

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "doubles/fault_injection.h"

namespace kvtier::testing {

class IoGate {
 public:
  // Holds `fs`'s segment reads from now on; the gate must outlive its use
  // there (Open, then the store closed, before it goes).
  void HoldReads(FaultInjectionFileSystem& fs) {
    fs.SetBeforeRead([this](const std::string& path) {
      if (path.find("segments") != std::string::npos) Hold();
    });
  }
  // The same for segment writes.
  void HoldWrites(FaultInjectionFileSystem& fs) {
    fs.SetBeforeWrite([this](const std::string& path) {
      if (path.find("segments") != std::string::npos) Hold();
    });
  }
  // Lets every held I/O and every later one through.
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Waits (bounded) until `n` I/Os are held.
  bool WaitHeld(int n, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, limit, [&] { return held_ >= n; });
  }
  int held() {
    std::lock_guard<std::mutex> l(mu_);
    return held_;
  }

 private:
  void Hold() {
    std::unique_lock<std::mutex> l(mu_);
    if (open_) return;
    ++held_;
    cv_.notify_all();
    cv_.wait(l, [&] { return open_; });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int held_ = 0;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_DOUBLES_IO_GATE_H_
