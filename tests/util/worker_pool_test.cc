#include "util/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace kvtier {
namespace {

// Every index runs exactly once, on the caller and the helpers, and
// ForEach returns only after the last one; concurrent callers each get
// their own items, whatever the helpers are busy with.
// With polling helpers (spin_us) as with sleeping ones.
TEST(WorkerPool, EveryItemRunsOnceBeforeForEachReturns) {
  for (uint32_t spin_us : {0u, 200u})
  for (unsigned helpers : {0u, 1u, 3u}) {
    SCOPED_TRACE(testing::Message() << helpers << " helpers, spin " << spin_us);
    WorkerPool pool(helpers, "test-pool", spin_us);
    EXPECT_EQ(pool.helpers(), helpers);
    auto run = [&](size_t n) {
      std::vector<std::atomic<int>> seen(n);
      std::atomic<size_t> finished{0};
      pool.ForEach(n, [&](size_t i) {
        seen[i].fetch_add(1);
        std::this_thread::yield();
        finished.fetch_add(1);
      });
      EXPECT_EQ(finished.load(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << i;
    };
    run(0);
    run(1);
    run(1000);
    std::vector<std::thread> callers;
    for (int c = 0; c < 4; ++c) callers.emplace_back([&, c] { for (int k = 0; k < 50; ++k) run(17 + c * 13 + k); });
    for (auto& c : callers) c.join();
  }
}

// ForEachInOrder: every item runs once, then() follows in index order, each
// only after its own item has returned, on the caller; with several callers
// at once and whatever the helpers are busy with.
TEST(WorkerPool, ThenFollowsEachItemInOrderOnTheCaller) {
  for (uint32_t spin_us : {0u, 200u})
  for (unsigned helpers : {0u, 1u, 3u}) {
    SCOPED_TRACE(testing::Message() << helpers << " helpers, spin " << spin_us);
    WorkerPool pool(helpers, "test-pool", spin_us);
    auto run = [&](size_t n) {
      std::vector<std::atomic<int>> ran(n);
      std::vector<size_t> order;
      bool then_before_item = false, then_off_caller = false;
      const std::thread::id caller = std::this_thread::get_id();
      pool.ForEachInOrder(
          n,
          [&](size_t i) {
            if (i % 3 == 0) std::this_thread::yield();  // items finish out of order
            ran[i].fetch_add(1);
          },
          [&](size_t i) {
            if (ran[i].load() != 1) then_before_item = true;
            if (std::this_thread::get_id() != caller) then_off_caller = true;
            order.push_back(i);
          });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(ran[i].load(), 1) << i;
      ASSERT_EQ(order.size(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(order[i], i);
      EXPECT_FALSE(then_before_item);
      EXPECT_FALSE(then_off_caller);
    };
    run(0);
    run(1);
    run(500);
    std::vector<std::thread> callers;
    for (int c = 0; c < 3; ++c)
      callers.emplace_back([&, c] {
        for (int k = 0; k < 40; ++k) {
          run(9 + c * 7 + k);
          std::atomic<int> items{0};  // a plain ForEach between them
          pool.ForEach(11, [&](size_t) { items.fetch_add(1); });
          EXPECT_EQ(items.load(), 11);
        }
      });
    for (auto& c : callers) c.join();
  }
}

// The caller hashes while helpers read: then(0) runs while a helper is
// still inside a later item (each helper item waits for then(0)). The
// caller's own items wait for a helper to start and take a while, so that
// the helpers do take items.
TEST(WorkerPool, ThenRunsWhileLaterItemsAreStillRunning) {
  WorkerPool pool(2, "test-pool");
  const std::thread::id caller = std::this_thread::get_id();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto wait_for = [&](const std::atomic<bool>& flag) {
    while (!flag.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  };
  std::atomic<bool> helper_started{false}, first_then_ran{false}, overlapped{false};
  pool.ForEachInOrder(
      8,
      [&](size_t i) {
        if (std::this_thread::get_id() == caller) {
          wait_for(helper_started);
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          return;
        }
        helper_started = true;
        if (i == 0) return;
        wait_for(first_then_ran);
        if (first_then_ran.load()) overlapped = true;
      },
      [&](size_t i) {
        if (i == 0) first_then_ran = true;
      });
  EXPECT_TRUE(overlapped.load());
}

// Posted work runs once each, on a helper (on the poster only without
// helpers), beside ForEach calls; a pool that goes runs what was posted
// first.
TEST(WorkerPool, PostedWorkRunsOnceOnAHelperAndBeforeThePoolGoes) {
  for (uint32_t spin_us : {0u, 200u})
  for (unsigned helpers : {0u, 1u, 3u}) {
    SCOPED_TRACE(testing::Message() << helpers << " helpers, spin " << spin_us);
    constexpr int kPosts = 500;
    std::vector<std::atomic<int>> ran(kPosts);
    std::atomic<int> on_poster{0};
    const std::thread::id poster = std::this_thread::get_id();
    {
      WorkerPool pool(helpers, "test-pool", spin_us);
      for (int i = 0; i < kPosts; ++i) {
        pool.Post([&ran, &on_poster, poster, i] {
          ran[i].fetch_add(1);
          if (std::this_thread::get_id() == poster) on_poster.fetch_add(1);
          std::this_thread::yield();
        });
        if (i % 50 == 0) {  // a ForEach among the posts still gets every item
          std::atomic<int> items{0};
          pool.ForEach(20, [&](size_t) { items.fetch_add(1); });
          EXPECT_EQ(items.load(), 20);
        }
      }
    }  // the pool goes here, with posts possibly still queued
    for (int i = 0; i < kPosts; ++i) ASSERT_EQ(ran[i].load(), 1) << i;
    EXPECT_EQ(on_poster.load(), helpers == 0 ? kPosts : 0);
  }
}

// How many threads ran a call of 3 items that wait for each other: it
// finishes only if three threads run them at once.
size_t ThreadsForThreeWaitingItems(WorkerPool& pool) {
  std::atomic<int> arrived{0};
  std::set<std::thread::id> threads;
  std::mutex m;
  pool.ForEach(3, [&](size_t) {
    {
      std::lock_guard<std::mutex> g(m);
      threads.insert(std::this_thread::get_id());
    }
    arrived.fetch_add(1);
    while (arrived.load() < 3) std::this_thread::yield();
  });
  return threads.size();
}

// The helpers do take work.
TEST(WorkerPool, HelpersRunItemsBesideTheCaller) {
  WorkerPool pool(2, "test-pool");
  EXPECT_EQ(ThreadsForThreeWaitingItems(pool), 3u);
}

// Polling helpers still take a call that comes after their poll has ended
// (they sleep then, and the call wakes them), and one that comes while they
// poll (no wake-up needed).
TEST(WorkerPool, PollingHelpersTakeCallsBothWhilePollingAndAfterSleeping) {
  WorkerPool pool(2, "test-pool", 1000);
  EXPECT_EQ(ThreadsForThreeWaitingItems(pool), 3u);
  EXPECT_EQ(ThreadsForThreeWaitingItems(pool), 3u);  // within the 1 ms poll of the first
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past it: asleep
  EXPECT_EQ(ThreadsForThreeWaitingItems(pool), 3u);
}

}  // namespace
}  // namespace kvtier
