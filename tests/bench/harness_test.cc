// kvtier-bench's correctness: the tiny preset runs every workload on every
// design, reads every block back and verifies it (exit status 1 otherwise),
// and --json prints the schema of issue 5. The binary is built next to this
// test (build/bin); speed is not checked here.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace {

namespace fs = std::filesystem;

std::string BenchBinary() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  return (fs::path(std::string(exe, static_cast<size_t>(n))).parent_path() / "kvtier-bench").string();
}

struct BenchRun {
  int status = -1;
  std::string out;
};

// Runs `args` through the shell with stderr to a file; returns exit status and stdout.
BenchRun RunBench(const std::string& args) {
  BenchRun r;
  const std::string cmd = BenchBinary() + " " + args + " 2>" + ::testing::TempDir() + "/bench.err";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

class BenchHarnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(BenchBinary())) << "kvtier-bench not built next to the test: "
                                           << BenchBinary();
    char tmpl[] = "/tmp/kvtier_bench_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

TEST_F(BenchHarnessTest, TinyPresetVerifiesEveryBlockAndPrintsTheSchema) {
  // fio is left to the next test so this one stays within seconds.
  BenchRun r = RunBench("--preset tiny --no-fio --json --dir " + dir_ + "/data");
  ASSERT_EQ(r.status, 0) << "every read must verify; output:\n" << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_TRUE(j.contains("machine"));
  EXPECT_TRUE(j["machine"].contains("cpu"));
  EXPECT_TRUE(j["machine"].contains("fs_type"));
  const std::set<std::string> designs = {"fio", "kvtier", "kvtier-ram", "file-per-block",
                                         "file-per-block-fsync", "rocksdb-blob"};
  const std::set<std::string> ops = {"put", "get", "lookup", "reopen"};
  const std::set<std::string> fields = {"design", "op", "gbps", "ops_per_s", "p50_us",
                                        "p99_us", "p999_us", "write_amp", "cpu_s_per_gb"};
  std::set<std::string> names, seen_designs;
  for (const auto& w : j["workloads"]) {
    names.insert(w["name"].get<std::string>());
    EXPECT_GT(w["block_bytes"].get<uint64_t>(), 0u);
    for (const auto& res : w["results"]) {
      for (const auto& [k, v] : res.items()) EXPECT_TRUE(fields.count(k)) << "unexpected field " << k;
      EXPECT_TRUE(designs.count(res["design"].get<std::string>()));
      EXPECT_TRUE(ops.count(res["op"].get<std::string>()));
      seen_designs.insert(res["design"].get<std::string>());
      if (res["op"] == "put" || res["op"] == "get") {
        EXPECT_GT(res.value("gbps", 0.0), 0.0) << w["name"] << " " << res["design"];
        EXPECT_GT(res.value("p50_us", 0.0), 0.0);
        EXPECT_LE(res.value("p50_us", 0.0), res.value("p999_us", 0.0));
      }
      if (res["op"] == "put" && res["design"] != "fio") {
        // Every byte put reaches the device at least once.
        EXPECT_GE(res.value("write_amp", 0.0), 0.99) << w["name"] << " " << res["design"];
      }
    }
  }
  for (const char* n : {"seq-put", "cold-get", "small-blocks", "prefix-lookup", "reopen-clean",
                        "reopen-kill", "revisit"})
    EXPECT_TRUE(names.count(n)) << "missing workload " << n;
  for (const char* d : {"kvtier", "file-per-block", "file-per-block-fsync", "rocksdb-blob"})
    EXPECT_TRUE(seen_designs.count(d)) << "missing design " << d;
  // The data folder is removed when the run succeeds.
  EXPECT_FALSE(fs::exists(dir_ + "/data"));
}

TEST_F(BenchHarnessTest, FioIsTheReferenceWhenInstalled) {
  BenchRun r = RunBench("--preset tiny --workloads seq --sizes 64K --seq-bytes 4M --designs kvtier "
                   "--json --dir " + dir_);
  ASSERT_EQ(r.status, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  if (j["machine"]["fio"] == "missing") GTEST_SKIP() << "fio is not installed";
  int fio_rows = 0;
  for (const auto& w : j["workloads"])
    for (const auto& res : w["results"])
      if (res["design"] == "fio") {
        ++fio_rows;
        EXPECT_GT(res.value("gbps", 0.0), 0.0);
      }
  EXPECT_EQ(fio_rows, 2);  // sequential write and random read
}

TEST_F(BenchHarnessTest, BadOptionsGetAClearError) {
  BenchRun r = RunBench("--sizes 3K --dir " + dir_);
  EXPECT_EQ(r.status, 2);
  r = RunBench("--designs nosuch --dir " + dir_);
  EXPECT_EQ(r.status, 2);
  r = RunBench("--kvtier-option nosuch=1 --dir " + dir_);
  EXPECT_EQ(r.status, 2);
  r = RunBench("--help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("file-per-block-fsync"), std::string::npos);
}

}  // namespace
