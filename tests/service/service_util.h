// A store served in this process (ServedStore) and clients of it, for the
// service tests.
#ifndef KVTIER_TESTS_SERVICE_SERVICE_UTIL_H_
#define KVTIER_TESTS_SERVICE_SERVICE_UTIL_H_

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "kvtier/service.h"
#include "kvtier/store.h"
#include "store/store_test_util.h"

namespace kvtier::testing {

// An embedded store in `dir`/store, served on `dir`/s.sock.
class ServedStore {
 public:
  explicit ServedStore(const std::string& dir, ServiceOptions so = {}, Options o = SmallOptions());
  ~ServedStore();
  Store* store() { return store_.get(); }
  Service* service() { return service_.get(); }
  const std::string& socket() const { return socket_; }
  std::string address() const { return "unix:" + socket_; }
  // A new client of the service.
  std::unique_ptr<Store> Client(ServiceClientOptions c = {}) const;
  void Stop();

 private:
  std::string socket_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Service> service_;
};

// An engine's buffer: memfd pages mapped shared, which a client registers.
struct SharedBuffer {
  explicit SharedBuffer(size_t n) : bytes(n), fd(memfd_create("engine-buffers", MFD_CLOEXEC)) {
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(n)) != 0) return;
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) mem = static_cast<uint8_t*>(p);
  }
  ~SharedBuffer() {
    if (mem != nullptr) munmap(mem, bytes);
    if (fd >= 0) close(fd);
  }
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  const size_t bytes;
  const int fd;
  uint8_t* mem = nullptr;
};

// Kills and reaps a forked child still running when a test leaves early (a
// failed ASSERT): a live `kvtier serve` would hold ctest's output pipe open
// until its timeout. A child already reaped is left alone.
class ReapOnExit {
 public:
  explicit ReapOnExit(const pid_t* pid) : pid_(pid) {}
  ~ReapOnExit() {
    if (*pid_ > 0 && ::waitpid(*pid_, nullptr, WNOHANG) == 0) {
      ::kill(*pid_, SIGKILL);
      ::waitpid(*pid_, nullptr, 0);
    }
  }
  ReapOnExit(const ReapOnExit&) = delete;
  ReapOnExit& operator=(const ReapOnExit&) = delete;

 private:
  const pid_t* pid_;
};

// Waits (bounded) until `pred` holds: what the service does after a client
// leaves (unmapping its regions, dropping it) happens on its own threads.
template <typename P>
bool Eventually(P pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_SERVICE_SERVICE_UTIL_H_
