// The shared tier on Ceph end to end: stores in separate folders (and
// processes) sharing one pool of a real one-node cluster. The cluster is
// $KVTIER_CEPH_CONF when set, else a private one started on first use and
// stopped at the end. Each test works in its own RADOS namespace.
#include <gtest/gtest.h>

#ifndef KVTIER_WITH_CEPH

#include "kvtier/store.h"
#include "store/store_test_util.h"

TEST(RemoteTier, EnablingWithoutLibradosFailsOpen) {
  kvtier::testing::TempDir tmp;
  kvtier::Options o = kvtier::testing::SmallOptions();
  o.remote.enabled = true;
  auto s = kvtier::Store::Open(tmp.Sub("s"), o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), kvtier::Code::kNotSupported) << s.status().ToString();
  o.remote.enabled = false;
  EXPECT_TRUE(kvtier::Store::Open(tmp.Sub("s"), o).ok());
}

TEST(RemoteTier, NeedsLibrados) {
  GTEST_SKIP() << "built without librados: install librados-dev and libradospp-dev (and ceph-mon ceph-osd ceph-common) to test the "
                  "shared tier";
}

#else

#include <rados/librados.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "format/record.h"
#include "kvtier/store.h"
#include "remote/ceph_cluster_util.h"
#include "remote/rados_client.h"
#include "remote/summary.h"
#include "store/store_test_util.h"

namespace kvtier::testing {

namespace {
CephCluster* g_cluster = nullptr;  // created on first use, so skipped tests start nothing
}  // namespace

CephCluster& TheCluster() {
  if (g_cluster == nullptr) {
    g_cluster = new CephCluster(CephCluster::FromEnv());
    if (g_cluster->conf().empty() && CephCluster::Unavailable().empty()) *g_cluster = CephCluster::StartPrivate();
  }
  return *g_cluster;
}

namespace {

class CephEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    if (g_cluster != nullptr) g_cluster->Stop();
  }
};
[[maybe_unused]] ::testing::Environment* const kEnv = ::testing::AddGlobalTestEnvironment(new CephEnvironment);

using std::chrono::milliseconds;
using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

constexpr size_t kBlock = 100 * 1024 + 123;  // records straddle the 4 MiB object parts
// Half the blocks are whole pages (the aligned record layout), half not
// (packed), chosen by the key.
size_t SizeOf(const std::string& key) { return (static_cast<uint8_t>(key.back()) & 1) ? 64 * 1024 : kBlock; }

bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds limit = seconds(30)) {
  const auto end = SteadyClock::now() + limit;
  while (SteadyClock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return pred();
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

Options RemoteOptions(const std::string& conf, const std::string& rados_ns) {
  Options o = SmallOptions();
  o.segment_size_bytes = 8 << 20;
  o.capacity_bytes = 64 << 20;
  o.write_queue_bytes = 16 << 20;
  o.remote.enabled = true;
  o.remote.ceph_conf = conf;
  o.remote.pool = "kvtier";
  o.remote.rados_namespace = rados_ns;
  o.remote.object_bytes = 4 << 20;
  o.remote.poll_interval_ms = 100;
  o.remote.read_deadline_ms = 2000;
  o.remote.op_timeout_ms = 5000;
  return o;
}

std::unique_ptr<Store> OpenStore(const std::string& dir, const Options& o) {
  auto s = Store::Open(dir, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

// Puts blocks until `segments` segments are sealed; returns the keys of the
// sealed ones (those the tier uploads).
std::vector<std::string> PutUntilSealed(Store* s, NamespaceId ns, const std::string& tag, uint32_t segments) {
  std::vector<std::string> all;
  for (uint64_t i = 0;; ++i) {
    uint32_t sealed = 0;
    for (const SegmentInfo& seg : s->Segments()) sealed += seg.state == SegmentState::kSealed;
    if (sealed >= segments) break;
    std::string key = tag + Key(i).substr(0, 24);
    auto p = Payload(ns, key, SizeOf(key));
    EXPECT_TRUE(s->Put(ns, key, p.data(), p.size()).ok());
    all.push_back(key);
  }
  std::set<uint32_t> sealed_ids;
  for (const SegmentInfo& seg : s->Segments())
    if (seg.state == SegmentState::kSealed) sealed_ids.insert(seg.id);
  std::vector<std::string> out;
  for (const std::string& k : all) {
    auto info = s->Stat(ns, k);
    if (info.ok() && sealed_ids.count(info->segment)) out.push_back(k);
  }
  return out;
}

bool SameBlock(Store* s, NamespaceId ns, const std::string& key, std::string* why = nullptr) {
  std::vector<uint8_t> buf(kBlock + 4096);
  auto n = s->Get(ns, key, buf.data(), buf.size());
  if (!n.ok()) {
    if (why) *why = n.status().ToString();
    return false;
  }
  buf.resize(*n);
  return buf == Payload(ns, key, SizeOf(key));
}

class RemoteTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    if (std::string_view(info->name()) == "ChildServesBlocksOfTheOtherProcess" && Env("KVTIER_REMOTE_KEYS").empty())
      GTEST_SKIP() << "runs only as the child process of TwoProcessesShareOnePool";
    std::string why = CephCluster::Unavailable();
    if (!why.empty() && Env("KVTIER_CEPH_CONF").empty()) GTEST_SKIP() << why;
    conf_ = TheCluster().conf();
    ASSERT_FALSE(conf_.empty()) << "no Ceph cluster: " << TheCluster().error();
    rados_ns_ = Env("KVTIER_REMOTE_NS");
    if (rados_ns_.empty())
      rados_ns_ = std::string("t") + std::to_string(::getpid()) + "-" + info->name() + "-" +
                  std::to_string(SteadyClock::now().time_since_epoch().count() % 1000000);
    spec_ = TestSpec("remote/model");
  }
  Options Opts() const { return RemoteOptions(conf_, rados_ns_); }

  // A cluster whose OSD this test may stop: stopping it would disturb other
  // tests sharing one, so a private cluster (started in *priv) unless this
  // process owns its own. nullptr when one cannot start (priv->error()).
  static const CephCluster* ClusterToStop(CephCluster* priv) {
    if (TheCluster().owned()) return &TheCluster();
    *priv = CephCluster::StartPrivate();
    return priv->conf().empty() ? nullptr : priv;
  }

  // A store in tmp_/dir (options `o`) that put blocks under spec_ until
  // `segments` segments were sealed and uploaded; keys of the sealed blocks.
  struct Uploaded {
    std::unique_ptr<Store> store;
    NamespaceId ns = 0;
    std::vector<std::string> keys;
  };
  void OpenAndUpload(const std::string& dir, const Options& o, const std::string& tag, uint32_t segments,
                     Uploaded* out) {
    out->store = OpenStore(tmp_.Sub(dir), o);
    ASSERT_NE(out->store, nullptr);
    auto ns = out->store->RegisterNamespace(spec_);
    ASSERT_TRUE(ns.ok());
    out->ns = *ns;
    out->keys = PutUntilSealed(out->store.get(), out->ns, tag, segments);
    ASSERT_FALSE(out->keys.empty());
    Store* st = out->store.get();
    ASSERT_TRUE(WaitUntil([&] { return st->GetStats().remote_uploads >= segments; }));
  }

  // Plain librados on the test's pool and RADOS namespace, to tamper with
  // objects behind the tier's back.
  struct RawRados {
    rados_t cluster = nullptr;
    rados_ioctx_t io = nullptr;
    ~RawRados() {
      if (io != nullptr) rados_ioctx_destroy(io);
      if (cluster != nullptr) rados_shutdown(cluster);
    }
  };
  void ConnectRaw(RawRados* r) {
    ASSERT_EQ(rados_create(&r->cluster, "admin"), 0);
    ASSERT_EQ(rados_conf_read_file(r->cluster, conf_.c_str()), 0);
    ASSERT_EQ(rados_connect(r->cluster), 0);
    ASSERT_EQ(rados_ioctx_create(r->cluster, "kvtier", &r->io), 0);
    rados_ioctx_set_namespace(r->io, rados_ns_.c_str());
  }

  std::string conf_, rados_ns_;
  NamespaceSpec spec_;
  TempDir tmp_;
};

// Runs as the second process of TwoProcessesShareOnePool (skipped otherwise).
TEST_F(RemoteTierTest, ChildServesBlocksOfTheOtherProcess) {
  const std::string keys_file = Env("KVTIER_REMOTE_KEYS");
  if (keys_file.empty()) GTEST_SKIP() << "runs only as the child process of TwoProcessesShareOnePool";
  std::vector<std::string> keys;
  {
    std::ifstream f(keys_file);
    std::string hex;
    while (f >> hex) {
      std::string k;
      for (size_t i = 0; i + 1 < hex.size(); i += 2) k.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
      keys.push_back(k);
    }
  }
  ASSERT_FALSE(keys.empty());
  auto b = OpenStore(tmp_.Sub("b"), Opts());
  ASSERT_NE(b, nullptr);
  auto ns = b->RegisterNamespace(spec_);
  ASSERT_TRUE(ns.ok());
  ASSERT_TRUE(WaitUntil([&] { return b->GetStats().remote_segments_imported >= 1; }));
  std::vector<std::string_view> views(keys.begin(), keys.end());
  auto prefix = b->LookupPrefix(*ns, views);
  ASSERT_TRUE(prefix.ok());
  EXPECT_EQ(*prefix, keys.size());
  for (const std::string& k : keys) {
    std::string why;
    EXPECT_TRUE(SameBlock(b.get(), *ns, k, &why)) << why;
  }
  Stats st = b->GetStats();
  EXPECT_EQ(st.hits_remote, keys.size());
  EXPECT_EQ(st.hits_disk, 0u);
  EXPECT_EQ(st.remote_checksum_failures, 0u);
}

TEST_F(RemoteTierTest, TwoProcessesShareOnePool) {
  if (!Env("KVTIER_REMOTE_KEYS").empty()) GTEST_SKIP() << "parent-only test";
  Uploaded a;
  ASSERT_NO_FATAL_FAILURE(OpenAndUpload("a", Opts(), "p", 1, &a));
  Store* node = a.store.get();
  const std::vector<std::string>& keys = a.keys;
  ASSERT_GT(keys.size(), 40u);
  const std::string keys_file = tmp_.Sub("keys.txt");
  {
    std::ofstream f(keys_file);
    for (const std::string& k : keys) {
      for (unsigned char c : k) {
        char h[3];
        std::snprintf(h, sizeof h, "%02x", c);
        f << h;
      }
      f << "\n";
    }
  }
  // Node B: this test binary again, in its own process and folder. Everything
  // the child needs is built before fork (only exec runs after it).
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  const std::string filter = "--gtest_filter=RemoteTierTest.ChildServesBlocksOfTheOtherProcess";
  std::vector<std::string> env_strings = {"KVTIER_CEPH_CONF=" + conf_, "KVTIER_REMOTE_NS=" + rados_ns_,
                                          "KVTIER_REMOTE_KEYS=" + keys_file};
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view v(*e);
    if (!v.starts_with("KVTIER_CEPH_CONF=") && !v.starts_with("KVTIER_REMOTE_")) env_strings.emplace_back(v);
  }
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  char* argv[] = {const_cast<char*>(self.c_str()), const_cast<char*>(filter.c_str()), nullptr};
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execve(self.c_str(), argv, envp.data());
    ::_exit(127);
  }
  int status = 0;
  const bool exited = WaitUntil([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, seconds(90));
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  ASSERT_TRUE(exited) << "node B did not finish";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "node B failed (its gtest output is above)";
  // A served nothing remotely: it still has every block on disk.
  EXPECT_EQ(node->GetStats().hits_remote, 0u);
}

TEST_F(RemoteTierTest, LocalEvictionStillServesFromCeph) {
  Uploaded a;
  ASSERT_NO_FATAL_FAILURE(OpenAndUpload("a", Opts(), "e", 2, &a));
  Store* node = a.store.get();
  const NamespaceId ns = a.ns;
  const std::vector<std::string>& keys = a.keys;
  ASSERT_TRUE(node->EvictTo(0).ok());
  for (const std::string& k : keys) {
    // No local copy is left; Stat reports the shared tier's (callers size
    // their buffers from it).
    auto info = node->Stat(ns, k);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->tier, BlockTier::kShared) << "still local";
    EXPECT_EQ(info->payload_bytes, SizeOf(k));
  }
  std::vector<std::string_view> views(keys.begin(), keys.end());
  auto prefix = node->LookupPrefix(ns, views);
  ASSERT_TRUE(prefix.ok());
  EXPECT_EQ(*prefix, keys.size());
  for (const std::string& k : keys) {
    auto has = node->Contains(ns, k);
    ASSERT_TRUE(has.ok() && *has) << "Contains must agree with LookupPrefix";
  }
  auto none = node->Contains(ns, "never-written");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);
  for (const std::string& k : keys) {
    std::string why;
    ASSERT_TRUE(SameBlock(node, ns, k, &why)) << why;
  }
  Stats st = node->GetStats();
  EXPECT_EQ(st.hits_remote, keys.size());
  EXPECT_GE(st.bytes_read_remote, keys.size() * 64 * 1024);
  // A never-written key is still a plain miss.
  std::vector<uint8_t> buf(kBlock);
  auto r = node->Get(ns, "never-written", buf.data(), buf.size());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
}

