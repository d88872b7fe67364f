// TierPins: the RAM tier's CUDA registrations, region by region, behind its
// prefault (label "gpu"; skipped, with the reason, without a CUDA device).
#include "cuda/tier_pins.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "cuda/skip_without_gpu.h"
#include "kvtier/cuda.h"

namespace kvtier::gpu {
namespace {


std::unique_ptr<RamTier> Tier(bool prefault) {
  RamTierOptions o;
  o.chunk_bytes = 64u << 20;
  o.capacity_bytes = 33ull << 26;  // regions of 1 GiB, 1 GiB and 64 MiB
  o.shards = 1;
  o.prefault = prefault;
  auto t = RamTier::Open(o);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : nullptr;
}

bool WaitAllPinned(const TierPins& p) {
  for (int i = 0; i < 6000 && p.pinned() < p.regions(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return p.pinned() == p.regions();
}

// Whether CUDA takes [p, p + n) as a new registration (and undoes it): it
// refuses memory that is registered already.
bool Unregistered(void* p, size_t n) {
  if (cudaHostRegister(p, n, cudaHostRegisterPortable) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  cudaHostUnregister(p);
  return true;
}

TEST(TierPins, ARegionACallNeedsIsPinnedWithItsDeviceAlias) {
  SKIP_WITHOUT_GPU();
  auto tier = Tier(/*prefault=*/false);
  ASSERT_NE(tier, nullptr);
  const std::vector<iovec> regions = tier->Regions();
  ASSERT_EQ(regions.size(), 3u);
  TierPins pins(tier.get(), 0);
  EXPECT_EQ(pins.regions(), 3u);
  uint8_t* second = static_cast<uint8_t*>(regions[1].iov_base);
  auto r = pins.Ensure(second + 4096, 1 << 20);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->host, second);
  EXPECT_EQ(r->len, regions[1].iov_len);
  EXPECT_NE(r->dev, nullptr);
  // A copy the driver can run through the alias: bytes written on the host
  // read back on the device.
  second[4096] = 0x5c;
  uint8_t got = 0;
  ASSERT_EQ(cudaMemcpy(&got, r->dev + 4096, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, 0x5c);
  // Across a region's end, or outside the tier: no region.
  EXPECT_FALSE(pins.Ensure(second - 4096, 8192).has_value());
  uint8_t outside[16];
  EXPECT_FALSE(pins.Covers(outside));
  EXPECT_FALSE(pins.Ensure(outside, sizeof outside).has_value());
  EXPECT_TRUE(pins.ok());
}

TEST(TierPins, TheThreadPinsEveryRegionAndTheirEndUnpinsThem) {
  SKIP_WITHOUT_GPU();
  for (bool prefault : {false, true}) {
    auto tier = Tier(prefault);
    ASSERT_NE(tier, nullptr);
    const std::vector<iovec> regions = tier->Regions();
    {
      TierPins pins(tier.get(), 0);
      ASSERT_TRUE(WaitAllPinned(pins)) << pins.pinned() << " of " << pins.regions() << ", prefault " << prefault;
      EXPECT_TRUE(pins.ok());
      // Behind the prefault: it had passed every region by then.
      if (prefault) {
        EXPECT_TRUE(tier->PrefaultOver());
      }
      for (const iovec& r : regions) EXPECT_FALSE(Unregistered(r.iov_base, r.iov_len)) << "pinned already";
    }
    for (const iovec& r : regions) EXPECT_TRUE(Unregistered(r.iov_base, r.iov_len)) << "unpinned at the end";
  }
}

// Destroyed at once, its thread most likely still waiting behind the
// prefault: it stops without hanging and leaves nothing registered.
TEST(TierPins, DestroyedAtOnceLeavesNothingPinned) {
  SKIP_WITHOUT_GPU();
  auto tier = Tier(/*prefault=*/true);
  ASSERT_NE(tier, nullptr);
  { TierPins pins(tier.get(), 0); }
  for (const iovec& r : tier->Regions()) EXPECT_TRUE(Unregistered(r.iov_base, r.iov_len));
}

}  // namespace
}  // namespace kvtier::gpu
