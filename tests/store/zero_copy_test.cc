// Puts written from where the payload already is, and gets read straight
// into the caller's pages: the bytes, the counters that prove no copy was
// made, and the cases that must fall back to a copy.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <thread>

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "format/record.h"
#include "kvtier/store.h"
#include "store/store_test_util.h"
#include "util/page_backing.h"

namespace kvtier {
namespace {

using testing::Key;
using testing::Payload;
using testing::TempDir;

constexpr size_t kPage = 4096;

// Page-aligned memory holding `bytes`.
struct PageBuf {
  explicit PageBuf(size_t bytes) : size(bytes) {
    data = static_cast<uint8_t*>(std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage + kPage));
  }
  ~PageBuf() { std::free(data); }
  PageBuf(const PageBuf&) = delete;
  PageBuf& operator=(const PageBuf&) = delete;
  uint8_t* data;
  size_t size;
};

// Every call to the default file system of a backend; its queues count the
// read requests handed to them (one per record a get reads).
class CountingFileSystem final : public FileSystem {
 public:
  explicit CountingFileSystem(IoBackend backend) : base_(DefaultFileSystem(backend)) {}
  Result<std::unique_ptr<File>> Open(const std::string& path, OpenFlags flags) override {
    return base_->Open(path, flags);
  }
  Status CreateDir(const std::string& path, unsigned mode) override { return base_->CreateDir(path, mode); }
  Status SyncDir(const std::string& path) override { return base_->SyncDir(path); }
  Status Rename(const std::string& from, const std::string& to) override { return base_->Rename(from, to); }
  Status Remove(const std::string& path) override { return base_->Remove(path); }
  Result<bool> Exists(const std::string& path) override { return base_->Exists(path); }
  Result<std::vector<std::string>> ListDir(const std::string& path) override { return base_->ListDir(path); }
  Result<std::unique_ptr<FileLock>> Lock(const std::string& path, bool exclusive, unsigned mode) override {
    return base_->Lock(path, exclusive, mode);
  }
  Result<std::optional<long>> LockHolder(const std::string& path) override { return base_->LockHolder(path); }
  Result<uint64_t> FreeSpace(const std::string& path) override { return base_->FreeSpace(path); }
  std::string IoBackendName() const override { return base_->IoBackendName(); }
  Result<std::unique_ptr<IoQueue>> NewIoQueue(unsigned depth) override {
    auto q = base_->NewIoQueue(depth);
    if (!q.ok()) return q.status();
    return std::unique_ptr<IoQueue>(std::make_unique<Counted>(std::move(q).value(), &reads_));
  }
  uint64_t reads() const { return reads_.load(); }

 private:
  class Counted final : public IoQueue {
   public:
    Counted(std::unique_ptr<IoQueue> q, std::atomic<uint64_t>* reads) : q_(std::move(q)), reads_(reads) {}
    Status Submit(std::span<IoRequest> requests) override {
      for (const IoRequest& r : requests) Count(r);
      return q_->Submit(requests);
    }
    void Enqueue(IoRequest* request) override {
      Count(*request);
      q_->Enqueue(request);
    }
    size_t Reap(bool wait) override { return q_->Reap(wait); }
    size_t Outstanding() const override { return q_->Outstanding(); }
    Status RegisterBuffers(std::span<const iovec> regions) override { return q_->RegisterBuffers(regions); }
    unsigned depth() const override { return q_->depth(); }
    const char* backend() const override { return q_->backend(); }
    IoQueueStats stats() const override { return q_->stats(); }

   private:
    void Count(const IoRequest& r) {
      if (r.op == IoRequest::Op::kRead) reads_->fetch_add(1);
    }
    std::unique_ptr<IoQueue> q_;
    std::atomic<uint64_t>* reads_;
  };
  std::shared_ptr<FileSystem> base_;
  std::atomic<uint64_t> reads_{0};
};

// KiB of this process's memory pinned by the kernel for io_uring (VmPin), or -1.
int64_t PinnedKiB() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "VmPin: %lld kB", &kib) == 1) break;
  std::fclose(f);
  return kib;
}

class ZeroCopyTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override {
    if (GetParam() == IoBackend::kIoUring && !IoUringAvailable()) GTEST_SKIP() << "io_uring unavailable";
    opt_ = testing::SmallOptions(GetParam());
    opt_.zero_copy_min_bytes = 4096;  // every aligned size here takes the zero-copy path
    // The mechanism with any memory (aligned_alloc gives 4 KiB pages); the
    // page-aware default has its own test below.
    opt_.zero_copy_small_pages = true;
  }
  std::unique_ptr<Store> OpenStore() {
    auto s = Store::Open(dir_.Sub("store"), opt_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  NamespaceId Ns(Store* s) {
    auto id = s->RegisterNamespace(testing::TestSpec());
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.value_or(0);
  }
  // Puts Payload(ns, key, size) from a page-aligned copy of it.
  Status PutAligned(Store* s, NamespaceId ns, const std::string& key, size_t size) {
    auto p = Payload(ns, key, size);
    PageBuf b(size);
    std::memcpy(b.data, p.data(), size);
    return s->Put(ns, key, b.data, size);
  }
  void ExpectBlock(Store* s, NamespaceId ns, const std::string& key, size_t size) {
    auto got = s->GetVector(ns, key);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status().ToString();
    EXPECT_EQ(*got, Payload(ns, key, size)) << key;
  }

  TempDir dir_;
  Options opt_;
};

TEST_P(ZeroCopyTest, AlignedPayloadsAreWrittenFromCallerMemory) {
  // Whole pages, a tail in a second page, and a payload that takes the
  // packed layout (no page of its own) and so is copied.
  const size_t sizes[] = {kPage, 16 * kPage, 3 * kPage + 4050, 100 * kPage};
  uint64_t whole_pages = 0;
  {
    auto s = OpenStore();
    NamespaceId ns = Ns(s.get());
    for (size_t size : sizes) {
      ASSERT_TRUE(format::PayloadAligned(32, size, 0));
      ASSERT_TRUE(PutAligned(s.get(), ns, Key(size), size).ok());
      whole_pages += size / kPage * kPage;
    }
    ASSERT_FALSE(format::PayloadAligned(32, 1000, 0));
    ASSERT_TRUE(PutAligned(s.get(), ns, Key(1000), 1000).ok());
    Stats st = s->GetStats();
    EXPECT_EQ(st.zero_copy_put_bytes, whole_pages);
    // Record sizes are unchanged by where the payload came from.
    EXPECT_LT(st.write_amplification, 1.1);
    ASSERT_TRUE(s->Close().ok());
  }
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  for (size_t size : sizes) ExpectBlock(s.get(), ns, Key(size), size);
  ExpectBlock(s.get(), ns, Key(1000), 1000);
  auto v = s->Verify(VerifyOptions{.deep = true, .progress = nullptr});
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->ok()) << (v->problems.empty() ? "" : v->problems[0]);
}

TEST_P(ZeroCopyTest, PerLayerFragmentsAndTheirFallbacks) {
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  // 8 per-layer pieces of 8 KiB, each its own page-aligned allocation.
  auto p = Payload(ns, "layers", 8 * 8192);
  std::vector<std::unique_ptr<PageBuf>> bufs;
  std::vector<Fragment> frags;
  for (int i = 0; i < 8; ++i) {
    bufs.push_back(std::make_unique<PageBuf>(8192));
    std::memcpy(bufs.back()->data, p.data() + i * 8192, 8192);
    frags.push_back({bufs.back()->data, 8192});
  }
  ASSERT_TRUE(s->Put(ns, "layers", frags).ok());
  EXPECT_EQ(s->GetStats().zero_copy_put_bytes, 8u * 8192);

  // A middle fragment that is not whole pages: copied, same bytes.
  auto q = Payload(ns, "uneven", 3 * 8192);
  PageBuf a(8192 + 100), b(8192 - 100), c(8192);
  std::memcpy(a.data, q.data(), 8192 + 100);
  std::memcpy(b.data, q.data() + 8192 + 100, 8192 - 100);
  std::memcpy(c.data, q.data() + 2 * 8192, 8192);
  std::vector<Fragment> uneven{{a.data, 8192 + 100}, {b.data, 8192 - 100}, {c.data, 8192}};
  ASSERT_TRUE(s->Put(ns, "uneven", uneven).ok());
  // An unaligned start: copied.
  auto r = Payload(ns, "unaligned", 8 * kPage);
  PageBuf u(8 * kPage + 64);
  std::memcpy(u.data + 64, r.data(), r.size());
  ASSERT_TRUE(s->Put(ns, "unaligned", u.data + 64, r.size()).ok());
  EXPECT_EQ(s->GetStats().zero_copy_put_bytes, 8u * 8192) << "fallbacks must not count as zero-copy";

  ASSERT_TRUE(s->Close().ok());
  s = OpenStore();
  ExpectBlock(s.get(), ns, "layers", 8 * 8192);
  ExpectBlock(s.get(), ns, "uneven", 3 * 8192);
  ExpectBlock(s.get(), ns, "unaligned", 8 * kPage);
}