TEST_F(RemoteTierTest, ABacklogOfSegmentsGoesUpInBatchesAndReadsBackWhole) {
  // Written with the tier off, then reopened with it on: every sealed
  // segment is queued at once, so the uploader streams them in batches, each
  // segment's two parts written in stripes of 4 MiB chunks, a part's second
  // chunk sent while its first (which replaces the object) is in flight.
  Options on = Opts();
  on.segment_size_bytes = 16 << 20;
  on.remote.object_bytes = 8 << 20;
  on.remote.upload_write_bytes = 4 << 20;  // two writes a part
  on.capacity_bytes = 256 << 20;  // room for 11 sealed segments of 16 MiB
  Options off = on;
  off.remote.enabled = false;
  const std::string dir = tmp_.Sub("backlog");
  std::vector<std::string> keys;
  NamespaceId ns = 0;
  {
    auto node = OpenStore(dir, off);
    ASSERT_NE(node, nullptr);
    ns = node->RegisterNamespace(spec_).value();
    keys = PutUntilSealed(node.get(), ns, "b", 11);
    ASSERT_TRUE(node->Close().ok());
  }
  auto node = OpenStore(dir, on);
  ASSERT_NE(node, nullptr);
  uint32_t sealed = 0;
  for (const SegmentInfo& seg : node->Segments()) sealed += seg.state == SegmentState::kSealed;
  ASSERT_GE(sealed, 11u);
  ASSERT_TRUE(WaitUntil([&] { return node->GetStats().remote_uploads >= sealed; }, seconds(60)));
  EXPECT_EQ(node->GetStats().remote_uploads, sealed) << "each segment once";
  ASSERT_TRUE(node->EvictTo(0).ok());
  for (const std::string& k : keys) {
    std::string why;
    ASSERT_TRUE(SameBlock(node.get(), ns, k, &why)) << why;
  }
  EXPECT_EQ(node->GetStats().hits_remote, keys.size());
}

