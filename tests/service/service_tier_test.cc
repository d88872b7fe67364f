// The RAM tier lent to a client (map_tier, pin_tier, unpin_tier): the
// client maps the tier's file read-only and copies pinned blocks out of it
// itself, as the GPU path does through a service (tests/cuda holds the
// device half).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <future>
#include <string_view>
#include <vector>

#include "client/service_store.h"
#include "service/service_util.h"
#include "store/block_sink.h"
#include "util/checksum.h"

namespace kvtier::testing {
namespace {

Options WithRamTier() {
  Options o = SmallOptions();
  o.ram_tier_bytes = 8 << 20;
  return o;
}

// The client's mapping of the lent tier; unmapped when it goes.
struct TierView {
  explicit TierView(const client::ServiceStore::TierMapping& m) : len(m.map.file_bytes) {
    void* p = mmap(nullptr, len, PROT_READ, MAP_SHARED, m.fd.get(), 0);
    base = p == MAP_FAILED ? nullptr : static_cast<const uint8_t*>(p);
  }
  ~TierView() {
    if (base != nullptr) munmap(const_cast<uint8_t*>(base), len);
  }
  // A pinned block's bytes, gathered from its pieces.
  std::vector<uint8_t> Bytes(const wire::TierPinned& b) const {
    std::vector<uint8_t> out;
    for (const auto& [off, n] : b.pieces) {
      EXPECT_LE(off + n, len);
      out.insert(out.end(), base + off, base + off + n);
    }
    return out;
  }
  const uint8_t* base = nullptr;
  size_t len;
};

// 36 blocks of about 300 KiB through an 8 MiB tier: it holds the last
// ones, the first are only on disk.
// A served store with a lent tier, a client, and those blocks put.
constexpr int kBlocks = 36;
struct PastTheTier {
  PastTheTier(const std::string& dir, const ServiceClientOptions& co)
      : served(dir, ServiceOptions{}, WithRamTier()), client(served.Client(co)) {
    if (client == nullptr) return;
    ns = client->RegisterNamespace(TestSpec()).value();
    for (int i = 0; i < kBlocks; ++i) {
      payloads.push_back(Payload(ns, Key(i), (300u << 10) + 17 * i));
      EXPECT_TRUE(client->Put(ns, Key(i), payloads.back().data(), payloads.back().size()).ok());
    }
    tier = BlockSinkOf(served.store())->ram_tier();
  }
  ::testing::AssertionResult Ready() {
    if (!served.store()->GetStats().ram_shared_memory)
      return ::testing::AssertionFailure() << "the test needs the tier in /dev/shm";
    if (client == nullptr) return ::testing::AssertionFailure() << "no client";
    if (tier->Contains(ns, Key(0)) || !tier->Contains(ns, Key(kBlocks - 1)))
      return ::testing::AssertionFailure() << "the tier should hold the last blocks only";
    return ::testing::AssertionSuccess();
  }
  ServedStore served;
  std::unique_ptr<Store> client;
  NamespaceId ns = 0;
  std::vector<std::vector<uint8_t>> payloads;
  RamTier* tier = nullptr;
};

class ServiceTierTest : public ::testing::Test {
 protected:
  TempDir dir_;
};

TEST_F(ServiceTierTest, PinnedBlocksAreReadStraightFromTheLentTierAndStayUntilUnpinned) {
  ServedStore served(dir_.path(), ServiceOptions{}, WithRamTier());
  ASSERT_TRUE(served.store()->GetStats().ram_shared_memory) << "the test needs the tier in /dev/shm";
  auto c = served.Client();
  ASSERT_NE(c, nullptr);
  auto* lender = dynamic_cast<client::ServiceStore*>(c.get());
  ASSERT_NE(lender, nullptr);
  const NamespaceId ns = c->RegisterNamespace(TestSpec()).value();
  std::vector<std::vector<uint8_t>> payloads;
  for (int i = 0; i < 3; ++i) {
    payloads.push_back(Payload(ns, Key(i), 200000 + 1000 * i));
    ASSERT_TRUE(c->Put(ns, Key(i), payloads.back().data(), payloads.back().size()).ok());
  }
  // Before the tier is mapped, the service refuses pins; a connection that
  // is not the live one is refused here.
  const std::vector<std::string> names = {Key(0), Key(1), "absent", Key(2)};
  const std::vector<std::string_view> keys(names.begin(), names.end());
  EXPECT_EQ(lender->PinTier(1, ns, keys).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(lender->PinTier(2, ns, keys).status().code(), Code::kAborted);
  {
    Stats st = served.store()->GetStats();
    ASSERT_EQ(st.ram_blocks, 3u) << st.ram_used_bytes << " " << st.ram_capacity_bytes;
  }
  auto m = lender->MapTier();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_GT(m->map.data_bytes, 0u);
  EXPECT_EQ(m->map.data_offset % 4096, 0u);
  // The regions the client registers one by one are the tier's own.
  EXPECT_EQ(m->map.region_bytes, BlockSinkOf(served.store())->ram_tier()->region_bytes());
  EXPECT_EQ(m->map.data_offset + m->map.data_bytes, m->map.file_bytes);
  TierView view(*m);
  ASSERT_NE(view.base, nullptr);
  // Read-only: the descriptor cannot be mapped for writing.
  void* w = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd.get(), 0);
  EXPECT_EQ(w, MAP_FAILED);
  EXPECT_EQ(errno, EACCES);

  const Stats before = served.store()->GetStats();
  auto lease = lender->PinTier(m->connection, ns, keys);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_EQ(lease->blocks.size(), keys.size());
  EXPECT_NE(lease->lease, 0u);
  EXPECT_FALSE(lease->blocks[2].pinned);
  uint64_t pinned = 0;
  for (size_t k : {0u, 1u, 3u}) {
    const wire::TierPinned& b = lease->blocks[k];
    const auto& p = payloads[k == 3 ? 2 : k];
    ASSERT_TRUE(b.pinned);
    EXPECT_EQ(b.size, p.size());
    const std::vector<uint8_t> bytes = view.Bytes(b);
    EXPECT_EQ(bytes, p);
    EXPECT_EQ(b.checksum, Xxh3(bytes.data(), bytes.size()));
    pinned += b.size;
  }
  ServiceStats sv = served.service()->GetStats();
  EXPECT_EQ(sv.tier_pinned_bytes, pinned);
  EXPECT_EQ(sv.tier_lent_blocks, 3u);
  EXPECT_EQ(sv.tier_maps, 1u);
  // The store counts a lent block as a RAM-tier get, as its own read would;
  // the tier counts it as a hit. The absent key is the client's miss to read.
  {
    const Stats st = served.store()->GetStats();
    EXPECT_EQ(st.gets - before.gets, 3u);
    EXPECT_EQ(st.hits_ram - before.hits_ram, 3u);
    EXPECT_EQ(st.bytes_read_ram - before.bytes_read_ram, pinned);
    EXPECT_EQ(st.misses, before.misses);
  }

  // Every block still reads back the usual way while pinned.
  for (int i = 0; i < 3; ++i) {
    auto got = c->GetVector(ns, Key(i));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, payloads[i]);
  }
  // Eviction cannot take a pinned block's memory: evicting everything
  // leaves the bytes where the lease says they are (the blocks themselves
  // are gone from the store), and the memory is freed once unpinned.
  ASSERT_TRUE(served.store()->EvictTo(0).ok());
  for (size_t k : {0u, 1u, 3u}) EXPECT_EQ(view.Bytes(lease->blocks[k]), payloads[k == 3 ? 2 : k]);
  EXPECT_TRUE(c->GetVector(ns, Key(0)).status().IsNotFound());
  EXPECT_GT(served.store()->GetStats().ram_used_bytes, 0u);
  lender->UnpinTier(m->connection, lease->lease);
  EXPECT_TRUE(Eventually([&] { return served.service()->GetStats().tier_pinned_bytes == 0; }));
  EXPECT_TRUE(Eventually([&] { return served.store()->GetStats().ram_used_bytes == 0; }));
}

// Gets into memory not registered with the service read the lent tier
// themselves (one copy, verified here): the right bytes, whatever the tier
// holds; blocks only on disk, absent keys and short buffers answered as the
// service would; a copy changed in the tier is caught and read again from
// the service, which drops it. Gets into registered memory, and clients
// that turn it off, leave the tier to the service.
TEST_F(ServiceTierTest, GetsIntoUnregisteredMemoryCopyFromTheLentTierThemselves) {
  PastTheTier t(dir_.path(), ServiceClientOptions{});
  ASSERT_TRUE(t.Ready());
  ServedStore& served = t.served;
  Store* c = t.client.get();
  const NamespaceId ns = t.ns;
  const auto& payloads = t.payloads;
  RamTier* tier = t.tier;
  auto lent = [&] { return served.service()->GetStats().tier_lent_blocks; };

  // A lone get of a block the tier holds: from the tier.
  std::vector<uint8_t> buf(2u << 20, 0xEE);
  auto got = c->Get(ns, Key(kBlocks - 1), buf.data(), buf.size());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.begin() + static_cast<long>(*got)), payloads.back());
  EXPECT_EQ(lent(), 1u);
  // One only on disk: from the service.
  got = c->Get(ns, Key(0), buf.data(), buf.size());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.begin() + static_cast<long>(*got)), payloads[0]);

  // A batch of every block, an absent key and a short buffer.
  std::vector<std::string> names;
  for (int i = 0; i < kBlocks; ++i) names.push_back(Key(i));
  names.push_back("absent");
  names.push_back(Key(kBlocks - 2));
  std::vector<std::vector<uint8_t>> outs(names.size(), std::vector<uint8_t>(1u << 20, 0xEE));
  outs.back().resize(1000);
  std::vector<MutableFragment> frags;
  for (auto& o : outs) frags.push_back(MutableFragment{o.data(), o.size()});
  std::vector<GetItem> items;
  for (size_t i = 0; i < names.size(); ++i) items.push_back(GetItem{names[i], {&frags[i], 1}});
  const uint64_t lent_before = lent();
  auto res = c->GetBatch(ns, items);
  ASSERT_EQ(res.size(), items.size());
  for (int i = 0; i < kBlocks; ++i) {
    ASSERT_TRUE(res[i].ok()) << i << ": " << res[i].status().ToString();
    ASSERT_EQ(*res[i], payloads[i].size());
    EXPECT_TRUE(std::equal(payloads[i].begin(), payloads[i].end(), outs[i].begin())) << i;
  }
  EXPECT_TRUE(res[kBlocks].status().IsNotFound()) << res[kBlocks].status().ToString();
  EXPECT_EQ(res[kBlocks + 1].status().code(), Code::kBufferTooSmall) << res[kBlocks + 1].status().ToString();
  EXPECT_GE(lent() - lent_before, 5u);  // what the tier held, read from it

  // A copy changed in the tier (a stray write into the service's memory):
  // the client's check fails, the service's read drops it and goes to disk.
  const uint64_t bad_before = tier->GetStats().checksum_failures;
  {
    RamTier::Pin pin = tier->Peek(ns, Key(kBlocks - 1));
    ASSERT_TRUE(pin);
    pin.pieces()[0].data[4321] ^= 0x10;
  }
  std::fill(buf.begin(), buf.end(), 0);
  got = c->Get(ns, Key(kBlocks - 1), buf.data(), buf.size());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.begin() + static_cast<long>(*got)), payloads.back());
  EXPECT_EQ(tier->GetStats().checksum_failures, bad_before + 1);  // dropped by the service's read

  // Registered memory: the service fills it itself.
  SharedBuffer shared(2u << 20);
  ASSERT_NE(shared.mem, nullptr);
  ASSERT_TRUE(c->RegisterMemory(shared.mem, shared.bytes, shared.fd, 0).ok());
  const uint64_t lent_now = lent();
  got = c->Get(ns, Key(kBlocks - 2), shared.mem, shared.bytes);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(std::equal(payloads[kBlocks - 2].begin(), payloads[kBlocks - 2].end(), shared.mem));
  EXPECT_EQ(lent(), lent_now);

  // A client that turns it off reads through staging.
  ServiceClientOptions off;
  off.read_lent_tier = false;
  auto d = served.Client(off);
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->RegisterNamespace(TestSpec()).ok());
  got = d->Get(ns, Key(kBlocks - 3), buf.data(), buf.size());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.begin() + static_cast<long>(*got)), payloads[kBlocks - 3]);
  EXPECT_EQ(lent(), lent_now);
}

