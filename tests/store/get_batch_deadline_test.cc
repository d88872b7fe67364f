// GetBatch with a deadline (Store::GetBatch's three-argument form): reads
// not started by the deadline miss and leave their memory alone; a read
// already on the device lands, and the call waits for it, so that nothing
// writes a caller's memory after the call has returned.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "doubles/fault_injection.h"
#include "doubles/io_gate.h"
#include "kvtier/store.h"
#include "store/store_test_util.h"

namespace kvtier {
namespace {

using testing::Key;
using testing::Payload;

constexpr size_t kBytes = 20000;
constexpr uint8_t kUntouched = 0xEE;

// A store on a file system whose segment reads `gate` can hold, with `n`
// blocks of kBytes: one reader, one read at a time, a window of two reads
// per batch (max_pending_reads / 4).
struct GatedStore {
  explicit GatedStore(const std::string& dir, int n) {
    fs = std::make_shared<FaultInjectionFileSystem>(DefaultFileSystem(IoBackend::kPosix));
    Options o = testing::SmallOptions();
    o.file_system = fs;
    o.read_threads = 1;
    o.queue_depth = 1;
    o.max_pending_reads = 8;
    store = testing::OpenOrFail(dir, o);
    ns = testing::RegisterOrFail(store.get());
    for (int i = 0; i < n; ++i) {
      auto p = Payload(ns, Key(i), kBytes);
      EXPECT_TRUE(store->Put(ns, Key(i), p.data(), p.size()).ok());
    }
    got.assign(n, std::vector<uint8_t>(kBytes, kUntouched));
    frags.resize(n);
    for (int i = 0; i < n; ++i) {
      keys.push_back(Key(i));
      frags[i] = MutableFragment{got[i].data(), got[i].size()};
    }
    for (int i = 0; i < n; ++i) items.push_back(GetItem{keys[i], {&frags[i], 1}});
  }
  bool Untouched(int i) const {
    for (uint8_t b : got[i])
      if (b != kUntouched) return false;
    return true;
  }
  std::shared_ptr<FaultInjectionFileSystem> fs;
  std::unique_ptr<Store> store;
  NamespaceId ns = 0;
  std::vector<std::string> keys;
  std::vector<std::vector<uint8_t>> got;
  std::vector<MutableFragment> frags;
  std::vector<GetItem> items;
};

TEST(GetBatchDeadline, APassedDeadlineReadsNothingAndTouchesNothing) {
  testing::TempDir dir;
  GatedStore g(dir.Sub("store"), 4);
  g.fs->ResetCounts();
  const auto res = g.store->GetBatch(g.ns, g.items, Clock::now() - std::chrono::milliseconds(1));
  ASSERT_EQ(res.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(res[i].status().code(), Code::kTimedOut) << i;
    EXPECT_TRUE(g.Untouched(i)) << i;
  }
  EXPECT_EQ(g.fs->Calls(FaultOp::kRead), 0u);
  EXPECT_EQ(g.store->GetStats().get_deadline_misses, 4u);
}

TEST(GetBatchDeadline, AFarDeadlineReadsEverything) {
  testing::TempDir dir;
  GatedStore g(dir.Sub("store"), 40);
  const auto res = g.store->GetBatch(g.ns, g.items, Clock::now() + std::chrono::seconds(60));
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(res[i].ok()) << i << ": " << res[i].status().ToString();
    EXPECT_EQ(g.got[i], Payload(g.ns, g.keys[i], kBytes)) << i;
  }
  EXPECT_EQ(g.store->GetStats().get_deadline_misses, 0u);
}

// The first read is held on the "device" past the deadline. The second is
// queued behind it, the rest wait for room in the batch's window: those
// miss at the deadline, untouched. The call returns only once the held read
// has landed, with its bytes.
TEST(GetBatchDeadline, ReadsNotStartedMissAndTheCallWaitsForTheOneOnTheDevice) {
  testing::TempDir dir;
  GatedStore g(dir.Sub("store"), 6);
  testing::IoGate gate;
  gate.HoldReads(*g.fs);
  const auto deadline = Clock::now() + std::chrono::milliseconds(300);
  std::atomic<bool> returned{false};
  auto batch = std::async(std::launch::async, [&] {
    auto r = g.store->GetBatch(g.ns, g.items, deadline);
    returned.store(true);
    return r;
  });
  ASSERT_TRUE(gate.WaitHeld(1));
  std::this_thread::sleep_until(deadline + std::chrono::milliseconds(300));
  EXPECT_FALSE(returned.load()) << "returned while a read could still write its memory";
  EXPECT_EQ(gate.held(), 1) << "a read started after the deadline";
  gate.Open();
  const auto res = batch.get();
  ASSERT_TRUE(res[0].ok()) << res[0].status().ToString();
  EXPECT_EQ(g.got[0], Payload(g.ns, g.keys[0], kBytes));
  for (int i = 1; i < 6; ++i) {
    EXPECT_EQ(res[i].status().code(), Code::kTimedOut) << i << ": " << res[i].status().ToString();
    EXPECT_TRUE(g.Untouched(i)) << i;
  }
  EXPECT_EQ(g.store->GetStats().get_deadline_misses, 5u);
  ASSERT_TRUE(g.store->Close().ok());
}

}  // namespace
}  // namespace kvtier
