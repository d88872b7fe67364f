#include "store/store_test_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "format/record.h"

namespace kvtier::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/kvtier-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}

TempDir::~TempDir() {
  // Stores first, through Store::Destroy: a RAM tier in /dev/shm outlives
  // the folder otherwise, and a suite run leaves gigabytes of it behind.
  std::error_code ec;
  std::vector<std::string> stores;
  for (auto it = std::filesystem::recursive_directory_iterator(path_, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().filename() == "SUPERBLOCK") stores.push_back(it->path().parent_path().string());
  }
  for (const std::string& dir : stores) (void)Store::Destroy(dir);
  std::filesystem::remove_all(path_, ec);
}

NamespaceSpec TestSpec(const std::string& model, uint32_t tp_rank) {
  NamespaceSpec s;
  s.model_id = model;
  s.model_revision = "r1";
  s.dtype = "bf16";
  s.layout = "test-layout";
  s.block_tokens = 16;
  s.tp_rank = tp_rank;
  s.tp_size = 2;
  s.hash_scheme = "sha256_cbor";
  return s;
}

std::vector<uint8_t> Payload(NamespaceId ns, const std::string& key, size_t size, uint32_t version) {
  std::vector<uint8_t> v(size);
  uint64_t x = format::Checksum(key.data(), key.size()) ^ (ns * 0x9E3779B97F4A7C15ull) ^ version;
  for (size_t i = 0; i < size; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, size - i));
  }
  return v;
}

std::string Key(uint64_t i) {
  std::string k(32, '\0');
  uint64_t h = format::Checksum(&i, sizeof i);
  for (int j = 0; j < 4; ++j) std::memcpy(&k[j * 8], &h, 8), h = h * 31 + i + j;
  return k;
}

std::unique_ptr<Store> OpenOrFail(const std::string& dir, const Options& o) {
  auto s = Store::Open(dir, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

NamespaceId RegisterOrFail(Store* s) {
  auto id = s->RegisterNamespace(TestSpec());
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  return id.value_or(0);
}

Options SmallOptions(IoBackend backend) {
  Options o;
  o.segment_size_bytes = 1 << 20;
  o.capacity_bytes = 16 << 20;
  o.write_queue_bytes = 8 << 20;
  o.group_commit_bytes = 2 << 20;
  o.io_backend = backend;
  o.read_threads = 2;
  o.queue_depth = 16;
  return o;
}

std::string BackendName(const ::testing::TestParamInfo<IoBackend>& info) {
  return info.param == IoBackend::kIoUring ? "io_uring" : "posix";
}

void ExpectOptionRefused(const Options& o, const std::string& option) {
  TempDir dir;
  auto s = Store::Open(dir.Sub("store"), o);
  ASSERT_FALSE(s.ok()) << option;
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument) << s.status().ToString();
  EXPECT_NE(s.status().message().find(option), std::string::npos) << s.status().ToString();
}

void FlipBit(const std::string& path, uint64_t offset, int bit) {
  int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) throw std::runtime_error("open " + path);
  uint8_t b;
  if (pread(fd, &b, 1, static_cast<off_t>(offset)) != 1) throw std::runtime_error("pread");
  b ^= static_cast<uint8_t>(1u << bit);
  if (pwrite(fd, &b, 1, static_cast<off_t>(offset)) != 1) throw std::runtime_error("pwrite");
  ::close(fd);
}

std::function<void(const std::string&)> WarnedLines::Sink() {
  return [this](const std::string& line) {
    std::lock_guard<std::mutex> l(mu_);
    lines_.push_back(line);
  };
}

std::vector<std::string> WarnedLines::Lines() {
  std::lock_guard<std::mutex> l(mu_);
  return lines_;
}

size_t WarnedLines::Count(const std::string& part) {
  std::lock_guard<std::mutex> l(mu_);
  size_t n = 0;
  for (const std::string& line : lines_) n += line.find(part) != std::string::npos;
  return n;
}

}  // namespace kvtier::testing
