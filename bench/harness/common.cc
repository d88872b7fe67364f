#include <sys/mman.h>

#include "harness/common.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>

namespace kvbench {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Room for sliding the block window across the shared buffer.
constexpr size_t kSlack = 1u << 20;

}  // namespace

std::string MakeKey(uint64_t seed, uint64_t id) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull ^ id;
  std::string k(32, '\0');
  for (size_t i = 0; i < 32; i += 8) {
    const uint64_t r = SplitMix64(&s);
    std::memcpy(&k[i], &r, 8);
  }
  return k;
}

Payloads::Payloads(size_t max_block_bytes) : base_(max_block_bytes + kSlack) {
  uint64_t s = 42;
  for (size_t i = 0; i + 8 <= base_.size(); i += 8) {
    const uint64_t r = SplitMix64(&s);
    std::memcpy(&base_[i], &r, 8);
  }
}

size_t Payloads::Offset(uint64_t id) const {
  uint64_t s = id;
  return (SplitMix64(&s) % (kSlack / 64)) * 64;
}

void Payloads::Fill(uint64_t id, size_t size, uint8_t* dst) const {
  std::memcpy(dst, base_.data() + Offset(id), size);
  const uint64_t neg = ~id;
  std::memcpy(dst, &id, 8);
  std::memcpy(dst + 8, &neg, 8);
  if (size >= 32) std::memcpy(dst + size - 8, &id, 8);
}

bool Payloads::Verify(uint64_t id, size_t size, const uint8_t* got) const {
  if (size < 32) return false;
  const uint64_t neg = ~id;
  if (std::memcmp(got, &id, 8) != 0 || std::memcmp(got + 8, &neg, 8) != 0 ||
      std::memcmp(got + size - 8, &id, 8) != 0)
    return false;
  const uint8_t* want = base_.data() + Offset(id);
  return std::memcmp(got + 16, want + 16, size - 24) == 0;
}

namespace {
bool g_huge_buffers = true;
}  // namespace

void SetHugePageBuffers(bool on) { g_huge_buffers = on; }
bool HugePageBuffers() { return g_huge_buffers; }

AlignedBuf::AlignedBuf(size_t size) : size_(size) {
  // Buffers of 2 MiB and more sit on huge pages where the kernel has them,
  // like an engine's pinned staging memory: O_DIRECT I/O from them pins one
  // page per 2 MiB instead of 512 (expensive on this VM), for every design.
  constexpr size_t kHuge = 2u << 20;
  const size_t align = size >= kHuge && g_huge_buffers ? kHuge : 4096;
  const size_t rounded = (size + align - 1) / align * align;
  p_ = static_cast<uint8_t*>(std::aligned_alloc(align, rounded == 0 ? align : rounded));
  if (p_ == nullptr) throw std::bad_alloc();
  // Hints, fine if refused; 4 KiB mode also opts out where THP is "always".
  if (align == kHuge) {
    madvise(p_, rounded, MADV_HUGEPAGE);
  } else if (!g_huge_buffers) {
    madvise(p_, rounded, MADV_NOHUGEPAGE);
  }
}

AlignedBuf::~AlignedBuf() { std::free(p_); }

AlignedBuf& AlignedBuf::operator=(AlignedBuf&& o) noexcept {
  if (this != &o) {
    std::free(p_);
    p_ = o.p_;
    size_ = o.size_;
    o.p_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

ProcCounters ProcCounters::Now() {
  ProcCounters c;
  std::ifstream io("/proc/self/io");
  std::string name;
  uint64_t v = 0;
  while (io >> name >> v) {
    if (name == "write_bytes:") c.write_bytes = v;
  }
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/block", ec)) {
    const std::string dev = e.path().filename().string();
    if (dev.rfind("loop", 0) == 0 || dev.rfind("ram", 0) == 0) continue;
    std::ifstream st(e.path() / "stat");
    uint64_t f[7] = {};
    for (uint64_t& x : f) st >> x;
    if (st) {
      c.device_sectors_written += f[6];
      c.device_reads += f[0];
    }
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  c.cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
            ru.ru_stime.tv_usec / 1e6;
  std::ifstream statm("/proc/self/statm");
  uint64_t size_pages = 0, resident_pages = 0;
  if (statm >> size_pages >> resident_pages) c.resident_bytes = resident_pages * uint64_t(sysconf(_SC_PAGESIZE));
  return c;
}

void FillPercentiles(std::vector<double>* lat_us, Measurement* m) {
  if (lat_us->empty()) return;
  std::sort(lat_us->begin(), lat_us->end());
  auto at = [&](double q) {
    const size_t i = std::min(lat_us->size() - 1, static_cast<size_t>(q * lat_us->size()));
    return (*lat_us)[i];
  };
  m->p50_us = at(0.50);
  m->p99_us = at(0.99);
  m->p999_us = at(0.999);
}

void FillRates(uint64_t ops, uint64_t payload_bytes, double seconds, const ProcCounters& before,
               const ProcCounters& after, bool writes, Measurement* m) {
  m->ops = ops;
  if (seconds <= 0) return;
  m->ops_per_s = ops / seconds;
  if (payload_bytes > 0) {
    m->gbps = payload_bytes / seconds / 1e9;
    m->cpu_s_per_gb = (after.cpu_s - before.cpu_s) / (payload_bytes / 1e9);
    if (writes) m->write_amp = double(after.write_bytes - before.write_bytes) / payload_bytes;
  }
}

std::string HumanBytes(uint64_t n) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (std::fabs(v - std::round(v)) < 1e-9)
    std::snprintf(buf, sizeof buf, "%.0f%s", v, units[u]);
  else
    std::snprintf(buf, sizeof buf, "%.1f%s", v, units[u]);
  return buf;
}

std::optional<uint64_t> ParseBytes(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  double v = std::strtod(s.substr(0, i).c_str(), nullptr);
  std::string unit = s.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit == "IB" || unit.empty() || unit == "B") {
  } else if (unit == "K" || unit == "KB" || unit == "KIB") {
    v *= 1024;
  } else if (unit == "M" || unit == "MB" || unit == "MIB") {
    v *= 1024 * 1024;
  } else if (unit == "G" || unit == "GB" || unit == "GIB") {
    v *= 1024.0 * 1024 * 1024;
  } else if (unit == "T" || unit == "TB" || unit == "TIB") {
    v *= 1024.0 * 1024 * 1024 * 1024;
  } else {
    return std::nullopt;
  }
  return static_cast<uint64_t>(v);
}

namespace {
bool g_tty = isatty(2) == 1;
size_t g_last_len = 0;
}  // namespace

void Progress(const std::string& line) {
  if (g_tty) {
    std::string l = line;
    if (l.size() < g_last_len) l.append(g_last_len - l.size(), ' ');
    std::fprintf(stderr, "\r%s", l.c_str());
    g_last_len = line.size();
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void ProgressDone() {
  if (g_tty && g_last_len > 0) std::fprintf(stderr, "\n");
  g_last_len = 0;
}

}  // namespace kvbench
