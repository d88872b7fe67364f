// The Store's contract, run on both I/O backends.
#include "kvtier/store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <fstream>
#include <random>
#include <chrono>
#include <thread>

#include "format/record.h"
#include "store/store_test_util.h"

namespace kvtier {
namespace {

using testing::Key;
using testing::Payload;
using testing::TempDir;

class StoreTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override {
    if (GetParam() == IoBackend::kIoUring && !IoUringAvailable()) GTEST_SKIP() << "io_uring unavailable";
    opt_ = testing::SmallOptions(GetParam());
  }
  std::unique_ptr<Store> OpenStore() {
    auto s = Store::Open(dir_.Sub("store"), opt_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  NamespaceId Ns(Store* s, const std::string& model = "test/model") {
    auto id = s->RegisterNamespace(testing::TestSpec(model));
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.value_or(0);
  }
  void ExpectBlock(Store* s, NamespaceId ns, const std::string& key, size_t size, uint32_t version = 0) {
    auto got = s->GetVector(ns, key);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, Payload(ns, key, size, version));
  }
  // Puts keys [first, end) of `size` bytes, one Put each.
  void PutKeys(Store* s, NamespaceId ns, int first, int end, size_t size) {
    for (int i = first; i < end; ++i) {
      auto p = Payload(ns, Key(i), size);
      ASSERT_TRUE(s->Put(ns, Key(i), p.data(), p.size()).ok()) << i;
    }
  }
  // The reinsertion tests' reads: keys 0 and 1 twice (reinsert_min_hits),
  // key 2 once.
  void ReadTwoHotKeysAndOneOnce(Store* s, NamespaceId ns, size_t size) {
    for (int pass = 0; pass < 2; ++pass) {
      ExpectBlock(s, ns, Key(0), size);
      ExpectBlock(s, ns, Key(1), size);
    }
    ExpectBlock(s, ns, Key(2), size);
  }

  TempDir dir_;
  Options opt_;
};

TEST_P(StoreTest, PutGetRoundTripSingleBuffer) {
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  for (size_t size : {size_t{1}, size_t{4096}, size_t{4096 - 72 - 32}, size_t{100000}, size_t{300000}}) {
    std::string key = Key(size);
    auto p = Payload(ns, key, size);
    ASSERT_TRUE(s->Put(ns, key, p.data(), p.size()).ok());
    std::vector<uint8_t> out(size + 10, 0xAA);
    auto n = s->Get(ns, key, out.data(), out.size());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, size);
    EXPECT_TRUE(std::equal(p.begin(), p.end(), out.begin()));
    EXPECT_EQ(out[size], 0xAA) << "wrote past the payload";
  }
  EXPECT_EQ(s->GetStats().io_backend, GetParam() == IoBackend::kPosix ? "posix" : "io_uring");
}

TEST_P(StoreTest, BlockingGetsOfSmallBlocksRunOnTheCallersThread) {
  opt_.read_threads = 1;
  opt_.ram_tier_bytes = 0;
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  const size_t big = opt_.zero_copy_min_bytes + 4096;
  for (auto [k, n] : {std::pair{1, size_t{4096}}, {2, size_t{4096}}, {3, big}}) {
    auto p = Payload(ns, Key(k), n);
    ASSERT_TRUE(s->Put(ns, Key(k), p.data(), p.size()).ok());
  }
  // The one read thread is held inside an async get's callback.
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<uint8_t> buf(4096);
  MutableFragment f{buf.data(), buf.size()};
  s->GetAsync(ns, Key(1), {&f, 1}, kNoDeadline, [&](Result<size_t>) {
    entered.set_value();
    released.wait();
  });
  entered.get_future().wait();
  // A small block is read on its caller's thread meanwhile.
  auto small = std::async(std::launch::async, [&] { return s->GetVector(ns, Key(2)); });
  const bool small_done = small.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  if (!small_done) release.set_value();  // let it finish, then fail
  ASSERT_TRUE(small_done) << "a small blocking get waited for the busy read thread";
  EXPECT_EQ(small.get().value(), Payload(ns, Key(2), 4096));
  // A large one needs the read thread, so it waits until the thread is free.
  auto large = std::async(std::launch::async, [&] { return s->GetVector(ns, Key(3)); });
  EXPECT_EQ(large.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  release.set_value();
  auto got = large.get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, Payload(ns, Key(3), big));
  EXPECT_EQ(s->GetStats().hits_disk, 3u);
}

TEST_P(StoreTest, FragmentsGatherOnPutScatterOnGet) {
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  // A per-layer block: 2 x 4 layers of 8 KiB each, put as 8 fragments.
  auto p = Payload(ns, "frag", 8 * 8192);
  std::vector<Fragment> frags;
  for (int i = 0; i < 8; ++i) frags.push_back({p.data() + i * 8192, 8192});
  ASSERT_TRUE(s->Put(ns, "frag", frags).ok());
  // Read back into 3 uneven pieces.
  std::vector<uint8_t> a(1000), b(50000), c(20000);
  std::vector<MutableFragment> out{{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  auto n = s->Get(ns, "frag", out);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, p.size());
  std::vector<uint8_t> joined(a);
  joined.insert(joined.end(), b.begin(), b.end());
  joined.insert(joined.end(), c.begin(), c.begin() + (p.size() - a.size() - b.size()));
  EXPECT_EQ(joined, p);
  // Too small a destination is an error, not a partial copy.
  std::vector<uint8_t> small(100);
  EXPECT_EQ(s->Get(ns, "frag", small.data(), small.size()).status().code(), Code::kBufferTooSmall);
}

TEST_P(StoreTest, BatchPutGetLookupPrefixContainsRemove) {
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  const int n = 40;
  std::vector<std::string> keys;
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<std::vector<Fragment>> frags(n);
  std::vector<PutItem> items;
  for (int i = 0; i < n; ++i) {
    keys.push_back(Key(i));
    payloads.push_back(Payload(ns, keys[i], 16384 + i));
  }
  for (int i = 0; i < n; ++i) {
    frags[i] = {{payloads[i].data(), payloads[i].size()}};
    items.push_back({keys[i], frags[i]});
  }
  for (const Status& st : s->PutBatch(ns, items)) ASSERT_TRUE(st.ok()) << st.ToString();

  std::vector<std::vector<uint8_t>> outs(n, std::vector<uint8_t>(20000));
  std::vector<std::vector<MutableFragment>> of(n);
  std::vector<GetItem> gets;
  for (int i = 0; i < n; ++i) {
    of[i] = {{outs[i].data(), outs[i].size()}};
    gets.push_back({keys[i], of[i]});
  }
  auto res = s->GetBatch(ns, gets);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(res[i].ok()) << res[i].status().ToString();
    ASSERT_EQ(*res[i], payloads[i].size());
    EXPECT_TRUE(std::equal(payloads[i].begin(), payloads[i].end(), outs[i].begin()));
  }

  std::vector<std::string_view> views(keys.begin(), keys.end());
  EXPECT_EQ(*s->LookupPrefix(ns, views), size_t(n));
  ASSERT_TRUE(s->Remove(ns, keys[10]).ok());
  EXPECT_EQ(*s->LookupPrefix(ns, views), 10u);
  EXPECT_FALSE(*s->Contains(ns, keys[10]));
  EXPECT_TRUE(*s->Contains(ns, keys[11]));
  EXPECT_TRUE(s->Get(ns, keys[10], outs[0].data(), outs[0].size()).status().IsNotFound());
  EXPECT_TRUE(s->Remove(ns, "absent-key").ok());
  std::vector<std::string_view> none{"x", keys[0]};
  EXPECT_EQ(*s->LookupPrefix(ns, none), 0u);

  // The removal survives a restart.
  ASSERT_TRUE(s->Close().ok());
  s = OpenStore();
  EXPECT_EQ(*s->LookupPrefix(ns, views), 10u);
}

// After a reopen the lookup map loads in the background and then holds
// every block; Stats says when (operators watch it on large stores).
TEST_P(StoreTest, LookupMapLoadsAfterReopenAndCountsEveryBlock) {
  NamespaceId ns;
  {
    auto s = OpenStore();
    ns = Ns(s.get());
    for (int i = 0; i < 40; ++i) {
      auto p = Payload(ns, Key(i), 8192);
      ASSERT_TRUE(s->Put(ns, Key(i), p.data(), p.size()).ok());
    }
    ASSERT_TRUE(s->Close().ok());
  }
  auto s = OpenStore();
  Stats st = s->GetStats();
  for (int i = 0; i < 1000 && !st.lookup_map_ready; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    st = s->GetStats();
  }
  ASSERT_TRUE(st.lookup_map_ready);
  EXPECT_EQ(st.lookup_map_entries, 40u);
  ASSERT_TRUE(s->Remove(ns, Key(3)).ok());
  EXPECT_EQ(s->GetStats().lookup_map_entries, 39u);
}

TEST_P(StoreTest, RestartPersistsAndCleanReopenScansNothing) {
  std::vector<std::string> keys;
  NamespaceId ns;
  {
    auto s = OpenStore();
    ns = Ns(s.get());
    for (int i = 0; i < 30; ++i) {
      keys.push_back(Key(i));
      auto p = Payload(ns, keys.back(), 50000);
      ASSERT_TRUE(s->Put(ns, keys.back(), p.data(), p.size()).ok());
    }
    ASSERT_TRUE(s->Close().ok());
    EXPECT_EQ(s->Put(ns, "k", "x", 1).code(), Code::kClosed);
  }
  auto s = OpenStore();
  Stats st = s->GetStats();
  EXPECT_FALSE(st.recovered_from_crash);
  EXPECT_EQ(st.recovery_scanned_bytes, 0u);
  for (const std::string& k : keys) ExpectBlock(s.get(), ns, k, 50000);
  // The namespace is known after reopen, by id and by name.
  auto found = s->FindNamespace(testing::TestSpec().DisplayName());
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, ns);
  // Appends continue after the reopen.
  auto p = Payload(ns, "after", 7000);
  ASSERT_TRUE(s->Put(ns, "after", p.data(), p.size()).ok());
  ExpectBlock(s.get(), ns, "after", 7000);
}

