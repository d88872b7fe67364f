// The kvtier command, run as a subprocess on stores built by the test.
#include <fcntl.h>
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "format/record.h"
#include "kvtier/store.h"

#ifndef KVTIER_CLI
#error "KVTIER_CLI must name the kvtier executable"
#endif

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string t = std::string(base ? base : "/tmp") + "/kvtier-cli-XXXXXX";
    std::vector<char> buf(t.begin(), t.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) std::abort();
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string Sub(const std::string& n) const { return path_ + "/" + n; }

 private:
  std::string path_;
};

struct Out {
  int rc = -1;
  std::string out, err;
};

std::string ReadFile(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& p, const std::string& data) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Runs `exe args...` with stdout and stderr captured; env entries are added.
// With `as_group_member` it runs as uid/gid 65534 (nobody) with group 0 as a
// supplementary group: another user of the store owner's group.
Out RunExe(const std::string& exe, const std::vector<std::string>& args,
           const std::vector<std::string>& env = {}, bool as_group_member = false) {
  static int n = 0;
  const std::string base = fs::temp_directory_path().string() + "/kvtier-cli-out-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
  const std::string o = base + ".out", e = base + ".err";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fo = ::open(o.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int fe = ::open(e.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fo, 1);
    ::dup2(fe, 2);
    const int fi = ::open("/dev/null", O_RDONLY);
    ::dup2(fi, 0);
    for (const std::string& kv : env) ::putenv(const_cast<char*>(kv.c_str()));
    const gid_t groups[] = {0};
    if (as_group_member && (::setgroups(1, groups) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0))
      ::_exit(126);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(exe.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  Out r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(o);
  r.err = ReadFile(e);
  ::unlink(o.c_str());
  ::unlink(e.c_str());
  return r;
}

Out Kv(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  return RunExe(KVTIER_CLI, args, env);
}

// Runs the CLI as another user of the store owner's group, from the copy at
// `exe`, where that user can reach it (a build tree may sit in a private folder).
Out KvAsGroupMember(const std::string& exe, const std::vector<std::string>& args) {
  return RunExe(exe, args, {}, /*as_group_member=*/true);
}

json Json(const Out& o) {
  EXPECT_EQ(o.rc, 0) << o.err;
  return json::parse(o.out);
}

std::string Hex(std::string_view s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (char c : s) {
    h.push_back(d[static_cast<uint8_t>(c) >> 4]);
    h.push_back(d[static_cast<uint8_t>(c) & 15]);
  }
  return h;
}

std::string KeyOf(int i) { return "key-" + std::to_string(1000 + i); }  // printable, so hex is easy to read

std::string PayloadOf(int ns, int i, size_t size) {
  std::string p(size, '\0');
  uint64_t x = 0x1234567 + static_cast<uint64_t>(ns) * 1000003 + static_cast<uint64_t>(i);
  for (size_t j = 0; j < size; ++j) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    p[j] = static_cast<char>(x >> 56);
  }
  return p;
}

NamespaceSpec Spec(const std::string& name, const std::string& model) {
  NamespaceSpec s;
  s.name = name;
  s.model_id = model;
  s.dtype = "bf16";
  s.layout = "vllm-cross-layer";
  s.block_tokens = 16;
  s.hash_scheme = "sha256_cbor";
  return s;
}

Options SmallOptions() {
  Options o;
  o.segment_size_bytes = 1 << 20;
  o.capacity_bytes = 32 << 20;
  o.write_queue_bytes = 8 << 20;
  o.read_threads = 2;
  return o;
}

// A store with two namespaces: "alpha" (12 blocks of 40 KiB) and "beta"
// (5 blocks of 100 KiB), spread over several 1 MiB segments.
struct Fixture {
  std::string dir;
  NamespaceId alpha = 0, beta = 0;
  std::map<std::string, std::string> alpha_blocks;
};

Fixture BuildStore(const std::string& dir) {
  Fixture f;
  f.dir = dir;
  auto s = Store::Open(dir, SmallOptions());
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  auto a = (*s)->RegisterNamespace(Spec("alpha", "test/alpha"));
  auto b = (*s)->RegisterNamespace(Spec("beta", "test/beta"));
  EXPECT_TRUE(a.ok() && b.ok());
  f.alpha = *a;
  f.beta = *b;
  for (int i = 0; i < 12; ++i) {
    const std::string p = PayloadOf(1, i, 40 << 10);
    EXPECT_TRUE((*s)->Put(f.alpha, KeyOf(i), p.data(), p.size()).ok());
    f.alpha_blocks[KeyOf(i)] = p;
  }
  for (int i = 0; i < 5; ++i) {
    const std::string p = PayloadOf(2, i, 100 << 10);
    EXPECT_TRUE((*s)->Put(f.beta, KeyOf(i), p.data(), p.size()).ok());
  }
  EXPECT_TRUE((*s)->Close().ok());
  return f;
}

class KvtierCli : public ::testing::Test {
 protected:
  void SetUp() override { f_ = BuildStore(tmp_.Sub("store")); }
  TempDir tmp_;
  Fixture f_;
};

TEST(KvtierCliUsage, HelpListsEverySubcommandAndExitCodes) {
  Out o = Kv({"--help"});
  EXPECT_EQ(o.rc, 0);
  for (const char* c : {"info", "ns", "ls", "get", "show", "put", "verify", "repair", "destroy", "shm", "evict",
                        "rm", "export", "import", "stats", "demo", "bench"})
    EXPECT_NE(o.out.find(std::string(c)), std::string::npos) << c;
  EXPECT_NE(o.out.find("Exit codes"), std::string::npos);
  EXPECT_NE(o.out.find("3  cannot open"), std::string::npos);
  Out v = Kv({"verify", "--help"});
  EXPECT_EQ(v.rc, 0);
  EXPECT_NE(v.out.find("--deep"), std::string::npos);
  Out sh = Kv({"share", "--help"});
  EXPECT_EQ(sh.rc, 0);
  EXPECT_NE(sh.out.find("--rados-ns"), std::string::npos);
  // remote-bench passes --help to the bench (or says how to build it),
  // never the main command's help.
  Out rb = Kv({"remote-bench", "--help"});
  EXPECT_EQ((rb.out + rb.err).find("Subcommands:"), std::string::npos) << rb.out;
  EXPECT_NE((rb.out + rb.err).find("kvtier_remote_bench"), std::string::npos) << rb.out << rb.err;
}

TEST(KvtierCliUsage, BadArgumentsExit2) {
  EXPECT_EQ(Kv({}).rc, 2);
  EXPECT_EQ(Kv({"frobnicate"}).rc, 2);
  EXPECT_EQ(Kv({"ls"}).rc, 2);                                   // DIR missing
  EXPECT_EQ(Kv({"get", "/tmp", "00"}).rc, 2);                    // --ns missing
  EXPECT_EQ(Kv({"info", "/tmp", "--no-such-flag"}).rc, 2);
  Out k = Kv({"get", "/tmp", "--ns", "x", "xyz"});
  EXPECT_EQ(k.rc, 2);
  EXPECT_NE(k.err.find("hex"), std::string::npos) << k.err;
  Out s = Kv({"evict", "/tmp", "--to", "12Q"});
  EXPECT_EQ(s.rc, 2);
  EXPECT_NE(s.err.find("unknown unit"), std::string::npos) << s.err;
  Out sv = Kv({"serve", "/tmp/kvtier-no-such-store", "--ram-streaming-min", "12Q"});
  EXPECT_EQ(sv.rc, 2);
  EXPECT_NE(sv.err.find("--ram-streaming-min"), std::string::npos) << sv.err;
  Out sp = Kv({"serve", "/tmp/kvtier-no-such-store", "--ram-split-copy-min", "1X"});
  EXPECT_EQ(sp.rc, 2);
  EXPECT_NE(sp.err.find("--ram-split-copy-min"), std::string::npos) << sp.err;
  Out rc = Kv({"serve", "/tmp/kvtier-no-such-store", "--ram-chunk", "4X"});
  EXPECT_EQ(rc.rc, 2);
  EXPECT_NE(rc.err.find("--ram-chunk"), std::string::npos) << rc.err;
}

TEST(KvtierCliUsage, MissingStoreOrNotAStoreExit3) {
  TempDir t;
  for (const char* cmd : {"info", "ls", "verify", "stats", "ns"}) {
    Out o = Kv({cmd, t.Sub("nothing-here")});
    EXPECT_EQ(o.rc, 3) << cmd << ": " << o.err;
    EXPECT_NE(o.err.find(t.Sub("nothing-here")), std::string::npos) << o.err;
  }
  EXPECT_EQ(Kv({"repair", t.Sub("nothing-here")}).rc, 3);
  EXPECT_EQ(Kv({"evict", t.Sub("nothing-here"), "--to", "0"}).rc, 3);
  fs::create_directories(t.Sub("plain"));
  WriteFile(t.Sub("plain/notes.txt"), "hello");
  Out o = Kv({"info", t.Sub("plain")});
  EXPECT_EQ(o.rc, 3) << o.err;
  EXPECT_FALSE(fs::exists(t.Sub("plain/SUPERBLOCK")));  // nothing created
}

TEST(KvtierCliUsage, BenchWithoutHarnessSaysHowToBuildIt) {
  TempDir t;
  const std::string copy = t.Sub("kvtier");
  fs::copy_file(KVTIER_CLI, copy);
  fs::permissions(copy, fs::perms::owner_all);
  Out o = RunExe(copy, {"bench", "--quick"});
  EXPECT_EQ(o.rc, 2);
  EXPECT_NE(o.err.find("kvtier-bench"), std::string::npos) << o.err;
}

TEST_F(KvtierCli, DestroyAsksForYesThenRemovesTheStore) {
  const std::string dir = tmp_.Sub("store");
  Out ask = Kv({"destroy", dir});
  EXPECT_EQ(ask.rc, 2);
  EXPECT_NE(ask.err.find("--yes"), std::string::npos) << ask.err;
  EXPECT_TRUE(fs::exists(dir + "/SUPERBLOCK"));
  Out done = Kv({"destroy", dir, "--yes", "--json"});
  EXPECT_EQ(done.rc, 0) << done.err;
  EXPECT_EQ(nlohmann::json::parse(done.out)["destroyed"], true) << done.out;
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_EQ(Kv({"destroy", dir, "--yes"}).rc, 3);
}

// kvtier shm lists a store's shared-memory tier as kept while its folder
// holds it, as an orphan once the folder is deleted by hand, and removes it
// only with --remove-orphans --yes. (Other stores' tiers on the machine are
// listed too: the test looks at its own, and removes only its own, since
// other tests' orphans may be under check at the same time.)
TEST(KvtierCliShm, ListsTiersAndRemovesOrphansOnlyWithYes) {
  TempDir tmp;
  const std::string dir = tmp.Sub("s");
  std::string id;
  {
    Options o = SmallOptions();
    o.ram_tier_bytes = 8 << 20;
    auto s = Store::Open(dir, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE((*s)->GetStats().ram_shared_memory) << "the test needs /dev/shm";
    id = (*s)->Description().store_id;
    ASSERT_TRUE((*s)->Close().ok());
  }
  const std::string shm = "/dev/shm/kvtier-" + id + ".ram";
  auto mine = [&](const Out& o) -> json {
    for (const json& t : json::parse(o.out))
      if (t["store_id"] == id) return t;
    return json();
  };
  Out l = Kv({"shm", "--json"});
  ASSERT_EQ(l.rc, 0) << l.err;
  json t = mine(l);
  ASSERT_FALSE(t.is_null()) << l.out;
  EXPECT_EQ(t["state"], "kept");
  EXPECT_EQ(t["folder"], fs::absolute(dir).lexically_normal().string());
  EXPECT_EQ(t["path"], shm);

  fs::remove_all(dir);  // by hand: the tier stays behind
  Out table = Kv({"shm"});
  ASSERT_EQ(table.rc, 0) << table.err;
  EXPECT_NE(table.out.find(id + "  "), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("orphan (the folder is gone)"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("--remove-orphans --yes"), std::string::npos) << table.out;
  Out ask = Kv({"shm", "--remove-orphans", id});
  EXPECT_EQ(ask.rc, 2);
  EXPECT_NE(ask.err.find("would remove " + shm), std::string::npos) << ask.err;
  EXPECT_NE(ask.err.find("--yes"), std::string::npos) << ask.err;
  EXPECT_TRUE(fs::exists(shm));
  Out only = Kv({"shm", id, "--json"});
  ASSERT_EQ(only.rc, 0) << only.err;
  EXPECT_EQ(json::parse(only.out).size(), 1u) << only.out;
  Out done = Kv({"shm", "--remove-orphans", "--yes", "--json", id});
  EXPECT_EQ(done.rc, 0) << done.err;
  bool removed = false;
  const json report = json::parse(done.out);
  for (const json& r : report["removed"]) removed |= r["store_id"] == id;
  EXPECT_TRUE(removed) << done.out;
  EXPECT_FALSE(fs::exists(shm));
  EXPECT_TRUE(mine(Kv({"shm", "--json"})).is_null());
}

TEST_F(KvtierCli, InfoTableAndJson) {
  Out t = Kv({"info", f_.dir});
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_NE(t.out.find("format version " + std::to_string(format::kFormatVersion)), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("alpha"), std::string::npos);
  EXPECT_NE(t.out.find("last shutdown  clean"), std::string::npos) << t.out;
  json j = Json(Kv({"info", f_.dir, "--json"}));
  EXPECT_EQ(j["format_version"], format::kFormatVersion);
  EXPECT_EQ(j["store_id"].get<std::string>().size(), 32u);
  EXPECT_EQ(j["segment_size_bytes"], 1 << 20);
  EXPECT_EQ(j["blocks"], 17);
  EXPECT_EQ(j["payload_bytes"], 12 * (40 << 10) + 5 * (100 << 10));
  EXPECT_EQ(j["namespaces"].size(), 2u);
  EXPECT_EQ(j["last_shutdown"], "clean");
  EXPECT_EQ(j["in_use"], false);
  EXPECT_GT(j["segments"]["sealed"].get<int>() + j["segments"]["open"].get<int>(), 0);
  EXPECT_TRUE(j.contains("recovered_from_crash"));
  EXPECT_TRUE(j.contains("write_amplification"));
}

TEST_F(KvtierCli, NsListCreateAndLookupByNameOrId) {
  json l = Json(Kv({"ns", f_.dir, "--json"}));
  ASSERT_EQ(l.size(), 2u);
  std::map<std::string, json> by;
  for (auto& n : l) by[n["name"]] = n;
  EXPECT_EQ(by["alpha"]["model_id"], "test/alpha");
  EXPECT_EQ(by["alpha"]["blocks"], 12);
  EXPECT_EQ(by["alpha"]["id"], NamespaceIdToHex(f_.alpha));
  Out t = Kv({"ns", f_.dir});
  EXPECT_EQ(t.rc, 0);
  EXPECT_NE(t.out.find("hash_scheme"), std::string::npos);
  EXPECT_NE(t.out.find("sha256_cbor"), std::string::npos);

  json c = Json(Kv({"ns", f_.dir, "create", "qwen3-0.6b/bf16/tp0", "--model", "Qwen/Qwen3-0.6B", "--dtype", "bf16",
                     "--block-tokens", "16", "--block-bytes", "1835008", "--tp-rank", "1", "--tp-size", "2",
                     "--layout", "vllm-cross-layer", "--hash-scheme", "sha256_cbor", "--hash-seed", "7",
                     "--tenant-salt", "s3cret", "--json"}));
  EXPECT_EQ(c["existed"], false);
  NamespaceSpec want;
  want.model_id = "Qwen/Qwen3-0.6B";
  want.dtype = "bf16";
  want.block_tokens = 16;
  want.block_bytes = 1835008;
  want.tp_rank = 1;
  want.tp_size = 2;
  want.layout = "vllm-cross-layer";
  want.hash_scheme = "sha256_cbor";
  want.hash_seed = 7;
  want.tenant_salt = "s3cret";
  EXPECT_EQ(c["id"], NamespaceIdToHex(want.Fingerprint()));  // same id as the library computes
  Out again = Kv({"ns", f_.dir, "create", "qwen3-0.6b/bf16/tp0", "--model", "Other/Model"});
  EXPECT_EQ(again.rc, 1);
  EXPECT_NE(again.err.find("already used"), std::string::npos) << again.err;
  EXPECT_EQ(Kv({"ns", f_.dir, "create", "bad", "--model", "m", "--tp-rank", "3", "--tp-size", "2"}).rc, 2);

  // --ns takes the hex id as well as the name.
  json a = Json(Kv({"ls", f_.dir, "--ns", NamespaceIdToHex(f_.alpha), "--json"}));
  json b = Json(Kv({"ls", f_.dir, "--ns", "alpha", "--json"}));
  EXPECT_EQ(a, b);
  Out u = Kv({"ls", f_.dir, "--ns", "gamma"});
  EXPECT_EQ(u.rc, 1);
  EXPECT_NE(u.err.find("gamma"), std::string::npos) << u.err;
}

TEST_F(KvtierCli, LsTableJsonPrefixLimit) {
  json all = Json(Kv({"ls", f_.dir, "--json"}));
  EXPECT_EQ(all.size(), 17u);
  json a = Json(Kv({"ls", f_.dir, "--ns", "alpha", "--json"}));
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(a[0]["key"], Hex(KeyOf(0)));
  EXPECT_EQ(a[0]["payload_bytes"], 40 << 10);
  EXPECT_EQ(a[0]["namespace"], "alpha");
  EXPECT_TRUE(a[0].contains("segment") && a[0].contains("offset") && a[0].contains("hits"));
  json p = Json(Kv({"ls", f_.dir, "--ns", "alpha", "--prefix", Hex("key-100"), "--json"}));
  EXPECT_EQ(p.size(), 10u);  // key-1000 .. key-1009
  json l = Json(Kv({"ls", f_.dir, "--limit", "3", "--json"}));
  EXPECT_EQ(l.size(), 3u);
  // Paged: each page starts after the last key of the one before.
  json paged = json::array();
  std::vector<std::string> page_args{"ls", f_.dir, "--ns", "alpha", "--limit", "5", "--json"};
  for (int i = 0; i < 4; ++i) {
    json page = Json(Kv(page_args));
    if (page.empty()) break;
    EXPECT_LE(page.size(), 5u);
    for (const json& b : page) paged.push_back(b);
    page_args = {"ls", f_.dir, "--ns", "alpha", "--limit", "5", "--json", "--after", page.back()["key"]};
  }
  EXPECT_EQ(paged, a);
  EXPECT_EQ(Kv({"ls", f_.dir, "--after", Hex(KeyOf(0))}).rc, 2);  // needs --ns
  EXPECT_EQ(Kv({"ls", f_.dir, "--ns", "alpha", "--after", "zz"}).rc, 2);
  Out t = Kv({"ls", f_.dir, "--ns", "beta"});
  ASSERT_EQ(t.rc, 0);
  EXPECT_NE(t.out.find("KEY"), std::string::npos);
  EXPECT_NE(t.out.find(Hex(KeyOf(4))), std::string::npos);
  EXPECT_NE(t.out.find("100.00 KiB"), std::string::npos) << t.out;
}

TEST_F(KvtierCli, GetShowPutRoundTrip) {
  const std::string out = tmp_.Sub("block.bin");
  Out g = Kv({"get", f_.dir, "--ns", "alpha", Hex(KeyOf(3)), "-o", out});
  ASSERT_EQ(g.rc, 0) << g.err;
  EXPECT_EQ(ReadFile(out), f_.alpha_blocks[KeyOf(3)]);
  Out so = Kv({"get", f_.dir, "--ns", "alpha", Hex(KeyOf(4))});
  ASSERT_EQ(so.rc, 0);
  EXPECT_EQ(so.out, f_.alpha_blocks[KeyOf(4)]);
  json gj = Json(Kv({"get", f_.dir, "--ns", "alpha", Hex(KeyOf(3)), "-o", out, "--json"}));
  EXPECT_EQ(gj["payload_bytes"], 40 << 10);
  Out missing = Kv({"get", f_.dir, "--ns", "alpha", "00ff"});
  EXPECT_EQ(missing.rc, 1);
  EXPECT_NE(missing.err.find("00ff"), std::string::npos) << missing.err;

  Out sh = Kv({"show", f_.dir, "--ns", "alpha", Hex(KeyOf(3))});
  ASSERT_EQ(sh.rc, 0) << sh.err;
  EXPECT_NE(sh.out.find("payload_len    40960"), std::string::npos) << sh.out;
  EXPECT_NE(sh.out.find("matches index    yes"), std::string::npos);
  // 40 KiB is a dense record: format 4's compact header.
  EXPECT_NE(sh.out.find("magic          KVTD, format v4"), std::string::npos) << sh.out;
  EXPECT_NE(sh.out.find("(dense, compact header)"), std::string::npos) << sh.out;
  json sj = Json(Kv({"show", f_.dir, "--ns", "beta", Hex(KeyOf(1)), "--json"}));
  EXPECT_EQ(sj["record"]["payload_len"], 100 << 10);
  EXPECT_EQ(sj["record"]["magic"], 0x4454564B) << "100 KiB is dense too (below zero_copy_min_bytes)";
  EXPECT_EQ(sj["record"]["ns_id"], NamespaceIdToHex(f_.beta));
  EXPECT_EQ(sj["record"]["key_len"], KeyOf(1).size());
  EXPECT_TRUE(sj["problems"].empty());

  const std::string in = tmp_.Sub("in.bin");
  WriteFile(in, PayloadOf(9, 9, 12345));
  json pj = Json(Kv({"put", f_.dir, "--ns", "beta", "c0ffee", in, "--json"}));
  EXPECT_EQ(pj["payload_bytes"], 12345);
  ASSERT_EQ(Kv({"get", f_.dir, "--ns", "beta", "c0ffee", "-o", out}).rc, 0);
  EXPECT_EQ(ReadFile(out), PayloadOf(9, 9, 12345));
  Out pt = Kv({"put", f_.dir, "--ns", "beta", "c0ffee01", in});
  EXPECT_EQ(pt.rc, 0);
  EXPECT_NE(pt.out.find("stored c0ffee01"), std::string::npos);
  EXPECT_EQ(Kv({"put", f_.dir, "--ns", "beta", "c0ffee", tmp_.Sub("no-such-file")}).rc, 1);
  // A folder, an endless device and an empty file get a clear error, not an
  // abort or an unbounded read.
  Out dir_put = Kv({"put", f_.dir, "--ns", "beta", "c0ffee02", tmp_.Sub("")});
  EXPECT_EQ(dir_put.rc, 2);
  EXPECT_NE(dir_put.err.find("is a folder"), std::string::npos) << dir_put.err;
  Out zero_put = Kv({"put", f_.dir, "--ns", "beta", "c0ffee03", "/dev/zero"});
  EXPECT_EQ(zero_put.rc, 2);
  EXPECT_NE(zero_put.err.find("more than the payload limit"), std::string::npos) << zero_put.err;
  WriteFile(tmp_.Sub("empty.bin"), "");
  EXPECT_EQ(Kv({"put", f_.dir, "--ns", "beta", "c0ffee04", tmp_.Sub("empty.bin")}).rc, 2);

  // put and ns create make a new store when asked.
  const std::string fresh = tmp_.Sub("fresh");
  ASSERT_EQ(Kv({"ns", fresh, "create", "n1", "--model", "m/1", "--segment-size", "1M"}).rc, 0);
  ASSERT_EQ(Kv({"put", fresh, "--ns", "n1", "01", in}).rc, 0);
  EXPECT_EQ(Json(Kv({"info", fresh, "--json"}))["segment_size_bytes"], 1 << 20);
}

TEST_F(KvtierCli, VerifyCorruptRepairVerify) {
  Out ok = Kv({"verify", f_.dir});
  ASSERT_EQ(ok.rc, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("OK"), std::string::npos);
  json d = Json(Kv({"verify", f_.dir, "--deep", "--json"}));
  EXPECT_EQ(d["ok"], true);
  EXPECT_EQ(d["records_ok"], 17);
  EXPECT_EQ(d["index_entries"], 17);

  // Flip one payload bit of alpha's key 5.
  json s = Json(Kv({"show", f_.dir, "--ns", "alpha", Hex(KeyOf(5)), "--json"}));
  const uint64_t off = s["index"]["payload_offset"].get<uint64_t>() + 777;
  {
    const std::string seg = s["segment_file"];
    const int fd = ::open(seg.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t b;
    ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(off)), 1);
    b ^= 0x10;
    ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(off)), 1);
    ::close(fd);
  }
  Out bad = Kv({"verify", f_.dir, "--deep"});
  EXPECT_EQ(bad.rc, 1) << bad.out;
  EXPECT_NE(bad.out.find("PROBLEMS FOUND"), std::string::npos);
  json bj = json::parse(Kv({"verify", f_.dir, "--deep", "--json"}).out);
  EXPECT_EQ(bj["ok"], false);
  EXPECT_GE(bj["records_corrupt"].get<int>() + bj["entries_without_record"].get<int>(), 1);
  EXPECT_FALSE(bj["problems"].empty());
  // The corrupt block is never served.
  EXPECT_EQ(Kv({"get", f_.dir, "--ns", "alpha", Hex(KeyOf(5))}).rc, 1);

  Out r = Kv({"repair", f_.dir}, {"KVTIER_PROGRESS=always"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("records indexed"), std::string::npos);
  EXPECT_NE(r.err.find("repair ["), std::string::npos) << r.err;  // the progress bar
  // The index is consistent again and the corrupt region was cleared: the
  // corrupt block is dropped, every entry points at a valid record, and
  // verify passes.
  Out after = Kv({"verify", f_.dir, "--deep", "--json"});
  EXPECT_EQ(after.rc, 0) << after.out;
  json aj = json::parse(after.out);
  EXPECT_EQ(aj["records_corrupt"], 0);
  EXPECT_EQ(aj["index_entries"], 16);
  EXPECT_EQ(aj["entries_without_record"], 0);
  EXPECT_EQ(aj["stale_entries"], 0);
  EXPECT_EQ(aj["records_ok"], 16);
  // Everything else is intact.
  const std::string out = tmp_.Sub("b");
  ASSERT_EQ(Kv({"get", f_.dir, "--ns", "alpha", Hex(KeyOf(6)), "-o", out}).rc, 0);
  EXPECT_EQ(ReadFile(out), f_.alpha_blocks[KeyOf(6)]);
  json rj = Json(Kv({"repair", f_.dir, "--json"}));
  EXPECT_EQ(rj["entries_after"], 16);
}

TEST_F(KvtierCli, ReadOnlyCommandsWorkWhileHeldWritersSayBusy) {
  auto held = Store::Open(f_.dir, SmallOptions());
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(Kv({"info", f_.dir}).rc, 0);
  json j = Json(Kv({"info", f_.dir, "--json"}));
  EXPECT_EQ(j["in_use"], true);
  EXPECT_EQ(j["in_use_by_pid"], ::getpid());
  EXPECT_EQ(Kv({"ls", f_.dir, "--ns", "alpha"}).rc, 0);
  EXPECT_EQ(Kv({"verify", f_.dir}).rc, 0);
  Out rm = Kv({"rm", f_.dir, "--ns", "alpha", Hex(KeyOf(1))});
  EXPECT_EQ(rm.rc, 3);
  EXPECT_NE(rm.err.find("in use by pid " + std::to_string(::getpid())), std::string::npos) << rm.err;
  EXPECT_EQ(Kv({"repair", f_.dir}).rc, 3);
  ASSERT_TRUE((*held)->Close().ok());
}

TEST_F(KvtierCli, ShareUploadsTheOpenSegment) {
  const char* conf = std::getenv("KVTIER_CEPH_CONF");
  if (conf == nullptr || *conf == '\0') GTEST_SKIP() << "no Ceph cluster (KVTIER_CEPH_CONF unset)";
  const std::string ns = "cli-" + std::to_string(::getpid());
  json j = Json(Kv({"share", f_.dir, "--ceph-conf", conf, "--rados-ns", ns, "--timeout", "60", "--json"}));
  EXPECT_EQ(j["ok"], true) << j.dump();
  EXPECT_GE(j["segments_uploaded"].get<int>(), 1);
  Out bad = Kv({"share", f_.dir, "--ceph-conf", conf, "--rados-ns", ns, "--timeout", "soon"});
  EXPECT_EQ(bad.rc, 2);
}

// Options::group_access under umask 022: another user of the group opens the
// store read-write (LOCK, RocksDB's LOCK, WAL and MANIFEST), reads and writes.
TEST(KvtierCliGroup, AGroupMemberOfAnotherUidUsesAGroupStore) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as a second user";
  const mode_t old_umask = ::umask(022);
  TempDir t;
  ASSERT_EQ(::chmod(t.Sub("").c_str(), 0755), 0);
  const std::string dir = t.Sub("store");
  NamespaceId ns = 0;
  {
    Options o;
    o.group_access = true;
    o.segment_size_bytes = 1 << 20;
    auto s = Store::Open(dir, o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto id = (*s)->RegisterNamespace(Spec("group", "group/model"));
    ASSERT_TRUE(id.ok());
    ns = *id;
    ASSERT_TRUE((*s)->Put(ns, "k1", "hello", 5).ok());
    ASSERT_TRUE((*s)->Close().ok());
  }
  ::umask(old_umask);
  WriteFile(t.Sub("in.bin"), "from another user");
  ASSERT_EQ(::chmod(t.Sub("in.bin").c_str(), 0644), 0);
  const std::string nsid = NamespaceIdToHex(ns);
  const std::string exe = t.Sub("kvtier");
  fs::copy_file(KVTIER_CLI, exe);
  fs::permissions(exe, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);
  Out put = KvAsGroupMember(exe, {"put", dir, "--ns", nsid, Hex("k2"), t.Sub("in.bin")});
  ASSERT_EQ(put.rc, 0) << put.err;
  Out get = KvAsGroupMember(exe, {"get", dir, "--ns", nsid, Hex("k1")});
  ASSERT_EQ(get.rc, 0) << get.err;
  EXPECT_EQ(get.out, "hello");
  Out get2 = Kv({"get", dir, "--ns", nsid, Hex("k2")});
  ASSERT_EQ(get2.rc, 0) << get2.err;
  EXPECT_EQ(get2.out, "from another user");
}

TEST_F(KvtierCli, EvictAndRm) {
  json rm = Json(Kv({"rm", f_.dir, "--ns", "alpha", Hex(KeyOf(0)), Hex(KeyOf(1)), "abcd", "--json"}));
  EXPECT_EQ(rm["blocks_removed"], 2);
  EXPECT_EQ(rm["keys_absent"], 1);
  EXPECT_EQ(Json(Kv({"ls", f_.dir, "--ns", "alpha", "--json"})).size(), 10u);
  // No key and no --all-blocks: refused, nothing dropped.
  Out none = Kv({"rm", f_.dir, "--ns", "beta"});
  EXPECT_EQ(none.rc, 2);
  EXPECT_NE(none.err.find("--all-blocks"), std::string::npos) << none.err;
  EXPECT_EQ(Json(Kv({"ns", f_.dir, "--json"})).size(), 2u);
  EXPECT_EQ(Kv({"rm", f_.dir, "--ns", "beta", "--all-blocks", "00ff"}).rc, 2);
  Out drop = Kv({"rm", f_.dir, "--ns", "beta", "--all-blocks"});
  ASSERT_EQ(drop.rc, 0) << drop.err;
  EXPECT_NE(drop.out.find("removed namespace beta"), std::string::npos);
  EXPECT_EQ(Json(Kv({"ns", f_.dir, "--json"})).size(), 1u);
  EXPECT_EQ(Kv({"rm", f_.dir, "--ns", "beta", "--all-blocks"}).rc, 1);

  const uint64_t before = Json(Kv({"info", f_.dir, "--json"}))["used_bytes"];
  json ev = Json(Kv({"evict", f_.dir, "--to", "0", "--json"}));
  EXPECT_GT(before, 0u);
  EXPECT_LT(ev["used_bytes_after"].get<uint64_t>(), ev["used_bytes_before"].get<uint64_t>());
  EXPECT_GT(ev["segments_evicted"].get<int>(), 0);
  Out t = Kv({"evict", f_.dir, "--to", "1G"});
  EXPECT_EQ(t.rc, 0);
  EXPECT_NE(t.out.find("0 segments"), std::string::npos) << t.out;
}

// A long list goes through a file (or standard input): one hex key a line,
// as `kvtier ls --json | jq -r '.[].key'` prints them.
TEST_F(KvtierCli, RmTakesKeysFromAFile) {
  const std::string list = tmp_.Sub("keys.txt");
  {
    std::ofstream f(list);
    f << "# stale blocks\n" << Hex(KeyOf(2)) << "\n\n  " << Hex(KeyOf(3)) << "  \r\n" << "00ff\n";
  }
  json rm = Json(Kv({"rm", f_.dir, "--ns", "alpha", "--keys-from", list, Hex(KeyOf(4)), "--json"}));
  EXPECT_EQ(rm["blocks_removed"], 3);
  EXPECT_EQ(rm["keys_absent"], 1);
  EXPECT_EQ(Json(Kv({"ls", f_.dir, "--ns", "alpha", "--json"})).size(), 9u);
  // A bad line refuses the whole list, naming the line: nothing removed.
  const std::string bad = tmp_.Sub("bad.txt");
  {
    std::ofstream f(bad);
    f << Hex(KeyOf(5)) << "\nnot-hex\n";
  }
  Out b = Kv({"rm", f_.dir, "--ns", "alpha", "--keys-from", bad});
  EXPECT_EQ(b.rc, 2);
  EXPECT_NE(b.err.find("line 2"), std::string::npos) << b.err;
  // An empty file is no list at all: refused, not read as "everything".
  const std::string empty = tmp_.Sub("empty.txt");
  { std::ofstream f(empty); }
  Out e = Kv({"rm", f_.dir, "--ns", "alpha", "--keys-from", empty});
  EXPECT_EQ(e.rc, 2);
  EXPECT_NE(e.err.find("holds no key"), std::string::npos) << e.err;
  EXPECT_EQ(Kv({"rm", f_.dir, "--ns", "alpha", "--keys-from", tmp_.Sub("missing.txt")}).rc, 2);
  EXPECT_EQ(Json(Kv({"ls", f_.dir, "--ns", "alpha", "--json"})).size(), 9u);
}

TEST_F(KvtierCli, StatsPrometheus) {
  Out s = Kv({"stats", f_.dir});
  ASSERT_EQ(s.rc, 0) << s.err;
  for (const char* want : {"# HELP kvtier_hits_total", "# TYPE kvtier_hits_total counter",
                           "kvtier_hits_total{source=\"disk\"}", "kvtier_misses_total 0",
                           "kvtier_checksum_failures_total", "kvtier_evictions_total", "kvtier_write_amplification",
                           "# TYPE kvtier_namespace_blocks gauge", "kvtier_blocks{tier=\"disk\"} 17",
                           "kvtier_zero_copy_put_bytes_total", "kvtier_remote_connected 0", "kvtier_remote_hits_total 0"})
    EXPECT_NE(s.out.find(want), std::string::npos) << want << "\n" << s.out;
  EXPECT_NE(s.out.find("kvtier_namespace_blocks{namespace=\"alpha\",ns_id=\"" + NamespaceIdToHex(f_.alpha) + "\"} 12"),
            std::string::npos);
  // Every non-comment line is "kvtier_<name>[{labels}] <number>".
  std::istringstream in(s.out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("#", 0) == 0) continue;
    EXPECT_EQ(line.rfind("kvtier_", 0), 0u) << line;
    EXPECT_NE(line.find(' '), std::string::npos) << line;
  }
  json j = Json(Kv({"stats", f_.dir, "--json"}));
  EXPECT_EQ(j["namespaces"], 2);
  EXPECT_EQ(j["blocks{tier=\"disk\"}"], 17);
  // Counting walks the whole index: the commands that count show it.
  for (const char* cmd : {"stats", "info", "ns"}) {
    Out p = Kv({cmd, f_.dir}, {"KVTIER_PROGRESS=always"});
    ASSERT_EQ(p.rc, 0) << cmd << ": " << p.err;
    EXPECT_NE(p.err.find("counting blocks ["), std::string::npos) << cmd << ": " << p.err;
    EXPECT_NE(p.err.find("17/17"), std::string::npos) << cmd << ": " << p.err;
  }
}

