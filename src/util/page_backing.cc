#include "util/page_backing.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace kvtier {

namespace {

// The PAGEMAP_SCAN interface of <linux/fs.h> (Linux 6.7, stable ABI), spelled
// out because Debian 12's kernel headers predate it.
struct PmScanArg {
  uint64_t size;
  uint64_t flags;
  uint64_t start;
  uint64_t end;
  uint64_t walk_end;
  uint64_t vec;
  uint64_t vec_len;
  uint64_t max_pages;
  uint64_t category_inverted;
  uint64_t category_mask;
  uint64_t category_anyof_mask;
  uint64_t return_mask;
};
static_assert(sizeof(PmScanArg) == 96, "struct pm_scan_arg is 96 bytes");
struct PageRegion {
  uint64_t start;
  uint64_t end;
  uint64_t categories;
};
static_assert(sizeof(PageRegion) == 24, "struct page_region is 24 bytes");
constexpr unsigned long kPagemapScan = _IOWR('f', 16, PmScanArg);
constexpr uint64_t kPageIsHuge = 1u << 6;

// /proc/self/pagemap, opened on first use: -1 when unavailable (no /proc,
// seccomp). The file names the process that opened it, so a forked child
// drops the parent's (an atfork handler) and opens its own.
constexpr int kNotOpened = -2;
std::atomic<int> g_pagemap_fd{kNotOpened};

void DropPagemapInChild() {
  const int fd = g_pagemap_fd.exchange(kNotOpened);
  if (fd >= 0) ::close(fd);
}

int PagemapFd() {
  int fd = g_pagemap_fd.load(std::memory_order_acquire);
  if (fd != kNotOpened) return fd;
  static std::once_flag atfork;
  std::call_once(atfork, [] { pthread_atfork(nullptr, nullptr, DropPagemapInChild); });
  const int opened = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  int expected = kNotOpened;
  if (g_pagemap_fd.compare_exchange_strong(expected, opened)) return opened;
  if (opened >= 0) ::close(opened);  // another thread was first
  return expected;
}

std::atomic<bool> g_scan_unsupported{false};

}  // namespace

PageBacking QueryPageBacking(const void* p, size_t len) {
  if (len == 0) return PageBacking::kHuge;
  const int fd = PagemapFd();
  if (fd < 0 || g_scan_unsupported.load(std::memory_order_relaxed)) return PageBacking::kUnknown;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uint64_t end = reinterpret_cast<uintptr_t>(p) + len;
  // Ask for the first page that is NOT huge (the huge bit inverted, then
  // required): none found means every page is huge.
  PageRegion region{};
  PmScanArg arg{};
  arg.size = sizeof(arg);
  arg.start = begin;
  arg.end = end;
  arg.vec = reinterpret_cast<uintptr_t>(&region);
  arg.vec_len = 1;
  arg.max_pages = 1;
  arg.category_inverted = kPageIsHuge;
  arg.category_mask = kPageIsHuge;
  arg.return_mask = kPageIsHuge;
  const int r = ::ioctl(fd, kPagemapScan, &arg);
  if (r < 0) {
    // ENOTTY: a kernel without PAGEMAP_SCAN; it will not grow one.
    if (errno == ENOTTY) g_scan_unsupported.store(true);
    return PageBacking::kUnknown;
  }
  return r == 0 ? PageBacking::kHuge : PageBacking::kSmall;
}

bool TransparentHugePagesUsable() {
  static const bool usable = [] {
    FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f == nullptr) return false;
    char buf[128] = {};
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = 0;
    // The active choice is bracketed: "always [madvise] never".
    return std::strstr(buf, "[never]") == nullptr && n > 0;
  }();
  return usable;
}

}  // namespace kvtier