TEST_P(StoreTest, NamespacesIsolateKeys) {
  auto s = OpenStore();
  NamespaceId a = Ns(s.get(), "model/a");
  NamespaceId b = Ns(s.get(), "model/b");
  ASSERT_NE(a, b);
  NamespaceSpec salted = testing::TestSpec("model/a");
  salted.tenant_salt = "tenant-2";
  NamespaceId c = *s->RegisterNamespace(salted);
  ASSERT_NE(a, c);
  EXPECT_EQ(*s->RegisterNamespace(testing::TestSpec("model/a")), a) << "same spec, same id";
  auto pa = Payload(a, "same-key", 9000);
  ASSERT_TRUE(s->Put(a, "same-key", pa.data(), pa.size()).ok());
  EXPECT_TRUE(s->GetVector(b, "same-key").status().IsNotFound());
  EXPECT_TRUE(s->GetVector(c, "same-key").status().IsNotFound());
  EXPECT_FALSE(*s->Contains(b, "same-key"));
  auto pb = Payload(b, "same-key", 9000);
  ASSERT_TRUE(s->Put(b, "same-key", pb.data(), pb.size()).ok());
  ExpectBlock(s.get(), a, "same-key", 9000);
  ExpectBlock(s.get(), b, "same-key", 9000);
  // Unknown namespace and fixed block size are enforced.
  EXPECT_EQ(s->Put(12345, "k", pa.data(), pa.size()).code(), Code::kNotFound);
  NamespaceSpec fixed = testing::TestSpec("model/fixed");
  fixed.block_bytes = 4096;
  NamespaceId f = *s->RegisterNamespace(fixed);
  EXPECT_EQ(s->Put(f, "k", pa.data(), 4000).code(), Code::kInvalidArgument);
  EXPECT_TRUE(s->Put(f, "k", pa.data(), 4096).ok());
  // Dropping a namespace drops its blocks only.
  ASSERT_TRUE(s->RemoveNamespace(b).ok());
  EXPECT_EQ(s->Put(b, "k2", pb.data(), pb.size()).code(), Code::kNotFound);
  ExpectBlock(s.get(), a, "same-key", 9000);
  auto list = s->ListNamespaces();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 3u);
  // Specs alone: the same namespaces, nothing counted.
  auto specs = s->ListNamespaces(NamespaceListing::kSpecsOnly);
  ASSERT_TRUE(specs.ok());
  ASSERT_EQ(specs->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*specs)[i].id, (*list)[i].id);
    EXPECT_EQ((*specs)[i].spec.DisplayName(), (*list)[i].spec.DisplayName());
    EXPECT_EQ((*specs)[i].blocks, 0u);
  }
  EXPECT_GT((*list)[0].blocks + (*list)[1].blocks + (*list)[2].blocks, 0u);
}