void ExpectSameBlocks(const std::string& a, const std::string& b, const std::string& ns_name) {
  Options ro;
  ro.read_only = true;
  auto sa = Store::Open(a, ro);
  auto sb = Store::Open(b, ro);
  ASSERT_TRUE(sa.ok() && sb.ok());
  auto na = (*sa)->FindNamespace(ns_name);
  auto nb = (*sb)->FindNamespace(ns_name);
  ASSERT_TRUE(na.ok() && nb.ok());
  EXPECT_EQ(*na, *nb);
  size_t n = 0;
  ASSERT_TRUE((*sa)->ListBlocks(*na, "", [&](const BlockInfo& bi) {
                  auto x = (*sa)->GetVector(*na, bi.key);
                  auto y = (*sb)->GetVector(*nb, bi.key);
                  EXPECT_TRUE(x.ok() && y.ok());
                  if (x.ok() && y.ok()) {
                    EXPECT_TRUE(*x == *y);
                  }
                  ++n;
                  return true;
                }).ok());
  EXPECT_GT(n, 0u);
  size_t m = 0;
  ASSERT_TRUE((*sb)->ListBlocks(*nb, "", [&](const BlockInfo&) { return ++m, true; }).ok());
  EXPECT_EQ(n, m);
}

// An export reads its namespace a batch (1,024 blocks) at a time, each
// listed after the last key of the one before: every block goes, once,
// here 20,000 small ones, many times what the store's read queue holds.
TEST_F(KvtierCli, ExportOfMoreThanOneBatchRoundTrips) {
  {
    auto s = Store::Open(f_.dir, SmallOptions());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto id = (*s)->RegisterNamespace(Spec("many", "test/many"));
    ASSERT_TRUE(id.ok());
    for (int from = 0; from < 20000; from += 1000) {
      std::vector<std::string> keys, bodies;
      for (int i = from; i < from + 1000; ++i) {
        keys.push_back(KeyOf(i));
        bodies.push_back(PayloadOf(3, i, 512 + i % 7));
      }
      std::vector<Fragment> frags;
      for (const std::string& b : bodies) frags.push_back(Fragment{b.data(), b.size()});
      std::vector<PutItem> items;
      for (size_t i = 0; i < keys.size(); ++i) items.push_back(PutItem{keys[i], {&frags[i], 1}});
      for (const Status& st : (*s)->PutBatch(*id, items)) ASSERT_TRUE(st.ok()) << st.ToString();
    }
    ASSERT_TRUE((*s)->Close().ok());
  }
  const std::string archive = tmp_.Sub("many.kvta");
  json e = Json(Kv({"export", f_.dir, "--ns", "many", "-o", archive, "--json"}));
  EXPECT_EQ(e["blocks"], 20000);
  EXPECT_EQ(e["skipped"], 0);
  const std::string second = tmp_.Sub("second");
  json im = Json(Kv({"import", second, archive, "--segment-size", "1M", "--json"}));
  EXPECT_EQ(im["blocks"], 20000);
  ExpectSameBlocks(f_.dir, second, "many");
}

