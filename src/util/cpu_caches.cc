#include "util/cpu_caches.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace kvtier {
namespace {

// "16384K" or "32M" from /sys/devices/system/cpu/cpu0/cache/indexN/size.
uint64_t SysfsCacheBytes(int index) {
  const std::string path = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return 0;
  char buf[32] = {};
  const bool got = std::fgets(buf, sizeof(buf), f) != nullptr;
  std::fclose(f);
  if (!got) return 0;
  char* end = nullptr;
  const uint64_t n = std::strtoull(buf, &end, 10);
  if (end != nullptr && *end == 'K') return n << 10;
  if (end != nullptr && *end == 'M') return n << 20;
  return n;
}

uint64_t Probe() {
  uint64_t best = 0;
  for (int i = 0; i < 8; ++i) best = std::max(best, SysfsCacheBytes(i));
  if (best != 0) return best;
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) return static_cast<uint64_t>(l3);
  return 32ull << 20;
}

}  // namespace

uint64_t LastLevelCacheBytes() {
  static const uint64_t bytes = Probe();
  return bytes;
}

}  // namespace kvtier