TEST_P(StoreTest, BadArgumentsGetClearErrors) {
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  std::string long_key(256, 'k');
  EXPECT_EQ(s->Put(ns, long_key, "x", 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(s->Put(ns, "", "x", 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(s->Put(ns, "k", "x", 0).code(), Code::kInvalidArgument);
  std::vector<uint8_t> huge(2 << 20);  // larger than a 1 MiB segment
  Status st = s->Put(ns, "k", huge.data(), huge.size());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("payload"), std::string::npos) << st.message();
  NamespaceSpec bad = testing::TestSpec();
  bad.tp_rank = 5;
  EXPECT_EQ(s->RegisterNamespace(bad).status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(s->Put(ns, "fine", "x", 1).ok());
}

TEST_P(StoreTest, OpenErrors) {
  // Missing folder without create.
  Options o = opt_;
  o.create_if_missing = false;
  auto r = Store::Open(dir_.Sub("missing"), o);
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("missing"), std::string::npos);
  // A folder with other files is not a store.
  std::filesystem::create_directories(dir_.Sub("other"));
  std::ofstream(dir_.Sub("other/notes.txt")) << "hello";
  r = Store::Open(dir_.Sub("other"), opt_);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a kvtier store"), std::string::npos) << r.status().message();
  // Second open of the same store is refused with the holder's pid.
  auto s = OpenStore();
  auto second = Store::Open(dir_.Sub("store"), opt_);
  EXPECT_EQ(second.status().code(), Code::kBusy);
  EXPECT_NE(second.status().message().find("pid " + std::to_string(getpid())), std::string::npos)
      << second.status().message();
  // But a read-only open works alongside, and refuses writes.
  NamespaceId ns = Ns(s.get());
  auto p = Payload(ns, "k", 5000);
  ASSERT_TRUE(s->Put(ns, "k", p.data(), p.size()).ok());
  ASSERT_TRUE(s->Flush().ok());  // a reader sees the index as of the writer's last flush
  Options ro = opt_;
  ro.read_only = true;
  auto reader = Store::Open(dir_.Sub("store"), ro);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ExpectBlock(reader->get(), ns, "k", 5000);
  EXPECT_EQ((*reader)->Put(ns, "k2", p.data(), p.size()).code(), Code::kNotSupported);
}

TEST_P(StoreTest, SecondProcessOpenIsRefused) {
  auto s = OpenStore();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto r = Store::Open(dir_.Sub("store"), opt_);
    bool ok = r.status().code() == Code::kBusy &&
              r.status().message().find("pid " + std::to_string(getppid())) != std::string::npos;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_P(StoreTest, SuperblockDamage) {
  { auto s = OpenStore(); }
  std::string sb = dir_.Sub("store/SUPERBLOCK");
  testing::FlipBit(sb, 30);  // first copy damaged: the second serves
  { auto s = OpenStore(); ASSERT_NE(s, nullptr); }
  testing::FlipBit(sb, 4096 + 30);  // both damaged
  auto r = Store::Open(dir_.Sub("store"), opt_);
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_NE(r.status().message().find("SUPERBLOCK"), std::string::npos) << r.status().message();
}

TEST_P(StoreTest, NewerFormatVersionIsRefused) {
  { auto s = OpenStore(); }
  std::string path = dir_.Sub("store/SUPERBLOCK");
  std::vector<uint8_t> buf(format::kSuperblockFileBytes);
  {
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(buf.data()), buf.size());
  }
  auto sb = format::DecodeSuperblock({buf.data(), format::kSuperblockEncodedBytes});
  ASSERT_TRUE(sb.ok());
  sb->format_version = format::kFormatVersion + 1;
  for (int copy = 0; copy < 2; ++copy)
    format::EncodeSuperblock(*sb, std::span<uint8_t, format::kSuperblockEncodedBytes>(
                                      buf.data() + copy * format::kPage, format::kSuperblockEncodedBytes));
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(buf.data()), buf.size());
  }
  auto r = Store::Open(dir_.Sub("store"), opt_);
  EXPECT_EQ(r.status().code(), Code::kNotSupported) << r.status().ToString();
}

// Every get that reaches the device has its phases timed: a read thread's
// queue (for one handed to the threads), the index, the device, and the
// verification and completion. Gets here run one at a time, so the phases
// cannot add up to more than the time they took.
TEST_P(StoreTest, DiskReadsAreTimedPhaseByPhase) {
  constexpr int kBlocks = 6;
  NamespaceId ns;
  {
    auto s = OpenStore();
    ns = Ns(s.get());
    for (int i = 0; i < 2 * kBlocks; ++i) {
      auto p = Payload(ns, Key(i), 20000);
      ASSERT_TRUE(s->Put(ns, Key(i), p.data(), p.size()).ok());
    }
  }
  auto s = OpenStore();
  const auto t0 = Clock::now();
  for (int i = 0; i < kBlocks; ++i) ExpectBlock(s.get(), ns, Key(i), 20000);  // blocking: the caller's thread
  Stats mid = s->GetStats();
  EXPECT_EQ(mid.disk_reads_timed, uint64_t(kBlocks));
  EXPECT_EQ(mid.disk_read_queue_ns, 0u) << "read on the caller's thread: no queue";
  for (int i = kBlocks; i < 2 * kBlocks; ++i) {  // async: a read thread
    std::vector<uint8_t> out(20000);
    MutableFragment f{out.data(), out.size()};
    std::promise<Result<size_t>> got;
    s->GetAsync(ns, Key(i), {&f, 1}, kNoDeadline, [&](Result<size_t> r) { got.set_value(std::move(r)); });
    auto r = got.get_future().get();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(out, Payload(ns, Key(i), 20000));
  }
  const uint64_t elapsed =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
  Stats st = s->GetStats();
  EXPECT_EQ(st.hits_disk, uint64_t(2 * kBlocks));
  EXPECT_EQ(st.disk_reads_timed, uint64_t(2 * kBlocks));
  EXPECT_GT(st.disk_read_queue_ns, 0u);
  EXPECT_GT(st.disk_read_index_ns, mid.disk_read_index_ns);
  EXPECT_GT(st.disk_read_device_ns, mid.disk_read_device_ns);
  EXPECT_GT(st.disk_read_finish_ns, mid.disk_read_finish_ns);
  EXPECT_GT(mid.disk_read_index_ns, 0u);
  EXPECT_GT(mid.disk_read_device_ns, 0u);
  EXPECT_GT(mid.disk_read_finish_ns, 0u);
  EXPECT_LE(st.disk_read_queue_ns + st.disk_read_index_ns + st.disk_read_device_ns + st.disk_read_finish_ns, elapsed);
  // A RAM-less miss is not a disk read.
  std::vector<uint8_t> none(10);
  EXPECT_TRUE(s->Get(ns, "absent", none.data(), none.size()).status().IsNotFound());
  EXPECT_EQ(s->GetStats().disk_reads_timed, uint64_t(2 * kBlocks));
}

TEST_P(StoreTest, PutsAreTimedPhaseByPhase) {
  constexpr int kPuts = 8;
  auto s = OpenStore();
  const NamespaceId ns = Ns(s.get());
  const auto t0 = Clock::now();
  for (int i = 0; i < kPuts; ++i) {  // one at a time: their phases cannot overlap
    auto p = Payload(ns, Key(i), 300000);
    ASSERT_TRUE(s->Put(ns, Key(i), p.data(), p.size()).ok());
  }
  const uint64_t elapsed =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
  Stats st = s->GetStats();
  EXPECT_EQ(st.puts_timed, uint64_t(kPuts));
  for (uint64_t phase : {st.put_encode_ns, st.put_queue_ns, st.put_place_ns, st.put_write_ns, st.put_sync_ns,
                         st.put_commit_ns})
    EXPECT_GT(phase, 0u);
  EXPECT_LE(st.put_encode_ns + st.put_queue_ns + st.put_place_ns + st.put_write_ns + st.put_sync_ns +
                st.put_commit_ns,
            elapsed);
  // A refused put is not timed, and neither is a flush.
  std::vector<uint8_t> small(16);
  EXPECT_FALSE(s->Put(ns, "", small.data(), small.size()).ok());
  ASSERT_TRUE(s->Flush().ok());
  EXPECT_EQ(s->GetStats().puts_timed, uint64_t(kPuts));
}

TEST_P(StoreTest, FlippedPayloadBitIsAMissNeverWrongBytes) {
  NamespaceId ns;
  BlockInfo info;
  {
    auto s = OpenStore();
    ns = Ns(s.get());
    for (int i = 0; i < 5; ++i) {
      auto p = Payload(ns, Key(i), 20000);
      ASSERT_TRUE(s->Put(ns, Key(i), p.data(), p.size()).ok());
    }
    info = *s->Stat(ns, Key(2));
  }
  std::string seg = dir_.Sub("store/segments/seg-" + std::string(6 - std::to_string(info.segment).size(), '0') +
                             std::to_string(info.segment) + ".kvs");
  testing::FlipBit(seg, info.payload_offset + 1234, 3);
  auto s = OpenStore();
  auto r = s->GetVector(ns, Key(2));
  EXPECT_TRUE(r.status().IsNotFound()) << r.status().ToString();
  EXPECT_EQ(s->GetStats().checksum_failures, 1u);
  ASSERT_TRUE(s->Flush().ok());  // the drop goes through the writer
  EXPECT_FALSE(*s->Contains(ns, Key(2)));
  for (int i : {0, 1, 3, 4}) ExpectBlock(s.get(), ns, Key(i), 20000);
  // Verify finds it too.
  VerifyOptions vo;
  vo.deep = true;
  auto rep = s->Verify(vo);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->records_corrupt, 1u);
  EXPECT_EQ(rep->records_ok, 4u);
}