TEST_F(KvtierCli, ExportImportRoundTripAndCorruptArchiveRefused) {
  const std::string plain = tmp_.Sub("alpha.kvta"), packed = tmp_.Sub("alpha.kvta.zst");
  json e = Json(Kv({"export", f_.dir, "--ns", "alpha", "-o", plain, "--json"}));
  EXPECT_EQ(e["blocks"], 12);
  Out z = Kv({"export", f_.dir, "--ns", "alpha", "-o", packed, "--zstd"});
  ASSERT_EQ(z.rc, 0) << z.err;
  EXPECT_NE(z.out.find("zstd"), std::string::npos);

  const std::string second = tmp_.Sub("second");
  json im = Json(Kv({"import", second, plain, "--segment-size", "1M", "--json"}));
  EXPECT_EQ(im["blocks"], 12);
  ExpectSameBlocks(f_.dir, second, "alpha");
  const std::string third = tmp_.Sub("third");
  Out iz = Kv({"import", third, packed, "--segment-size", "1M"});
  ASSERT_EQ(iz.rc, 0) << iz.err;
  EXPECT_NE(iz.out.find("imported 12 blocks"), std::string::npos);
  ExpectSameBlocks(f_.dir, third, "alpha");

  // One flipped byte anywhere: refused, and the target store is not touched.
  for (const std::string& src : {plain, packed}) {
    std::string bytes = ReadFile(src);
    for (size_t at : {size_t{20}, bytes.size() / 2, bytes.size() - 3}) {
      std::string bad = bytes;
      bad[at] = static_cast<char>(bad[at] ^ 0x01);
      const std::string bp = tmp_.Sub("bad.kvta");
      WriteFile(bp, bad);
      Out r = Kv({"import", tmp_.Sub("never"), bp});
      EXPECT_EQ(r.rc, 1) << src << " @" << at;
      EXPECT_NE(r.err.find("refusing"), std::string::npos) << r.err;
      EXPECT_FALSE(fs::exists(tmp_.Sub("never")));
    }
    const std::string tp = tmp_.Sub("short.kvta");
    WriteFile(tp, bytes.substr(0, bytes.size() - 100));
    Out r = Kv({"import", second, tp});
    EXPECT_EQ(r.rc, 1);
  }
  WriteFile(tmp_.Sub("junk"), std::string(200, 'j'));
  Out j = Kv({"import", second, tmp_.Sub("junk")});
  EXPECT_EQ(j.rc, 1);
  EXPECT_NE(j.err.find("not a kvtier archive"), std::string::npos) << j.err;
  EXPECT_EQ(Kv({"import", second, tmp_.Sub("absent.kvta")}).rc, 1);
}

