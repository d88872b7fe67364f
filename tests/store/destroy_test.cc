// Store::Destroy: the store goes with its shared-memory RAM tier; an open
// store, a folder without a store and files kvtier did not make are refused
// or left alone.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

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
  ASSERT_TRUE(Store::Destroy(path).ok());
  EXPECT_FALSE(Exists(shm));
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

}  // namespace
}  // namespace kvtier
