// Store::Destroy: the store goes with its shared-memory RAM tier; an open
// store, a folder without a store and files kvtier did not make are refused
// or left alone.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "store/layout.h"
#include "store_test_util.h"
#include "tier/ram_tier.h"

namespace kvtier {
namespace {

using testing::Key;
using testing::Payload;
using testing::SmallOptions;
using testing::TempDir;
using testing::TestSpec;

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// A closed store at `path` with a block in it and its RAM tier in /dev/shm;
// returns the tier's file.
std::string MakeStoreWithRamTier(const std::string& path) {
  Options o = SmallOptions();
  o.ram_tier_bytes = 8 << 20;
  o.ram_tier_shared_memory = true;
  auto store = Store::Open(path, o);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return "";
  auto ns = (*store)->RegisterNamespace(TestSpec());
  EXPECT_TRUE(ns.ok());
  auto p = Payload(*ns, Key(1), 8192);
  EXPECT_TRUE((*store)->Put(*ns, Key(1), p.data(), p.size()).ok());
  EXPECT_TRUE((*store)->GetStats().ram_shared_memory) << "the test needs /dev/shm";
  const std::string shm = RamTierShmPath((*store)->Description().store_id);
  EXPECT_TRUE((*store)->Close().ok());
  return shm;
}

TEST(Destroy, RemovesTheStoreAndItsRamTier) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const std::string shm = MakeStoreWithRamTier(path);
  ASSERT_TRUE(Exists(shm));
  const std::string note = shm.substr(0, shm.size() - 4) + ".dir";
  ASSERT_TRUE(Exists(note));
  ASSERT_TRUE(Store::Destroy(path).ok());
  EXPECT_FALSE(Exists(shm));
  EXPECT_FALSE(Exists(note));
  EXPECT_FALSE(Exists(path));
  EXPECT_EQ(Store::Describe(path).status().code(), Code::kNotFound);
}

TEST(Destroy, RefusesAnOpenStoreAndRemovesNothing) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const std::string shm = MakeStoreWithRamTier(path);
  Options o = SmallOptions();
  o.ram_tier_bytes = 8 << 20;
  auto store = Store::Open(path, o);
  ASSERT_TRUE(store.ok());
  Status st = Store::Destroy(path);
  EXPECT_EQ(st.code(), Code::kBusy) << st.ToString();
  EXPECT_NE(st.message().find("in use by pid"), std::string::npos) << st.ToString();
  EXPECT_TRUE(Exists(shm));
  EXPECT_TRUE(Exists(layout::SuperblockPath(path)));
  auto ns = (*store)->RegisterNamespace(TestSpec());
  ASSERT_TRUE(ns.ok());
  std::vector<uint8_t> out(8192);
  auto got = (*store)->Get(*ns, Key(1), out.data(), out.size());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(out, Payload(*ns, Key(1), 8192));
  ASSERT_TRUE((*store)->Close().ok());
  EXPECT_TRUE(Store::Destroy(path).ok());
  EXPECT_FALSE(Exists(shm));
}

TEST(Destroy, LeavesFilesItDidNotMakeAndTheirFolder) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const std::string shm = MakeStoreWithRamTier(path);
  std::ofstream(path + "/notes.txt") << "mine";
  ASSERT_TRUE(Store::Destroy(path).ok());
  EXPECT_FALSE(Exists(shm));
  EXPECT_TRUE(Exists(path + "/notes.txt"));
  for (const char* name : {"SUPERBLOCK", "LOCK", "segments", "index", "namespaces"})
    EXPECT_FALSE(Exists(path + "/" + name)) << name;
}

TEST(Destroy, AFolderWithoutAStoreIsNotFoundAndUntouched) {
  TempDir dir;
  std::filesystem::create_directories(dir.Sub("plain/segments"));
  Status st = Store::Destroy(dir.Sub("plain"));
  EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
  EXPECT_TRUE(Exists(dir.Sub("plain/segments")));
  EXPECT_EQ(Store::Destroy(dir.Sub("missing")).code(), Code::kNotFound);
}

TEST(Destroy, AStoreWithoutARamTierGoesToo) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  {
    auto store = Store::Open(path, SmallOptions());
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Close().ok());
  }
  ASSERT_TRUE(Store::Destroy(path).ok());
  EXPECT_FALSE(Exists(path));
}

