// Lists of keys in one call. RemoveBatch: removed with one index flush per
// 4,096 keys, durable on return like Remove (under a failed write's held
// checkpoint: failed_write_test.cc). ContainsBatch: Contains for each.
// TouchBatch: a use of each present key, counted for reinsertion as a read.
// GetBatch: a batch longer than the read queue waits for room, missing none.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "doubles/fault_injection.h"
#include "kvtier/store.h"
#include "store/store_test_util.h"

namespace kvtier {
namespace {

using testing::Key;
using testing::Payload;

std::vector<std::string_view> Views(const std::vector<std::string>& keys) {
  return std::vector<std::string_view>(keys.begin(), keys.end());
}

void PutKeys(Store& s, NamespaceId ns, int from, int to) {
  for (int i = from; i < to; ++i) {
    auto p = Payload(ns, Key(i), 20000);
    ASSERT_TRUE(s.Put(ns, Key(i), p.data(), p.size()).ok());
  }
}

TEST(RemoveBatch, RemovesTheKeysAndSaysWhichWerePresent) {
  testing::TempDir dir;
  auto s = testing::OpenOrFail(dir.Sub("store"), testing::SmallOptions());
  const NamespaceId ns = testing::RegisterOrFail(s.get());
  PutKeys(*s, ns, 0, 20);
  // Present keys, an absent one, and a key named twice.
  const std::vector<std::string> keys{Key(3), "absent", Key(7), Key(3), Key(19)};
  std::vector<bool> present;
  ASSERT_TRUE(s->RemoveBatch(ns, Views(keys), &present).ok());
  // The second Key(3) is looked up before the batch's deletes commit.
  EXPECT_EQ(present, (std::vector<bool>{true, false, true, true, true}));
  for (int i = 0; i < 20; ++i) {
    const bool gone = i == 3 || i == 7 || i == 19;
    EXPECT_EQ(*s->Contains(ns, Key(i)), !gone) << i;
    EXPECT_EQ(s->GetVector(ns, Key(i)).status().IsNotFound(), gone) << i;
  }
  EXPECT_EQ(s->GetStats().removes, 5u);
  // An empty list does nothing; a null `present` is allowed.
  EXPECT_TRUE(s->RemoveBatch(ns, {}, &present).ok());
  EXPECT_TRUE(present.empty());
  const std::vector<std::string> more{Key(4)};
  EXPECT_TRUE(s->RemoveBatch(ns, Views(more), nullptr).ok());
  EXPECT_FALSE(*s->Contains(ns, Key(4)));
  // A bad key refuses the whole list: nothing removed.
  const std::vector<std::string> bad{Key(5), ""};
  EXPECT_EQ(s->RemoveBatch(ns, Views(bad), &present).code(), Code::kInvalidArgument);
  EXPECT_TRUE(*s->Contains(ns, Key(5)));
  ASSERT_TRUE(s->Close().ok());

  // And across a clean restart.
  s = testing::OpenOrFail(dir.Sub("store"), testing::SmallOptions());
  EXPECT_FALSE(*s->Contains(ns, Key(3)));
  EXPECT_FALSE(*s->Contains(ns, Key(19)));
  EXPECT_TRUE(*s->Contains(ns, Key(5)));
}

TEST(ContainsBatch, SaysForEveryKeyWhetherItIsPresent) {
  testing::TempDir dir;
  auto s = testing::OpenOrFail(dir.Sub("store"), testing::SmallOptions());
  const NamespaceId ns = testing::RegisterOrFail(s.get());
  PutKeys(*s, ns, 0, 5);
  ASSERT_TRUE(s->Remove(ns, Key(2)).ok());
  const std::vector<std::string> keys{Key(0), Key(2), "absent", Key(4), Key(0)};
  std::vector<bool> present{true};  // replaced, not appended to
  ASSERT_TRUE(s->ContainsBatch(ns, Views(keys), &present).ok());
  EXPECT_EQ(present, (std::vector<bool>{true, false, false, true, true}));
  EXPECT_EQ(s->GetStats().contains, 5u);
  ASSERT_TRUE(s->ContainsBatch(ns, {}, &present).ok());
  EXPECT_TRUE(present.empty());
  EXPECT_EQ(s->ContainsBatch(ns, Views(keys), nullptr).code(), Code::kInvalidArgument);
  // Another namespace holds none of them.
  ASSERT_TRUE(s->ContainsBatch(ns + 1, Views(keys), &present).ok());
  EXPECT_EQ(present, std::vector<bool>(5, false));
}

// A touched block counts as read: touched twice (reinsert_min_hits) it is
// rewritten when its segment is reclaimed, as a block read twice is;
// touched once, or not at all, it is evicted.
TEST(TouchBatch, TouchedBlocksAreKeptByReclaimAsReadOnesAre) {
  testing::TempDir dir;
  Options o = testing::SmallOptions();
  o.capacity_bytes = 4 << 20;  // 4 segments of 1 MiB
  o.reinsert_hot_blocks = true;
  auto s = testing::OpenOrFail(dir.Sub("store"), o);
  const NamespaceId ns = testing::RegisterOrFail(s.get());
  PutKeys(*s, ns, 0, 16);
  const std::vector<std::string> hot{Key(0), Key(1), "absent"};
  std::vector<bool> present;
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(s->TouchBatch(ns, Views(hot), &present).ok());
    EXPECT_EQ(present, (std::vector<bool>{true, true, false}));
  }
  const std::vector<std::string> once{Key(2)};
  ASSERT_TRUE(s->TouchBatch(ns, Views(once), nullptr).ok());
  ASSERT_TRUE(s->TouchBatch(ns + 1, Views(hot), &present).ok());  // another namespace holds none
  EXPECT_EQ(present, std::vector<bool>(3, false));
  const std::vector<std::string> bad{""};
  EXPECT_EQ(s->TouchBatch(ns, Views(bad), &present).code(), Code::kInvalidArgument);
  EXPECT_EQ(s->GetStats().gets, 0u);  // nothing was read
  EXPECT_EQ(s->GetStats().touches, 5u);  // keys found: twice two, then one
  PutKeys(*s, ns, 16, 300);  // many times the budget: every early segment is reclaimed
  const Stats st = s->GetStats();
  EXPECT_GT(st.evicted_blocks, 100u);
  EXPECT_GE(st.reinsertions, 2u);
  for (int i : {0, 1}) {
    auto got = s->GetVector(ns, Key(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
    EXPECT_EQ(*got, Payload(ns, Key(i), 20000));
  }
  EXPECT_FALSE(*s->Contains(ns, Key(2)));  // touched once: not kept
  EXPECT_FALSE(*s->Contains(ns, Key(5)));  // never touched
}

// A batch of disk reads many times the read queue (max_pending_reads):
// every block comes back, none is turned into a "read queue full" miss, and
// the reads still run side by side.
TEST(GetBatch, ABatchLongerThanTheReadQueueWaitsForRoomAndMissesNothing) {
  testing::TempDir dir;
  Options o = testing::SmallOptions();
  o.max_pending_reads = 8;
  o.read_threads = 1;
  auto s = testing::OpenOrFail(dir.Sub("store"), o);
  const NamespaceId ns = testing::RegisterOrFail(s.get());
  constexpr int kBlocks = 400;
  std::vector<std::string> keys;
  std::vector<std::vector<uint8_t>> want, got(kBlocks);
  std::vector<MutableFragment> frags(kBlocks);
  std::vector<GetItem> items;
  for (int i = 0; i < kBlocks; ++i) {
    keys.push_back(Key(i));
    want.push_back(Payload(ns, keys.back(), 4096 + i));
    ASSERT_TRUE(s->Put(ns, keys.back(), want.back().data(), want.back().size()).ok());
  }
  for (int i = 0; i < kBlocks; ++i) {
    got[i].assign(want[i].size(), 0);
    frags[i] = MutableFragment{got[i].data(), got[i].size()};
    items.push_back(GetItem{keys[i], {&frags[i], 1}});
  }
  const auto res = s->GetBatch(ns, items);
  ASSERT_EQ(res.size(), items.size());
  for (int i = 0; i < kBlocks; ++i) {
    ASSERT_TRUE(res[i].ok()) << i << ": " << res[i].status().ToString();
    EXPECT_EQ(got[i], want[i]) << i;
  }
  const Stats st = s->GetStats();
  EXPECT_EQ(st.get_deadline_misses, 0u);
  EXPECT_EQ(st.hits_disk, static_cast<uint64_t>(kBlocks));
}

// The read queue full of other callers' async gets: theirs may come back
// as "read queue full" misses (an async get's back-pressure), blocking
// batches and gets wait for room and all come back.
TEST(GetBatch, BlockingReadsWaitWhereOtherCallersFilledTheReadQueue) {
  testing::TempDir dir;
  Options o = testing::SmallOptions();
  o.max_pending_reads = 8;
  o.read_threads = 1;
  // Before the store: the flood's reads land here until the store closes.
  std::vector<uint8_t> sink(8192);
  std::atomic<uint64_t> async_done{0};
  auto s = testing::OpenOrFail(dir.Sub("store"), o);
  const NamespaceId ns = testing::RegisterOrFail(s.get());
  constexpr int kBlocks = 200;
  std::vector<std::string> keys;
  for (int i = 0; i < kBlocks; ++i) {
    keys.push_back(Key(i));
    auto p = Payload(ns, keys.back(), 8192);
    ASSERT_TRUE(s->Put(ns, keys.back(), p.data(), p.size()).ok());
  }
  std::atomic<bool> stop{false};
  const MutableFragment into{sink.data(), sink.size()};
  std::thread flood([&] {
    while (!stop.load()) {
      for (int i = 0; i < 32; ++i)
        s->GetAsync(ns, keys[i], {&into, 1}, kNoDeadline,
                    [&](Result<size_t>) { async_done.fetch_add(1); });
      std::this_thread::yield();
    }
  });
  struct Joined {  // on every way out, a failed ASSERT's too
    std::atomic<bool>& stop;
    std::thread& t;
    ~Joined() {
      stop.store(true);
      if (t.joinable()) t.join();
    }
  } joined{stop, flood};
  std::vector<std::vector<uint8_t>> got(kBlocks, std::vector<uint8_t>(8192));
  std::vector<MutableFragment> frags(kBlocks);
  std::vector<GetItem> items;
  for (int i = 0; i < kBlocks; ++i) {
    frags[i] = MutableFragment{got[i].data(), got[i].size()};
    items.push_back(GetItem{keys[i], {&frags[i], 1}});
  }
  for (int round = 0; round < 5; ++round) {
    const auto res = s->GetBatch(ns, items);
    for (int i = 0; i < kBlocks; ++i) {
      ASSERT_TRUE(res[i].ok()) << round << "/" << i << ": " << res[i].status().ToString();
      EXPECT_EQ(got[i], Payload(ns, keys[i], 8192)) << i;
    }
  }
  for (int i = 0; i < kBlocks; ++i) {  // and key by key, blocking
    auto one = s->GetVector(ns, keys[i]);
    ASSERT_TRUE(one.ok()) << i << ": " << one.status().ToString();
    EXPECT_EQ(*one, Payload(ns, keys[i], 8192)) << i;
  }
  stop.store(true);
  flood.join();
  EXPECT_GT(s->GetStats().get_deadline_misses, 0u);  // the queue was full: the flood's gets missed
  ASSERT_TRUE(s->Close().ok());  // completes what is queued before the sink goes
  EXPECT_GT(async_done.load(), 0u);
}

// A list longer than one writer pass (4,096 keys) goes in pieces; the
// answer is still one flag per key, in order.
TEST(RemoveBatch, ALongListSaysForEveryKeyWhetherItWasThere) {
  testing::TempDir dir;
  auto s = testing::OpenOrFail(dir.Sub("store"), testing::SmallOptions());
  const NamespaceId ns = testing::RegisterOrFail(s.get());
  std::vector<std::string> keys;
  for (int i = 0; i < 9000; ++i) keys.push_back(Key(i));
  const std::vector<int> put_at{0, 4095, 4096, 8191, 8999};
  for (int i : put_at) PutKeys(*s, ns, i, i + 1);
  std::vector<bool> present;
  ASSERT_TRUE(s->RemoveBatch(ns, Views(keys), &present).ok());
  ASSERT_EQ(present.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i)
    EXPECT_EQ(present[i], std::count(put_at.begin(), put_at.end(), static_cast<int>(i)) == 1) << i;
  for (int i : put_at) EXPECT_FALSE(*s->Contains(ns, Key(i))) << i;
}

// What the batch is for: a Remove per key flushes the index once each (a
// new table file each time); a batch flushes once for the list.
TEST(RemoveBatch, FlushesTheIndexOnceForTheWholeList) {
  testing::TempDir dir;
  auto fs = std::make_shared<FaultInjectionFileSystem>(DefaultFileSystem(IoBackend::kPosix));
  Options o = testing::SmallOptions(IoBackend::kPosix);
  o.file_system = fs;
  auto s = testing::OpenOrFail(dir.Sub("store"), o);
  const NamespaceId ns = testing::RegisterOrFail(s.get());
  PutKeys(*s, ns, 0, 40);
  ASSERT_TRUE(s->Flush().ok());

  std::vector<std::string> first;
  for (int i = 0; i < 20; ++i) first.push_back(Key(i));
  fs->ResetCounts();
  ASSERT_TRUE(s->RemoveBatch(ns, Views(first), nullptr).ok());
  const uint64_t batch_syncs = fs->Calls(FaultOp::kSync);

  fs->ResetCounts();
  for (int i = 20; i < 40; ++i) ASSERT_TRUE(s->Remove(ns, Key(i)).ok());
  const uint64_t single_syncs = fs->Calls(FaultOp::kSync);

  EXPECT_GT(batch_syncs, 0u);
  // Each single remove syncs at least what the whole batch did.
  EXPECT_GE(single_syncs, 20 * batch_syncs) << "batch " << batch_syncs << ", 20 removes " << single_syncs;
  for (int i = 0; i < 40; ++i) EXPECT_FALSE(*s->Contains(ns, Key(i))) << i;
}

// Durable when it returns: a process killed right after it (no close, no
// clean checkpoint) leaves the keys removed and the rest in place.
TEST(RemoveBatch, IsDurableWhenItReturns) {
  testing::TempDir dir;
  const std::string store = dir.Sub("store");
  const Options o = testing::SmallOptions(IoBackend::kPosix);
  NamespaceId ns = 0;
  {
    auto s = testing::OpenOrFail(store, o);
    ns = testing::RegisterOrFail(s.get());
    PutKeys(*s, ns, 0, 30);
    ASSERT_TRUE(s->Close().ok());
  }
  testing::InKilledChild([&] {
    auto s = Store::Open(store, o);
    if (!s.ok()) _exit(2);
    std::vector<std::string> keys;
    for (int i = 0; i < 30; i += 2) keys.push_back(Key(i));
    if (!(*s)->RemoveBatch(ns, Views(keys), nullptr).ok()) _exit(3);
    testing::KillSelf();  // before the store's destructor could close it
  });
  auto s = testing::OpenOrFail(store, o);
  EXPECT_TRUE(s->GetStats().recovered_from_crash);
  for (int i = 0; i < 30; ++i) {
    auto got = s->GetVector(ns, Key(i));
    if (i % 2 == 0) {
      EXPECT_TRUE(got.status().IsNotFound()) << i << " came back";
    } else {
      ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
      EXPECT_EQ(*got, Payload(ns, Key(i), 20000));
    }
  }
}

}  // namespace
}  // namespace kvtier
