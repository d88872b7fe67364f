// A record whose sync failed may be torn on disk. No later checkpoint may
// pass it, so the next recovery rescans from it and cuts the tail, however
// many successful puts came after (found by the power-loss simulation's deep
// verify after each recovery; issue 16).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "doubles/fault_injection.h"
#include "kvtier/store.h"
#include "store/store_test_util.h"

namespace kvtier {
namespace {

using testing::Key;
using testing::Payload;

// Offset of the record holding `key` in a segment file, or npos.
size_t RecordOffset(const std::string& path, const std::string& key) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  const size_t at = data.find(key);
  return at == std::string::npos ? at : at - 72;  // the key follows the 72-byte header
}

TEST(FailedWrite, ASyncFailureHoldsTheCheckpointUntilRecoveryCutsTheTail) {
  testing::TempDir dir;
  const std::string store = dir.Sub("store");
  Options o = testing::SmallOptions(IoBackend::kPosix);
  const NamespaceId ns = [&] {
    auto s = Store::Open(store, o);
    EXPECT_TRUE(s.ok());
    return (*s)->RegisterNamespace(testing::TestSpec()).value_or(0);
  }();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto fs = std::make_shared<FaultInjectionFileSystem>(DefaultFileSystem(IoBackend::kPosix));
    Options fo = o;
    fo.file_system = fs;
    auto s = Store::Open(store, fo);
    if (!s.ok()) _exit(2);
    auto a = Payload(ns, Key(0), 30000), b = Payload(ns, Key(1), 30000);
    if (!(*s)->Put(ns, Key(0), a.data(), a.size()).ok()) _exit(3);
    fs->SetFault(FaultOp::kSync, FaultSpec::After(0).OnPaths("segments/"));
    if ((*s)->Put(ns, Key(1), b.data(), b.size()).ok()) _exit(4);  // not durable: refused
    fs->ClearAllFaults();
    // Later puts succeed (in a fresh segment) and checkpoint as usual.
    for (int i = 2; i < 40; ++i) {
      auto p = Payload(ns, Key(i), 30000);
      if (!(*s)->Put(ns, Key(i), p.data(), p.size()).ok()) _exit(5);
    }
    _exit(0);  // killed: no clean checkpoint
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child step " << WEXITSTATUS(status);
  // The failed put's bytes reached the page cache whole; tear them, as a
  // power cut after a failed fdatasync could.
  const std::string seg0 = dir.Sub("store/segments/seg-000000.kvs");
  const size_t b_at = RecordOffset(seg0, Key(1));
  ASSERT_NE(b_at, std::string::npos);
  testing::FlipBit(seg0, b_at + 20000, 3);

  auto s = Store::Open(store, o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_GT((*s)->GetStats().recovery_torn_bytes, 0u);
  EXPECT_TRUE((*s)->GetVector(ns, Key(1)).status().IsNotFound());
  for (int i : {0, 2, 39}) {
    auto got = (*s)->GetVector(ns, Key(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
    EXPECT_EQ(*got, Payload(ns, Key(i), 30000));
  }
  VerifyOptions vo;
  vo.deep = true;
  auto rep = (*s)->Verify(vo);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->records_corrupt, 0u) << (rep->problems.empty() ? "" : rep->problems[0]);
}

}  // namespace
}  // namespace kvtier