// The tier file of store `id` as ListRamTierFiles sees it; null when absent.
std::optional<RamTierFile> ListedTier(const std::string& id) {
  auto all = Store::ListRamTierFiles();
  EXPECT_TRUE(all.ok()) << all.status().ToString();
  if (all.ok())
    for (const RamTierFile& t : *all)
      if (t.store_id == id) return t;
  return std::nullopt;
}

// A tier's store is open, then closed (kept for its next open), then its
// folder deleted by hand (an orphan, which only then may be removed); a
// folder that now holds another store orphans the old tier too; a tier with
// no folder noted is left alone.
TEST(RamTierFiles, TellOpenKeptAndOrphanedTiersAndRemoveOnlyOrphans) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const std::string shm = MakeStoreWithRamTier(path);
  ASSERT_FALSE(shm.empty());
  const std::string id = Store::Describe(path)->store_id;
  auto kept = ListedTier(id);
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->state, RamTierFile::State::kKept);
  EXPECT_EQ(kept->path, shm);
  EXPECT_EQ(kept->folder, std::filesystem::absolute(path).lexically_normal().string());
  EXPECT_GT(kept->bytes, uint64_t{8} << 20);
  EXPECT_EQ(Store::RemoveOrphanRamTier(id).code(), Code::kInvalidArgument);
  {
    Options o = SmallOptions();
    o.ram_tier_bytes = 8 << 20;
    auto store = Store::Open(path, o);
    ASSERT_TRUE(store.ok());
    auto open = ListedTier(id);
    ASSERT_TRUE(open.has_value());
    EXPECT_EQ(open->state, RamTierFile::State::kOpen);
    EXPECT_EQ(open->holder_pid, static_cast<long>(::getpid()));
    EXPECT_EQ(Store::RemoveOrphanRamTier(id).code(), Code::kBusy);
    ASSERT_TRUE((*store)->Close().ok());
  }
  EXPECT_TRUE(Exists(shm));

  std::filesystem::remove_all(path);  // by hand: the tier stays
  auto orphan = ListedTier(id);
  ASSERT_TRUE(orphan.has_value());
  EXPECT_EQ(orphan->state, RamTierFile::State::kOrphan);
  EXPECT_EQ(orphan->why, "the folder is gone");
  ASSERT_TRUE(Store::RemoveOrphanRamTier(id).ok());
  EXPECT_FALSE(Exists(shm));
  EXPECT_FALSE(ListedTier(id).has_value());
  EXPECT_EQ(Store::RemoveOrphanRamTier(id).code(), Code::kNotFound);

  // The folder reused by a new store: the old tier is an orphan, the new
  // one kept.
  const std::string old_shm = MakeStoreWithRamTier(path);
  const std::string old_id = Store::Describe(path)->store_id;
  std::filesystem::remove_all(path);
  const std::string new_shm = MakeStoreWithRamTier(path);
  const std::string new_id = Store::Describe(path)->store_id;
  auto old_tier = ListedTier(old_id), new_tier = ListedTier(new_id);
  ASSERT_TRUE(old_tier.has_value() && new_tier.has_value());
  EXPECT_EQ(old_tier->state, RamTierFile::State::kOrphan);
  EXPECT_EQ(old_tier->why, "the folder holds store " + new_id);
  EXPECT_EQ(new_tier->state, RamTierFile::State::kKept);
  ASSERT_TRUE(Store::RemoveOrphanRamTier(old_id).ok());
  EXPECT_FALSE(Exists(old_shm));
  EXPECT_TRUE(Exists(new_shm));

  // No folder noted: unknown, and not removed.
  ASSERT_EQ(::unlink(RamTierFolderNotePath(new_id).c_str()), 0);
  auto unknown = ListedTier(new_id);
  ASSERT_TRUE(unknown.has_value());
  EXPECT_EQ(unknown->state, RamTierFile::State::kUnknown);
  EXPECT_EQ(Store::RemoveOrphanRamTier(new_id).code(), Code::kInvalidArgument);
  EXPECT_EQ(Store::RemoveOrphanRamTier("not-an-id").code(), Code::kInvalidArgument);
  ASSERT_TRUE(Store::Destroy(path).ok());
  EXPECT_FALSE(Exists(new_shm));
}

}  // namespace
}  // namespace kvtier
