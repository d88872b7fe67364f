// Shared helpers for store tests: temporary folders, namespaces and
// deterministic payloads (a payload is a function of namespace, key and
// version, so any returned block can be checked).
#ifndef KVTIER_TESTS_STORE_STORE_TEST_UTIL_H_
#define KVTIER_TESTS_STORE_STORE_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <csignal>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kvtier/store.h"

namespace kvtier::testing {

// A fresh folder under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

NamespaceSpec TestSpec(const std::string& model = "test/model", uint32_t tp_rank = 0);
// Deterministic bytes for (ns, key, version).
std::vector<uint8_t> Payload(NamespaceId ns, const std::string& key, size_t size, uint32_t version = 0);
std::string Key(uint64_t i);  // 32-byte engine-style key
// Options for small, fast test stores.
Options SmallOptions(IoBackend backend = IoBackend::kAuto);
// Names a backend-parameterized test after its backend ("io_uring", "posix").
std::string BackendName(const ::testing::TestParamInfo<IoBackend>& info);
// Expects Store::Open with `o` to fail with InvalidArgument naming `option`
// (a bad value of it), in a folder of its own.
void ExpectOptionRefused(const Options& o, const std::string& option);

// The store at `dir` opened with `o`, or nullptr with the test failed.
std::unique_ptr<Store> OpenOrFail(const std::string& dir, const Options& o);
// TestSpec() registered in `s`, or 0 with the test failed.
NamespaceId RegisterOrFail(Store* s);

// Flips one bit of a file at `offset`.
void FlipBit(const std::string& path, uint64_t offset, int bit = 0);

// Ends a forked child with SIGKILL, closing nothing: a crash, and one that a
// TSan build cannot report as leaked threads, as it did at _exit.
[[noreturn]] inline void KillSelf() {
  kill(getpid(), SIGKILL);
  _exit(0);  // not reached
}

// Runs `body` in a forked child that then kills itself (KillSelf), never
// closing what it opened: a crash. The child reports failure with a non-zero
// _exit code (named in the assertion); `body` may end with KillSelf too.
template <typename F>
void InKilledChild(F body) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    body();
    KillSelf();
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFSIGNALED(status)) {
    ASSERT_EQ(WTERMSIG(status), SIGKILL) << "child died";
    return;
  }
  ASSERT_TRUE(WIFEXITED(status)) << "child died";
  ASSERT_EQ(WEXITSTATUS(status), 0) << "child step " << WEXITSTATUS(status) << " failed";
}

// What a store said through Options::warn, from whichever thread:
// `o.warn = warned.Sink();` (the collector outlives the store).
class WarnedLines {
 public:
  std::function<void(const std::string&)> Sink();
  std::vector<std::string> Lines();
  // How many lines hold `part`.
  size_t Count(const std::string& part);

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_STORE_STORE_TEST_UTIL_H_
