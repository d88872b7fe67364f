// The store with the host RAM tier on: hits by source, eviction from RAM
// forcing disk reads, write-through surviving restarts, shared-memory
// adoption with a corrupted block dropped.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "kvtier/store.h"
#include "store/block_sink.h"
#include "tier/ram_tier.h"

namespace kvtier {
namespace {

class StoreRam : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/kvtier-ramtest-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    ASSERT_NE(mkdtemp(buf.data()), nullptr);
    dir_ = buf.data();
    opt_.segment_size_bytes = 1 << 20;
    opt_.capacity_bytes = 64 << 20;
    opt_.ram_tier_bytes = 1 << 20;  // 16 chunks of 64 KiB
    opt_.ram_tier_shared_memory = false;
    opt_.write_queue_bytes = 8 << 20;
  }
  void TearDown() override {
    store_.reset();
    if (!shm_.empty()) unlink(shm_.c_str());
    if (!note_.empty()) unlink(note_.c_str());  // the folder noted beside a shared tier
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void Open() {
    store_.reset();
    auto s = Store::Open(dir_, opt_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    shm_ = RamTierShmPath(store_->Description().store_id);
    note_ = RamTierFolderNotePath(store_->Description().store_id);
    NamespaceSpec spec;
    spec.model_id = "m";
    spec.dtype = "bf16";
    auto ns = store_->RegisterNamespace(spec);
    ASSERT_TRUE(ns.ok());
    ns_ = *ns;
  }
  static std::vector<uint8_t> Block(int i, size_t n = 64 << 10) {
    std::vector<uint8_t> v(n);
    std::mt19937_64 r(i);
    for (size_t j = 0; j + 8 <= n; j += 8) {
      uint64_t x = r();
      std::memcpy(v.data() + j, &x, 8);
    }
    return v;
  }
  static std::string K(int i) {
    std::string k("key-");
    k += std::to_string(i);
    return k;
  }
  void PutN(int n) {
    for (int i = 0; i < n; ++i) {
      auto v = Block(i);
      ASSERT_TRUE(store_->Put(ns_, K(i), v.data(), v.size()).ok());
    }
  }
  // Opens the store with its tier in /dev/shm; false (the test then skips)
  // where there is no room for it.
  bool OpenShared() {
    if (!std::filesystem::exists("/dev/shm")) return false;
    opt_.ram_tier_shared_memory = true;
    Open();
    return store_ != nullptr && store_->GetStats().ram_shared_memory;
  }
  // XORs `mask` into the byte at `offset` of the tier's data area, through
  // the shared-memory file (chunks are handed out from the start of the data
  // area, which ends the file).
  void FlipTierByte(off_t offset, uint8_t mask) {
    int fd = open(shm_.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const off_t data = lseek(fd, 0, SEEK_END) - static_cast<off_t>(opt_.ram_tier_bytes);
    uint8_t b = 0;
    ASSERT_EQ(pread(fd, &b, 1, data + offset), 1);
    b ^= mask;
    ASSERT_EQ(pwrite(fd, &b, 1, data + offset), 1);
    close(fd);
  }
  bool GetOk(int i) {
    std::vector<uint8_t> out(64 << 10);
    auto r = store_->Get(ns_, K(i), out.data(), out.size());
    return r.ok() && *r == out.size() && out == Block(i);
  }

  std::string dir_, shm_, note_;
  Options opt_;
  std::unique_ptr<Store> store_;
  NamespaceId ns_ = 0;
};

TEST_F(StoreRam, PutsAreServedFromRam) {
  Open();
  PutN(4);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(GetOk(i));
  Stats s = store_->GetStats();
  EXPECT_EQ(s.hits_ram, 4u);
  EXPECT_EQ(s.hits_disk, 0u);
  EXPECT_EQ(s.bytes_read_ram, 4u * (64 << 10));
  EXPECT_EQ(s.ram_blocks, 4u);
  EXPECT_EQ(s.ram_capacity_bytes, 1u << 20);
  EXPECT_FALSE(s.ram_shared_memory);
  // A too-small buffer is reported from RAM as from disk.
  std::vector<uint8_t> small(100);
  EXPECT_EQ(store_->Get(ns_, K(0), small.data(), small.size()).status().code(), Code::kBufferTooSmall);
}

// A put records the hash's states between its block's pieces as it fills
// the tier's copy, so that the very first read of a large block (alone, or
// in a batch) is shared out, each piece verified, and lands exact.
TEST_F(StoreRam, APutRecordsTheStatesSoTheFirstReadsGoAsVerifiedPieces) {
  opt_.ram_tier_bytes = 16 << 20;
  opt_.ram_copy_threads = 4;
  opt_.segment_size_bytes = 8 << 20;
  Open();
  RamTier* ram = BlockSinkOf(store_.get())->ram_tier();
  ASSERT_NE(ram, nullptr);
  constexpr size_t kBig = (2 << 20) + 4096 * 3;  // pieces of 256 KiB and a short last one
  std::vector<std::vector<uint8_t>> v;
  for (int i = 0; i < 3; ++i) {
    v.push_back(Block(100 + i, kBig));
    ASSERT_TRUE(store_->Put(ns_, K(i), v[i].data(), v[i].size()).ok());
  }
  std::vector<uint8_t> out(kBig + 64, 0xCC);
  auto n = store_->Get(ns_, K(0), out.data(), out.size());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_TRUE(std::equal(v[0].begin(), v[0].end(), out.begin()));
  EXPECT_EQ(ram->GetStats().split_copies, 1u);
  std::vector<std::vector<uint8_t>> outs(2, std::vector<uint8_t>(kBig));
  MutableFragment f1{outs[0].data(), kBig}, f2{outs[1].data(), kBig};
  const std::string k1 = K(1), k2 = K(2);
  GetItem items[2] = {{k1, {&f1, 1}}, {k2, {&f2, 1}}};
  auto got = store_->GetBatch(ns_, items);
  ASSERT_TRUE(got[0].ok() && got[1].ok());
  EXPECT_EQ(outs[0], v[1]);
  EXPECT_EQ(outs[1], v[2]);
  EXPECT_EQ(ram->GetStats().split_copies, 3u);
  EXPECT_EQ(ram->GetStats().checksum_failures, 0u);
}

TEST_F(StoreRam, EvictionFromRamForcesDiskReadsThenAdmits) {
  Open();
  PutN(40);  // 2.5 MiB through a 1 MiB tier
  Stats s = store_->GetStats();
  EXPECT_LE(s.ram_used_bytes, 1u << 20);
  EXPECT_GT(s.ram_evictions, 0u);
  for (int i = 0; i < 40; ++i) EXPECT_TRUE(GetOk(i)) << i;  // write-through: nothing lost
  s = store_->GetStats();
  EXPECT_GT(s.hits_disk, 0u);
  EXPECT_EQ(s.hits_ram + s.hits_disk, 40u);
  EXPECT_EQ(s.misses, 0u);
  // A block read from disk is admitted before its get returns: reading the
  // last one again is a RAM hit.
  const uint64_t ram_before = s.hits_ram;
  EXPECT_TRUE(GetOk(39));
  EXPECT_EQ(store_->GetStats().hits_ram, ram_before + 1);
}

TEST_F(StoreRam, RemoveAndRemoveNamespaceEraseFromRam) {
  Open();
  PutN(3);
  ASSERT_TRUE(store_->Remove(ns_, K(1)).ok());
  std::vector<uint8_t> out(64 << 10);
  EXPECT_TRUE(store_->Get(ns_, K(1), out.data(), out.size()).status().IsNotFound());
  EXPECT_EQ(store_->GetStats().ram_blocks, 2u);
  ASSERT_TRUE(store_->RemoveNamespace(ns_).ok());
  EXPECT_EQ(store_->GetStats().ram_blocks, 0u);
}

TEST_F(StoreRam, WriteThroughSurvivesRestartWithoutSharedMemory) {
  Open();
  PutN(8);
  ASSERT_TRUE(store_->Close().ok());
  Open();
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(GetOk(i));
  Stats s = store_->GetStats();
  EXPECT_EQ(s.hits_disk, 8u);
  EXPECT_EQ(s.ram_adopted_blocks, 0u);
}

TEST_F(StoreRam, SharedMemoryAdoptedAfterRestartCorruptBlockDropped) {
  if (!OpenShared()) GTEST_SKIP() << "no /dev/shm with room for the tier on this machine";
  PutN(8);
  ASSERT_TRUE(store_->Remove(ns_, K(5)).ok());
  store_.reset();  // like a process exit: the file stays
  ASSERT_TRUE(std::filesystem::exists(shm_));
  ASSERT_NO_FATAL_FAILURE(FlipTierByte(123, 0x5A));  // in the first block's payload
  Open();
  Stats s = store_->GetStats();
  EXPECT_TRUE(s.ram_shared_memory);
  EXPECT_EQ(s.ram_adopted_blocks, 6u);  // 8 put, 1 removed, 1 corrupt
  EXPECT_EQ(s.ram_adopt_dropped, 1u);
  for (int i = 0; i < 8; ++i) {
    if (i == 5) {
      std::vector<uint8_t> out(64 << 10);
      EXPECT_TRUE(store_->Get(ns_, K(5), out.data(), out.size()).status().IsNotFound());
    } else {
      EXPECT_TRUE(GetOk(i)) << i;  // the corrupt one comes (right) from disk
    }
  }
  s = store_->GetStats();
  EXPECT_EQ(s.hits_ram, 6u);
  EXPECT_EQ(s.hits_disk, 1u);
}

// Each block takes whole chunks: 4 KiB blocks in the default 64 KiB chunks
// fill a 1 MiB tier at 16 blocks; in 4 KiB chunks it holds 256 of them.
TEST_F(StoreRam, SmallChunksHoldSmallBlocksAtTheirSize) {
  constexpr int kBlocks = 128;
  constexpr size_t kSmall = 4096;
  for (uint32_t chunk : {64u << 10, 4u << 10}) {
    SCOPED_TRACE(chunk);
    opt_.ram_tier_chunk_bytes = chunk;
    Open();
    for (int i = 0; i < kBlocks; ++i) {
      auto v = Block(i, kSmall);
      ASSERT_TRUE(store_->Put(ns_, K(i), v.data(), v.size()).ok());
    }
    const Stats s = store_->GetStats();
    EXPECT_EQ(s.ram_capacity_bytes, 1u << 20);
    if (chunk == kSmall) {
      EXPECT_EQ(s.ram_blocks, uint64_t{kBlocks});
      EXPECT_EQ(s.ram_used_bytes, uint64_t{kBlocks} * kSmall);
      EXPECT_EQ(s.ram_evictions, 0u);
    } else {
      EXPECT_LE(s.ram_blocks, 16u);
      EXPECT_GT(s.ram_evictions, 0u);
    }
    for (int i = 0; i < kBlocks; ++i) {
      std::vector<uint8_t> out(kSmall);
      auto r = store_->Get(ns_, K(i), out.data(), out.size());
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(out, Block(i, kSmall)) << i;
    }
    if (chunk == kSmall) {
      EXPECT_EQ(store_->GetStats().hits_ram, uint64_t{kBlocks});
    }
    ASSERT_TRUE(store_->Close().ok());  // the next open's tier starts empty (anonymous memory)
  }
}

// Blocks of a quarter chunk or less are named once per open, with the option
// that fits them.
TEST_F(StoreRam, SmallBlocksInLargeChunksAreWarnedOfOnce) {
  std::vector<std::string> lines;
  opt_.warn = [&lines](const std::string& l) { lines.push_back(l); };
  Open();
  PutN(4);  // 64 KiB blocks in 64 KiB chunks: nothing to say
  EXPECT_TRUE(lines.empty());
  for (int i = 0; i < 3; ++i) {
    auto v = Block(i, 4096);
    ASSERT_TRUE(store_->Put(ns_, K(100 + i), v.data(), v.size()).ok());
  }
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("ram_tier_chunk_bytes"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("16x"), std::string::npos) << lines[0];
  ASSERT_TRUE(store_->Close().ok());
  lines.clear();
  opt_.ram_tier_chunk_bytes = 4096;
  Open();
  auto v = Block(7, 4096);
  ASSERT_TRUE(store_->Put(ns_, K(200), v.data(), v.size()).ok());
  EXPECT_TRUE(lines.empty());
}

// Blocks larger than a chunk take a chain of them and come back whole.
TEST_F(StoreRam, BlocksSpanningManySmallChunksComeBackWhole) {
  opt_.ram_tier_chunk_bytes = 4096;
  Open();
  PutN(8);  // 64 KiB each: 16 chunks apiece
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(GetOk(i)) << i;
  EXPECT_EQ(store_->GetStats().hits_ram, 8u);
}

TEST_F(StoreRam, AChunkSizeOutsideItsRangeIsRefused) {
  for (uint32_t chunk : {0u, 4095u, 6000u, (64u << 20) + 4096u}) {
    opt_.ram_tier_chunk_bytes = chunk;
    auto s = Store::Open(dir_, opt_);
    ASSERT_FALSE(s.ok()) << chunk;
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument) << chunk;
    EXPECT_NE(s.status().message().find("ram_tier_chunk_bytes"), std::string::npos) << s.status().ToString();
  }
}

// A tier kept in /dev/shm under one chunk size is not adopted under another:
// it starts empty, and every block is read (right) from disk.
TEST_F(StoreRam, ASharedTierOfAnotherChunkSizeStartsEmpty) {
  opt_.ram_tier_chunk_bytes = 4096;
  if (!OpenShared()) GTEST_SKIP() << "no /dev/shm with room for the tier on this machine";
  PutN(8);
  store_.reset();
  opt_.ram_tier_chunk_bytes = 64u << 10;
  Open();
  Stats s = store_->GetStats();
  EXPECT_TRUE(s.ram_shared_memory);
  EXPECT_EQ(s.ram_adopted_blocks, 0u);
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(GetOk(i)) << i;
  EXPECT_EQ(store_->GetStats().hits_disk, 8u);
  store_.reset();  // the same chunk size again: the blocks read back are adopted
  Open();
  EXPECT_EQ(store_->GetStats().ram_adopted_blocks, 8u);
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

// A RAM copy that changes in memory while the store runs (here: a write into
// the shared-memory file from outside) is caught on the next hit: the get is
// served, right, from disk and the copy is dropped.
TEST_F(StoreRam, ChangedRamCopyIsCaughtOnReadAndServedFromDisk) {
  if (!OpenShared()) GTEST_SKIP() << "no /dev/shm with room for the tier on this machine";
  PutN(4);
  ASSERT_TRUE(GetOk(0));
  ASSERT_NO_FATAL_FAILURE(FlipTierByte(4000, 0x01));  // inside block 0's first chunk
  Stats before = store_->GetStats();
  EXPECT_TRUE(GetOk(0));  // right bytes, from disk
  Stats s = store_->GetStats();
  EXPECT_EQ(s.ram_checksum_failures, 1u);
  EXPECT_EQ(s.hits_disk, before.hits_disk + 1);
  EXPECT_EQ(s.hits_ram, before.hits_ram);
  EXPECT_TRUE(GetOk(0));  // admitted again after the disk read: a RAM hit
  EXPECT_EQ(store_->GetStats().hits_ram, before.hits_ram + 1);
  for (int i = 1; i < 4; ++i) EXPECT_TRUE(GetOk(i)) << i;
}

// A disk record that fails verification is a miss and never reaches the
// tier.
TEST_F(StoreRam, ADiskRecordThatFailsVerificationIsNotAdmitted) {
  opt_.ram_tier_bytes = 16 << 20;
  opt_.segment_size_bytes = 8 << 20;
  constexpr size_t kBig = (1 << 20) + 777;
  const std::vector<uint8_t> v = Block(300, kBig);
  Open();
  ASSERT_TRUE(store_->Put(ns_, K(0), v.data(), v.size()).ok());
  auto info = store_->Stat(ns_, K(0));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  store_.reset();
  const std::string seg = std::to_string(info->segment);
  const std::string path = dir_ + "/segments/seg-" + std::string(6 - seg.size(), '0') + seg + ".kvs";
  int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path;
  uint8_t b = 0;
  const off_t at = static_cast<off_t>(info->payload_offset + kBig / 2);
  ASSERT_EQ(pread(fd, &b, 1, at), 1);
  b ^= 0x10;
  ASSERT_EQ(pwrite(fd, &b, 1, at), 1);
  close(fd);
  Open();
  std::vector<uint8_t> out(kBig);
  auto n = store_->Get(ns_, K(0), out.data(), out.size());
  EXPECT_TRUE(n.status().IsNotFound()) << n.status().ToString();
  Stats s = store_->GetStats();
  EXPECT_EQ(s.checksum_failures, 1u);
  EXPECT_EQ(s.ram_blocks, 0u);
  EXPECT_EQ(s.ram_used_bytes, 0u);
}

}  // namespace
}  // namespace kvtier
