// Whether memory sits on huge pages, asked of the kernel.
//
// Zero-copy I/O from memory on 4 KiB pages pins every page and gives the
// device one segment per page; where that is costly (a VM with shadow paging,
// an IOMMU) copying into kvtier's own huge-page buffers is faster. The store
// asks this per buffer to choose (Options::zero_copy_small_pages).
//
// Thread-safe.
#ifndef KVTIER_SRC_UTIL_PAGE_BACKING_H_
#define KVTIER_SRC_UTIL_PAGE_BACKING_H_

#include <cstddef>
#include <cstdint>

namespace kvtier {

enum class PageBacking {
  kHuge,     // every page of the range is a huge page (THP or hugetlbfs)
  kSmall,    // at least one page is a 4 KiB page, or not mapped in yet
  kUnknown,  // the kernel cannot tell (no PAGEMAP_SCAN before Linux 6.7)
};

// The backing of [p, p + len). One ioctl on /proc/self/pagemap (opened once).
PageBacking QueryPageBacking(const void* p, size_t len);

// Whether transparent huge pages can back kvtier's own buffers (its madvise
// asks for them): false when /sys/kernel/mm/transparent_hugepage/enabled
// says "never". Read once.
bool TransparentHugePagesUsable();

inline constexpr uint64_t kMemoryPage = 4096;
inline bool PageAligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & (kMemoryPage - 1)) == 0; }

// Whether the first `bytes` of `pieces` (anything with .data and .size), laid
// out in order, keep every page boundary on a page boundary in memory: each
// piece they touch starts page-aligned and all but the one where they end
// are whole pages. Such bytes can go to or come from the device where they
// are. False when the pieces hold fewer than `bytes` (or `bytes` is 0).
template <typename P>
bool PageRun(const P* pieces, size_t count, uint64_t bytes) {
  uint64_t done = 0;
  for (size_t i = 0; i < count && done < bytes; ++i) {
    if (pieces[i].size == 0) continue;
    if (!PageAligned(pieces[i].data)) return false;
    if (done + pieces[i].size < bytes && pieces[i].size % kMemoryPage != 0) return false;
    done += pieces[i].size < bytes - done ? pieces[i].size : bytes - done;
  }
  return bytes != 0 && done == bytes;
}

// Whether the first `bytes` of a caller's pieces (anything with .data and
// .size) may be used for zero-copy I/O: false when some page is a 4 KiB
// page and copying through kvtier's huge-page buffers is the cheaper way,
// unless `allow_small_pages` (Options::zero_copy_small_pages).
template <typename P>
bool ZeroCopyPagesOk(const P* pieces, size_t count, uint64_t bytes, bool allow_small_pages) {
  if (allow_small_pages || !TransparentHugePagesUsable()) return true;
  for (size_t i = 0; i < count && bytes != 0; ++i) {
    const uint64_t n = pieces[i].size < bytes ? pieces[i].size : bytes;
    if (n != 0 && QueryPageBacking(pieces[i].data, n) == PageBacking::kSmall) return false;
    bytes -= n;
  }
  return true;
}

}  // namespace kvtier

#endif  // KVTIER_SRC_UTIL_PAGE_BACKING_H_