TEST_F(RemoteTierTest, OtherNamespaceSpecNeverSeesTheBlocks) {
  Uploaded a;
  ASSERT_NO_FATAL_FAILURE(OpenAndUpload("a", Opts(), "n", 1, &a));
  const std::vector<std::string>& keys = a.keys;

  auto b = OpenStore(tmp_.Sub("b"), Opts());
  ASSERT_NE(b, nullptr);
  NamespaceSpec other_tenant = spec_;
  other_tenant.tenant_salt = "tenant-2";
  NamespaceSpec other_model = spec_;
  other_model.model_revision = "r2";
  auto t2 = b->RegisterNamespace(other_tenant);
  auto m2 = b->RegisterNamespace(other_model);
  auto same = b->RegisterNamespace(spec_);
  ASSERT_TRUE(t2.ok() && m2.ok() && same.ok());
  ASSERT_TRUE(WaitUntil([&] { return b->GetStats().remote_segments_imported >= 1; }));
  std::vector<uint8_t> buf(kBlock + 4096);
  std::vector<std::string_view> views(keys.begin(), keys.end());
  for (NamespaceId other : {*t2, *m2}) {
    for (const std::string& k : keys) {
      auto r = b->Get(other, k, buf.data(), buf.size());
      EXPECT_EQ(r.status().code(), Code::kNotFound);
    }
    auto prefix = b->LookupPrefix(other, views);
    ASSERT_TRUE(prefix.ok());
    EXPECT_EQ(*prefix, 0u);
  }
  EXPECT_EQ(b->GetStats().hits_remote, 0u);
  // The same spec does see them (so the misses above are the namespace's doing).
  EXPECT_TRUE(SameBlock(b.get(), *same, keys.front()));
  EXPECT_EQ(b->GetStats().hits_remote, 1u);
}

TEST_F(RemoteTierTest, RemoteHitsAreAdmittedToTheRamTier) {
  Uploaded a;
  ASSERT_NO_FATAL_FAILURE(OpenAndUpload("a", Opts(), "r", 1, &a));
  const std::vector<std::string>& keys = a.keys;

  for (bool admit : {true, false}) {
    SCOPED_TRACE(admit ? "admit_to_ram" : "no admission");
    Options o = Opts();
    o.ram_tier_bytes = 16 << 20;
    o.ram_tier_shared_memory = false;
    o.remote.admit_to_ram = admit;
    auto b = OpenStore(tmp_.Sub(admit ? "b1" : "b2"), o);
    ASSERT_NE(b, nullptr);
    auto bns = b->RegisterNamespace(spec_);
    ASSERT_TRUE(bns.ok());
    ASSERT_TRUE(WaitUntil([&] { return b->GetStats().remote_segments_imported >= 1; }));
    auto before = b->Stat(*bns, keys[0]);
    ASSERT_TRUE(before.ok()) << before.status().ToString();
    EXPECT_EQ(before->tier, BlockTier::kShared);
    EXPECT_EQ(before->payload_bytes, SizeOf(keys[0]));
    std::string why;
    ASSERT_TRUE(SameBlock(b.get(), *bns, keys[0], &why)) << why;
    auto after = b->Stat(*bns, keys[0]);
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->tier, admit ? BlockTier::kRam : BlockTier::kShared);
    EXPECT_EQ(after->payload_bytes, SizeOf(keys[0]));
    // Admitted before the get returned: the next get is a RAM hit.
    EXPECT_EQ(b->GetStats().remote_admitted_to_ram, admit ? 1u : 0u);
    ASSERT_TRUE(SameBlock(b.get(), *bns, keys[0], &why)) << why;
    Stats st = b->GetStats();
    EXPECT_EQ(st.hits_remote, admit ? 1u : 2u);
    EXPECT_EQ(st.hits_ram, admit ? 1u : 0u);
    EXPECT_EQ(st.remote_admitted_to_ram, admit ? 1u : 0u);
  }
}

// Objects no catalog entry names (an upload cut short, a failed delete) are
// removed after the grace; catalogued uploads and foreign objects stay.
TEST_F(RemoteTierTest, OrphanObjectsAreSwept) {
  RawRados raw;
  ASSERT_NO_FATAL_FAILURE(ConnectRaw(&raw));
  rados_ioctx_t io = raw.io;
  const std::vector<std::string> orphans = {"kvtier.crashed-node.000007.3.p0", "kvtier.crashed-node.000007.3.p1",
                                            "kvtier.crashed-node.000007.3.sum"};
  const std::vector<std::string> foreign = {"kvtier.crashed-node.000007.3.px", "someone-else.p0", "kvtier.notes"};
  for (const std::string& name : orphans) ASSERT_EQ(rados_write_full(io, name.c_str(), "x", 1), 0);
  for (const std::string& name : foreign) ASSERT_EQ(rados_write_full(io, name.c_str(), "y", 1), 0);
  auto exists = [&](const std::string& name) {
    uint64_t size = 0;
    time_t mtime = 0;
    return rados_stat(io, name.c_str(), &size, &mtime) == 0;
  };

  // A long grace keeps everything (the objects are seconds old).
  Options o = Opts();
  o.remote.orphan_sweep_interval_ms = 100;
  o.remote.orphan_grace_ms = 3600 * 1000;
  std::vector<std::string> a_keys;
  {
    Uploaded a;
    ASSERT_NO_FATAL_FAILURE(OpenAndUpload("a", o, "o", 1, &a));
    a_keys = a.keys;
    std::this_thread::sleep_for(milliseconds(500));  // several sweeps
    EXPECT_EQ(a.store->GetStats().remote_orphans_removed, 0u);
    for (const std::string& name : orphans) EXPECT_TRUE(exists(name)) << name;
  }
  // Past the grace, only the orphans go.
  std::this_thread::sleep_for(milliseconds(1100));  // object times have 1 s resolution
  o.remote.orphan_grace_ms = 1000;
  auto b = OpenStore(tmp_.Sub("b"), o);
  ASSERT_NE(b, nullptr);
  auto ns = b->RegisterNamespace(spec_);
  ASSERT_TRUE(ns.ok());
  ASSERT_TRUE(WaitUntil([&] { return b->GetStats().remote_orphans_removed >= orphans.size(); }));
  for (const std::string& name : orphans) EXPECT_FALSE(exists(name)) << name;
  for (const std::string& name : foreign) EXPECT_TRUE(exists(name)) << name;
  EXPECT_EQ(b->GetStats().remote_orphans_removed, orphans.size());
  // Node a's upload is catalogued: its objects stayed and b serves them.
  ASSERT_TRUE(WaitUntil([&] { return b->GetStats().remote_segments_imported >= 1; }));
  std::string why;
  EXPECT_TRUE(SameBlock(b.get(), *ns, a_keys.front(), &why)) << why;
  EXPECT_TRUE(SameBlock(b.get(), *ns, a_keys.back(), &why)) << why;
}