TEST(KvtierCliDemo, SmallDemoVerifiesEverything) {
  TempDir t;
  Out o = Kv({"demo", "--dir", t.Sub("demo"), "--total-bytes", "64M", "--segment-size", "8M", "--batch-bytes", "16M", "--json"});
  ASSERT_EQ(o.rc, 0) << o.out << o.err;
  json j = json::parse(o.out);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["shapes"].size(), 5u);
  EXPECT_EQ(j["bytes_verified"], j["payload_bytes"]);
  EXPECT_EQ(j["blocks_present"], j["blocks"]);
  EXPECT_EQ(j["recovered_from_crash"], false);
  EXPECT_GT(j["write_gb_per_s"].get<double>(), 0);
  // The table form, on the same store (second run overwrites the same keys).
  Out t2 = Kv({"demo", "--dir", t.Sub("demo"), "--total-bytes", "16M", "--segment-size", "8M"});
  ASSERT_EQ(t2.rc, 0) << t2.out << t2.err;
  EXPECT_NE(t2.out.find("byte-exact"), std::string::npos) << t2.out;
  EXPECT_NE(t2.out.find("deepseek-v3/bf16/mla"), std::string::npos);
  EXPECT_EQ(Kv({"demo", "--dir", t.Sub("d2"), "--segment-size", "1M"}).rc, 2);
}

}  // namespace
}  // namespace kvtier
