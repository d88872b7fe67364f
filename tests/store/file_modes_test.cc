// Every file and folder of a store has the store's mode, whatever the umask:
// 0600/0700 for a private store, 0660/0770 with Options::group_access, the
// RocksDB files of index/ and the LOCK file included (issue 16, D3).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "kvtier/store.h"
#include "store/store_test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

class UmaskGuard {
 public:
  explicit UmaskGuard(mode_t m) : old_(::umask(m)) {}
  ~UmaskGuard() { ::umask(old_); }

 private:
  mode_t old_;
};

// Every entry under `dir` (and `dir` itself) with a mode other than expected.
std::vector<std::string> WrongModes(const std::string& dir, unsigned file_mode, unsigned dir_mode) {
  std::vector<std::string> wrong;
  auto check = [&](const fs::path& p) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) return;
    const unsigned want = S_ISDIR(st.st_mode) ? dir_mode : file_mode;
    if ((st.st_mode & 07777) != want) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "%04o", st.st_mode & 07777);
      wrong.push_back(p.string() + " is " + buf);
    }
  };
  check(dir);
  for (const auto& e : fs::recursive_directory_iterator(dir)) check(e.path());
  return wrong;
}

void Fill(const std::string& dir, const Options& o) {
  auto s = Store::Open(dir, o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto ns = (*s)->RegisterNamespace(testing::TestSpec());
  ASSERT_TRUE(ns.ok());
  for (int i = 0; i < 50; ++i) {
    auto p = testing::Payload(*ns, testing::Key(i), 20000);
    ASSERT_TRUE((*s)->Put(*ns, testing::Key(i), p.data(), p.size()).ok());
  }
  ASSERT_TRUE((*s)->Flush().ok());
  // Checked while open (LOCK, WAL, LOG) and after close (SST, MANIFEST).
  auto wrong = WrongModes(dir, o.group_access ? 0660 : 0600, o.group_access ? 0770 : 0700);
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " wrong, first: " << wrong[0];
  ASSERT_TRUE((*s)->Close().ok());
}

TEST(FileModes, GroupAccessGivesTheGroupReadWriteUnderUmask022) {
  UmaskGuard um(022);
  testing::TempDir tmp;
  Options o = testing::SmallOptions();
  o.group_access = true;
  Fill(tmp.Sub("store"), o);
  auto wrong = WrongModes(tmp.Sub("store"), 0660, 0770);
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " wrong, first: " << wrong[0];
  // A reopen (RocksDB writes a new MANIFEST, OPTIONS and WAL) keeps the modes.
  Fill(tmp.Sub("store"), o);
}

TEST(FileModes, PrivateStoreIndexIsNotWorldReadable) {
  UmaskGuard um(022);
  testing::TempDir tmp;
  Fill(tmp.Sub("store"), testing::SmallOptions());
  auto wrong = WrongModes(tmp.Sub("store"), 0600, 0700);
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " wrong, first: " << wrong[0];
}

}  // namespace
}  // namespace kvtier