TEST_P(StoreTest, TornTailIsCutAndNeverReturned) {
  NamespaceId ns;
  {
    auto s = OpenStore();
    ns = Ns(s.get());
  }
  testing::InKilledChild([&] {
    auto s = Store::Open(dir_.Sub("store"), opt_);
    if (!s.ok()) _exit(2);
    for (int i = 0; i < 12; ++i) {
      auto p = Payload(ns, Key(i), 30000);
      if (!(*s)->Put(ns, Key(i), p.data(), p.size()).ok()) _exit(3);
    }
    auto info = (*s)->Stat(ns, Key(11));
    std::ofstream(dir_.Sub("last")) << info->segment << " " << info->offset;
    testing::KillSelf();  // no Close
  });
  uint32_t seg;
  uint64_t off;
  std::ifstream(dir_.Sub("last")) >> seg >> off;
  // Tear the last record: its second half never reached the disk.
  std::string path = dir_.Sub("store/segments/seg-" + std::string(6 - std::to_string(seg).size(), '0') +
                              std::to_string(seg) + ".kvs");
  testing::FlipBit(path, off + 20000, 0);
  auto s = OpenStore();
  Stats st = s->GetStats();
  EXPECT_TRUE(st.recovered_from_crash);
  EXPECT_GT(st.recovery_scanned_bytes, 0u);
  for (int i = 0; i < 11; ++i) ExpectBlock(s.get(), ns, Key(i), 30000);
  EXPECT_TRUE(s->GetVector(ns, Key(11)).status().IsNotFound());
  // The store accepts writes after recovery, and a clean reopen scans nothing.
  auto p = Payload(ns, "new", 4000);
  ASSERT_TRUE(s->Put(ns, "new", p.data(), p.size()).ok());
  ASSERT_TRUE(s->Close().ok());
  s = OpenStore();
  EXPECT_FALSE(s->GetStats().recovered_from_crash);
  ExpectBlock(s.get(), ns, "new", 4000);
  VerifyOptions vo;
  vo.deep = true;
  auto rep = s->Verify(vo);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok()) << (rep->problems.empty() ? "" : rep->problems[0]);
}