TEST_P(ZeroCopyTest, PutAsyncCopiesButBorrowedKeepsReadingTheBuffer) {
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  const size_t size = 64 * kPage;
  // PutAsync copies before it returns: scribbling on the buffer right after
  // must not change what is stored.
  auto p = Payload(ns, "copied", size);
  PageBuf b(size);
  std::memcpy(b.data, p.data(), size);
  std::promise<Status> copied;
  s->PutAsync(ns, "copied", std::vector<Fragment>{{b.data, size}}, [&](Status st) { copied.set_value(st); });
  std::memset(b.data, 0x5A, size);
  ASSERT_TRUE(copied.get_future().get().ok());
  EXPECT_EQ(s->GetStats().zero_copy_put_bytes, 0u);

  // PutAsyncBorrowed reads the caller's pages until its callback.
  auto q = Payload(ns, "borrowed", size);
  PageBuf c(size);
  std::memcpy(c.data, q.data(), size);
  std::promise<Status> borrowed;
  s->PutAsyncBorrowed(ns, "borrowed", std::vector<Fragment>{{c.data, size}},
                      [&](Status st) { borrowed.set_value(st); });
  ASSERT_TRUE(borrowed.get_future().get().ok());
  EXPECT_EQ(s->GetStats().zero_copy_put_bytes, size);

  ASSERT_TRUE(s->Close().ok());
  s = OpenStore();
  ExpectBlock(s.get(), ns, "copied", size);
  ExpectBlock(s.get(), ns, "borrowed", size);
}

TEST_P(ZeroCopyTest, BorrowedPutsLargerThanTheQueueBudgetStillGoThrough) {
  opt_.write_queue_bytes = 1 << 20;
  opt_.max_payload_bytes = 512 << 10;
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  const size_t size = 512 << 10;
  std::vector<std::unique_ptr<PageBuf>> bufs;
  std::atomic<int> ok{0}, declined{0}, failed{0};
  std::atomic<int> left{16};
  std::promise<void> all;
  for (int i = 0; i < 16; ++i) {
    auto p = Payload(ns, Key(i), size);
    bufs.push_back(std::make_unique<PageBuf>(size));
    std::memcpy(bufs.back()->data, p.data(), size);
    s->PutAsyncBorrowed(ns, Key(i), std::vector<Fragment>{{bufs.back()->data, size}}, [&](Status st) {
      (st.ok() ? ok : st.code() == Code::kNotAdmitted ? declined : failed)++;
      if (--left == 0) all.set_value();
    });
  }
  all.get_future().get();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GE(ok.load(), 1);
  EXPECT_EQ(ok.load() + declined.load(), 16);
  for (int i = 0; i < 16; ++i) {
    auto got = s->GetVector(ns, Key(i));
    if (got.ok()) {
      EXPECT_EQ(*got, Payload(ns, Key(i), size));
    }
  }
  EXPECT_EQ(s->GetStats().puts, static_cast<uint64_t>(ok.load()));
}

