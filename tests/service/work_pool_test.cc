// The service's WorkPool: every job runs, owners take turns, and the
// destructor runs what is still queued.
#include "service/work_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <vector>

namespace kvtier::service {
namespace {

TEST(WorkPool, OwnersTakeTurnsSoAFloodDelaysOthersByOneJob) {
  std::vector<uint64_t> order;
  std::mutex m;
  std::promise<void> release;
  std::shared_future<void> go = release.get_future().share();
  {
    WorkPool pool(1);
    std::promise<void> started;
    pool.Submit(9, [&] {
      started.set_value();
      go.wait();  // the only thread is busy while the queues fill
    });
    started.get_future().wait();
    for (int i = 0; i < 100; ++i) pool.Submit(1, [&] { std::lock_guard<std::mutex> l(m); order.push_back(1); });
    pool.Submit(2, [&] { std::lock_guard<std::mutex> l(m); order.push_back(2); });
    pool.Submit(3, [&] { std::lock_guard<std::mutex> l(m); order.push_back(3); });
    release.set_value();
  }  // the destructor drains the queues
  ASSERT_EQ(order.size(), 102u);
  // Owner 1 flooded first; 2 and 3 each wait for one of its jobs at most.
  EXPECT_EQ(order[0], 1u);
  EXPECT_EQ(order[1], 2u);
  EXPECT_EQ(order[2], 3u);
  EXPECT_EQ(order[3], 1u);
}

TEST(WorkPool, EveryJobOfEveryOwnerRunsOnManyThreads) {
  std::atomic<int> ran{0};
  {
    WorkPool pool(4);
    std::vector<std::thread> submitters;
    for (uint64_t owner = 0; owner < 4; ++owner)
      submitters.emplace_back([&, owner] {
        for (int i = 0; i < 1000; ++i) pool.Submit(owner, [&] { ++ran; });
      });
    for (auto& t : submitters) t.join();
  }
  EXPECT_EQ(ran.load(), 4000);
}

}  // namespace
}  // namespace kvtier::service