TEST_P(StoreTest, LostIndexIsRebuiltFromSegments) {
  NamespaceId ns;
  {
    auto s = OpenStore();
    ns = Ns(s.get());
    for (int i = 0; i < 20; ++i) {
      auto p = Payload(ns, Key(i), 12000);
      ASSERT_TRUE(s->Put(ns, Key(i), p.data(), p.size()).ok());
    }
  }
  std::filesystem::remove_all(dir_.Sub("store/index"));
  {
    auto s = OpenStore();  // no checkpoint: everything is rescanned
    EXPECT_TRUE(s->GetStats().recovered_from_crash);
    EXPECT_EQ(s->GetStats().recovery_reindexed, 20u);
    for (int i = 0; i < 20; ++i) ExpectBlock(s.get(), ns, Key(i), 12000);
  }
  // Repair rebuilds the same index explicitly.
  auto rep = Store::Repair(dir_.Sub("store"), opt_);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->records_indexed, 20u);
  EXPECT_EQ(rep->entries_before, 20u);
  EXPECT_EQ(rep->entries_after, 20u);
  auto s = OpenStore();
  EXPECT_FALSE(s->GetStats().recovered_from_crash);
  for (int i = 0; i < 20; ++i) ExpectBlock(s.get(), ns, Key(i), 12000);
}

