// GPU round trips through the store (label "gpu"). Skipped, with the reason,
// where no CUDA device is usable.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include <xxhash.h>

#include "kvtier/cuda.h"
#include "kvtier/service.h"
#include "cuda/hash_kernel.h"
#include "cuda/skip_without_gpu.h"
#include "cuda/transfer_impl.h"
#include "kvtier/store.h"
#include "tier/ram_tier.h"

namespace kvtier::gpu {
namespace {


// The GPU's XXH3 equals the host's for lengths around every branch of the
// long-input algorithm and for fragment layouts a block can have.
TEST(Gpu, HashKernelMatchesXxh3) {
  SKIP_WITHOUT_GPU();
  ASSERT_EQ(InitGpuHash(), cudaSuccess);
  const size_t arena = (5u << 20) + 65536;
  std::vector<uint8_t> host(arena);
  std::mt19937_64 r(11);
  for (auto& b : host) b = static_cast<uint8_t>(r());
  uint8_t* dev = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dev), arena), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), arena, cudaMemcpyHostToDevice), cudaSuccess);
  // Each case: payload length and fragment sizes (the last takes the rest).
  struct Case { uint64_t len; std::vector<uint64_t> sizes; };
  std::vector<Case> cases;
  for (uint64_t len : {241ull, 256ull, 1023ull, 1024ull, 1025ull, 1088ull, 2047ull, 2048ull, 2049ull, 4096ull,
                       65536ull + 8, 65536ull + 13, (2ull << 20), (2ull << 20) + 4104, 5ull << 20})
    cases.push_back({len, {}});
  cases.push_back({2u << 20, std::vector<uint64_t>(63, 32768)});           // 64 per-layer pieces of 32 KiB
  cases.push_back({(1u << 20) + 5, {8, 16, 4096, 1000, 24, 65536}});       // odd last fragment
  cases.push_back({300000, {264, 8, 8, 131072, 40000}});
  std::vector<HashPayload> payloads;
  std::vector<HashFrag> frags;
  std::vector<uint64_t> want;
  uint64_t blocks = 0, at = 0;
  for (const Case& c : cases) {
    const uint32_t first = static_cast<uint32_t>(frags.size());
    std::vector<uint8_t> gathered;
    uint64_t end = 0;
    std::vector<uint64_t> sizes = c.sizes;
    uint64_t used = 0;
    for (uint64_t s : sizes) used += s;
    sizes.push_back(c.len - used);
    for (uint64_t s : sizes) {
      // Fragments live at scattered, 8-aligned places of the arena.
      at = (at + 4096 + 8 * (r() % 64)) % (arena - s - 8) / 8 * 8;
      end += s;
      frags.push_back(HashFrag{dev + at, end});
      gathered.insert(gathered.end(), host.begin() + at, host.begin() + at + s);
    }
    ASSERT_TRUE(GpuHashable(frags.data() + first, static_cast<uint32_t>(sizes.size()), c.len)) << c.len;
    payloads.push_back(HashPayload{c.len, blocks, first, static_cast<uint32_t>(sizes.size())});
    blocks += (c.len - 1) / 1024;
    want.push_back(XXH3_64bits(gathered.data(), gathered.size()));
  }
  HashPayload* d_pay = nullptr;
  HashFrag* d_frag = nullptr;
  uint64_t *d_scratch = nullptr, *d_out = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_pay), payloads.size() * sizeof(HashPayload)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_frag), frags.size() * sizeof(HashFrag)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_scratch), (blocks + 1) * 64), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_out), payloads.size() * 8), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_pay, payloads.data(), payloads.size() * sizeof(HashPayload), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_frag, frags.data(), frags.size() * sizeof(HashFrag), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(LaunchGpuHash(d_pay, payloads.size(), d_frag, blocks, d_scratch, d_out, nullptr), cudaSuccess);
  std::vector<uint64_t> got(payloads.size());
  ASSERT_EQ(cudaMemcpy(got.data(), d_out, got.size() * 8, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(got[i], want[i]) << "case " << i << ", length " << cases[i].len;
  // What the GPU cannot take goes to the host.
  HashFrag odd[2] = {{dev, 1001}, {dev + 2048, 5000}};
  EXPECT_FALSE(GpuHashable(odd, 2, 5000));   // a middle fragment not a multiple of 8
  HashFrag misaligned[1] = {{dev + 4, 4096}};
  EXPECT_FALSE(GpuHashable(misaligned, 1, 4096));
  HashFrag tiny[1] = {{dev, 240}};
  EXPECT_FALSE(GpuHashable(tiny, 1, 240));  // XXH3's short-input paths stay on the host
  for (void* p : {static_cast<void*>(dev), static_cast<void*>(d_pay), static_cast<void*>(d_frag),
                  static_cast<void*>(d_scratch), static_cast<void*>(d_out)})
    cudaFree(p);
}

TEST(Gpu, WithoutDeviceEveryCallSaysWhy) {
  Status dev = DeviceStatus();
  if (dev.ok()) GTEST_SKIP() << "a device is present: covered by the round-trip tests";
  EXPECT_EQ(dev.code(), Code::kNotSupported);
  EXPECT_FALSE(dev.message().empty());
  auto t = Transfer::Create(nullptr);
  EXPECT_EQ(t.status().code(), Code::kNotSupported);
}

class GpuStore : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/kvtier-gputest-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    ASSERT_NE(mkdtemp(buf.data()), nullptr);
    dir_ = buf.data();
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    transfer_.reset();
    client_.reset();
    if (service_) service_->Stop();
    service_.reset();
    store_.reset();
    if (!shm_.empty()) unlink(shm_.c_str());
    for (void* p : dev_) cudaFree(p);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  // The store in dir_ with the test namespace; no Transfer yet.
  void OpenStore(const Options& o) {
    auto s = Store::Open(dir_, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    shm_ = RamTierShmPath(store_->Description().store_id);
    NamespaceSpec spec;
    spec.model_id = "gpu-test";
    spec.dtype = "bf16";
    auto ns = store_->RegisterNamespace(spec);
    ASSERT_TRUE(ns.ok());
    ns_ = *ns;
  }
  void Open(uint64_t ram_bytes, CopyMethod method, bool shared_tier = false) {
    Options o;
    o.segment_size_bytes = 64 << 20;
    o.capacity_bytes = 4ull << 30;
    o.ram_tier_bytes = ram_bytes;
    o.ram_tier_shared_memory = shared_tier;
    ASSERT_NO_FATAL_FAILURE(OpenStore(o));
    TransferOptions to;
    to.method = method;
    auto t = Transfer::Create(store_.get(), to);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    transfer_ = std::move(t).value();
  }
  void Serve(bool shared_tier);
  void StartService();
  void* DevAlloc(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, n), cudaSuccess);
    dev_.push_back(p);
    return p;
  }
  // Blocks of `layers` x 2 fragments of `frag` bytes each (per-layer layout),
  // or one fragment (layers = 0), laid out in one device buffer with gaps.
  struct Layout {
    std::vector<std::vector<DeviceFragment>> frags;
    std::vector<DeviceBlock> blocks;
    std::vector<std::string> keys;
    uint8_t* base = nullptr;
    size_t bytes = 0;
  };
  Layout MakeLayout(int nblocks, int layers, size_t frag, const std::string& prefix) {
    Layout l;
    size_t per_block = layers == 0 ? frag : 2 * layers * frag;
    size_t stride = layers == 0 ? frag : frag + 4096;  // gaps between fragments
    size_t slots = layers == 0 ? 1 : 2 * layers;
    l.bytes = nblocks * slots * stride;
    l.base = static_cast<uint8_t*>(DevAlloc(l.bytes));
    cudaMemset(l.base, 0, l.bytes);
    for (int b = 0; b < nblocks; ++b) {
      std::vector<DeviceFragment> f;
      for (size_t s = 0; s < slots; ++s)
        f.push_back(DeviceFragment{l.base + (static_cast<size_t>(b) * slots + s) * stride, per_block / slots});
      l.frags.push_back(std::move(f));
      std::string k(prefix);
      k += std::to_string(b);
      l.keys.push_back(std::move(k));
    }
    for (int b = 0; b < nblocks; ++b) l.blocks.push_back(DeviceBlock{l.keys[b], l.frags[b]});
    return l;
  }
  static void Fill(Layout& l, uint64_t seed) {
    std::vector<uint8_t> host(l.bytes);
    std::mt19937_64 r(seed);
    for (size_t i = 0; i + 8 <= host.size(); i += 8) {
      uint64_t x = r();
      std::memcpy(host.data() + i, &x, 8);
    }
    ASSERT_EQ(cudaMemcpy(l.base, host.data(), l.bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  // Compares the fragments of two layouts byte for byte on the device side
  // (copied back to the host for the comparison).
  static void ExpectSame(const Layout& a, const Layout& b, size_t count = SIZE_MAX) {
    ASSERT_EQ(a.blocks.size(), b.blocks.size());
    for (size_t i = 0; i < std::min(count, a.blocks.size()); ++i)
      for (size_t f = 0; f < a.frags[i].size(); ++f) {
        size_t n = a.frags[i][f].size;
        std::vector<uint8_t> x(n), y(n);
        ASSERT_EQ(cudaMemcpy(x.data(), a.frags[i][f].ptr, n, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(y.data(), b.frags[i][f].ptr, n, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(x, y) << "block " << i << " fragment " << f;
      }
  }
  void RoundTrip(uint64_t ram_bytes, CopyMethod method, int nblocks, int layers, size_t frag) {
    Open(ram_bytes, method);
    Layout src = MakeLayout(nblocks, layers, frag, "k");
    Fill(src, 7);
    auto put = transfer_->PutFromDevice(ns_, src.blocks, stream_, /*wait_durable=*/true);
    for (size_t i = 0; i < put.size(); ++i) ASSERT_TRUE(put[i].ok()) << i << ": " << put[i].ToString();
    // Every block was hashed on the GPU (reads below verify those sums on the host).
    EXPECT_EQ(transfer_->GetStats().gpu_hashed_blocks, static_cast<uint64_t>(nblocks));
    if (ram_bytes != 0) {  // the put's time split, from CUDA events and the host clock
      TransferStats ts = transfer_->GetStats();
      EXPECT_GT(ts.last_put_copy_ms, 0);
      EXPECT_GT(ts.last_put_enqueue_ms, 0);
      EXPECT_GE(ts.last_put_call_ms, ts.last_put_enqueue_ms);
    }
    // Every fragment lies in one allocation: one driver query for the call.
    const uint64_t queries = transfer_->GetStats().pointer_queries;
    EXPECT_EQ(queries, 1u);
    Layout dst = MakeLayout(nblocks, layers, frag, "k");
    const Stats store_before = store_->GetStats();
    cudaEvent_t ev;
    ASSERT_EQ(cudaEventCreate(&ev), cudaSuccess);
    std::atomic<int> done{0};
    auto got = transfer_->GetToDevice(ns_, dst.blocks, stream_, ev, [&](Status st) {
      EXPECT_TRUE(st.ok()) << st.ToString();
      done++;
    });
    for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
    ASSERT_EQ(cudaEventSynchronize(ev), cudaSuccess);
    cudaEventDestroy(ev);
    ExpectSame(src, dst);
    const TransferStats ts = transfer_->GetStats();
    EXPECT_EQ(ts.pointer_queries, queries + 1);
    EXPECT_EQ(ts.ram_hits_verified_on_device, ts.ram_hits);  // every RAM hit checked
    EXPECT_EQ(ts.ram_hits_reloaded, 0u);
    // The store's counters see the load: RAM hits the GPU path pinned itself
    // count as the store's own gets would (kvtier stats, metrics).
    const Stats store_after = store_->GetStats();
    EXPECT_EQ(store_after.gets - store_before.gets, static_cast<uint64_t>(nblocks));
    EXPECT_EQ(store_after.hits_ram - store_before.hits_ram + store_after.hits_disk - store_before.hits_disk,
              static_cast<uint64_t>(nblocks));
    if (ram_bytes != 0) {
      EXPECT_EQ(store_after.hits_ram - store_before.hits_ram, ts.ram_hits);
      EXPECT_GT(store_after.bytes_read_ram, store_before.bytes_read_ram);
    }
    if (ram_bytes != 0 && ts.ram_hits_verified_on_device > 0) {  // the load's time split
      EXPECT_GT(ts.last_get_copy_ms, 0);
      EXPECT_GT(ts.last_get_enqueue_ms, 0);
      EXPECT_GE(ts.last_get_hash_tail_ms, 0);
      EXPECT_GE(ts.last_get_call_ms, ts.last_get_enqueue_ms);
    }
    for (int i = 0; i < 100 && done.load() == 0; ++i) usleep(10000);
    EXPECT_EQ(done.load(), 1);
  }

  std::string dir_, shm_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> dev_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Service> service_;  // ThroughTheService: serving store_
  std::unique_ptr<Store> client_;     // and its client
  std::unique_ptr<Transfer> transfer_;
  NamespaceId ns_ = 0;
};

TEST_F(GpuStore, CrossLayerBlocksThroughRam) { RoundTrip(256 << 20, CopyMethod::kAuto, 32, 0, 2 << 20); }
TEST_F(GpuStore, PerLayerBlocksThroughRamBatchApi) { RoundTrip(256 << 20, CopyMethod::kBatch, 16, 28, 32 << 10); }
TEST_F(GpuStore, PerLayerBlocksThroughRamKernel) { RoundTrip(256 << 20, CopyMethod::kKernel, 16, 28, 32 << 10); }
TEST_F(GpuStore, PerLayerBlocksThroughRamLoop) { RoundTrip(256 << 20, CopyMethod::kLoop, 8, 28, 32 << 10); }
TEST_F(GpuStore, WithoutRamTierThroughStaging) { RoundTrip(0, CopyMethod::kAuto, 16, 28, 32 << 10); }

// SetCopyMethod changes how the next call copies, and GetStats says so.
// A service's client stores and loads with the same calls: its blocks go
// through staging the service maps (one host copy each, by the service).
// `kvtier serve` in this process: store_ served on dir_/s.sock.
void GpuStore::StartService() {
  ServiceOptions so;
  so.socket_path = dir_ + "/s.sock";
  so.log = [](const std::string&) {};
  auto sv = Service::Start(store_.get(), so);
  ASSERT_TRUE(sv.ok()) << sv.status().ToString();
  service_ = std::move(sv).value();
}

// A store served in this process, its client, and a Transfer on the client.
// `shared_tier`: the RAM tier in /dev/shm, which the service lends.
void GpuStore::Serve(bool shared_tier) {
  Options o;
  o.segment_size_bytes = 64 << 20;
  o.capacity_bytes = 4ull << 30;
  o.ram_tier_bytes = 256 << 20;
  o.ram_tier_shared_memory = shared_tier;
  auto s = Store::Open(dir_ + "/store", o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  store_ = std::move(s).value();
  shm_ = RamTierShmPath(store_->Description().store_id);
  ASSERT_NO_FATAL_FAILURE(StartService());
  auto c = Store::Open("unix:" + dir_ + "/s.sock", Options{});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  client_ = std::move(c).value();
  NamespaceSpec spec;
  spec.model_id = "gpu-test";
  spec.dtype = "bf16";
  auto ns = client_->RegisterNamespace(spec);
  ASSERT_TRUE(ns.ok()) << ns.status().ToString();
  ns_ = *ns;
  auto t = Transfer::Create(client_.get());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  transfer_ = std::move(t).value();
  EXPECT_TRUE(transfer_->GetStats().through_service);
}

TEST_F(GpuStore, ThroughTheServiceRoundTrips) {
  ASSERT_NO_FATAL_FAILURE(Serve(/*shared_tier=*/false));
  EXPECT_FALSE(transfer_->GetStats().ram_tier_lent);  // a tier in anonymous memory cannot be lent

  // 24 blocks of 28 layers' K and V (1.75 MiB each) stored; a 25th is not.
  constexpr int kStored = 24;
  Layout src = MakeLayout(kStored + 1, 28, 32 << 10, "k");
  Fill(src, 11);
  auto put = transfer_->PutFromDevice(ns_, std::span<const DeviceBlock>(src.blocks).first(kStored), stream_,
                                      /*wait_durable=*/true);
  ASSERT_EQ(put.size(), static_cast<size_t>(kStored));
  for (size_t i = 0; i < put.size(); ++i) ASSERT_TRUE(put[i].ok()) << i << ": " << put[i].ToString();
  auto there = client_->Contains(ns_, src.keys[kStored - 1]);
  ASSERT_TRUE(there.ok() && *there);

  Layout dst = MakeLayout(kStored + 1, 28, 32 << 10, "k");
  auto got = transfer_->GetToDevice(ns_, dst.blocks, stream_);
  ASSERT_EQ(got.size(), static_cast<size_t>(kStored + 1));
  for (int i = 0; i < kStored; ++i) {
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
    EXPECT_EQ(*got[i], 2u * 28 * (32 << 10));
  }
  EXPECT_TRUE(got[kStored].status().IsNotFound()) << got[kStored].status().ToString();
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectSame(src, dst, kStored);
  const TransferStats ts = transfer_->GetStats();
  EXPECT_EQ(ts.disk_reads, static_cast<uint64_t>(kStored));  // every block through the service
  EXPECT_EQ(ts.misses, 1u);
  EXPECT_EQ(ts.ram_hits, 0u);
  EXPECT_EQ(ts.blocks_from_device, static_cast<uint64_t>(kStored));
  EXPECT_TRUE(ts.staging_shared_with_service);  // one host copy per block, by the service
}

// With the service's RAM tier in shared memory, the service lends it: hits
// are copied straight from its memory to the device and checked there; a
// block whose bytes in the tier changed is loaded again through the
// service's verified read, never handed over.
TEST_F(GpuStore, ThroughTheServiceRamHitsComeStraightFromTheLentTier) {
  ASSERT_NO_FATAL_FAILURE(Serve(/*shared_tier=*/true));
  if (!store_->GetStats().ram_shared_memory) GTEST_SKIP() << "no room in /dev/shm for the RAM tier";
  ASSERT_TRUE(transfer_->GetStats().ram_tier_lent);
  constexpr int kStored = 24;
  Layout src = MakeLayout(kStored + 1, 28, 32 << 10, "t");
  Fill(src, 5);
  for (const Status& st : transfer_->PutFromDevice(ns_, std::span<const DeviceBlock>(src.blocks).first(kStored),
                                                   stream_, /*wait_durable=*/true))
    ASSERT_TRUE(st.ok()) << st.ToString();
  // One block's bytes in the service's tier change (a stray write).
  {
    RamTier::Pin pin = BlockSinkOf(store_.get())->ram_tier()->Peek(ns_, src.keys[3]);
    ASSERT_TRUE(pin);
    pin.pieces()[0].data[100] ^= 0x5a;
  }
  Layout dst = MakeLayout(kStored + 1, 28, 32 << 10, "t");
  auto got = transfer_->GetToDevice(ns_, dst.blocks, stream_);
  for (int i = 0; i < kStored; ++i) ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
  EXPECT_TRUE(got[kStored].status().IsNotFound());
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectSame(src, dst, kStored);
  const TransferStats ts = transfer_->GetStats();
  EXPECT_EQ(ts.ram_hits, static_cast<uint64_t>(kStored - 1));
  EXPECT_EQ(ts.ram_hits_verified_on_device, static_cast<uint64_t>(kStored));
  EXPECT_EQ(ts.ram_hits_reloaded, 1u);
  EXPECT_EQ(ts.disk_reads, 1u);  // the changed block, through the service's verified read
  EXPECT_EQ(ts.misses, 1u);
  const ServiceStats sv = service_->GetStats();
  EXPECT_EQ(sv.tier_lent_blocks, static_cast<uint64_t>(kStored));
  // The lease goes once the copies have run.
  for (int i = 0; i < 500 && service_->GetStats().tier_pinned_bytes != 0; ++i) usleep(10000);
  EXPECT_EQ(service_->GetStats().tier_pinned_bytes, 0u);

  // The service restarts (the store and its tier stay). While it is down the
  // idle client lets go of the old mapping (it would otherwise keep memory
  // pinned that a stopped service, or a new one that could not adopt the
  // file, no longer uses); the next load maps the tier again from the new
  // service and copies from it.
  service_->Stop();
  service_.reset();
  for (int i = 0; i < 300 && transfer_->GetStats().ram_tier_lent; ++i) usleep(10000);
  EXPECT_FALSE(transfer_->GetStats().ram_tier_lent) << "an idle client still maps a stopped service's tier";
  ASSERT_NO_FATAL_FAILURE(StartService());
  usleep(300000);  // past the client's pause between reconnections
  Layout again = MakeLayout(kStored + 1, 28, 32 << 10, "t");
  for (const auto& r : transfer_->GetToDevice(ns_, std::span<const DeviceBlock>(again.blocks).first(kStored), stream_))
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectSame(src, again, kStored);
  const TransferStats after = transfer_->GetStats();
  EXPECT_TRUE(after.ram_tier_lent);
  // The changed block was dropped from the tier; its disk read may have put it back.
  EXPECT_GE(after.ram_hits - ts.ram_hits, static_cast<uint64_t>(kStored - 1));
  EXPECT_EQ(after.disk_reads - ts.disk_reads + after.ram_hits - ts.ram_hits, static_cast<uint64_t>(kStored));
  EXPECT_EQ(service_->GetStats().tier_maps, 1u);

  // The service is down for a load (which fails: nothing to read from), then
  // comes back: the tier is mapped again (at most once a second) and loads
  // copy from it.
  service_->Stop();
  service_.reset();
  usleep(300000);
  Layout down = MakeLayout(kStored + 1, 28, 32 << 10, "t");
  for (const auto& r : transfer_->GetToDevice(ns_, std::span<const DeviceBlock>(down.blocks).first(kStored), stream_))
    EXPECT_FALSE(r.ok());
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_FALSE(transfer_->GetStats().ram_tier_lent);
  ASSERT_NO_FATAL_FAILURE(StartService());
  usleep(1100000);  // past the pause between attempts to map the tier
  const uint64_t hits_before = transfer_->GetStats().ram_hits;
  Layout back = MakeLayout(kStored + 1, 28, 32 << 10, "t");
  for (const auto& r : transfer_->GetToDevice(ns_, std::span<const DeviceBlock>(back.blocks).first(kStored), stream_))
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectSame(src, back, kStored);
  EXPECT_TRUE(transfer_->GetStats().ram_tier_lent);
  EXPECT_GE(transfer_->GetStats().ram_hits - hits_before, static_cast<uint64_t>(kStored - 1));
}

TEST_F(GpuStore, CopyMethodChangesBetweenCalls) {
  Open(256 << 20, CopyMethod::kAuto);
  Layout src = MakeLayout(8, 0, 512 << 10, "m");
  Fill(src, 11);
  for (const Status& st : transfer_->PutFromDevice(ns_, src.blocks, stream_, true)) ASSERT_TRUE(st.ok());
  struct Case {
    CopyMethod method;
    uint64_t TransferStats::*calls;
  };
  for (Case c : {Case{CopyMethod::kKernel, &TransferStats::kernel_calls},
                 Case{CopyMethod::kLoop, &TransferStats::loop_calls},
                 Case{CopyMethod::kBatch, &TransferStats::batch_calls}}) {
    transfer_->SetCopyMethod(c.method);
    const TransferStats before = transfer_->GetStats();
    EXPECT_EQ(before.method, c.method);
    Layout dst = MakeLayout(8, 0, 512 << 10, "m");
    for (const auto& r : transfer_->GetToDevice(ns_, dst.blocks, stream_)) ASSERT_TRUE(r.ok());
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ExpectSame(src, dst);
    EXPECT_GT(transfer_->GetStats().*c.calls, before.*c.calls) << CopyMethodName(c.method);
  }
}

// A RAM-tier copy changed in memory (a stray write into the shared mapping)
// never reaches the device as a hit: the device's hash of the landed bytes
// fails, and the block is loaded again through the store's verified read,
// which drops the changed copy and reads the disk. Fragments the hash kernel
// takes (layers 0) and fragments it does not (1,001 bytes, unaligned: the
// tier's copy is hashed on the host) are both checked.
class GpuStoreChangedRam : public GpuStore, public ::testing::WithParamInterface<std::pair<int, size_t>> {};

TEST_P(GpuStoreChangedRam, IsReloadedFromDiskNeverServed) {
  constexpr uint64_t kTier = 16 << 20;
  Open(kTier, CopyMethod::kAuto, /*shared_tier=*/true);
  if (!store_->GetStats().ram_shared_memory) GTEST_SKIP() << "no /dev/shm with room for the tier";
  const auto [layers, frag] = GetParam();
  Layout src = MakeLayout(4, layers, frag, "c");
  Fill(src, 21);
  for (const Status& st : transfer_->PutFromDevice(ns_, src.blocks, stream_, true)) ASSERT_TRUE(st.ok());
  // One byte flipped in every MiB of the tier's data area, which ends the
  // shared-memory file: whichever blocks lie there are changed.
  int fd = open(shm_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << shm_;
  const off_t data = lseek(fd, 0, SEEK_END) - static_cast<off_t>(kTier);
  for (off_t at = 0; at < static_cast<off_t>(kTier); at += 1 << 20) {
    uint8_t b = 0;
    ASSERT_EQ(pread(fd, &b, 1, data + at + 8), 1);
    b ^= 0x40;
    ASSERT_EQ(pwrite(fd, &b, 1, data + at + 8), 1);
  }
  close(fd);
  const Stats before = store_->GetStats();
  const TransferStats tb = transfer_->GetStats();
  Layout dst = MakeLayout(4, layers, frag, "c");
  auto got = transfer_->GetToDevice(ns_, dst.blocks, stream_);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectSame(src, dst);
  const Stats after = store_->GetStats();
  const TransferStats ta = transfer_->GetStats();
  const uint64_t reloaded = ta.ram_hits_reloaded - tb.ram_hits_reloaded;
  EXPECT_GE(reloaded, 1u);
  EXPECT_EQ(ta.ram_hits_verified_on_device - tb.ram_hits_verified_on_device, 4u);
  EXPECT_EQ(ta.ram_hits - tb.ram_hits, 4u - reloaded);
  EXPECT_EQ(ta.disk_reads - tb.disk_reads, reloaded);
  EXPECT_EQ(after.ram_checksum_failures - before.ram_checksum_failures, reloaded);
  EXPECT_EQ(after.hits_disk - before.hits_disk, reloaded);
  EXPECT_EQ(after.hits_ram - before.hits_ram, 4u - reloaded);  // a reloaded block counted once
  EXPECT_EQ(after.gets - before.gets, 4u);
}

INSTANTIATE_TEST_SUITE_P(Layouts, GpuStoreChangedRam,
                         ::testing::Values(std::make_pair(0, size_t{1} << 20), std::make_pair(2, size_t{1001})));

// A get's hash plan covers exactly the payload's bytes: a payload may end
// inside a fragment (the caller's buffer is larger), and fragments the
// kernel cannot take leave the plan unchanged (the host checks those).
// Runs without a device: no memory is touched.
TEST(Gpu, AHashPlanCoversExactlyThePayload) {
  auto* base = reinterpret_cast<uint8_t*>(uintptr_t{1} << 20);
  const DeviceFragment f4[] = {{base, 4096}, {base + 8192, 4096}, {base + 16384, 4096}, {base + 24576, 4096}};
  const DeviceBlock block{"k", f4};
  std::vector<HashPayload> pay;
  std::vector<HashFrag> frags;
  ASSERT_TRUE(PlanHash(block, 10000, 7, &pay, &frags));
  ASSERT_EQ(pay.size(), 1u);
  EXPECT_EQ(pay[0].len, 10000u);
  EXPECT_EQ(pay[0].block_begin, 7u);
  EXPECT_EQ(pay[0].frag_begin, 0u);
  ASSERT_EQ(pay[0].frag_count, 3u);  // the fourth fragment holds none of the payload
  EXPECT_EQ(frags[2].ptr, base + 16384);
  EXPECT_EQ(frags[2].end, 10000u);
  // A second payload's fragments follow the first's.
  ASSERT_TRUE(PlanHash(block, 4096 * 4, 100, &pay, &frags));
  EXPECT_EQ(pay[1].frag_begin, 3u);
  EXPECT_EQ(pay[1].frag_count, 4u);
  EXPECT_EQ(frags.back().end, 4096u * 4);
  // Refused, the plan unchanged: more payload than fragments, too short for
  // the kernel, an unaligned fragment, a middle fragment not a multiple of 8.
  const DeviceFragment odd[] = {{base + 3, 4096}, {base + 8192, 4096}};
  const DeviceFragment ragged[] = {{base, 1001}, {base + 8192, 4096}};
  for (auto [b, len] : {std::pair{block, uint64_t{4096 * 4 + 1}}, std::pair{block, uint64_t{240}},
                        std::pair{DeviceBlock{"o", odd}, uint64_t{5000}},
                        std::pair{DeviceBlock{"r", ragged}, uint64_t{5000}}}) {
    EXPECT_FALSE(PlanHash(b, len, 0, &pay, &frags)) << len;
    EXPECT_EQ(pay.size(), 2u);
    EXPECT_EQ(frags.size(), 7u);
  }
}

// A RAM-tier block's chunks at a region's end and at the next region's
// start are two pieces, but they continue each other in memory, as the
// device fragment continues, so Zip joins them into one copy; the driver
// copies from one registration at a time (the load failed with an I/O
// error on the H100), so Enqueue splits such copies at the boundary again.
// As for one block's end and the next block's start. Runs without a device:
// no memory is touched.
TEST(Gpu, ACopyJoinedAcrossTwoRegistrationsIsSplitAtTheirBoundary) {
  constexpr size_t kRegion = 1u << 20;
  auto* base = reinterpret_cast<uint8_t*>(uintptr_t{1} << 30);  // three regions from here
  auto* dev = reinterpret_cast<uint8_t*>(uintptr_t{1} << 40);
  auto room = [&](const void* p) -> size_t {
    const auto* at = static_cast<const uint8_t*>(p);
    if (at < base || at >= base + 3 * kRegion) return 0;
    return kRegion - static_cast<size_t>(at - base) % kRegion;
  };
  const std::vector<Span> pieces = {{base + kRegion - 65536, 65536}, {base + kRegion, 4096}};
  const std::vector<Span> frag = {{dev, 65536 + 4096}};
  std::vector<CopyPiece> copies;
  Zip(pieces, frag, 65536 + 4096, &copies);
  ASSERT_EQ(copies.size(), 1u) << "joined";
  SplitAtRegistrations(&copies, /*to_device=*/true, room);
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].src, base + kRegion - 65536);
  EXPECT_EQ(copies[0].dst, dev);
  EXPECT_EQ(copies[0].size, 65536u);
  EXPECT_EQ(copies[1].src, base + kRegion);
  EXPECT_EQ(copies[1].dst, dev + 65536);
  EXPECT_EQ(copies[1].size, 4096u);
  // Left whole: inside one region, and outside every registration; across
  // all three (a put from the device, host on the destination side): three.
  copies = {{dev, base + 8192, 4096}, {dev + 4096, reinterpret_cast<uint8_t*>(8192), kRegion * 4}};
  SplitAtRegistrations(&copies, true, room);
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[1].size, kRegion * 4);
  copies = {{base + 4096, dev, 3 * kRegion - 4096}};
  SplitAtRegistrations(&copies, /*to_device=*/false, room);
  ASSERT_EQ(copies.size(), 3u);
  EXPECT_EQ(copies[0].size, kRegion - 4096);
  EXPECT_EQ(copies[1].dst, base + kRegion);
  EXPECT_EQ(copies[1].src, dev + kRegion - 4096);
  EXPECT_EQ(copies[2].size, kRegion);
}

TEST(Gpu, CopyMethodNamesRoundTrip) {
  for (CopyMethod m : {CopyMethod::kAuto, CopyMethod::kBatch, CopyMethod::kLoop, CopyMethod::kKernel}) {
    auto parsed = ParseCopyMethod(CopyMethodName(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  auto bad = ParseCopyMethod("fast");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), kvtier::Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("auto, batch, loop, kernel"), std::string::npos);
}

// A tier of two regions (1 GiB of 4 MiB chunks, then two more chunks): a
// block whose chunks are the first region's last and the second's first
// is copied in two pieces, each inside its own registration, and loads
// byte-exact on the Transfer's stream and on the legacy default stream.
TEST_F(GpuStore, ABlockOnEitherSideOfARegionsEndLoadsWhole) {
  constexpr uint32_t kChunk = 4u << 20;
  Options o;
  o.segment_size_bytes = 64 << 20;
  o.capacity_bytes = 1ull << 30;
  o.ram_tier_bytes = 258ull * kChunk;
  o.ram_tier_chunk_bytes = kChunk;
  o.ram_tier_shared_memory = false;
  o.ram_tier_prefault = false;
  ASSERT_NO_FATAL_FAILURE(OpenStore(o));
  for (int i = 0; i < 255; ++i) {
    const uint8_t b = static_cast<uint8_t>(i);
    ASSERT_TRUE(store_->Put(ns_, "small" + std::to_string(i), &b, 1).ok());
  }
  constexpr size_t kBlock = kChunk + 4096;
  std::vector<std::vector<uint8_t>> want(2, std::vector<uint8_t>(kBlock));
  std::mt19937_64 r(3);
  for (auto& w : want)
    for (auto& b : w) b = static_cast<uint8_t>(r());
  ASSERT_TRUE(store_->Put(ns_, "across", want[0].data(), kBlock).ok());
  ASSERT_TRUE(store_->Put(ns_, "within", want[1].data(), kBlock).ok());
  auto t = Transfer::Create(store_.get(), TransferOptions{});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  transfer_ = std::move(t).value();
  for (cudaStream_t stream : {stream_, static_cast<cudaStream_t>(nullptr)}) {
    uint8_t* dev = static_cast<uint8_t*>(DevAlloc(2 * kBlock));
    ASSERT_EQ(cudaMemset(dev, 0, 2 * kBlock), cudaSuccess);
    const DeviceFragment f[2] = {{dev, kBlock}, {dev + kBlock, kBlock}};
    const DeviceBlock blocks[2] = {{"across", {&f[0], 1}}, {"within", {&f[1], 1}}};
    auto got = transfer_->GetToDevice(ns_, blocks, stream);
    ASSERT_EQ(got.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
      EXPECT_EQ(*got[i], kBlock);
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<uint8_t> back(kBlock);
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_EQ(cudaMemcpy(back.data(), dev + i * kBlock, kBlock, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_TRUE(back == want[i]) << "block " << i;
    }
  }
  const TransferStats st = transfer_->GetStats();
  EXPECT_EQ(st.ram_hits, 4u);
  EXPECT_EQ(st.ram_tier_regions, 2u);
}

// A RAM tier much smaller than the data: most gets must come from disk.
TEST_F(GpuStore, EvictionFromRamForcesDiskReads) {
  Open(16 << 20, CopyMethod::kAuto);
  Layout src = MakeLayout(64, 0, 2 << 20, "e");  // 128 MiB through a 16 MiB tier
  Fill(src, 11);
  auto put = transfer_->PutFromDevice(ns_, src.blocks, stream_, true);
  for (const Status& s : put) ASSERT_TRUE(s.ok()) << s.ToString();
  Layout dst = MakeLayout(64, 0, 2 << 20, "e");
  auto got = transfer_->GetToDevice(ns_, dst.blocks, stream_);
  for (auto& r : got) ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectSame(src, dst);
  TransferStats st = transfer_->GetStats();
  EXPECT_GT(st.disk_reads, 40u);
  EXPECT_GT(st.ram_hits, 0u);
  EXPECT_TRUE(st.ram_tier_pinned);
  // The same blocks after a restart: the RAM tier starts empty, reads hit disk.
  transfer_.reset();
  ASSERT_TRUE(store_->Close().ok());
  Open(16 << 20, CopyMethod::kAuto);
  Layout again = MakeLayout(64, 0, 2 << 20, "e");
  got = transfer_->GetToDevice(ns_, again.blocks, stream_);
  for (auto& r : got) ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectSame(src, again);
}

TEST_F(GpuStore, MissesAndSmallBuffersAreReported) {
  Open(64 << 20, CopyMethod::kAuto);
  Layout src = MakeLayout(2, 0, 1 << 20, "m");
  Fill(src, 3);
  auto put = transfer_->PutFromDevice(ns_, src.blocks, stream_, true);
  ASSERT_TRUE(put[0].ok() && put[1].ok());
  Layout small = MakeLayout(1, 0, 4096, "m");
  auto got = transfer_->GetToDevice(ns_, small.blocks, stream_);
  EXPECT_EQ(got[0].status().code(), Code::kBufferTooSmall);
  Layout absent = MakeLayout(1, 0, 1 << 20, "absent");
  got = transfer_->GetToDevice(ns_, absent.blocks, stream_);
  EXPECT_TRUE(got[0].status().IsNotFound());
}

// Fragments that are not memory of the Transfer's device are refused per
// block, before any copy (a copy kernel on them would fault the context):
// host memory, a bogus address, an empty key. The other blocks still move,
// and the device stays usable.
TEST_F(GpuStore, FragmentsOffTheDeviceAreRefused) {
  Open(64 << 20, CopyMethod::kAuto);
  Layout good = MakeLayout(1, 0, 1 << 20, "good");
  Fill(good, 5);
  std::vector<uint8_t> host(1 << 20, 7);
  DeviceFragment host_frag{host.data(), host.size()};
  DeviceFragment bogus_frag{reinterpret_cast<void*>(0x10), 4096};
  std::vector<DeviceBlock> blocks = {good.blocks[0], DeviceBlock{"host", {&host_frag, 1}},
                                     DeviceBlock{"bogus", {&bogus_frag, 1}}, DeviceBlock{"", good.blocks[0].fragments}};
  auto put = transfer_->PutFromDevice(ns_, blocks, stream_, true);
  ASSERT_EQ(put.size(), 4u);
  EXPECT_TRUE(put[0].ok()) << put[0].ToString();
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(put[i].code(), Code::kInvalidArgument) << i;
  EXPECT_NE(put[1].message().find("not host memory"), std::string::npos) << put[1].ToString();
  EXPECT_FALSE(*store_->Contains(ns_, "host"));
  EXPECT_FALSE(*store_->Contains(ns_, "bogus"));
  auto got = transfer_->GetToDevice(ns_, blocks, stream_);
  EXPECT_TRUE(got[0].ok());
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(got[i].status().code(), Code::kInvalidArgument) << i;
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  Layout again = MakeLayout(1, 0, 1 << 20, "good");
  got = transfer_->GetToDevice(ns_, again.blocks, stream_);
  ASSERT_TRUE(got[0].ok());
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectSame(good, again);
}

// Every byte of a fragment is checked, not only its first: one that runs
// past its allocation into memory that is not the device's is refused
// before a copy could fault the context, and fragments in allocations of
// their own cost one driver query per allocation, not per block.
TEST_F(GpuStore, AFragmentPastItsAllocationIsRefused) {
  Open(64 << 20, CopyMethod::kAuto);
  Layout a = MakeLayout(4, 0, 1 << 20, "a");
  Layout b = MakeLayout(4, 0, 1 << 20, "b");
  Fill(a, 3);
  Fill(b, 4);
  std::vector<DeviceBlock> both = a.blocks;
  both.insert(both.end(), b.blocks.begin(), b.blocks.end());
  const uint64_t before = transfer_->GetStats().pointer_queries;
  auto put = transfer_->PutFromDevice(ns_, both, stream_, true);
  for (size_t i = 0; i < put.size(); ++i) ASSERT_TRUE(put[i].ok()) << i << ": " << put[i].ToString();
  EXPECT_EQ(transfer_->GetStats().pointer_queries, before + 2);  // two allocations
  // One terabyte from the last block's address: past any allocation.
  DeviceFragment over{a.frags[3][0].ptr, size_t{1} << 40};
  std::vector<DeviceBlock> bad = {a.blocks[0], DeviceBlock{"over", {&over, 1}}};
  put = transfer_->PutFromDevice(ns_, bad, stream_, true);
  ASSERT_EQ(put.size(), 2u);
  EXPECT_TRUE(put[0].ok()) << put[0].ToString();
  EXPECT_EQ(put[1].code(), Code::kInvalidArgument) << put[1].ToString();
  EXPECT_NE(put[1].message().find("runs past its allocation"), std::string::npos) << put[1].ToString();
  EXPECT_FALSE(*store_->Contains(ns_, "over"));
  auto got = transfer_->GetToDevice(ns_, std::vector<DeviceBlock>{DeviceBlock{"a1", {&over, 1}}}, stream_);
  EXPECT_EQ(got[0].status().code(), Code::kInvalidArgument) << got[0].status().ToString();
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  Layout again = MakeLayout(4, 0, 1 << 20, "a");
  got = transfer_->GetToDevice(ns_, again.blocks, stream_);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(got[i].ok()) << i;
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ExpectSame(a, again);
}

}  // namespace
}  // namespace kvtier::gpu
