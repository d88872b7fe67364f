// WriteRing: live allocations never overlap, release is FIFO, a full ring
// refuses, and streaming reuses the start of the ring instead of touching all
// of it.
#include "log/write_ring.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <random>
#include <vector>

namespace kvtier {
namespace {

constexpr uint64_t kPage = 4096;

TEST(WriteRing, FullRingRefusesAndReleaseMakesRoom) {
  WriteRing r;
  ASSERT_TRUE(r.Init((3 << 20) + 1).ok());
  EXPECT_EQ(r.capacity(), 4u << 20);  // whole MiB: it bounds the bytes queued
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r.base()) % (2 << 20), 0u);
  std::deque<WriteRing::Allocation> live;
  for (int i = 0; i < 4; ++i) {
    live.push_back(r.Allocate(1 << 20));
    ASSERT_NE(live.back().data, nullptr) << i;
  }
  EXPECT_EQ(r.used(), 4u << 20);
  EXPECT_EQ(r.Allocate(kPage).data, nullptr);
  EXPECT_EQ(r.Allocate(0).data, nullptr);
  EXPECT_EQ(r.Allocate(8 << 20).data, nullptr);  // larger than the ring
  r.Release(live.front());
  live.pop_front();
  auto a = r.Allocate(1 << 20);  // fits at the front again
  ASSERT_NE(a.data, nullptr);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(r.Allocate(kPage).data, nullptr);
}

// Streams `n` allocations of `bytes` with `window` in flight, released oldest
// first; where the ring refuses, releases the oldest and retries (as a blocked
// put waits for the writer). Returns the refusals.
int Stream(WriteRing* r, std::deque<WriteRing::Allocation>* live, size_t window, uint64_t bytes, int n) {
  int refused = 0;
  for (int i = 0; i < n; ++i) {
    while (live->size() >= window) {
      r->Release(live->front());
      live->pop_front();
    }
    WriteRing::Allocation a = r->Allocate(bytes);
    while (a.data == nullptr) {
      ++refused;
      if (live->empty()) return -1;
      r->Release(live->front());
      live->pop_front();
      a = r->Allocate(bytes);
    }
    live->push_back(a);
  }
  return refused;
}

TEST(WriteRing, StreamingStaysInTheMemoryItHasTouched) {
  WriteRing r;
  ASSERT_TRUE(r.Init(256 << 20).ok());
  std::deque<WriteRing::Allocation> live;
  // 20000 x 64 KiB = 1.2 GiB through the ring with 8 MiB in flight.
  EXPECT_EQ(Stream(&r, &live, 128, 64 << 10, 20000), 0);
  // About two windows touched, not the 256 MiB capacity.
  EXPECT_LE(r.touched(), (16u << 20) + (128u << 10));
}

TEST(WriteRing, GrowsWhenMoreIsInFlight) {
  WriteRing r;
  ASSERT_TRUE(r.Init(64 << 20).ok());
  std::deque<WriteRing::Allocation> live;
  EXPECT_EQ(Stream(&r, &live, 64, 64 << 10, 5000), 0);  // 4 MiB in flight
  const uint64_t small = r.touched();
  EXPECT_LE(small, (8u << 20) + (128u << 10));
  // 16 MiB in flight: the ring grows at a lap's end (a few refusals while the
  // lap that was too small drains), then streams without refusals.
  EXPECT_GE(Stream(&r, &live, 256, 64 << 10, 5000), 0);
  EXPECT_EQ(Stream(&r, &live, 256, 64 << 10, 5000), 0);
  EXPECT_GT(r.touched(), 16u << 20);
  EXPECT_LE(r.touched(), (32u << 20) + (128u << 10));
  EXPECT_EQ(r.used(), 256u * (64 << 10));
}

// A random FIFO workload against a model: every live allocation lies inside
// the ring, none overlaps another, and bytes written into one survive the
// allocations and releases that follow until it is released.
TEST(WriteRing, RandomWorkloadNeverOverlaps) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 rng(seed);
    WriteRing r;
    ASSERT_TRUE(r.Init((1 + rng() % 4) << 20).ok());
    const uint64_t cap = r.capacity();
    std::vector<int> owner(cap / kPage, -1);
    struct Live {
      WriteRing::Allocation a;
      int id;
    };
    std::deque<Live> live;
    int next_id = 0;
    uint64_t refused = 0;
    for (int step = 0; step < 20000; ++step) {
      const bool release = !live.empty() && (rng() % 100 < 45 || refused > 0);
      if (release) {
        Live l = live.front();
        live.pop_front();
        const uint8_t fill = static_cast<uint8_t>(l.id);
        for (uint64_t i = 0; i < l.a.bytes; i += 509) ASSERT_EQ(l.a.data[i], fill) << "clobbered";
        for (uint64_t p = l.a.offset / kPage; p < (l.a.offset + l.a.bytes) / kPage; ++p) owner[p] = -1;
        r.Release(l.a);
        refused = 0;
        continue;
      }
      const uint64_t bytes = (1 + rng() % (rng() % 4 == 0 ? 64 : 8)) * kPage;
      WriteRing::Allocation a = r.Allocate(bytes);
      if (a.data == nullptr) {
        ++refused;
        continue;
      }
      ASSERT_EQ(a.bytes, bytes);
      ASSERT_LE(a.offset + bytes, cap);
      ASSERT_EQ(a.data, r.base() + a.offset);
      const int id = next_id++;
      for (uint64_t p = a.offset / kPage; p < (a.offset + bytes) / kPage; ++p) {
        ASSERT_EQ(owner[p], -1) << "page " << p << " given out twice";
        owner[p] = id;
      }
      std::memset(a.data, static_cast<uint8_t>(id), bytes);
      live.push_back(Live{a, id});
    }
    uint64_t used = 0;
    for (const Live& l : live) used += l.a.bytes;
    EXPECT_EQ(r.used(), used);
    EXPECT_LE(r.touched(), cap);
  }
}

TEST(WriteRing, DenseAllocationsAreBackToBackAndPageAlignedOnesSkipToAPage) {
  WriteRing r;
  ASSERT_TRUE(r.Init(1 << 20).ok());
  // Dense records: 8-byte aligned, each right after the one before.
  WriteRing::Allocation a = r.Allocate(4200, 8);
  WriteRing::Allocation b = r.Allocate(104, 8);
  ASSERT_NE(a.data, nullptr);
  ASSERT_NE(b.data, nullptr);
  EXPECT_EQ(b.data, a.data + 4200);
  EXPECT_EQ(r.used(), 4304u);
  // A page-aligned record after them starts on the next page; the gap is
  // charged to it, so used() and FIFO release still add up.
  WriteRing::Allocation c = r.Allocate(kPage);
  ASSERT_NE(c.data, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data) % kPage, 0u);
  EXPECT_EQ(c.data, a.data + 2 * kPage);
  EXPECT_EQ(c.bytes, 2 * kPage - 4304 + kPage);
  EXPECT_EQ(r.used(), 3 * kPage);
  WriteRing::Allocation d = r.Allocate(16, 8);
  EXPECT_EQ(d.data, c.data + kPage);
  r.Release(a);
  r.Release(b);
  r.Release(c);
  r.Release(d);
  EXPECT_EQ(r.used(), 0u);
  // Once empty, the next allocation starts at the front again.
  EXPECT_EQ(r.Allocate(kPage).data, r.base());
}

}  // namespace
}  // namespace kvtier