// A segment reclaimed to be written again keeps its space (its pages are
// rewritten at once; punching them first only made every write after it
// allocate again); one left free gives its space back.
TEST_P(StoreTest, AReusedSegmentKeepsItsSpaceAFreedOneGivesItBack) {
  opt_.capacity_bytes = 4 << 20;  // 4 segments of 1 MiB
  opt_.hot_region_fraction = 0;
  auto s = OpenStore();
  const NamespaceId ns = Ns(s.get());
  PutKeys(s.get(), ns, 0, 200, 60000);  // 17 records a segment: every segment reused several times
  ASSERT_GT(s->GetStats().evictions, 4u);
  auto allocated = [&] {
    std::vector<uint64_t> bytes;
    for (const auto& e : std::filesystem::directory_iterator(dir_.Sub("store/segments"))) {
      struct stat st {};
      if (::stat(e.path().c_str(), &st) == 0) bytes.push_back(static_cast<uint64_t>(st.st_blocks) * 512);
    }
    return bytes;
  };
  const std::vector<uint64_t> before = allocated();
  ASSERT_EQ(before.size(), 4u);
  ASSERT_TRUE(s->EvictTo(0).ok());
  const std::vector<uint64_t> after = allocated();
  uint64_t sum_after = 0;
  for (uint64_t b : after) sum_after += b;
  if (sum_after >= 4 * (1u << 20) / 2) GTEST_SKIP() << "this file system does not punch holes";
  // Every segment, the one being filled included, still held a whole
  // segment's space: the earlier lives' pages were never given back.
  for (uint64_t b : before) EXPECT_GE(b, (1u << 20) - 4096);
}

// After a kill, recovery finds where the open segment's new life ends: the
// first record of an earlier life behind it is that end, not a torn write.
TEST_P(StoreTest, RecoveryEndsAReusedSegmentAtItsEarlierLifeWithoutTornBytes) {
  opt_.capacity_bytes = 4 << 20;  // 4 segments of 1 MiB
  opt_.hot_region_fraction = 0;
  // The child creates the store: RocksDB's background threads, once started
  // here, would not exist in a forked child.
  testing::InKilledChild([&] {
    auto s = Store::Open(dir_.Sub("store"), opt_);
    if (!s.ok()) _exit(2);
    const NamespaceId ns = Ns(s->get());
    for (int i = 0; i < 200; ++i) {  // 17 records a segment: the open one is reused, 13 records into it
      auto p = Payload(ns, Key(i), 60000);
      if (!(*s)->Put(ns, Key(i), p.data(), p.size()).ok()) _exit(3);
    }
    testing::KillSelf();  // no Close
  });
  auto s = OpenStore();
  const NamespaceId ns = Ns(s.get());  // the same spec: the same namespace
  const Stats st = s->GetStats();
  EXPECT_TRUE(st.recovered_from_crash);
  EXPECT_EQ(st.recovery_torn_bytes, 0u);
  for (int i = 190; i < 200; ++i) ExpectBlock(s.get(), ns, Key(i), 60000);
}

TEST_P(StoreTest, EvictionUnderSmallBudgetWithReinsertion) {
  opt_.capacity_bytes = 4 << 20;  // 4 segments of 1 MiB
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  const size_t size = 60000;  // 15 pages per record: ~16 records per segment
  PutKeys(s.get(), ns, 0, 16, size);
  // Key 0 and 1 are read twice (reinsert_min_hits): they are hot when their
  // segment is reclaimed. Key 2, read once, is not.
  ReadTwoHotKeysAndOneOnce(s.get(), ns, size);
  PutKeys(s.get(), ns, 16, 200, size);
  Stats st = s->GetStats();
  EXPECT_GT(st.evictions, 0u);
  EXPECT_GT(st.evicted_blocks, 0u);
  EXPECT_GE(st.reinsertions, 2u);
  EXPECT_LE(st.used_bytes, st.capacity_bytes);
  EXPECT_LE(st.segments_total, 4u);
  // Cold early keys are gone, the hot ones survived, recent ones are present.
  EXPECT_TRUE(s->GetVector(ns, Key(5)).status().IsNotFound());
  EXPECT_FALSE(*s->Contains(ns, Key(5)));
  EXPECT_FALSE(*s->Contains(ns, Key(2)));  // read once: not kept
  ExpectBlock(s.get(), ns, Key(199), size);
  // Hot blocks are reinserted at most once per reclaim; after several cycles
  // without reads they too may go, but whatever is present is right.
  for (int i = 0; i < 200; ++i) {
    auto r = s->GetVector(ns, Key(i));
    if (r.ok()) {
      EXPECT_EQ(*r, Payload(ns, Key(i), size)) << i;
    }
  }
  // Everything present survives a reopen.
  ASSERT_TRUE(s->Close().ok());
  s = OpenStore();
  ExpectBlock(s.get(), ns, Key(199), size);
  VerifyOptions vo;
  vo.deep = true;
  auto rep = s->Verify(vo);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok()) << (rep->problems.empty() ? "" : rep->problems[0]);
  // Explicit eviction frees space down to a target.
  ASSERT_TRUE(s->EvictTo(1 << 20).ok());
  EXPECT_LE(s->GetStats().used_bytes, uint64_t{1} << 20);
}