TEST_F(RemoteTierTest, CorruptedObjectIsAChecksumMiss) {
  Uploaded a;
  ASSERT_NO_FATAL_FAILURE(OpenAndUpload("a", Opts(), "c", 1, &a));
  Store* node = a.store.get();
  const NamespaceId ns = a.ns;
  const std::vector<std::string>& keys = a.keys;
  ASSERT_GE(keys.size(), 3u);
  auto info = node->Stat(ns, keys[1]);
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(node->EvictTo(0).ok());

  // Flip a payload byte of keys[1] inside its RADOS object.
  const uint64_t part_bytes = Opts().remote.object_bytes;
  const uint64_t at = info->payload_offset + 1000;
  const std::string object =
      remote::PartObject(remote::ObjectBase(node->Description().store_id, info->segment, info->generation),
                         static_cast<uint32_t>(at / part_bytes));
  {
    RawRados raw;
    ASSERT_NO_FATAL_FAILURE(ConnectRaw(&raw));
    char byte = 0;
    ASSERT_EQ(rados_read(raw.io, object.c_str(), &byte, 1, at % part_bytes), 1);
    byte = static_cast<char>(byte ^ 0x20);
    ASSERT_EQ(rados_write(raw.io, object.c_str(), &byte, 1, at % part_bytes), 0);
  }

  std::vector<uint8_t> buf(kBlock + 4096);
  auto r = node->Get(ns, keys[1], buf.data(), buf.size());
  EXPECT_EQ(r.status().code(), Code::kNotFound) << r.status().ToString();
  EXPECT_EQ(node->GetStats().remote_checksum_failures, 1u);
  // The bad entry is forgotten; its neighbours are fine.
  r = node->Get(ns, keys[1], buf.data(), buf.size());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_EQ(node->GetStats().remote_checksum_failures, 1u);
  EXPECT_TRUE(SameBlock(node, ns, keys[0]));
  EXPECT_TRUE(SameBlock(node, ns, keys[2]));
}

TEST_F(RemoteTierTest, RestartedNodeCatchesUpFromTheCatalog) {
  Uploaded a;
  ASSERT_NO_FATAL_FAILURE(OpenAndUpload("a", Opts(), "r", 1, &a));
  Store* node = a.store.get();
  const NamespaceId ns = a.ns;
  const std::vector<std::string>& first = a.keys;
  {
    auto b = OpenStore(tmp_.Sub("b"), Opts());
    ASSERT_NE(b, nullptr);
    ASSERT_TRUE(b->RegisterNamespace(spec_).ok());
    ASSERT_TRUE(WaitUntil([&] { return b->GetStats().remote_segments_imported >= 1; }));
    ASSERT_TRUE(b->Close().ok());
  }
  // While B is down, A uploads another segment.
  auto second = PutUntilSealed(node, ns, "s", 2);
  ASSERT_FALSE(second.empty());
  ASSERT_TRUE(WaitUntil([&] { return node->GetStats().remote_uploads >= 2; }));
  std::vector<std::string> both = first;
  both.insert(both.end(), second.begin(), second.end());
  auto b = OpenStore(tmp_.Sub("b"), Opts());
  ASSERT_NE(b, nullptr);
  // Only the upload it missed is new to B.
  ASSERT_TRUE(WaitUntil([&] { return b->GetStats().remote_segments_imported >= 1; }));
  std::this_thread::sleep_for(milliseconds(300));  // a few more polls
  EXPECT_EQ(b->GetStats().remote_segments_imported, 1u);
  for (const std::string& k : both) {
    std::string why;
    EXPECT_TRUE(SameBlock(b.get(), ns, k, &why)) << why;
  }
  EXPECT_EQ(b->GetStats().hits_remote, both.size());
}