// A direct get is one read of its record's pages, scattered: the header
// page and the tail page to the store's buffer, the payload's whole pages to
// the caller's. As two or three requests, the device served each apart (a
// 4 KiB read beside every 2 MiB one: 1,032 requests for 512 gets, and the
// gets 0.6-0.9x of the drive at four in flight). A blocking Get makes that
// read on its own thread (no hand-over to a reader and back); GetAsync
// hands it to a reader's queue, as one request.
TEST_P(ZeroCopyTest, ADirectGetIsOneReadRequest) {
  auto fs = std::make_shared<CountingFileSystem>(GetParam());
  opt_.file_system = fs;
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  const size_t size = 3 * kPage + 4050;  // whole pages and a tail
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(PutAligned(s.get(), ns, Key(i), size).ok());
  ASSERT_TRUE(s->Close().ok());
  s = OpenStore();
  ns = Ns(s.get());
  PageBuf out(size);
  uint64_t before = fs->reads();
  for (int i = 0; i < 4; ++i) {
    std::memset(out.data, 0, size);
    auto n = s->Get(ns, Key(i), out.data, size);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    auto want = Payload(ns, Key(i), size);
    EXPECT_EQ(std::memcmp(out.data, want.data(), size), 0) << i;
  }
  EXPECT_EQ(s->GetStats().direct_read_bytes, 4 * 3 * kPage);
  EXPECT_EQ(fs->reads() - before, 0u) << "blocking gets read on the caller's thread, not through a queue";

  before = fs->reads();
  for (int i = 0; i < 4; ++i) {
    std::memset(out.data, 0, size);
    std::promise<Result<size_t>> r;
    s->GetAsync(ns, Key(i), std::vector<MutableFragment>{{out.data, size}}, kNoDeadline,
                [&](Result<size_t> x) { r.set_value(std::move(x)); });
    auto n = r.get_future().get();
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    auto want = Payload(ns, Key(i), size);
    EXPECT_EQ(std::memcmp(out.data, want.data(), size), 0) << i;
  }
  EXPECT_EQ(s->GetStats().direct_read_bytes, 8 * 3 * kPage);
  EXPECT_EQ(fs->reads() - before, 4u) << "one request per get";
}

TEST_P(ZeroCopyTest, GetsLandInAlignedCallerPages) {
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  const size_t size = 3 * kPage + 4050;  // whole pages and a tail
  ASSERT_TRUE(PutAligned(s.get(), ns, "k", size).ok());
  ASSERT_TRUE(PutAligned(s.get(), ns, "layers", 8 * 8192).ok());
  ASSERT_TRUE(s->Close().ok());
  s = OpenStore();  // nothing cached: every get reads the device
  auto want = Payload(ns, "k", size);

  PageBuf out(size + 100);
  std::memset(out.data, 0xAA, size + 100);
  auto n = s->Get(ns, "k", out.data, size + 100);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, size);
  EXPECT_EQ(std::memcmp(out.data, want.data(), size), 0);
  EXPECT_EQ(out.data[size], 0xAA) << "wrote past the payload";
  EXPECT_EQ(s->GetStats().direct_read_bytes, 3 * kPage);

  // Per-layer destinations, each page-aligned.
  auto layers = Payload(ns, "layers", 8 * 8192);
  std::vector<std::unique_ptr<PageBuf>> bufs;
  std::vector<MutableFragment> frags;
  for (int i = 0; i < 8; ++i) {
    bufs.push_back(std::make_unique<PageBuf>(8192));
    frags.push_back({bufs.back()->data, 8192});
  }
  ASSERT_TRUE(s->Get(ns, "layers", frags).ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(std::memcmp(bufs[i]->data, layers.data() + i * 8192, 8192), 0) << i;
  EXPECT_EQ(s->GetStats().direct_read_bytes, 3 * kPage + 8 * 8192);

  // A get with a deadline must never touch `out` after timing out, so it
  // reads through the store's own buffer.
  std::memset(out.data, 0, size);
  std::promise<Result<size_t>> r;
  s->GetAsync(ns, "k", std::vector<MutableFragment>{{out.data, size}}, Clock::now() + std::chrono::seconds(30),
              [&](Result<size_t> x) { r.set_value(std::move(x)); });
  auto got = r.get_future().get();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(std::memcmp(out.data, want.data(), size), 0);
  // So does an unaligned destination.
  std::vector<uint8_t> plain(size + 1);
  ASSERT_TRUE(s->Get(ns, "k", plain.data() + 1, size).ok());
  EXPECT_EQ(std::memcmp(plain.data() + 1, want.data(), size), 0);
  EXPECT_EQ(s->GetStats().direct_read_bytes, 3 * kPage + 8 * 8192);
}

