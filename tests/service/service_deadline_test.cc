// get_batch through the service with a deadline: the service starts no read
// after it, and answers only once the reads under way have landed, so the
// client's memory (registered with the store, which the service writes
// itself) is never written after the client's call has returned. Without a
// caller's deadline the same holds for the client's own reply timeout.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "doubles/fault_injection.h"
#include "doubles/read_gate.h"
#include "service/service_util.h"

namespace kvtier::testing {
namespace {

constexpr size_t kBytes = 20000;
constexpr int kBlocks = 6;
constexpr uint8_t kUntouched = 0xEE;

// A served store whose segment reads the test can hold: one reader, one
// read at a time, so a held read keeps every later one from starting.
struct GatedService {
  explicit GatedService(const std::string& dir, ServiceClientOptions co = {})
      : fs(std::make_shared<FaultInjectionFileSystem>(DefaultFileSystem(IoBackend::kPosix))),
        served(dir, ServiceOptions{}, GatedOptions(fs)),
        buf(kBlocks * kBytes) {
    client = served.Client(co);
    ns = client->RegisterNamespace(TestSpec()).value();
    for (int i = 0; i < kBlocks; ++i) {
      auto p = Payload(ns, Key(i), kBytes);
      EXPECT_TRUE(client->Put(ns, Key(i), p.data(), p.size()).ok()) << i;
      keys.push_back(Key(i));
    }
    std::memset(buf.mem, kUntouched, buf.bytes);
    EXPECT_TRUE(client->RegisterMemory(buf.mem, buf.bytes, buf.fd, 0).ok());
    frags.resize(kBlocks);
    for (int i = 0; i < kBlocks; ++i) frags[i] = MutableFragment{buf.mem + i * kBytes, kBytes};
    for (int i = 0; i < kBlocks; ++i) items.push_back(GetItem{keys[i], {&frags[i], 1}});
  }
  static Options GatedOptions(const std::shared_ptr<FaultInjectionFileSystem>& fs) {
    Options o = SmallOptions();
    o.file_system = fs;
    o.read_threads = 1;
    o.queue_depth = 1;
    o.max_pending_reads = 8;
    return o;
  }
  bool Untouched(int i) const {
    for (size_t b = 0; b < kBytes; ++b)
      if (buf.mem[i * kBytes + b] != kUntouched) return false;
    return true;
  }
  bool Holds(int i) const {
    const auto want = Payload(ns, keys[i], kBytes);
    return std::memcmp(buf.mem + i * kBytes, want.data(), kBytes) == 0;
  }
  std::shared_ptr<FaultInjectionFileSystem> fs;
  ServedStore served;
  SharedBuffer buf;
  std::unique_ptr<Store> client;
  NamespaceId ns = 0;
  std::vector<std::string> keys;
  std::vector<MutableFragment> frags;
  std::vector<GetItem> items;
};

// Runs the batch on another thread while the first read is held on the
// "device" until `open_at`; says whether the call returned before that.
std::vector<Result<size_t>> HeldBatch(GatedService& g, Clock::time_point deadline, Clock::time_point open_at,
                                      bool* returned_early) {
  ReadGate gate;
  gate.Install(*g.fs);
  std::atomic<bool> returned{false};
  auto batch = std::async(std::launch::async, [&] {
    auto r = g.client->GetBatch(g.ns, g.items, deadline);
    returned.store(true);
    return r;
  });
  EXPECT_TRUE(gate.WaitHeld(1));
  std::this_thread::sleep_until(open_at);
  *returned_early = returned.load();
  gate.Open();
  auto res = batch.get();
  g.fs->SetBeforeRead(nullptr);
  return res;
}

TEST(ServiceGetBatchDeadline, ReadsNotStartedByTheDeadlineMissAndNothingLandsAfterTheReply) {
  TempDir dir;
  GatedService g(dir.path());
  const auto deadline = Clock::now() + std::chrono::milliseconds(300);
  bool early = false;
  auto res = HeldBatch(g, deadline, deadline + std::chrono::milliseconds(300), &early);
  EXPECT_FALSE(early) << "the client returned while the service could still write its memory";
  ASSERT_TRUE(res[0].ok()) << res[0].status().ToString();
  EXPECT_TRUE(g.Holds(0));
  for (int i = 1; i < kBlocks; ++i) {
    EXPECT_EQ(res[i].status().code(), Code::kTimedOut) << i << ": " << res[i].status().ToString();
    EXPECT_TRUE(g.Untouched(i)) << i;
  }
  // Nothing trails the reply: the memory stays as it was answered.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int i = 1; i < kBlocks; ++i) EXPECT_TRUE(g.Untouched(i)) << i;
}

// No deadline from the caller: the service is told to start no read later
// than the client's reply timeout less a margin (a quarter of it here), so
// that the reads under way land before the client stops waiting.
TEST(ServiceGetBatchDeadline, TheClientsReplyTimeoutBoundsWhenTheServiceStartsReads) {
  TempDir dir;
  ServiceClientOptions co;
  co.op_timeout_ms = 2000;
  GatedService g(dir.path(), co);
  const auto t0 = Clock::now();
  bool early = false;
  auto res = HeldBatch(g, kNoDeadline, t0 + std::chrono::milliseconds(1700), &early);
  EXPECT_FALSE(early);
  ASSERT_TRUE(res[0].ok()) << res[0].status().ToString();
  EXPECT_TRUE(g.Holds(0));
  for (int i = 1; i < kBlocks; ++i) {
    EXPECT_EQ(res[i].status().code(), Code::kTimedOut) << i << ": " << res[i].status().ToString();
    EXPECT_TRUE(g.Untouched(i)) << i;
  }
  // With the device quick again, the same batch reads everything.
  std::memset(g.buf.mem, kUntouched, g.buf.bytes);
  res = g.client->GetBatch(g.ns, g.items);
  for (int i = 0; i < kBlocks; ++i) {
    ASSERT_TRUE(res[i].ok()) << i << ": " << res[i].status().ToString();
    EXPECT_TRUE(g.Holds(i)) << i;
  }
}

}  // namespace
}  // namespace kvtier::testing