// The open segment is shared without a reopen: by ShareNow, and by a clean
// Close (bounded by close_upload_timeout_ms).
TEST_F(RemoteTierTest, ShareNowAndCleanCloseUploadTheOpenSegment) {
  for (bool by_close : {false, true}) {
    SCOPED_TRACE(by_close ? "clean close" : "ShareNow");
    const std::string tag = by_close ? "z" : "y";
    auto a = OpenStore(tmp_.Sub(tag + "a"), Opts());
    ASSERT_NE(a, nullptr);
    auto ns = a->RegisterNamespace(spec_);
    ASSERT_TRUE(ns.ok());
    std::vector<std::string> keys;
    for (int i = 0; i < 5; ++i) {  // well under one 8 MiB segment: nothing sealed
      std::string key = tag + Key(i).substr(0, 24);
      auto p = Payload(*ns, key, SizeOf(key));
      ASSERT_TRUE(a->Put(*ns, key, p.data(), p.size()).ok());
      keys.push_back(key);
    }
    EXPECT_EQ(a->GetStats().remote_uploads, 0u);
    if (by_close) {
      ASSERT_TRUE(a->Close().ok());
    } else {
      ASSERT_TRUE(a->ShareNow(seconds(30)).ok());
      EXPECT_EQ(a->GetStats().remote_uploads, 1u);
      // Puts go on in a new segment.
      auto p = Payload(*ns, keys[0], SizeOf(keys[0]));
      ASSERT_TRUE(a->Put(*ns, tag + "after", p.data(), p.size()).ok());
    }
    auto b = OpenStore(tmp_.Sub(tag + "b"), Opts());
    ASSERT_NE(b, nullptr);
    auto bns = b->RegisterNamespace(spec_);
    ASSERT_TRUE(bns.ok());
    // The pool keeps the first round's uploads too, so b may import those
    // first: wait for the blocks themselves.
    ASSERT_TRUE(WaitUntil([&] {
      for (const std::string& k : keys)
        if (!b->Stat(*bns, k).ok()) return false;
      return true;
    }));
    for (const std::string& k : keys) {
      std::string why;
      EXPECT_TRUE(SameBlock(b.get(), *bns, k, &why)) << k << ": " << why;
    }
  }
}

// A cluster that cannot be reached does not hold up Close beyond its bound.
TEST_F(RemoteTierTest, CloseUploadIsBoundedWhenTheClusterIsUnreachable) {
  Options o = Opts();
  o.remote.ceph_conf = tmp_.Sub("no-such-ceph.conf");
  o.remote.close_upload_timeout_ms = 20000;  // not waited for: the tier is not connected
  WarnedLines warned;
  o.warn = warned.Sink();
  auto a = OpenStore(tmp_.Sub("u"), o);
  ASSERT_NE(a, nullptr);
  auto ns = a->RegisterNamespace(spec_);
  ASSERT_TRUE(ns.ok());
  auto p = Payload(*ns, "k", 4096);
  ASSERT_TRUE(a->Put(*ns, "k", p.data(), p.size()).ok());
  EXPECT_EQ(a->ShareNow(milliseconds(200)).code(), Code::kTimedOut);
  const auto t0 = SteadyClock::now();
  ASSERT_TRUE(a->Close().ok());
  EXPECT_LT(SteadyClock::now() - t0, seconds(5));
  // The operator is told once, however many times the tier tried.
  EXPECT_EQ(warned.Count("shared tier: connecting to Ceph failed, retrying with back-off: "), 1u);
  EXPECT_EQ(warned.Count("no-such-ceph.conf"), 1u);
}

// Part and write sizes that RADOS or the uploader cannot use are refused at
// open, with the option named.
TEST_F(RemoteTierTest, UnusableObjectOrWriteSizesAreRefusedAtOpen) {
  const std::pair<uint64_t, uint64_t> bad[] = {{6ull << 20, 4ull << 20},   // object not a multiple of 4 MiB
                                               {16ull << 20, 2ull << 20},  // write below 4 MiB
                                               {16ull << 20, 6ull << 20},  // write not a multiple of 4 MiB
                                               {128ull << 20, 68ull << 20}};  // write above 64 MiB
  for (const auto& [object, write] : bad) {
    Options o = Opts();
    o.remote.object_bytes = object;
    o.remote.upload_write_bytes = write;
    auto s = Store::Open(tmp_.Sub("sizes"), o);
    ASSERT_FALSE(s.ok()) << object << " / " << write;
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
    EXPECT_NE(s.status().ToString().find(object % (4u << 20) ? "object_bytes" : "upload_write_bytes"),
              std::string::npos)
        << s.status().ToString();
  }
  Options o = Opts();
  o.remote.object_bytes = 4ull << 20;
  o.remote.upload_write_bytes = 64ull << 20;  // larger than a part: each part is one write
  EXPECT_NE(OpenStore(tmp_.Sub("sizes-ok"), o), nullptr);
}

