// A budget the disk cannot hold is capped at open and said; a disk that fills
// up before the budget shrinks the store, counted and said, instead of
// silently evicting at every rollover (issue 16).
#include <gtest/gtest.h>

#include <mutex>

#include "doubles/fault_injection.h"
#include "kvtier/store.h"
#include "store/store_test_util.h"

namespace kvtier {
namespace {

using testing::Key;
using testing::Payload;

TEST(DiskSpace, ABudgetAboveTheFreeDiskIsCappedAtOpenAndSaid) {
  testing::TempDir tmp;
  auto fs = std::make_shared<FaultInjectionFileSystem>(DefaultFileSystem());
  fs->SetFreeSpace(uint64_t{10} << 20);  // 10 MiB free, 64 MiB asked
  testing::WarnedLines w;
  Options o = testing::SmallOptions();
  o.capacity_bytes = 64 << 20;
  o.file_system = fs;
  o.warn = w.Sink();
  auto s = Store::Open(tmp.Sub("store"), o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const Stats st = (*s)->GetStats();
  EXPECT_EQ(st.capacity_configured_bytes, 64u << 20);
  EXPECT_LT(st.capacity_bytes, 10u << 20);
  EXPECT_GE(st.capacity_bytes, 2u << 20);
  ASSERT_EQ(w.Lines().size(), 1u);
  EXPECT_EQ(w.Count("more than the disk"), 1u) << w.Lines()[0];
  // Enough room: no cap, no warning, no configured figure.
  ASSERT_TRUE((*s)->Close().ok());
  fs->SetFreeSpace(uint64_t{1} << 40);
  s = Store::Open(tmp.Sub("store"), o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->GetStats().capacity_bytes, 64u << 20);
  EXPECT_EQ((*s)->GetStats().capacity_configured_bytes, 0u);
  EXPECT_EQ(w.Lines().size(), 1u);
}

TEST(DiskSpace, ADiskFullBeforeTheBudgetShrinksTheStoreCountedAndSaid) {
  testing::TempDir tmp;
  auto fs = std::make_shared<FaultInjectionFileSystem>(DefaultFileSystem());
  testing::WarnedLines w;
  Options o = testing::SmallOptions();
  o.capacity_bytes = 64 << 20;
  o.file_system = fs;
  o.warn = w.Sink();
  auto s = Store::Open(tmp.Sub("store"), o);
  ASSERT_TRUE(s.ok());
  auto ns = (*s)->RegisterNamespace(testing::TestSpec());
  ASSERT_TRUE(ns.ok());
  // The 5th segment file finds the disk full.
  fs->SetFault(FaultOp::kAllocate, FaultSpec::After(4, ENOSPC).OnPaths("segments/"));
  for (int i = 0; i < 400; ++i) {
    auto p = Payload(*ns, Key(i), 30000);
    ASSERT_TRUE((*s)->Put(*ns, Key(i), p.data(), p.size()).ok()) << i;  // a cache: it evicts
  }
  const Stats st = (*s)->GetStats();
  EXPECT_GE(st.disk_full_events, 1u);
  EXPECT_EQ(st.capacity_configured_bytes, 64u << 20);
  EXPECT_EQ(st.capacity_bytes, 4u << 20);
  EXPECT_GT(st.evictions, 0u);
  const std::vector<std::string> lines = w.Lines();
  ASSERT_GE(lines.size(), 1u);
  EXPECT_NE(lines[0].find("disk"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("full"), std::string::npos) << lines[0];
  // The newest blocks are all there and right.
  for (int i = 390; i < 400; ++i) {
    auto got = (*s)->GetVector(*ns, Key(i));
    ASSERT_TRUE(got.ok()) << i;
    EXPECT_EQ(*got, Payload(*ns, Key(i), 30000));
  }
}

}  // namespace
}  // namespace kvtier