// GetAsync into memory not registered reads the lent tier too: one copy on
// the pin's reply, the pin released after; what the tier does not serve
// (only on disk, absent, a bad copy) comes from the service as before, a
// short buffer and a passed deadline are answered without touching it.
// Copied on the client's copy threads, or (one copy thread) on the reply's.
class AsyncLentTest : public ServiceTierTest, public ::testing::WithParamInterface<uint32_t> {};
INSTANTIATE_TEST_SUITE_P(CopyThreads, AsyncLentTest, ::testing::Values(1u, 3u));

TEST_P(AsyncLentTest, AsyncGetsIntoUnregisteredMemoryCopyFromTheLentTierToo) {
  ServiceClientOptions co;
  co.copy_threads = GetParam();
  PastTheTier t(dir_.path(), co);
  ASSERT_TRUE(t.Ready());
  Store* c = t.client.get();
  const NamespaceId ns = t.ns;
  const auto& payloads = t.payloads;
  RamTier* tier = t.tier;
  ServedStore& served = t.served;
  auto lent = [&] { return served.service()->GetStats().tier_lent_blocks; };
  // GetAsync of `key` into `buf` with `deadline`, waited for.
  auto get_async = [&](const std::string& key, std::vector<uint8_t>& buf, Clock::time_point deadline) {
    std::promise<Result<size_t>> p;
    MutableFragment m{buf.data(), buf.size()};
    c->GetAsync(ns, key, {&m, 1}, deadline, [&p](Result<size_t> r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  };
  const Clock::time_point soon = Clock::now() + std::chrono::seconds(10);

  // A lone get without a deadline; an absent key is NotFound, a short buffer
  // BufferTooSmall with nothing written.
  std::vector<uint8_t> buf(1u << 20, 0);
  auto r = get_async(Key(kBlocks - 1), buf, kNoDeadline);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(std::equal(payloads.back().begin(), payloads.back().end(), buf.begin()));
  EXPECT_EQ(lent(), 1u);
  EXPECT_TRUE(get_async("absent", buf, soon).status().IsNotFound());
  std::vector<uint8_t> small(1000, 0xAB);
  EXPECT_EQ(get_async(Key(kBlocks - 1), small, soon).status().code(), Code::kBufferTooSmall);
  EXPECT_EQ(small, std::vector<uint8_t>(1000, 0xAB));
  // A deadline already passed: TimedOut, untouched.
  std::vector<uint8_t> untouched(1u << 20, 0xAB);
  EXPECT_EQ(get_async(Key(kBlocks - 1), untouched, Clock::now() - std::chrono::milliseconds(1)).status().code(),
            Code::kTimedOut);
  EXPECT_EQ(untouched, std::vector<uint8_t>(1u << 20, 0xAB));

  // Every block, in flight together: what the tier holds is lent, the rest
  // read by the service (through staging, which holds them all); all land
  // right.
  std::vector<std::vector<uint8_t>> outs;
  for (int i = 0; i < kBlocks; ++i) outs.emplace_back(payloads[i].size(), 0xEE);
  std::vector<std::promise<Result<size_t>>> got(kBlocks);
  for (int i = 0; i < kBlocks; ++i) {
    MutableFragment m{outs[i].data(), outs[i].size()};
    c->GetAsync(ns, Key(i), {&m, 1}, soon, [&got, i](Result<size_t> r) { got[i].set_value(std::move(r)); });
  }
  for (int i = 0; i < kBlocks; ++i) {
    auto r = got[i].get_future().get();
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    ASSERT_EQ(*r, payloads[i].size());
    EXPECT_TRUE(std::equal(payloads[i].begin(), payloads[i].end(), outs[i].begin())) << i;
  }
  EXPECT_GE(lent(), 6u);
  EXPECT_TRUE(Eventually([&] { return served.service()->GetStats().tier_pinned_bytes == 0; }));

  // A copy changed in the tier: caught, read again by the service, which
  // drops it (and keeps the disk's copy there).
  const uint64_t bad_before = tier->GetStats().checksum_failures, lent_before = lent();
  int held = kBlocks - 1;
  while (held > 0 && !tier->Contains(ns, Key(held))) --held;
  {
    RamTier::Pin pin = tier->Peek(ns, Key(held));
    ASSERT_TRUE(pin);
    pin.pieces()[0].data[999] ^= 0x01;
  }
  std::fill(buf.begin(), buf.end(), 0);
  r = get_async(Key(held), buf, soon);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(std::equal(payloads[held].begin(), payloads[held].end(), buf.begin()));
  EXPECT_EQ(tier->GetStats().checksum_failures, bad_before + 1);
  EXPECT_EQ(lent(), lent_before + 1);  // pinned and copied here first
  EXPECT_TRUE(Eventually([&] { return served.service()->GetStats().tier_pinned_bytes == 0; }));

  // Closing the client with gets in flight: each has answered by the time
  // Close returns, right bytes or an error.
  std::atomic<int> answered{0}, right{0};
  for (int i = 0; i < kBlocks; ++i) {
    std::fill(outs[i].begin(), outs[i].end(), 0);
    MutableFragment m{outs[i].data(), outs[i].size()};
    c->GetAsync(ns, Key(i), {&m, 1}, soon, [&, i](Result<size_t> r) {
      if (r.ok() && std::equal(payloads[i].begin(), payloads[i].end(), outs[i].begin())) ++right;
      ++answered;
    });
  }
  ASSERT_TRUE(c->Close().ok());
  EXPECT_EQ(answered.load(), kBlocks);
  EXPECT_GT(right.load(), 0);
}

TEST_F(ServiceTierTest, AClientThatGoesReleasesItsPins) {
  ServedStore served(dir_.path(), ServiceOptions{}, WithRamTier());
  auto c = served.Client();
  ASSERT_NE(c, nullptr);
  auto* lender = dynamic_cast<client::ServiceStore*>(c.get());
  const NamespaceId ns = c->RegisterNamespace(TestSpec()).value();
  auto p = Payload(ns, Key(1), 100000);
  ASSERT_TRUE(c->Put(ns, Key(1), p.data(), p.size()).ok());
  auto m = lender->MapTier();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::string k1 = Key(1);
  const std::vector<std::string_view> keys = {k1};
  auto lease = lender->PinTier(m->connection, ns, keys);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(lease->blocks[0].pinned);
  EXPECT_EQ(served.service()->GetStats().tier_pinned_bytes, p.size());
  c.reset();  // never unpinned
  EXPECT_TRUE(Eventually([&] { return served.service()->GetStats().tier_pinned_bytes == 0; }));
  // The block is evictable again.
  ASSERT_TRUE(served.store()->EvictTo(0).ok());
  EXPECT_EQ(served.store()->GetStats().ram_used_bytes, 0u);
}

TEST_F(ServiceTierTest, PinsPastTheClientsCapAreAnsweredNotPinned) {
  ServiceOptions so;
  so.max_client_pinned_bytes = 150000;
  ServedStore served(dir_.path(), so, WithRamTier());
  auto c = served.Client();
  ASSERT_NE(c, nullptr);
  auto* lender = dynamic_cast<client::ServiceStore*>(c.get());
  const NamespaceId ns = c->RegisterNamespace(TestSpec()).value();
  for (int i = 0; i < 3; ++i) {
    auto p = Payload(ns, Key(i), 100000);
    ASSERT_TRUE(c->Put(ns, Key(i), p.data(), p.size()).ok());
  }
  auto m = lender->MapTier();
  ASSERT_TRUE(m.ok());
  const std::vector<std::string> names = {Key(0), Key(1), Key(2)};
  const std::vector<std::string_view> keys(names.begin(), names.end());
  const Stats before = served.store()->GetStats();
  const uint64_t tier_hits = BlockSinkOf(served.store())->ram_tier()->GetStats().hits;
  auto lease = lender->PinTier(m->connection, ns, keys);
  ASSERT_TRUE(lease.ok());
  EXPECT_TRUE(lease->blocks[0].pinned);
  EXPECT_FALSE(lease->blocks[1].pinned);
  EXPECT_FALSE(lease->blocks[2].pinned);
  EXPECT_EQ(served.service()->GetStats().tier_pinned_bytes, 100000u);
  // Only the lent block is a read: the two left to the client's own read
  // are counted when it reads them, not here as well.
  const Stats after = served.store()->GetStats();
  EXPECT_EQ(after.hits_ram - before.hits_ram, 1u);
  EXPECT_EQ(BlockSinkOf(served.store())->ram_tier()->GetStats().hits - tier_hits, 1u);
  // A second lease on top of the first is held to the same cap.
  auto more = lender->PinTier(m->connection, ns, keys);
  ASSERT_TRUE(more.ok());
  for (const auto& b : more->blocks) EXPECT_FALSE(b.pinned);
  EXPECT_EQ(more->lease, 0u);  // nothing pinned, no lease
}

// All clients together pin at most half the tier, so new blocks still find
// room whatever the clients hold.
TEST_F(ServiceTierTest, ClientsTogetherPinAtMostHalfTheTier) {
  ServedStore served(dir_.path(), ServiceOptions{}, WithRamTier());  // 8 MiB: 4 MiB may be pinned
  auto a = served.Client(), b = served.Client();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const NamespaceId ns = a->RegisterNamespace(TestSpec()).value();
  ASSERT_TRUE(b->RegisterNamespace(TestSpec()).ok());
  std::vector<std::string> names;
  constexpr size_t kBlock = 512 << 10;
  for (int i = 0; i < 10; ++i) {
    names.push_back(Key(i));
    auto p = Payload(ns, Key(i), kBlock);
    ASSERT_TRUE(a->Put(ns, Key(i), p.data(), p.size()).ok());
  }
  auto* la = dynamic_cast<client::ServiceStore*>(a.get());
  auto* lb = dynamic_cast<client::ServiceStore*>(b.get());
  auto ma = la->MapTier(), mb = lb->MapTier();
  ASSERT_TRUE(ma.ok() && mb.ok());
  const std::vector<std::string_view> first(names.begin(), names.begin() + 6), rest(names.begin() + 6, names.end());
  auto pa = la->PinTier(ma->connection, ns, first);
  ASSERT_TRUE(pa.ok());
  for (const auto& blk : pa->blocks) EXPECT_TRUE(blk.pinned);
  auto pb = lb->PinTier(mb->connection, ns, rest);  // 3 MiB held: two more fit, the last two do not
  ASSERT_TRUE(pb.ok());
  EXPECT_TRUE(pb->blocks[0].pinned && pb->blocks[1].pinned);
  EXPECT_FALSE(pb->blocks[2].pinned || pb->blocks[3].pinned);
  EXPECT_EQ(served.service()->GetStats().tier_pinned_bytes, 8 * kBlock);
  la->UnpinTier(ma->connection, pa->lease);
  EXPECT_TRUE(Eventually([&] { return served.service()->GetStats().tier_pinned_bytes == 2 * kBlock; }));
  const std::vector<std::string_view> last(names.begin() + 8, names.end());
  auto again = lb->PinTier(mb->connection, ns, last);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->blocks[0].pinned && again->blocks[1].pinned);
}

// Each unreleased lease costs the service memory: a client holds at most
// 4,096, and past them nothing more is pinned for it until it releases one.
TEST_F(ServiceTierTest, AClientHoldsAtMost4096Leases) {
  ServedStore served(dir_.path(), ServiceOptions{}, WithRamTier());
  auto c = served.Client();
  ASSERT_NE(c, nullptr);
  auto* lender = dynamic_cast<client::ServiceStore*>(c.get());
  const NamespaceId ns = c->RegisterNamespace(TestSpec()).value();
  auto p = Payload(ns, Key(1), 512);
  ASSERT_TRUE(c->Put(ns, Key(1), p.data(), p.size()).ok());
  auto m = lender->MapTier();
  ASSERT_TRUE(m.ok());
  const std::string k1 = Key(1);
  const std::vector<std::string_view> keys = {k1};
  uint64_t first = 0;
  for (int i = 0; i < 4096; ++i) {
    auto l = lender->PinTier(m->connection, ns, keys);
    ASSERT_TRUE(l.ok() && l->blocks[0].pinned) << i;
    if (i == 0) first = l->lease;
  }
  auto over = lender->PinTier(m->connection, ns, keys);
  ASSERT_TRUE(over.ok());
  EXPECT_FALSE(over->blocks[0].pinned);
  lender->UnpinTier(m->connection, first);
  EXPECT_TRUE(Eventually([&] {
    auto again = lender->PinTier(m->connection, ns, keys);
    return again.ok() && again->blocks[0].pinned;
  }));
}

TEST_F(ServiceTierTest, UnknownNamespacesAndServicesWithoutASharedTierAreRefused) {
  {
    ServedStore served(dir_.path(), ServiceOptions{}, WithRamTier());
    auto c = served.Client();
    ASSERT_NE(c, nullptr);
    auto* lender = dynamic_cast<client::ServiceStore*>(c.get());
    auto m = lender->MapTier();
    ASSERT_TRUE(m.ok());
    const std::string k1 = Key(1);
    const std::vector<std::string_view> keys = {k1};
    // Without tenancy a namespace nobody registered simply holds nothing.
    auto none = lender->PinTier(m->connection, 0x1234, keys);
    ASSERT_TRUE(none.ok()) << none.status().ToString();
    EXPECT_FALSE(none->blocks[0].pinned);
    EXPECT_EQ(lender->PinTier(m->connection, 0x1234, {}).status().code(), Code::kInvalidArgument);
  }
  TempDir other;
  ServedStore plain(other.path());  // no RAM tier
  auto c = plain.Client();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(dynamic_cast<client::ServiceStore*>(c.get())->MapTier().status().code(), Code::kNotSupported);
}

// A client trusts no reply: pieces must add up to the block's size, each
// piece must hold bytes and not wrap, and counts are bounded.
TEST(TierLeaseWire, RoundTripsAndRefusesPiecesThatDoNotMakeTheBlock) {
  wire::TierLease l;
  l.lease = 7;
  l.blocks.resize(2);
  l.blocks[0] = wire::TierPinned{true, 300, 0xabc, {{4096, 100}, {65536, 200}}};
  wire::WireWriter w;
  wire::Encode(w, l);
  wire::WireReader r(w.body());
  wire::TierLease back;
  wire::Decode(r, &back);
  ASSERT_TRUE(r.Finish("lease").ok());
  EXPECT_EQ(back.lease, 7u);
  ASSERT_EQ(back.blocks.size(), 2u);
  EXPECT_TRUE(back.blocks[0].pinned);
  EXPECT_EQ(back.blocks[0].pieces, l.blocks[0].pieces);
  EXPECT_FALSE(back.blocks[1].pinned);
  auto refused = [](const wire::TierPinned& b) {
    wire::TierLease bad;
    bad.blocks.push_back(b);
    wire::WireWriter bw;
    wire::Encode(bw, bad);
    wire::WireReader br(bw.body());
    wire::TierLease out;
    wire::Decode(br, &out);
    return !br.Finish("lease").ok();
  };
  EXPECT_TRUE(refused(wire::TierPinned{true, 300, 1, {{0, 100}}}));             // short of the size
  EXPECT_TRUE(refused(wire::TierPinned{true, 100, 1, {{0, 100}, {200, 50}}}));  // past it
  EXPECT_TRUE(refused(wire::TierPinned{true, 100, 1, {{0, 0}, {0, 100}}}));     // an empty piece
  EXPECT_TRUE(refused(wire::TierPinned{true, 100, 1, {{~0ull - 10, 100}}}));    // wraps
  EXPECT_TRUE(refused(wire::TierPinned{true, 0, 1, {}}));                       // pinned, no pieces
  wire::TierMap m{4096, 8192, 1};  // data past the file
  wire::WireWriter mw;
  wire::Encode(mw, m);
  wire::WireReader mr(mw.body());
  wire::TierMap mb;
  wire::Decode(mr, &mb);
  EXPECT_FALSE(mr.Finish("map").ok());
  const auto decodes = [](const wire::TierMap& t) {
    wire::WireWriter w;
    wire::Encode(w, t);
    wire::WireReader r(w.body());
    wire::TierMap back;
    wire::Decode(r, &back);
    return r.Finish("map").ok() && back.region_bytes == t.region_bytes;
  };
  EXPECT_TRUE(decodes(wire::TierMap{1 << 20, 4096, 8192, 1ull << 30}));
  EXPECT_FALSE(decodes(wire::TierMap{1 << 20, 4096, 8192, 0})) << "no regions";
  EXPECT_FALSE(decodes(wire::TierMap{1 << 20, 4096, 8192, 1000})) << "not whole pages";
}

}  // namespace
}  // namespace kvtier::testing