TEST_F(RemoteTierTest, BudgetDeletesTheOldestUploads) {
  Options o = Opts();
  o.remote.budget_bytes = 12 << 20;  // room for one 8 MiB segment, not two
  Uploaded a;
  ASSERT_NO_FATAL_FAILURE(OpenAndUpload("a", o, "b", 1, &a));
  Store* node = a.store.get();
  const NamespaceId ns = a.ns;
  const std::vector<std::string>& first = a.keys;
  auto second = PutUntilSealed(node, ns, "c", 2);
  ASSERT_FALSE(second.empty());
  ASSERT_TRUE(WaitUntil([&] { return node->GetStats().remote_uploads_deleted >= 1; }));
  // An 8 MiB segment in 4 MiB objects: two parts and a summary per upload.
  EXPECT_EQ(node->GetStats().remote_objects_deleted, 3 * node->GetStats().remote_uploads_deleted);
  ASSERT_TRUE(node->EvictTo(0).ok());
  std::vector<uint8_t> buf(kBlock + 4096);
  // The first segment's blocks vanished with its objects: misses.
  auto r = node->Get(ns, first.front(), buf.data(), buf.size());
  EXPECT_EQ(r.status().code(), Code::kNotFound) << r.status().ToString();
  // The second's are still served.
  EXPECT_TRUE(SameBlock(node, ns, second.back()));
}

TEST_F(RemoteTierTest, StoppedOsdTurnsRemoteGetsIntoDeadlineMisses) {
  CephCluster priv;
  const CephCluster* cluster = ClusterToStop(&priv);
  ASSERT_NE(cluster, nullptr) << priv.error();
  const pid_t osd = cluster->OsdPid();
  ASSERT_GT(osd, 0);
  Options o = RemoteOptions(cluster->conf(), rados_ns_);
  o.remote.read_deadline_ms = 300;
  o.remote.op_timeout_ms = 2000;
  o.remote.close_upload_timeout_ms = 3000;  // the close below has a segment to share
  WarnedLines warned;
  o.warn = warned.Sink();
  auto a = OpenStore(tmp_.Sub("a"), o);
  ASSERT_NE(a, nullptr);
  auto ns = a->RegisterNamespace(spec_);
  ASSERT_TRUE(ns.ok());
  auto keys = PutUntilSealed(a.get(), *ns, "o", 1);
  ASSERT_TRUE(WaitUntil([&] { return a->GetStats().remote_uploads >= 1; }));
  ASSERT_TRUE(a->EvictTo(0).ok());
  ASSERT_TRUE(SameBlock(a.get(), *ns, keys[0]));

  ASSERT_EQ(::kill(osd, SIGSTOP), 0);
  std::vector<uint8_t> buf(kBlock + 4096);
  for (size_t i = 1; i <= 8; ++i) {
    const auto t0 = SteadyClock::now();
    auto r = a->Get(*ns, keys[i], buf.data(), buf.size());
    const auto took = SteadyClock::now() - t0;
    EXPECT_EQ(r.status().code(), Code::kTimedOut) << r.status().ToString();
    // A bound that only a hang breaks (the deadline is 300 ms).
    EXPECT_LT(took, seconds(5));
  }
  // A get's own, shorter deadline wins over the tier's.
  std::promise<Result<size_t>> p;
  MutableFragment frag{buf.data(), buf.size()};
  a->GetAsync(*ns, keys[9], {&frag, 1}, SteadyClock::now() + milliseconds(50), [&](Result<size_t> r) { p.set_value(std::move(r)); });
  auto fut = p.get_future();
  ASSERT_EQ(fut.wait_for(seconds(5)), std::future_status::ready);
  EXPECT_EQ(fut.get().status().code(), Code::kTimedOut);
  EXPECT_GE(a->GetStats().remote_deadline_misses, 8u);
  ASSERT_EQ(::kill(osd, SIGCONT), 0);
  // Once the OSD is back, the same blocks are served again.
  std::string why;
  EXPECT_TRUE(WaitUntil([&] { return SameBlock(a.get(), *ns, keys[1], &why); }, seconds(30))) << why;
  // An upload that fails says so once, and says when uploads resume.
  const uint64_t uploaded = a->GetStats().remote_uploads;
  ASSERT_EQ(::kill(osd, SIGSTOP), 0);
  PutUntilSealed(a.get(), *ns, "u", 1);
  EXPECT_TRUE(WaitUntil([&] { return a->GetStats().remote_upload_retries >= 1; }, seconds(20)));
  ASSERT_EQ(::kill(osd, SIGCONT), 0);
  EXPECT_TRUE(WaitUntil([&] { return a->GetStats().remote_uploads > uploaded; }, seconds(60)));
  // Told once the batch that published returns.
  EXPECT_TRUE(WaitUntil([&] { return warned.Count("shared tier: uploading works again after ") == 1; }, seconds(30)));
  EXPECT_EQ(warned.Count("shared tier: uploading failed, retrying with back-off: TimedOut"), 1u);
  // Closing while the OSD is stopped does not hang either.
  ASSERT_EQ(::kill(osd, SIGSTOP), 0);
  const auto t0 = SteadyClock::now();
  Status closed = a->Close();
  ::kill(osd, SIGCONT);
  EXPECT_TRUE(closed.ok()) << closed.ToString();
  EXPECT_LT(SteadyClock::now() - t0, seconds(15));
}

