#include "tier/ram_tier.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <chrono>
#include <thread>

#include "format/record.h"

namespace kvtier {
namespace {

std::vector<uint8_t> Bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 r(seed);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t x = r();
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return v;
}

uint64_t Put(RamTier& t, NamespaceId ns, const std::string& key, const std::vector<uint8_t>& v) {
  Fragment f{v.data(), v.size()};
  return t.Insert(ns, key, {&f, 1}, format::Checksum(v.data(), v.size()));
}

// Flips `mask` in byte `at` of the tier's copy of `key`, as a stray write would.
void FlipBit(RamTier& t, NamespaceId ns, const std::string& key, size_t at, uint8_t mask) {
  RamTier::Pin p = t.Acquire(ns, key);
  ASSERT_TRUE(p);
  for (const RamTier::Piece& piece : p.pieces()) {
    if (at < piece.size) {
      piece.data[at] ^= mask;
      return;
    }
    at -= piece.size;
  }
  FAIL() << "offset past the block";
}

std::vector<uint8_t> Get(RamTier& t, NamespaceId ns, const std::string& key, size_t cap = 1 << 20) {
  std::vector<uint8_t> out(cap);
  MutableFragment f{out.data(), out.size()};
  auto r = t.Read(ns, key, {&f, 1});
  if (!r.ok()) return {};
  out.resize(*r);
  return out;
}

std::string Name(const char* prefix, int i) {
  std::string s(prefix);
  s += std::to_string(i);
  return s;
}

RamTierOptions Small(uint64_t bytes, RamPolicy p = RamPolicy::kS3Fifo) {
  RamTierOptions o;
  o.capacity_bytes = bytes;
  o.chunk_bytes = 4096;
  o.shards = 1;
  o.policy = p;
  return o;
}

TEST(RamTier, DataAreaIsFaultedInInTheBackground) {
  RamTierOptions o = Small(32u << 20);
  auto t = RamTier::Open(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // Blocks go in while the prefault runs; they must be untouched by it.
  auto v = Bytes(300000, 7);
  ASSERT_NE(Put(**t, 1, "during", v), 0u);
  for (int i = 0; i < 2000 && (*t)->GetStats().prefaulted_bytes < (*t)->GetStats().capacity_bytes; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ((*t)->GetStats().prefaulted_bytes, (*t)->GetStats().capacity_bytes);
  for (int i = 0; i < 200 && !(*t)->Prefaulted(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE((*t)->Prefaulted());  // what the writer waits for before it registers the tier
  // Every page of the data area is resident now.
  const iovec r = (*t)->Regions()[0];
  const long page = sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> resident((r.iov_len + page - 1) / page);
  ASSERT_EQ(mincore(r.iov_base, r.iov_len, resident.data()), 0);
  size_t in = 0;
  for (unsigned char c : resident) in += c & 1;
  EXPECT_EQ(in, resident.size());
  EXPECT_EQ(Get(**t, 1, "during"), v);
  // Off when asked.
  o.prefault = false;
  auto lazy = RamTier::Open(o);
  ASSERT_TRUE(lazy.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ((*lazy)->GetStats().prefaulted_bytes, 0u);
  EXPECT_FALSE((*lazy)->Prefaulted());
}

TEST(RamTier, InsertLookupAcrossChunksAndFragments) {
  auto t = RamTier::Open(Small(1 << 20));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto v = Bytes(10000, 1);  // 3 chunks, last one partial
  // Insert from three uneven fragments.
  Fragment fr[3] = {{v.data(), 100}, {v.data() + 100, 5000}, {v.data() + 5100, 4900}};
  EXPECT_NE((*t)->Insert(7, "k", fr, format::Checksum(v.data(), v.size())), 0u);
  EXPECT_EQ(Get(**t, 7, "k"), v);
  EXPECT_TRUE(Get(**t, 8, "k").empty());  // other namespace
  // Scatter into uneven destination fragments.
  std::vector<uint8_t> a(333), b(20000);
  MutableFragment out[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
  auto n = (*t)->Read(7, "k", out);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, v.size());
  EXPECT_EQ(0, std::memcmp(a.data(), v.data(), 333));
  EXPECT_EQ(0, std::memcmp(b.data(), v.data() + 333, v.size() - 333));
  MutableFragment tiny{a.data(), a.size()};
  EXPECT_EQ((*t)->Read(7, "k", {&tiny, 1}).status().code(), Code::kBufferTooSmall);
  auto st = (*t)->GetStats();
  EXPECT_EQ(st.blocks, 1u);
  EXPECT_EQ(st.payload_bytes, v.size());
  EXPECT_EQ(st.used_bytes, 3u * 4096);
  (*t)->Erase(7, "k");
  EXPECT_TRUE(Get(**t, 7, "k").empty());
  EXPECT_EQ((*t)->GetStats().used_bytes, 0u);
}

// A block whose bytes change in the tier's memory (a memory fault, a stray
// write) is never handed out: the read fails with Corruption and the block
// is dropped; with verification off the changed bytes would be returned.
TEST(RamTier, ReadsVerifyTheChecksumAndDropAChangedBlock) {
  for (bool verify : {true, false}) {
    SCOPED_TRACE(verify ? "verify_reads" : "no verification");
    RamTierOptions o = Small(1 << 20);
    o.verify_reads = verify;
    auto t = RamTier::Open(o);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    auto v = Bytes(10000, 5);
    ASSERT_NE(Put(**t, 1, "k", v), 0u);
    ASSERT_NE(Put(**t, 1, "other", Bytes(5000, 6)), 0u);
    EXPECT_EQ(Get(**t, 1, "k"), v);
    {  // flip one bit of the third chunk in place
      RamTier::Pin p = (*t)->Acquire(1, "k");
      ASSERT_TRUE(p);
      uint8_t* last = p.pieces().back().data + p.pieces().back().size - 1;
      *last ^= 0x10;
    }
    std::vector<uint8_t> out(v.size());
    MutableFragment f{out.data(), out.size()};
    auto r = (*t)->Read(1, "k", {&f, 1});
    if (verify) {
      EXPECT_EQ(r.status().code(), Code::kCorruption) << r.status().ToString();
      EXPECT_FALSE((*t)->Contains(1, "k"));  // dropped
      EXPECT_EQ((*t)->GetStats().checksum_failures, 1u);
      EXPECT_EQ(Get(**t, 1, "other"), Bytes(5000, 6));  // neighbours unaffected
    } else {
      ASSERT_TRUE(r.ok());
      EXPECT_NE(out, v);  // what verification exists to prevent
      EXPECT_EQ((*t)->GetStats().checksum_failures, 0u);
    }
  }
}

// Streaming (non-temporal) stores change how the copy reaches memory, not
// what it holds: the same bytes land, in aligned and unaligned fragments,
// and a changed block is still caught.
TEST(RamTier, StreamingCopiesGiveTheSameBytesAndStillVerify) {
  RamTierOptions o = Small(4 << 20);
  o.streaming_copy_min_bytes = 1;  // every read streams
  auto t = RamTier::Open(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const auto v = Bytes((300u << 10) + 77, 9);
  ASSERT_NE(Put(**t, 1, "k", v), 0u);
  auto* dst = static_cast<uint8_t*>(std::aligned_alloc(4096, 1 << 20));
  ASSERT_NE(dst, nullptr);
  for (size_t misalign : {0u, 32u, 1u}) {
    SCOPED_TRACE("destination offset " + std::to_string(misalign));
    std::memset(dst, 0, 1 << 20);
    // An aligned run, then one that starts off any alignment.
    MutableFragment out[2] = {{dst + misalign, 100000}, {dst + (512u << 10) + 3, v.size() - 100000}};
    auto n = (*t)->Read(1, "k", out);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(0, std::memcmp(dst + misalign, v.data(), 100000));
    EXPECT_EQ(0, std::memcmp(dst + (512u << 10) + 3, v.data() + 100000, v.size() - 100000));
  }
  {
    RamTier::Pin p = (*t)->Acquire(1, "k");
    ASSERT_TRUE(p);
    size_t at = 150000;  // one bit of a byte in the middle, whichever piece holds it
    for (const RamTier::Piece& piece : p.pieces()) {
      if (at < piece.size) {
        piece.data[at] ^= 0x01;
        break;
      }
      at -= piece.size;
    }
  }
  MutableFragment whole{dst, 1 << 20};
  EXPECT_EQ((*t)->Read(1, "k", {&whole, 1}).status().code(), Code::kCorruption);
  EXPECT_FALSE((*t)->Contains(1, "k"));
  std::free(dst);
}

// Non-temporal stores once the reads copying at once write more than the
// threshold: one caller's batch that fits in the cache keeps ordinary stores,
// eight callers' batches of the same size together do not.
TEST(RamTier, ReadsCopyingAtOnceDecideTheStores) {
  constexpr uint64_t kMiB = 1u << 20, kMin = 150 * kMiB;
  EXPECT_FALSE(RamTier::StreamsCopy(128 * kMiB, 128 * kMiB, kMin));      // one batch alone
  EXPECT_TRUE(RamTier::StreamsCopy(128 * kMiB, 8 * 128 * kMiB, kMin));   // eight at once
  EXPECT_FALSE(RamTier::StreamsCopy(2 * kMiB, 8 * 2 * kMiB, kMin));      // eight lone gets
  EXPECT_TRUE(RamTier::StreamsCopy(300 * kMiB, 300 * kMiB, kMin));       // a long prefix alone
  EXPECT_FALSE(RamTier::StreamsCopy(300 * kMiB, 4 * 300 * kMiB, UINT64_MAX));  // never
}

// A lone read shares its copy out only while few reads run at once: each
// keeps four copy threads, or two where idle copy threads poll for work.
TEST(RamTier, ALoneReadSharesItsCopyOnlyWhileMostCopyThreadsAreIdle) {
  EXPECT_TRUE(RamTier::SharesCopy(1, 16, false));
  EXPECT_TRUE(RamTier::SharesCopy(4, 16, false));
  EXPECT_FALSE(RamTier::SharesCopy(8, 16, false));  // 8 clients of a service on 16 cores
  EXPECT_TRUE(RamTier::SharesCopy(8, 16, true));    // the same, with polling copy threads
  EXPECT_FALSE(RamTier::SharesCopy(9, 16, true));
  EXPECT_FALSE(RamTier::SharesCopy(1, 2, false));   // a host of few cores: one pass
  EXPECT_FALSE(RamTier::SharesCopy(2, 2, true));
}

// Readers at once, each reading large blocks the polling copy threads share
// out (after each block's first read recorded its states): every copy lands
// the block's own bytes, whichever reads' pieces the threads run together.
TEST(RamTier, ConcurrentSharedReadsWithPollingCopyThreadsLandTheirOwnBytes) {
  RamTierOptions o = Small(32 << 20);
  o.copy_threads = 4;
  o.copy_spin_us = 500;
  o.split_copy_min_bytes = 64 << 10;
  auto t = RamTier::Open(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  constexpr int kBlocks = 6;
  std::vector<std::vector<uint8_t>> v;
  for (int i = 0; i < kBlocks; ++i) {
    v.push_back(Bytes((1u << 20) + 4096 * i + 7, 60 + i));
    ASSERT_NE(Put(**t, 1, Name("b", i), v.back()), 0u);
    ASSERT_EQ(Get(**t, 1, Name("b", i), v.back().size()), v.back());  // records the states
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r)
    readers.emplace_back([&, r] {
      std::vector<uint8_t> out(2u << 20);
      for (int k = 0; k < 60; ++k) {
        const int i = (r * 7 + k) % kBlocks;
        MutableFragment f{out.data(), out.size()};
        auto n = (*t)->Read(1, Name("b", i), {&f, 1});
        if (!n.ok() || *n != v[i].size() || !std::equal(v[i].begin(), v[i].end(), out.begin())) wrong.fetch_add(1);
      }
    });
  for (auto& th : readers) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT((*t)->GetStats().split_copies, 0u);  // two readers on four threads do share
}

// A lone read of a large block shares its copy over the copy threads, each
// piece verified as it is copied, once a first read (one pass) has recorded
// the hash's states between pieces: the same bytes land across uneven
// fragments and chunk runs, a block changed in the tier is still caught and
// dropped, and a batch copies such a block as pieces too.
TEST(RamTier, SharedCopiesOfOneBlockLandTheSameBytesAndStillVerify) {
  RamTierOptions o = Small(8 << 20);
  o.copy_threads = 4;
  o.split_copy_min_bytes = 64 << 10;
  auto t = RamTier::Open(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const auto v = Bytes((1u << 20) + 4097, 21);  // many units, an odd tail
  ASSERT_NE(Put(**t, 1, "big", v), 0u);
  ASSERT_NE(Put(**t, 1, "small", Bytes(10000, 22)), 0u);
  std::vector<uint8_t> a(300001, 0xA5), b(700000, 0xA5), c(v.size() - a.size() - b.size() + 99, 0xA5);
  MutableFragment out[3] = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  EXPECT_EQ(Get(**t, 1, "big", v.size()), v);  // the first read: one pass, which records the states
  EXPECT_EQ((*t)->GetStats().split_copies, 0u);
  auto n = (*t)->Read(1, "big", out);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, v.size());
  std::vector<uint8_t> joined(a);
  joined.insert(joined.end(), b.begin(), b.end());
  joined.insert(joined.end(), c.begin(), c.end());
  EXPECT_TRUE(std::equal(v.begin(), v.end(), joined.begin()));
  EXPECT_TRUE(std::all_of(joined.begin() + v.size(), joined.end(), [](uint8_t x) { return x == 0xA5; }));
  EXPECT_EQ((*t)->GetStats().split_copies, 1u);
  EXPECT_EQ(Get(**t, 1, "small"), Bytes(10000, 22));  // below the threshold: one pass
  EXPECT_EQ((*t)->GetStats().split_copies, 1u);
  {  // a batch of two: both copies go as pieces
    std::vector<uint8_t> x(v.size()), y(v.size());
    MutableFragment fx{x.data(), x.size()}, fy{y.data(), y.size()};
    const std::string big = "big";
    GetItem items[2] = {{big, {&fx, 1}}, {big, {&fy, 1}}};
    std::vector<Result<size_t>> got(2, Result<size_t>(Status::Aborted("not run")));
    (*t)->ReadBatch(1, items, got);
    EXPECT_TRUE(got[0].ok() && got[1].ok());
    EXPECT_EQ(x, v);
    EXPECT_EQ(y, v);
    EXPECT_EQ((*t)->GetStats().split_copies, 3u);
  }
  FlipBit(**t, 1, "big", 700000, 0x04);  // deep inside the block
  EXPECT_EQ((*t)->Read(1, "big", out).status().code(), Code::kCorruption);
  EXPECT_FALSE((*t)->Contains(1, "big"));
  EXPECT_EQ((*t)->GetStats().checksum_failures, 1u);
}

// A batch deals its copies out finely: blocks read before go as pieces,
// each verified from its recorded state; the rest whole, largest first,
// recording their states for the next batch. Each item is answered as a
// lone read would be: misses, short buffers and a copy gone bad each alone.
TEST(RamTier, ABatchCopiesBlocksWithRecordedStatesAsPiecesAndStillAnswersEachItem) {
  RamTierOptions o = Small(16 << 20);
  o.copy_threads = 4;
  o.split_copy_min_bytes = 256 << 10;
  auto t = RamTier::Open(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  constexpr int kBlocks = 6;
  std::vector<std::vector<uint8_t>> v;
  for (int i = 0; i < kBlocks; ++i) {
    v.push_back(Bytes((700u << 10) + 13 * i, 40 + i));  // uneven sizes and tails
    ASSERT_NE(Put(**t, 1, Name("b", i), v.back()), 0u);
  }
  ASSERT_NE(Put(**t, 1, "small", Bytes(5000, 9)), 0u);  // below split_copy_min_bytes
  std::vector<std::string> keys;
  for (int i = 0; i < kBlocks; ++i) keys.push_back(Name("b", i));
  keys.push_back("small");
  keys.push_back("absent");
  keys.push_back(Name("b", 0));  // into a buffer too small
  auto batch = [&](std::vector<std::vector<uint8_t>>* out) {
    out->assign(keys.size(), std::vector<uint8_t>(1u << 20, 0xEE));
    out->back().resize(1000);
    std::vector<MutableFragment> frags;
    for (auto& b : *out) frags.push_back(MutableFragment{b.data(), b.size()});
    std::vector<GetItem> items;
    for (size_t i = 0; i < keys.size(); ++i) items.push_back(GetItem{keys[i], {&frags[i], 1}});
    std::vector<Result<size_t>> got(keys.size(), Result<size_t>(Status::Aborted("not run")));
    (*t)->ReadBatch(1, items, got);
    return got;
  };
  auto check = [&](const std::vector<Result<size_t>>& got, const std::vector<std::vector<uint8_t>>& out) {
    for (int i = 0; i < kBlocks; ++i) {
      ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
      ASSERT_EQ(*got[i], v[i].size());
      EXPECT_TRUE(std::equal(v[i].begin(), v[i].end(), out[i].begin())) << i;
      EXPECT_EQ(out[i][v[i].size()], 0xEE) << i;  // nothing past the block
    }
    ASSERT_TRUE(got[kBlocks].ok());
    EXPECT_TRUE(std::equal(out[kBlocks].begin(), out[kBlocks].begin() + 5000, Bytes(5000, 9).begin()));
    EXPECT_EQ(got[kBlocks + 1].status().code(), Code::kNotFound);
    EXPECT_EQ(got[kBlocks + 2].status().code(), Code::kBufferTooSmall);
  };
  std::vector<std::vector<uint8_t>> out;
  auto got = batch(&out);  // first: whole blocks, one pass each, states recorded
  check(got, out);
  EXPECT_EQ((*t)->GetStats().split_copies, 0u);
  got = batch(&out);  // again: the large blocks as pieces
  check(got, out);
  EXPECT_EQ((*t)->GetStats().split_copies, uint64_t{kBlocks});
  FlipBit(**t, 1, Name("b", 3), 300000, 0x10);  // inside block 3's second piece
  got = batch(&out);
  EXPECT_EQ(got[3].status().code(), Code::kCorruption);
  EXPECT_FALSE((*t)->Contains(1, Name("b", 3)));
  EXPECT_EQ((*t)->GetStats().checksum_failures, 1u);
  for (int i : {0, 1, 2, 4, 5}) {
    ASSERT_TRUE(got[i].ok()) << i;
    EXPECT_TRUE(std::equal(v[i].begin(), v[i].end(), out[i].begin())) << i;
  }
}

TEST(RamTier, ByteBudgetEvictsAndReplaceFreesOldCopy) {
  for (RamPolicy p : {RamPolicy::kS3Fifo, RamPolicy::kLru}) {
    auto t = RamTier::Open(Small(64 * 4096, p));
    ASSERT_TRUE(t.ok());
    for (int i = 0; i < 200; ++i) {
      auto v = Bytes(8192, i);
      EXPECT_NE(Put(**t, 1, Name("k", i), v), 0u);
      auto st = (*t)->GetStats();
      EXPECT_LE(st.used_bytes, 64u * 4096) << RamPolicyName(p);
    }
    auto st = (*t)->GetStats();
    EXPECT_EQ(st.blocks, 32u);
    EXPECT_EQ(st.evictions, 200u - 32u);
    // The newest block is always present; replacing it keeps one copy.
    auto v = Bytes(8192, 999);
    EXPECT_NE(Put(**t, 1, "k199", v), 0u);
    EXPECT_EQ(Get(**t, 1, "k199"), v);
    // The new copy is reserved before the old one is freed (one more victim).
    st = (*t)->GetStats();
    EXPECT_EQ(st.blocks, 31u);
    EXPECT_EQ(st.payload_bytes, 31u * 8192);
    // Larger than the whole shard: refused, nothing evicted.
    EXPECT_EQ(Put(**t, 1, "huge", Bytes(65 * 4096, 3)), 0u);
    EXPECT_EQ((*t)->GetStats().blocks, 31u);
  }
}

// Chunks freed by two blocks that lay side by side, freed in the other
// order, come back as one piece for the next block (one copy, one device
// copy on the GPU path), and its bytes in order.
TEST(RamTier, AdjacentFreedChunksMergeIntoOnePieceWhateverTheOrderTheyWereFreed) {
  auto t = RamTier::Open(Small(4 * 4096));
  ASSERT_TRUE(t.ok());
  for (int i = 0; i < 4; ++i) ASSERT_NE(Put(**t, 1, Name("k", i), Bytes(4096, i)), 0u);
  auto chunk_of = [&](const std::string& k) { return (*t)->Peek(1, k).pieces().at(0).data; };
  uint8_t* a = chunk_of("k1");
  uint8_t* b = chunk_of("k2");
  ASSERT_EQ(std::abs(a - b), 4096) << "the fill takes chunks in order";
  (*t)->Erase(1, a < b ? "k1" : "k2");  // the lower one first: the stack hands the higher one out first
  (*t)->Erase(1, a < b ? "k2" : "k1");
  const auto v = Bytes(8192, 42);
  ASSERT_NE(Put(**t, 1, "both", v), 0u);
  RamTier::Pin p = (*t)->Peek(1, "both");
  ASSERT_TRUE(p);
  ASSERT_EQ(p.pieces().size(), 1u);
  EXPECT_EQ(p.pieces()[0].data, std::min(a, b));
  p.Release();
  EXPECT_EQ(Get(**t, 1, "both"), v);
  EXPECT_EQ((*t)->GetStats().evictions, 0u);
}

// The data area comes in regions of 1 GiB (each registered on its own with
// CUDA and io_uring), and no block's piece crosses a region's end, even
// where its chunks are adjacent; within a region they merge.
// The prefault's progress, which the GPU path's pinning thread follows:
// over at once without a prefault; with one, over once it has faulted in
// the whole data area, in address order.
TEST(RamTier, PrefaultProgressIsReportedAndEnds) {
  RamTierOptions o;
  o.chunk_bytes = 1u << 20;
  o.capacity_bytes = 64ull << 20;
  o.shards = 1;
  o.prefault = false;
  auto off = RamTier::Open(o);
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_TRUE((*off)->PrefaultOver());
  EXPECT_EQ((*off)->PrefaultedBytes(), 0u);
  o.prefault = true;
  auto on = RamTier::Open(o);
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  uint64_t data = 0;
  for (const iovec& r : (*on)->Regions()) data += r.iov_len;
  for (int i = 0; i < 2000 && !(*on)->PrefaultOver(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE((*on)->PrefaultOver());
  EXPECT_EQ((*on)->PrefaultedBytes(), data);
  EXPECT_TRUE((*on)->Prefaulted());
}

TEST(RamTier, RegionsOfOneGibAndNoPieceCrossesOne) {
  RamTierOptions o;
  o.chunk_bytes = 64u << 20;        // 16 chunks a region
  o.capacity_bytes = 33ull << 26;   // 33 chunks: regions of 16, 16 and 1
  o.shards = 1;
  o.prefault = false;
  auto t = RamTier::Open(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const std::vector<iovec> regions = (*t)->Regions();
  ASSERT_EQ(regions.size(), 3u);
  EXPECT_EQ(regions[0].iov_len, 1ull << 30);
  EXPECT_EQ(regions[1].iov_len, 1ull << 30);
  EXPECT_EQ(regions[2].iov_len, 64ull << 20);
  EXPECT_EQ(static_cast<uint8_t*>(regions[0].iov_base) + regions[0].iov_len, regions[1].iov_base);
  EXPECT_EQ((*t)->region_bytes(), 1ull << 30);
  // Fifteen one-chunk blocks (a byte each), then a block of two chunks: the
  // 16th and the 17th, on either side of the first region's end.
  for (int i = 0; i < 15; ++i) ASSERT_NE(Put(**t, 1, Name("small", i), Bytes(1, i)), 0u);
  const auto v = Bytes((64u << 20) + 4096, 9);
  ASSERT_NE(Put(**t, 1, "across", v), 0u);
  {
    RamTier::Pin p = (*t)->Peek(1, "across");
    ASSERT_EQ(p.pieces().size(), 2u);
    EXPECT_EQ(p.pieces()[0].size, 64u << 20);
    EXPECT_EQ(p.pieces()[0].data + p.pieces()[0].size, regions[1].iov_base) << "adjacent, yet apart";
    EXPECT_EQ(p.pieces()[1].size, 4096u);
  }
  EXPECT_EQ(Get(**t, 1, "across", v.size()), v);
  // Two chunks inside the second region are one piece.
  const auto w = Bytes((64u << 20) + 4096, 10);
  ASSERT_NE(Put(**t, 1, "within", w), 0u);
  EXPECT_EQ((*t)->Peek(1, "within").pieces().size(), 1u);
  EXPECT_EQ(Get(**t, 1, "within", w.size()), w);
}

// A block whose place on the disk is noted reports its reads there, for the
// disk's reclaim; one not placed (or placed under another version's
// checksum) keeps counting them itself.
TEST(RamTier, ReadsOfAPlacedBlockAreReportedForItsPlace) {
  RamTierOptions o = Small(1u << 20);
  std::vector<std::array<uint64_t, 3>> reported;
  o.on_placed_read = [&](uint32_t seg, uint64_t off, uint64_t bytes) { reported.push_back({seg, off, bytes}); };
  auto t = RamTier::Open(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  RamTier& tier = **t;
  const auto a = Bytes(10000, 1), b = Bytes(10000, 2);
  ASSERT_NE(Put(tier, 1, "a", a), 0u);
  ASSERT_NE(Put(tier, 1, "b", b), 0u);
  tier.NotePlaced(1, "a", format::Checksum(a.data(), a.size()), RamPlacement{7, 12288, 16384});
  tier.NotePlaced(1, "b", format::Checksum(a.data(), a.size()), RamPlacement{8, 0, 16384});  // not b's bytes: ignored
  tier.NotePlaced(1, "absent", 0, RamPlacement{9, 0, 4096});                                 // no such block: nothing
  EXPECT_EQ(Get(tier, 1, "a"), a);
  EXPECT_TRUE(tier.AcquireHit(1, "a"));
  EXPECT_EQ(Get(tier, 1, "b"), b);
  EXPECT_FALSE(tier.Peek(1, "a").pieces().empty());  // not a read
  ASSERT_EQ(reported.size(), 2u);
  for (const auto& r : reported) EXPECT_EQ(r, (std::array<uint64_t, 3>{7, 12288, 16384}));
  EXPECT_EQ(tier.TakeReads(1, "a"), 0u) << "reported, not counted";
  EXPECT_EQ(tier.TakeReads(1, "b"), 1u);
  // A new version is not placed until noted again.
  const auto a2 = Bytes(10000, 3);
  ASSERT_NE(Put(tier, 1, "a", a2), 0u);
  EXPECT_EQ(Get(tier, 1, "a"), a2);
  EXPECT_EQ(reported.size(), 2u);
  EXPECT_EQ(tier.TakeReads(1, "a"), 1u);
}

// Past its first reads, a placed block reports once per read epoch: enough
// for the reclaim to know it is still read.
TEST(RamTier, APlacedBlockReportsItsFirstReadsThenOncePerEpoch) {
  RamTierOptions o = Small(1u << 20);
  std::atomic<uint64_t> epoch{5};
  int reported = 0;
  o.on_placed_read = [&](uint32_t, uint64_t, uint64_t) { ++reported; };
  o.placed_reads_reported = 2;
  o.read_epoch = &epoch;
  auto t = RamTier::Open(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const auto a = Bytes(10000, 1);
  ASSERT_NE(Put(**t, 1, "a", a), 0u);
  (*t)->NotePlaced(1, "a", format::Checksum(a.data(), a.size()), RamPlacement{3, 0, 16384});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Get(**t, 1, "a"), a);
  EXPECT_EQ(reported, 2);
  epoch = 6;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Get(**t, 1, "a"), a);
  EXPECT_EQ(reported, 3);
  // Placed again (a reclaim moved it): its first reads count again.
  (*t)->NotePlaced(1, "a", format::Checksum(a.data(), a.size()), RamPlacement{4, 0, 16384});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Get(**t, 1, "a"), a);
  EXPECT_EQ(reported, 5);
  EXPECT_EQ((*t)->TakeReads(1, "a"), 0u);
}

TEST(RamTier, PinnedBlocksSurviveEvictionAndErase) {
  auto t = RamTier::Open(Small(4 * 4096, RamPolicy::kLru));
  ASSERT_TRUE(t.ok());
  auto v = Bytes(4096, 5);
  ASSERT_NE(Put(**t, 1, "pinned", v), 0u);
  RamTier::Pin pin = (*t)->Acquire(1, "pinned");
  ASSERT_TRUE(pin);
  for (int i = 0; i < 10; ++i) (void)Put(**t, 1, Name("x", i), Bytes(4096, i));
  EXPECT_TRUE((*t)->Contains(1, "pinned"));  // LRU tail, but pinned
  (*t)->Erase(1, "pinned");
  EXPECT_FALSE((*t)->Contains(1, "pinned"));
  EXPECT_EQ(0, std::memcmp(pin.pieces()[0].data, v.data(), v.size()));  // still readable
  uint64_t used = (*t)->GetStats().used_bytes;
  pin.Release();
  EXPECT_EQ((*t)->GetStats().used_bytes, used - 4096);
}

TEST(RamTier, EraseIfTokenAndNamespace) {
  auto t = RamTier::Open(Small(1 << 20));
  ASSERT_TRUE(t.ok());
  uint64_t t1 = Put(**t, 1, "a", Bytes(4096, 1));
  uint64_t t2 = Put(**t, 1, "a", Bytes(4096, 2));
  ASSERT_NE(t1, t2);
  (*t)->EraseIf(1, "a", t1);  // stale token: no effect
  EXPECT_TRUE((*t)->Contains(1, "a"));
  (*t)->EraseIf(1, "a", t2);
  EXPECT_FALSE((*t)->Contains(1, "a"));
  for (int i = 0; i < 10; ++i) Put(**t, i % 2 + 1, Name("k", i), Bytes(4096, i));
  (*t)->EraseNamespace(1);
  EXPECT_EQ((*t)->GetStats().blocks, 5u);
  EXPECT_TRUE((*t)->Contains(2, "k1"));
  EXPECT_FALSE((*t)->Contains(1, "k0"));
}

TEST(RamTier, ReserveCommitAndAbandon) {
  auto t = RamTier::Open(Small(1 << 20));
  ASSERT_TRUE(t.ok());
  auto v = Bytes(9000, 9);
  RamTier::Pin r = (*t)->Reserve(3, "r", v.size());
  ASSERT_TRUE(r);
  EXPECT_FALSE((*t)->Contains(3, "r"));  // invisible until committed
  size_t off = 0;
  for (const auto& p : r.pieces()) std::memcpy(p.data, v.data() + off, p.size), off += p.size;
  EXPECT_EQ(off, v.size());
  EXPECT_NE((*t)->Commit(std::move(r), format::Checksum(v.data(), v.size())), 0u);
  EXPECT_EQ(Get(**t, 3, "r"), v);
  {
    RamTier::Pin abandoned = (*t)->Reserve(3, "z", 5000);
    EXPECT_TRUE(abandoned);
  }
  EXPECT_FALSE((*t)->Contains(3, "z"));
  EXPECT_EQ((*t)->GetStats().used_bytes, 3u * 4096);
}

TEST(RamTier, ShardedUnderEightThreads) {
  RamTierOptions o;
  o.capacity_bytes = 8 << 20;
  o.chunk_bytes = 4096;
  o.shards = 8;
  auto t = RamTier::Open(o);
  ASSERT_TRUE(t.ok());
  std::atomic<int> bad{0};
  std::vector<std::thread> th;
  for (int w = 0; w < 8; ++w)
    th.emplace_back([&, w] {
      std::mt19937 r(w);
      for (int i = 0; i < 2000; ++i) {
        int k = r() % 600;
        std::string key = Name("k", k);
        auto want = Bytes(4096 + (k % 3) * 4096, k);  // content depends on the key only
        switch (r() % 4) {
          case 0: Put(**t, 1, key, want); break;
          case 1: (*t)->Erase(1, key); break;
          default: {
            auto got = Get(**t, 1, key, 16 << 10);
            if (!got.empty() && got != want) bad++;
          }
        }
      }
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(bad.load(), 0);
  auto st = (*t)->GetStats();
  EXPECT_LE(st.used_bytes, 8u << 20);
  EXPECT_GT(st.hits, 0u);
}

// ---- Shared memory adoption ----

class ShmTier : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/dev/shm/kvtier-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".ram";
    if (!std::filesystem::exists("/dev/shm")) GTEST_SKIP() << "no /dev/shm here";
    opt_ = Small(1 << 20);
    opt_.shm_path = path_;
    opt_.owner_id[0] = 42;
  }
  void TearDown() override { unlink(path_.c_str()); }
  std::string path_;
  RamTierOptions opt_;
};

TEST_F(ShmTier, AdoptedAfterRestartDroppingCorruptBlock) {
  std::vector<std::vector<uint8_t>> vals;
  {
    auto t = RamTier::Open(opt_);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_TRUE((*t)->GetStats().shared);
    EXPECT_FALSE((*t)->GetStats().adopted_file);
    for (int i = 0; i < 10; ++i) {
      vals.push_back(Bytes(6000 + i * 1000, i));
      ASSERT_NE(Put(**t, 5, Name("k", i), vals.back()), 0u);
    }
    // Corrupt block 3's payload behind the tier's back (a torn write).
    RamTier::Pin p = (*t)->Acquire(5, "k3");
    p.pieces()[0].data[17] ^= 0xFF;
    // The process "dies": the mapping goes, the file stays.
  }
  // The store's index no longer has k7; it knows where k0 lies.
  std::vector<uint64_t> reported;
  opt_.on_placed_read = [&](uint32_t seg, uint64_t, uint64_t) { reported.push_back(seg); };
  auto t = RamTier::Open(opt_, [](NamespaceId, std::string_view key, uint64_t, uint64_t, RamPlacement* placed) {
    if (key == "k0") *placed = RamPlacement{42, 0, 8192};
    return key != "k7";
  });
  ASSERT_TRUE(t.ok());
  auto st = (*t)->GetStats();
  EXPECT_TRUE(st.adopted_file);
  EXPECT_EQ(st.adopted_blocks, 8u);
  EXPECT_EQ(st.adopt_dropped, 2u);
  for (int i = 0; i < 10; ++i) {
    auto got = Get(**t, 5, Name("k", i));
    if (i == 3 || i == 7) {
      EXPECT_TRUE(got.empty()) << i;
    } else {
      EXPECT_EQ(got, vals[i]) << i;
    }
  }
  EXPECT_EQ(reported, std::vector<uint64_t>{42}) << "k0's read, for its segment";
  EXPECT_EQ((*t)->TakeReads(5, "k1"), 1u) << "k1 not placed: counted in the tier";
  // Freed chunks are reusable and adopted ones are not handed out twice.
  for (int i = 0; i < 20; ++i) Put(**t, 6, Name("n", i), Bytes(8192, 100 + i));
  EXPECT_EQ(Get(**t, 5, "k0"), vals[0]);
  EXPECT_EQ(Get(**t, 6, "n19"), Bytes(8192, 119));
}

TEST_F(ShmTier, OtherOwnerOrGeometryDiscardsFile) {
  {
    auto t = RamTier::Open(opt_);
    ASSERT_TRUE(t.ok());
    Put(**t, 1, "a", Bytes(4096, 1));
  }
  opt_.owner_id[0] = 43;
  {
    auto t = RamTier::Open(opt_);
    ASSERT_TRUE(t.ok());
    EXPECT_FALSE((*t)->GetStats().adopted_file);
    EXPECT_FALSE((*t)->Contains(1, "a"));
    Put(**t, 1, "b", Bytes(4096, 1));
  }
  opt_.capacity_bytes *= 2;
  auto t = RamTier::Open(opt_);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE((*t)->GetStats().adopted_file);
  EXPECT_FALSE((*t)->Contains(1, "b"));
}

// A batch over the copy threads answers each item as Read() would: hits
// byte for byte (in fragments), misses, a buffer too small, and a block
// changed in memory (dropped), with neighbours untouched. Many callers at
// once share the helpers.
TEST(RamTier, ReadBatchOnCopyThreadsAnswersEachItemAsRead) {
  RamTierOptions o = Small(64 << 20);
  o.copy_threads = 4;
  auto t = RamTier::Open(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  constexpr int kBlocks = 24;
  std::vector<std::vector<uint8_t>> want;
  for (int i = 0; i < kBlocks; ++i) {
    want.push_back(Bytes(300000 + 4096 * i, 100 + i));
    ASSERT_NE(Put(**t, 1, Name("b", i), want.back()), 0u);
  }
  {  // block 5 changes in memory
    RamTier::Pin p = (*t)->Acquire(1, Name("b", 5));
    ASSERT_TRUE(p);
    p.pieces().back().data[7] ^= 1;
  }
  auto run = [&](int caller) {
    std::vector<std::string> keys;
    std::vector<std::vector<uint8_t>> outs(kBlocks + 2);
    std::vector<std::vector<MutableFragment>> frags(kBlocks + 2);
    std::vector<GetItem> items;
    for (int i = 0; i < kBlocks + 2; ++i) keys.push_back(i < kBlocks ? Name("b", i) : Name("absent", caller));
    for (int i = 0; i < kBlocks + 2; ++i) {
      const size_t n = i == 3 ? 1000 : 1 << 20;  // block 3: too small a buffer
      outs[i].resize(n);
      frags[i] = {{outs[i].data(), n / 3}, {outs[i].data() + n / 3, n - n / 3}};
      items.push_back({keys[i], frags[i]});
    }
    std::vector<Result<size_t>> got(items.size(), Result<size_t>(Status::Aborted("")));
    (*t)->ReadBatch(1, items, got);
    for (int i = 0; i < kBlocks + 2; ++i) {
      SCOPED_TRACE(i);
      if (i == 3) {
        EXPECT_EQ(got[i].status().code(), Code::kBufferTooSmall);
      } else if (i == 5) {
        // The first caller to read it finds it changed; later ones, dropped.
        EXPECT_TRUE(got[i].status().code() == Code::kCorruption || got[i].status().IsNotFound());
      } else if (i >= kBlocks) {
        EXPECT_TRUE(got[i].status().IsNotFound());
      } else {
        ASSERT_TRUE(got[i].ok()) << got[i].status().ToString();
        ASSERT_EQ(*got[i], want[i].size());
        EXPECT_EQ(0, std::memcmp(outs[i].data(), want[i].data(), want[i].size()));
      }
    }
  };
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) callers.emplace_back(run, c);
  for (auto& c : callers) c.join();
  EXPECT_EQ((*t)->GetStats().checksum_failures, 1u);
  EXPECT_FALSE((*t)->Contains(1, Name("b", 5)));
}

TEST(RamTier, RejectsBadOptions) {
  RamTierOptions o;
  o.capacity_bytes = 1000;
  EXPECT_EQ(RamTier::Open(o).status().code(), Code::kInvalidArgument);
  o.capacity_bytes = 1 << 20;
  o.chunk_bytes = 1000;
  EXPECT_EQ(RamTier::Open(o).status().code(), Code::kInvalidArgument);
  o.chunk_bytes = 4096;
  o.shm_path = "/nonexistent-dir/x.ram";
  EXPECT_NE(RamTier::Open(o).status().message().find("/nonexistent-dir/x.ram"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
