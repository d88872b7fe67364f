// The index's RocksDB files and the RAM tier's shared-memory file go through
// the store's FileSystem (issue 18), so injected faults reach them: a failed
// index write fails the puts it carried and loses nothing acknowledged, and a
// RAM tier file that cannot be made leaves the store on anonymous memory.
// (Before the index stopped writing to RocksDB after a failed write, the next
// checkpoint aborted the process inside RocksDB's SyncWAL.)
#include <gtest/gtest.h>

#include "doubles/fault_injection.h"
#include "kvtier/store.h"
#include "store/store_test_util.h"

namespace kvtier {
namespace {

using testing::Key;
using testing::Payload;

TEST(SeamFaults, TheIndexFilesGoThroughTheStoresFileSystem) {
  testing::TempDir dir;
  auto fs = std::make_shared<FaultInjectionFileSystem>(DefaultFileSystem(IoBackend::kPosix));
  Options o = testing::SmallOptions(IoBackend::kPosix);
  o.file_system = fs;
  // Every open of an index file fails: so does the store's open, naming it.
  fs->SetFault(FaultOp::kOpen, FaultSpec::After(0).OnPaths("/index/"));
  auto s = Store::Open(dir.Sub("store"), o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().ToString().find("index"), std::string::npos) << s.status().ToString();
  EXPECT_GT(fs->Faults(FaultOp::kOpen), 0u);
  fs->ClearAllFaults();
  s = Store::Open(dir.Sub("store"), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
}

// The index has no WAL: puts reach only its memtables, and its files are
// written by flushes. A flush that fails fails the call that waited for it
// (Flush, Remove, a checkpoint), never aborts, and loses nothing acknowledged:
// the records are durable, and recovery re-indexes them.
TEST(SeamFaults, AFailedIndexFlushFailsItsCallerAndLosesNothingAcked) {
  testing::TempDir dir;
  const std::string store = dir.Sub("store");
  auto fs = std::make_shared<FaultInjectionFileSystem>(DefaultFileSystem(IoBackend::kPosix));
  Options o = testing::SmallOptions(IoBackend::kPosix);
  o.file_system = fs;
  std::vector<bool> acked(60, false);
  NamespaceId ns = 0;
  {
    auto s = Store::Open(store, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ns = (*s)->RegisterNamespace(testing::TestSpec()).value();
    for (int i = 0; i < 20; ++i) {
      auto p = Payload(ns, Key(i), 9000);
      acked[i] = (*s)->Put(ns, Key(i), p.data(), p.size()).ok();
      ASSERT_TRUE(acked[i]);
    }
    // Every write to the index's files fails: puts still complete (their
    // entries are in memory), and the flush that Flush() waits for fails.
    fs->SetFault(FaultOp::kWrite, FaultSpec::After(0).OnPaths("/index/"));
    for (int i = 20; i < 40; ++i) {
      auto p = Payload(ns, Key(i), 9000);
      acked[i] = (*s)->Put(ns, Key(i), p.data(), p.size()).ok();
    }
    Status flushed = (*s)->Flush();
    EXPECT_FALSE(flushed.ok());
    EXPECT_GT(fs->Faults(FaultOp::kWrite), 0u);
    fs->ClearAllFaults();
    // Afterwards a put either works (RocksDB resumed) or fails saying why;
    // nothing aborts.
    for (int i = 40; i < 50; ++i) {
      auto p = Payload(ns, Key(i), 9000);
      Status st = (*s)->Put(ns, Key(i), p.data(), p.size());
      acked[i] = st.ok();
      if (!st.ok()) {
        EXPECT_FALSE(st.message().empty()) << i;
      }
    }
    // Whatever was acknowledged reads back while the store is still open.
    for (int i = 0; i < 60; ++i) {
      if (!acked[i]) continue;
      auto got = (*s)->GetVector(ns, Key(i));
      ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
      EXPECT_EQ(*got, Payload(ns, Key(i), 9000)) << i;
    }
  }
  // And after a reopen on the plain file system: every acknowledged block,
  // byte for byte; an unacknowledged one is absent or whole, never wrong.
  Options plain = testing::SmallOptions(IoBackend::kPosix);
  auto s = Store::Open(store, plain);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (int i = 50; i < 60; ++i) {  // and puts work again
    auto p = Payload(ns, Key(i), 9000);
    acked[i] = (*s)->Put(ns, Key(i), p.data(), p.size()).ok();
    EXPECT_TRUE(acked[i]) << i;
  }
  for (int i = 0; i < 60; ++i) {
    auto got = (*s)->GetVector(ns, Key(i));
    if (acked[i]) {
      ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
    } else if (!got.ok()) {
      EXPECT_TRUE(got.status().IsNotFound()) << i << ": " << got.status().ToString();
      continue;
    }
    EXPECT_EQ(*got, Payload(ns, Key(i), 9000)) << i;
  }
  auto report = (*s)->Verify(VerifyOptions{});
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << (report->problems.empty() ? "" : report->problems[0]);
}

TEST(SeamFaults, ARamTierFileThatCannotBeMadeFallsBackToAnonymousMemory) {
  testing::TempDir dir;
  auto fs = std::make_shared<FaultInjectionFileSystem>(DefaultFileSystem(IoBackend::kPosix));
  Options o = testing::SmallOptions(IoBackend::kPosix);
  o.file_system = fs;
  o.ram_tier_bytes = 32ull << 20;
  o.ram_tier_shared_memory = true;
  for (FaultOp op : {FaultOp::kOpen, FaultOp::kAllocate}) {
    // The tier's file only (/dev/shm/kvtier-<id>.ram): the store's own
    // folder may be in /dev/shm too (tools/sanitize.sh puts TMPDIR there).
    fs->SetFault(op, FaultSpec::After(0).OnPaths(".ram"));
    auto s = Store::Open(dir.Sub(std::string("store-") + FaultOpName(op)), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_GT(fs->Faults(op), 0u) << FaultOpName(op);
    Stats st = (*s)->GetStats();
    EXPECT_FALSE(st.ram_shared_memory) << FaultOpName(op);
    EXPECT_GT(st.ram_capacity_bytes, 0u);
    // The tier still serves.
    auto ns = (*s)->RegisterNamespace(testing::TestSpec()).value();
    auto p = Payload(ns, Key(1), 5000);
    ASSERT_TRUE((*s)->Put(ns, Key(1), p.data(), p.size()).ok());
    EXPECT_EQ((*s)->GetVector(ns, Key(1)).value(), p);
    EXPECT_GT((*s)->GetStats().hits_ram, 0u);
    fs->ClearAllFaults();
  }
  // Without faults, the same file system makes the shared-memory tier (the
  // wrapper passes the descriptor through for mapping).
  auto s = Store::Open(dir.Sub("store-ok"), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE((*s)->GetStats().ram_shared_memory);
}

}  // namespace
}  // namespace kvtier