// Uploads send from RadosClient::WriteBuffer without a copy: the bytes that
// land are the buffer's at the time of the write, and a buffer filled again
// after its write was waited for does not change what went up. The second
// write sends the same range of the buffer with new bytes: librados must not
// reuse the CRC it computed for the first (the OSD would drop the write).
TEST_F(RemoteTierTest, WritesFromAWriteBufferLandByteForByte) {
  using remote::RadosClient;
  auto c = RadosClient::Connect({conf_, "admin", "kvtier", rados_ns_, 5000});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(RadosClient::WriteBuffer::Allocate(0).status().code(), Code::kInvalidArgument);
  constexpr size_t kLen = 3u << 20;
  auto buf = RadosClient::WriteBuffer::Allocate(kLen);
  ASSERT_TRUE(buf.ok()) << buf.status().ToString();
  ASSERT_EQ(buf->size(), kLen);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(buf->data()) % 4096, 0u);  // direct reads land in it
  auto fill = [&](uint8_t seed) {
    for (size_t i = 0; i < kLen; ++i) buf->data()[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 13));
  };
  std::string want(2 * kLen, '\0');
  {
    RadosClient::AsyncWrites writes(c->get());
    fill(1);
    std::memcpy(want.data(), buf->data(), kLen);
    auto t = writes.Start("wb.obj", *buf, kLen, 0, /*replace=*/true);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE(writes.Wait(*t).ok());
    // Refilled once librados let it go, then written again in part.
    ASSERT_TRUE(WaitUntil([&] { return !buf->HeldByCluster(); }, seconds(10)));
    fill(2);
    std::memcpy(want.data() + kLen, buf->data(), kLen);
    t = writes.Start("wb.obj", *buf, kLen, kLen, /*replace=*/false);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(writes.Start("wb.obj", *buf, kLen + 1, 0, false).status().code(), Code::kInvalidArgument);
    ASSERT_TRUE(writes.Drain().ok());
  }
  auto got = (*c)->ReadWhole("wb.obj", want.size());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == want);
  EXPECT_TRUE((*c)->Remove("wb.obj").ok());
}

// A write that cannot go out (the OSD is stopped) keeps its buffer held by
// librados, past its deadline: that is what keeps an upload from refilling
// memory a late write would still send.
TEST_F(RemoteTierTest, AWriteBufferStaysHeldWhileItsWriteIsUnsent) {
  CephCluster priv;
  const CephCluster* cluster = ClusterToStop(&priv);
  ASSERT_NE(cluster, nullptr) << priv.error();
  const pid_t osd = cluster->OsdPid();
  ASSERT_GT(osd, 0);
  using remote::RadosClient;
  auto c = RadosClient::Connect({cluster->conf(), "admin", "kvtier", rados_ns_, 1000});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto buf = RadosClient::WriteBuffer::Allocate(1u << 20);
  ASSERT_TRUE(buf.ok());
  std::memset(buf->data(), 0x5a, buf->size());
  EXPECT_FALSE(buf->HeldByCluster());
  ASSERT_EQ(::kill(osd, SIGSTOP), 0);
  {
    RadosClient::AsyncWrites writes(c->get());
    auto t = writes.Start("held.obj", *buf, buf->size(), 0, /*replace=*/true);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_TRUE(buf->HeldByCluster());
    const auto t0 = SteadyClock::now();
    EXPECT_EQ(writes.Wait(*t).code(), Code::kTimedOut);
    EXPECT_LT(SteadyClock::now() - t0, seconds(10));
  }
  ::kill(osd, SIGCONT);
  // Once librados is done with it, the memory is the client's alone again.
  EXPECT_TRUE(WaitUntil([&] { return !buf->HeldByCluster(); }, seconds(30)));
  (*c)->Remove("held.obj").IgnoreError();
}

// The shared tier's bench, small, on the test cluster: its sweep of write
// sizes and depths, the upload, the upload's writes alone and the reads all
// run, and every block read back verifies.
TEST_F(RemoteTierTest, RemoteBenchRunsSmallAndVerifiesEveryBlock) {
  const std::filesystem::path bench =
      std::filesystem::read_symlink("/proc/self/exe").parent_path() / "kvtier_remote_bench";
  if (!std::filesystem::exists(bench)) GTEST_SKIP() << "built without benches (KVTIER_BUILD_BENCH=OFF)";
  const std::string out = tmp_.Sub("bench.out");
  const std::string cmd = bench.string() + " --conf " + conf_ + " --dir " + tmp_.Sub("bench") +
                          " --convs 4 --blocks 4 --segment-mib 8 --object-mib 4 --rados-seconds 1"
                          " --write-depths 4 --write-sizes-mib 4,8 --upload-write-mib 4 > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream f(out);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(rc, 0) << text;
  for (const char* want : {"\"bad\":0", "\"checksum_failures\":0", "\"4MiB@4\":", "\"8MiB@4\":"})
    EXPECT_NE(text.find(want), std::string::npos) << want << " in\n" << text;
  EXPECT_EQ(text.find("\"upload_writes_alone_mbs\":0.0,"), std::string::npos) << text;
  EXPECT_EQ(text.find("\"upload_mbs\":0.0,"), std::string::npos) << text;
  // A list the sweep cannot use is refused before anything runs.
  EXPECT_NE(std::system((bench.string() + " --conf " + conf_ + " --write-sizes-mib 4,0 >/dev/null 2>&1").c_str()), 0);
}

}  // namespace
}  // namespace kvtier::testing

#endif  // KVTIER_WITH_CEPH