// With a RAM tier, reads it serves make a block hot as disk reads do, and
// blocks it merely holds (every recent put: it is the write-through front)
// are not rewritten. Counting presence rewrote up to half of each reclaimed
// segment. The hot blocks are rewritten from the tier's copies (checked
// against the index's checksum), not read back from the disk, and the
// records that makes are a put's, as the disk alone shows after a reopen.
TEST_P(StoreTest, ReclaimRewritesBlocksTheRamTierServedNotBlocksItHolds) {
  opt_.capacity_bytes = 4 << 20;    // 4 segments of 1 MiB
  opt_.ram_tier_bytes = 32 << 20;   // holds every block put below
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  const size_t size = 60000;
  PutKeys(s.get(), ns, 0, 16, size);
  ReadTwoHotKeysAndOneOnce(s.get(), ns, size);
  const Stats before = s->GetStats();
  EXPECT_EQ(before.hits_ram, 5u);  // all five reads served from memory
  // About six segments' worth: the first segments are reclaimed, but not yet
  // the one keys 0 and 1 are rewritten into.
  PutKeys(s.get(), ns, 16, 100, size);
  const Stats st = s->GetStats();
  EXPECT_GT(st.evicted_blocks, 20u);
  // Keys 0 and 1, once each: their reads were counted by that reclaim, and
  // nothing read them in their new place.
  EXPECT_EQ(st.reinsertions, 2u);
  EXPECT_EQ(st.reinserted_from_ram, 2u);
  EXPECT_EQ(st.device_bytes_read, before.device_bytes_read);  // nothing read back
  EXPECT_TRUE(*s->Contains(ns, Key(0)));
  EXPECT_TRUE(*s->Contains(ns, Key(1)));
  EXPECT_FALSE(*s->Contains(ns, Key(2)));  // read once: not kept
  EXPECT_FALSE(*s->Contains(ns, Key(5)));  // never read: not kept
  ExpectBlock(s.get(), ns, Key(0), size);
  ExpectBlock(s.get(), ns, Key(99), size);
  ASSERT_TRUE(s->Close().ok());
  opt_.ram_tier_bytes = 0;  // the disk alone now
  s = OpenStore();
  ExpectBlock(s.get(), ns, Key(0), size);
  ExpectBlock(s.get(), ns, Key(1), size);
  EXPECT_GT(s->GetStats().hits_disk, 0u);
  VerifyOptions vo;
  vo.deep = true;
  auto rep = s->Verify(vo);
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok()) << (rep->problems.empty() ? "" : rep->problems[0]);
}

TEST_P(StoreTest, StaleEntriesAfterSegmentReuseAreDropped) {
  opt_.capacity_bytes = 2 << 20;
  opt_.reinsert_hot_blocks = false;
  NamespaceId ns;
  {
    auto s = OpenStore();
    ns = Ns(s.get());
    auto p = Payload(ns, "old", 50000);
    ASSERT_TRUE(s->Put(ns, "old", p.data(), p.size()).ok());
  }
  // Keep a copy of the index that still names "old" in its first life.
  std::filesystem::copy(dir_.Sub("store/index"), dir_.Sub("index-copy"));
  {
    auto s = OpenStore();
    for (int i = 0; i < 60; ++i) {  // forces reuse of the first segment
      auto p = Payload(ns, Key(i), 50000);
      ASSERT_TRUE(s->Put(ns, Key(i), p.data(), p.size()).ok());
    }
    EXPECT_GT(s->GetStats().evictions, 0u);
  }
  std::filesystem::remove_all(dir_.Sub("store/index"));
  std::filesystem::copy(dir_.Sub("index-copy"), dir_.Sub("store/index"));
  auto s = OpenStore();
  EXPECT_FALSE(*s->Contains(ns, "old"));
  EXPECT_TRUE(s->GetVector(ns, "old").status().IsNotFound());
  for (int i = 50; i < 60; ++i) {
    auto r = s->GetVector(ns, Key(i));
    if (r.ok()) {
      EXPECT_EQ(*r, Payload(ns, Key(i), 50000));
    }
  }
}

