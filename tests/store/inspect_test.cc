// Store::Inspect (a folder's state without opening it) and
// Store::InspectRecord (a block's record header beside its index entry).
#include <unistd.h>

#include "format/record.h"
#include "store/layout.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using testing::InKilledChild;
using testing::Key;
using testing::Payload;
using testing::SmallOptions;
using testing::TempDir;
using testing::TestSpec;

TEST(Inspect, AFolderWithoutAStoreIsNotInUse) {
  TempDir dir;
  auto st = Store::Inspect(dir.path());
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_FALSE(st->in_use);
  EXPECT_EQ(st->last_shutdown, FolderState::Shutdown::kUnknown);
}

TEST(Inspect, SaysWhoHoldsTheStoreAndHowItWasClosed) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  {
    auto store = Store::Open(path, SmallOptions());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto st = Store::Inspect(path);
    ASSERT_TRUE(st.ok());
    EXPECT_TRUE(st->in_use);
    EXPECT_EQ(st->holder_pid, static_cast<long>(getpid()));
    ASSERT_TRUE((*store)->Close().ok());
  }
  auto st = Store::Inspect(path);
  ASSERT_TRUE(st.ok());
  EXPECT_FALSE(st->in_use);
  EXPECT_EQ(st->last_shutdown, FolderState::Shutdown::kClean);

  const std::string killed = dir.Sub("killed");
  InKilledChild([&] {
    auto store = Store::Open(killed, SmallOptions());
    if (!store.ok()) _exit(1);
    auto ns = (*store)->RegisterNamespace(TestSpec());
    if (!ns.ok()) _exit(2);
    auto p = Payload(*ns, Key(1), 8192);
    if (!(*store)->Put(*ns, Key(1), p.data(), p.size()).ok()) _exit(3);
    (void)store->release();  // never closed: the child dies with it open
  });
  st = Store::Inspect(killed);
  ASSERT_TRUE(st.ok());
  EXPECT_FALSE(st->in_use);
  EXPECT_EQ(st->last_shutdown, FolderState::Shutdown::kNotClean);
}

TEST(InspectRecord, DecodesTheHeaderAndFindsItMatchesTheEntry) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), SmallOptions());
  ASSERT_TRUE(store.ok());
  auto ns = (*store)->RegisterNamespace(TestSpec());
  ASSERT_TRUE(ns.ok());
  auto p = Payload(*ns, Key(7), 20000);
  ASSERT_TRUE((*store)->Put(*ns, Key(7), p.data(), p.size()).ok());
  auto r = (*store)->InspectRecord(*ns, Key(7));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->header.has_value());
  EXPECT_TRUE(r->problems.empty()) << r->problems.front();
  EXPECT_EQ(r->header->magic, format::kCompactRecordMagic) << "a small block: dense, with the compact header";
  EXPECT_EQ(r->header->payload_len, p.size());
  EXPECT_EQ(r->header->ns, *ns);
  EXPECT_EQ(r->header->sequence, r->entry.sequence);
  EXPECT_EQ(r->segment_file, layout::SegmentPath(dir.Sub("s"), r->entry.segment));
  EXPECT_EQ((*store)->InspectRecord(*ns, Key(8)).status().code(), Code::kNotFound);

  // A flipped bit in the header: the header no longer decodes.
  ASSERT_TRUE((*store)->Close().ok());
  testing::FlipBit(r->segment_file, r->entry.offset + 20);
  Options ro = SmallOptions();
  ro.read_only = true;
  auto again = Store::Open(dir.Sub("s"), ro);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  auto bad = (*again)->InspectRecord(*ns, Key(7));
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE(bad->header.has_value());
  ASSERT_EQ(bad->problems.size(), 1u);
  EXPECT_NE(bad->problems[0].find("does not decode"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
