// A store folder damaged in ways other than its segments: an index RocksDB
// cannot open, a stray symlink among the segments (issue 16).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kvtier/store.h"
#include "store/store_test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using testing::Key;
using testing::Payload;

class DamagedStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::Open(Dir(), opt_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto ns = (*s)->RegisterNamespace(testing::TestSpec());
    ASSERT_TRUE(ns.ok());
    ns_ = *ns;
    for (int i = 0; i < 30; ++i) {
      auto p = Payload(ns_, Key(i), 20000);
      ASSERT_TRUE((*s)->Put(ns_, Key(i), p.data(), p.size()).ok());
    }
  }
  std::string Dir() const { return tmp_.Sub("store"); }
  void ExpectAllBlocks(Store* s) {
    for (int i = 0; i < 30; ++i) {
      auto got = s->GetVector(ns_, Key(i));
      ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
      EXPECT_EQ(*got, Payload(ns_, Key(i), 20000));
    }
  }

  testing::TempDir tmp_;
  Options opt_ = testing::SmallOptions();
  NamespaceId ns_ = 0;
};

TEST_F(DamagedStoreTest, RepairRebuildsAnIndexThatCannotBeOpened) {
  // Every MANIFEST overwritten with garbage: RocksDB refuses the database.
  for (const auto& e : fs::directory_iterator(tmp_.Sub("store/index")))
    if (e.path().filename().string().rfind("MANIFEST-", 0) == 0)
      std::ofstream(e.path(), std::ios::binary | std::ios::trunc) << std::string(5000, 'x');
  auto broken = Store::Open(Dir(), opt_);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("kvtier repair"), std::string::npos) << broken.status().ToString();

  auto rep = Store::Repair(Dir(), opt_);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_EQ(rep->records_indexed, 30u);
  EXPECT_FALSE(rep->damaged_index_moved_to.empty());
  EXPECT_TRUE(fs::exists(rep->damaged_index_moved_to));
  auto s = Store::Open(Dir(), opt_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectAllBlocks(s->get());
  // The namespace came back from its file under namespaces/.
  auto found = (*s)->FindNamespace(testing::TestSpec().DisplayName());
  EXPECT_TRUE(found.ok()) << found.status().ToString();
}

TEST_F(DamagedStoreTest, AStraySymlinkAmongSegmentsIsIgnored) {
  const std::string target = tmp_.Sub("elsewhere");
  std::ofstream(target) << "not a segment";
  fs::create_symlink(target, tmp_.Sub("store/segments/seg-000001.kvs.tmp"));  // another name: always ignored
  // The next free id's name, as a symlink: the store must neither open nor reuse it.
  uint32_t next = 0;
  while (fs::exists(tmp_.Sub("store/segments/seg-" + std::string(6 - std::to_string(next).size(), '0') +
                             std::to_string(next) + ".kvs")))
    ++next;
  const std::string link = tmp_.Sub("store/segments/seg-" + std::string(6 - std::to_string(next).size(), '0') +
                                    std::to_string(next) + ".kvs");
  fs::create_symlink(target, link);
  fs::create_directory(tmp_.Sub("store/segments/seg-000999.kvs"));
  for (bool read_only : {true, false}) {
    Options o = opt_;
    o.read_only = read_only;
    auto s = Store::Open(Dir(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ((*s)->GetStats().segment_entries_ignored, 2u);
    ExpectAllBlocks(s->get());
    VerifyOptions vo;
    vo.deep = true;
    auto v = (*s)->Verify(vo);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(v->ok());
    if (!read_only) {
      // New segments skip the symlink's id.
      for (int i = 100; i < 200; ++i) {
        auto p = Payload(ns_, Key(i), 20000);
        ASSERT_TRUE((*s)->Put(ns_, Key(i), p.data(), p.size()).ok()) << i;
      }
    }
  }
  EXPECT_TRUE(fs::is_symlink(link));
  std::ifstream in(target);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "not a segment");
}

}  // namespace
}  // namespace kvtier