// Anonymous memory of `bytes` starting on a 2 MiB boundary, on huge pages or
// kept on 4 KiB pages (whole 2 MiB units, as THP maps them), touched.
struct MappedBuf {
  MappedBuf(size_t bytes, bool huge) : size(bytes) {
    constexpr size_t kHuge = 2u << 20;
    bytes = (bytes + kHuge - 1) / kHuge * kHuge;
    map_bytes = bytes + kHuge;
    void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    map = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
    if (map == nullptr) return;
    data = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(map) + kHuge - 1) & ~(kHuge - 1));
    madvise(data, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    std::memset(data, 0, bytes);
  }
  ~MappedBuf() {
    if (map != nullptr) munmap(map, map_bytes);
  }
  MappedBuf(const MappedBuf&) = delete;
  MappedBuf& operator=(const MappedBuf&) = delete;
  uint8_t* map = nullptr;
  uint8_t* data = nullptr;
  size_t map_bytes = 0, size = 0;
};

TEST_P(ZeroCopyTest, CallerMemoryOnSmallPagesIsCopiedByDefault) {
  opt_.zero_copy_small_pages = false;
  const size_t size = 512u << 10;  // a test segment is 1 MiB
  MappedBuf small(size, /*huge=*/false), small_out(size, false);
  ASSERT_NE(small.data, nullptr);
  ASSERT_NE(small_out.data, nullptr);
  if (!TransparentHugePagesUsable() || QueryPageBacking(small.data, size) == PageBacking::kUnknown)
    GTEST_SKIP() << "the kernel cannot tell huge pages from small ones here (PAGEMAP_SCAN, THP)";
  ASSERT_EQ(QueryPageBacking(small.data, size), PageBacking::kSmall);

  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  auto want = Payload(ns, "small", size);
  std::memcpy(small.data, want.data(), size);
  ASSERT_TRUE(s->Put(ns, "small", small.data, size).ok());
  Stats st = s->GetStats();
  EXPECT_EQ(st.zero_copy_put_bytes, 0u) << "4 KiB pages go through the ring";
  EXPECT_EQ(st.small_page_copies, 1u);
  std::memset(small.data, 0xEE, size);  // the store kept its own copy
  ASSERT_TRUE(s->Close().ok());
  s = OpenStore();
  auto n = s->Get(ns, "small", small_out.data, size);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, size);
  EXPECT_EQ(std::memcmp(small_out.data, want.data(), size), 0);
  st = s->GetStats();
  EXPECT_EQ(st.direct_read_bytes, 0u) << "read into a huge-page bounce buffer, then copied";
  EXPECT_EQ(st.small_page_copies, 1u);

  // Huge pages, where the kernel has one free: zero-copy both ways.
  MappedBuf huge(size, /*huge=*/true), huge_out(size, true);
  ASSERT_NE(huge.data, nullptr);
  ASSERT_NE(huge_out.data, nullptr);
  if (QueryPageBacking(huge.data, size) != PageBacking::kHuge ||
      QueryPageBacking(huge_out.data, size) != PageBacking::kHuge)
    GTEST_SKIP() << "no free huge page for the second half";
  auto want2 = Payload(ns, "huge", size);
  std::memcpy(huge.data, want2.data(), size);
  ASSERT_TRUE(s->Put(ns, "huge", huge.data, size).ok());
  EXPECT_EQ(s->GetStats().zero_copy_put_bytes, size);
  ASSERT_TRUE(s->Close().ok());
  s = OpenStore();
  ASSERT_TRUE(s->Get(ns, "huge", huge_out.data, size).ok());
  EXPECT_EQ(std::memcmp(huge_out.data, want2.data(), size), 0);
  st = s->GetStats();
  EXPECT_EQ(st.direct_read_bytes, size);
  EXPECT_EQ(st.small_page_copies, 0u);
  ExpectBlock(s.get(), ns, "small", size);
}

TEST_P(ZeroCopyTest, CorruptPayloadReadDirectlyIsAMiss) {
  BlockInfo info;
  NamespaceId ns = 0;
  {
    auto s = OpenStore();
    ns = Ns(s.get());
    ASSERT_TRUE(PutAligned(s.get(), ns, "k", 16 * kPage).ok());
    info = *s->Stat(ns, "k");
    ASSERT_TRUE(s->Close().ok());
  }
  const std::string seg = dir_.Sub("store/segments/seg-" + std::string(6 - std::to_string(info.segment).size(), '0') +
                                   std::to_string(info.segment) + ".kvs");
  testing::FlipBit(seg, info.offset + kPage + 5 * kPage + 17, 2);
  auto s = OpenStore();
  PageBuf out(16 * kPage);
  auto n = s->Get(ns, "k", out.data, 16 * kPage);
  EXPECT_EQ(n.status().code(), Code::kNotFound) << n.status().ToString();
  EXPECT_EQ(s->GetStats().checksum_failures, 1u);
  // The entry is dropped: the next get is a plain miss.
  EXPECT_EQ(s->Get(ns, "k", out.data, 16 * kPage).status().code(), Code::kNotFound);
}

