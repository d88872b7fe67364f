// File's one out-of-line piece: its never-reused id (see File::uid). Kept
// apart from the kernel-backed files so that code built without them (the
// scanner's fuzz target) still links.
#include <atomic>

#include "kvtier/io.h"

namespace kvtier {

File::File() : uid_([] {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}()) {}

}  // namespace kvtier