TEST_P(StoreTest, ConcurrentMixedWorkloadWithEviction) {
  opt_.capacity_bytes = 6 << 20;
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  std::atomic<int> wrong{0}, gets_ok{0}, puts_ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<uint8_t> out(70000);
      for (int i = 0; i < 150; ++i) {
        int k = static_cast<int>(rng() % 120);
        std::string key = Key(k);
        size_t size = 8192 + (k % 7) * 8000;
        switch (rng() % 4) {
          case 0: {
            auto p = Payload(ns, key, size);
            if (s->Put(ns, key, p.data(), p.size()).ok()) ++puts_ok;
            break;
          }
          case 1: {
            auto r = s->Get(ns, key, out.data(), out.size());
            if (r.ok()) {
              ++gets_ok;
              auto p = Payload(ns, key, size);
              if (*r != size || !std::equal(p.begin(), p.end(), out.begin())) ++wrong;
            }
            break;
          }
          case 2: {
            std::vector<std::string> ks{Key(k), Key(k + 1), Key(k + 2)};
            std::vector<std::string_view> v(ks.begin(), ks.end());
            if (!s->LookupPrefix(ns, v).ok()) ++wrong;
            break;
          }
          default:
            if (rng() % 4 == 0 && !s->Remove(ns, key).ok()) ++wrong;
            break;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(puts_ok.load(), 0);
  EXPECT_GT(gets_ok.load(), 0);
  EXPECT_GT(s->GetStats().evictions, 0u);
}

TEST_P(StoreTest, AsyncPutsBackPressureAndGetDeadlines) {
  opt_.write_queue_bytes = 1 << 20;
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  auto p = Payload(ns, "x", 200000);
  std::atomic<int> ok{0}, declined{0}, other{0};
  Fragment f{p.data(), p.size()};
  for (int i = 0; i < 64; ++i) {
    s->PutAsync(ns, Key(i), {&f, 1}, [&](Status st) {
      if (st.ok()) ++ok;
      else if (st.code() == Code::kNotAdmitted) ++declined;
      else ++other;
    });
  }
  ASSERT_TRUE(s->Flush().ok());
  EXPECT_EQ(ok + declined, 64);
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(declined.load(), 0) << "a 1 MiB queue cannot take 64 x 200 KB at once";
  EXPECT_EQ(s->GetStats().puts_not_admitted, uint64_t(declined.load()));
  // A get whose deadline has passed completes as a miss and never touches the buffer.
  std::string present;
  for (int i = 0; i < 64 && present.empty(); ++i)
    if (*s->Contains(ns, Key(i))) present = Key(i);
  ASSERT_FALSE(present.empty());
  std::vector<uint8_t> out(200000, 0x5A);
  MutableFragment m{out.data(), out.size()};
  std::promise<Result<size_t>> pr;
  s->GetAsync(ns, present, {&m, 1}, Clock::now() - std::chrono::milliseconds(1),
              [&](Result<size_t> r) { pr.set_value(std::move(r)); });
  auto r = pr.get_future().get();
  EXPECT_EQ(r.status().code(), Code::kTimedOut);
  EXPECT_EQ(out[0], 0x5A);
  EXPECT_GE(s->GetStats().get_deadline_misses, 1u);
  // With a generous deadline the same get succeeds.
  std::promise<Result<size_t>> pr2;
  s->GetAsync(ns, present, {&m, 1}, Clock::now() + std::chrono::seconds(30),
              [&](Result<size_t> r2) { pr2.set_value(std::move(r2)); });
  auto r2 = pr2.get_future().get();
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_TRUE(std::equal(p.begin(), p.end(), out.begin()));
}

TEST_P(StoreTest, AdmissionPolicies) {
  opt_.admit_on_second_put = true;
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  auto p = Payload(ns, "k", 5000);
  EXPECT_EQ(s->Put(ns, "k", p.data(), p.size()).code(), Code::kNotAdmitted);
  EXPECT_FALSE(*s->Contains(ns, "k"));
  EXPECT_TRUE(s->Put(ns, "k", p.data(), p.size()).ok());
  EXPECT_TRUE(*s->Contains(ns, "k"));
  ASSERT_TRUE(s->Close().ok());
  s.reset();
  opt_.admit_on_second_put = false;
  opt_.write_budget_bytes_per_day = 100000;  // burst = the whole day's budget here
  s = OpenStore();
  int admitted = 0, declined = 0;
  for (int i = 0; i < 40; ++i) {
    Status st = s->Put(ns, Key(i), p.data(), p.size());
    st.ok() ? ++admitted : (st.code() == Code::kNotAdmitted ? ++declined : 0);
  }
  EXPECT_EQ(admitted, 20);
  EXPECT_EQ(declined, 20);
}

TEST_P(StoreTest, StoreFilesArePrivate) {
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  ASSERT_TRUE(s->Put(ns, "k", "abc", 3).ok());
  namespace fs = std::filesystem;
  EXPECT_EQ(fs::status(dir_.Sub("store")).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(fs::status(dir_.Sub("store/SUPERBLOCK")).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(fs::status(dir_.Sub("store/segments/seg-000000.kvs")).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest, ::testing::Values(IoBackend::kIoUring, IoBackend::kPosix),
                         testing::BackendName);

}  // namespace
}  // namespace kvtier