TEST_P(ZeroCopyTest, RamTierChunksAreWrittenThroughWithoutASecondCopy) {
  opt_.ram_tier_bytes = 8 << 20;
  opt_.ram_tier_shared_memory = false;
  const size_t size = 32 * kPage;
  {
    auto s = OpenStore();
    NamespaceId ns = Ns(s.get());
    for (int i = 0; i < 8; ++i) {
      // Unaligned caller memory: copied once, into the RAM tier, and
      // written to the device from there.
      auto p = Payload(ns, Key(i), size);
      std::vector<uint8_t> v(size + 1);
      std::memcpy(v.data() + 1, p.data(), size);
      std::promise<Status> done;
      s->PutAsync(ns, Key(i), std::vector<Fragment>{{v.data() + 1, size}}, [&](Status st) { done.set_value(st); });
      std::memset(v.data(), 0, v.size());  // PutAsync copied it
      ASSERT_TRUE(done.get_future().get().ok());
      // Registration waits for the writer's idle moment. With the sync
      // nearly free (tmpfs) the next put can reach the writer before it
      // goes idle, every time on a loaded machine (seen once in CI's ASan
      // stage: no write registered): give it that moment.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    Stats st = s->GetStats();
    EXPECT_EQ(st.zero_copy_put_bytes, 8 * size);
    EXPECT_EQ(st.ram_blocks, 8u);
    // The tier's data area and the used part of the ring are registered with
    // the writer's io_uring whenever the writer is idle: puts after that
    // write their header page (ring) and payload (tier chunks) as fixed-buffer
    // writes (typically 15 of the 16 writes here; a put that reaches the
    // writer before its first idle moment runs unregistered).
    if (GetParam() == IoBackend::kIoUring) {
      EXPECT_GE(st.registered_writes, 8u);
    }
    for (int i = 0; i < 8; ++i) {
      auto got = s->GetVector(ns, Key(i));
      ASSERT_TRUE(got.ok());
      EXPECT_EQ(*got, Payload(ns, Key(i), size));
    }
    EXPECT_EQ(s->GetStats().hits_ram, 8u);
    ASSERT_TRUE(s->Close().ok());
  }
  // A fresh process view with the RAM tier off: the device has the bytes.
  opt_.ram_tier_bytes = 0;
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  for (int i = 0; i < 8; ++i) ExpectBlock(s.get(), ns, Key(i), size);
  EXPECT_EQ(s->GetStats().hits_disk, 8u);
}

// Registering memory with io_uring pins it, and pinning faults in every page
// not yet there, on the writer's thread while puts wait: the writer takes the
// RAM tier into its registration only once the tier's prefault has faulted it
// in, and never with the prefault off. What io_uring pinned shows as VmPin.
TEST_P(ZeroCopyTest, TheRamTierIsRegisteredOnlyOnceItsPrefaultIsDone) {
  if (GetParam() != IoBackend::kIoUring) GTEST_SKIP() << "registration is io_uring's";
  rlimit lock{};
  if (geteuid() != 0 && (getrlimit(RLIMIT_MEMLOCK, &lock) != 0 || lock.rlim_cur < (256u << 20)))
    GTEST_SKIP() << "RLIMIT_MEMLOCK below 256 MiB: the kernel would refuse to register the tier";
  const int64_t base = PinnedKiB();
  if (base < 0) GTEST_SKIP() << "no VmPin in /proc/self/status";
  constexpr int64_t kTierKiB = 64 << 10;
  opt_.ram_tier_bytes = static_cast<uint64_t>(kTierKiB) << 10;
  opt_.ram_tier_shared_memory = false;
  auto put_and_idle = [](Store* s, NamespaceId ns, int i) {
    std::vector<uint8_t> v(3 * kPage + 100, static_cast<uint8_t>(i));
    char key[16];
    std::snprintf(key, sizeof key, "k%d", i);
    ASSERT_TRUE(s->Put(ns, key, v.data(), v.size()).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the writer's idle moment, when it registers
  };
  opt_.ram_tier_prefault = false;
  {
    auto s = OpenStore();
    NamespaceId ns = Ns(s.get());
    for (int i = 0; i < 8; ++i) put_and_idle(s.get(), ns, i);
    // The write ring's used part (8 MiB pieces) and the read buffers, not the tier.
    EXPECT_LT(PinnedKiB() - base, kTierKiB / 2);
    EXPECT_GE(s->GetStats().registered_writes, 1u);  // the ring is registered all the same
    EXPECT_EQ(s->GetVector(ns, "k3").value_or(std::vector<uint8_t>{}), std::vector<uint8_t>(3 * kPage + 100, 3));
    ASSERT_TRUE(s->Close().ok());
  }
  opt_.ram_tier_prefault = true;
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  bool pinned = false;
  for (int i = 0; i < 500 && !pinned; ++i) {
    put_and_idle(s.get(), ns, i);
    pinned = PinnedKiB() - base >= kTierKiB;
  }
  EXPECT_TRUE(pinned) << "the prefaulted tier was never registered: " << PinnedKiB() - base << " KiB pinned";
}

TEST_P(ZeroCopyTest, SmallPayloadsAreCopiedBelowTheThreshold) {
  opt_.zero_copy_min_bytes = 64 * kPage;
  auto s = OpenStore();
  NamespaceId ns = Ns(s.get());
  ASSERT_TRUE(PutAligned(s.get(), ns, "small", 16 * kPage).ok());
  EXPECT_EQ(s->GetStats().zero_copy_put_bytes, 0u);
  ASSERT_TRUE(PutAligned(s.get(), ns, "large", 64 * kPage).ok());
  EXPECT_EQ(s->GetStats().zero_copy_put_bytes, 64 * kPage);
  ASSERT_TRUE(s->Close().ok());
  s = OpenStore();
  PageBuf out(64 * kPage);
  ASSERT_TRUE(s->Get(ns, "small", out.data, 64 * kPage).ok());
  EXPECT_EQ(std::memcmp(out.data, Payload(ns, "small", 16 * kPage).data(), 16 * kPage), 0);
  EXPECT_EQ(s->GetStats().direct_read_bytes, 0u);
  ASSERT_TRUE(s->Get(ns, "large", out.data, 64 * kPage).ok());
  EXPECT_EQ(std::memcmp(out.data, Payload(ns, "large", 64 * kPage).data(), 64 * kPage), 0);
  EXPECT_EQ(s->GetStats().direct_read_bytes, 64 * kPage);
}

TEST_P(ZeroCopyTest, SharedMemoryTierChunksAreWrittenThroughToo) {
  opt_.ram_tier_bytes = 8 << 20;
  opt_.ram_tier_shared_memory = true;
  const size_t size = 16 * kPage;
  std::string shm;
  {
    auto s = OpenStore();
    shm = "/dev/shm/kvtier-" + s->Description().store_id + ".ram";
    if (!s->GetStats().ram_shared_memory) GTEST_SKIP() << "/dev/shm cannot hold the tier here";
    NamespaceId ns = Ns(s.get());
    for (int i = 0; i < 4; ++i) {
      auto p = Payload(ns, Key(i), size);
      ASSERT_TRUE(s->Put(ns, Key(i), p.data(), p.size()).ok());
    }
    EXPECT_EQ(s->GetStats().zero_copy_put_bytes, 4 * size);
    ASSERT_TRUE(s->Close().ok());
  }
  opt_.ram_tier_bytes = 0;
  {
    auto s = OpenStore();
    NamespaceId ns = Ns(s.get());
    for (int i = 0; i < 4; ++i) ExpectBlock(s.get(), ns, Key(i), size);
    EXPECT_EQ(s->GetStats().hits_disk, 4u);
  }
  std::remove(shm.c_str());
}

INSTANTIATE_TEST_SUITE_P(Backends, ZeroCopyTest, ::testing::Values(IoBackend::kIoUring, IoBackend::kPosix),
                         testing::BackendName);

}  // namespace
}  // namespace kvtier
