// Staging: the client's share of a sealed memfd (wire/region.h) that payloads
// cross to the service through, handed out in page-aligned extents.
//
// An extent the service may still be reading or writing is never handed out
// again: it goes back only when the service answered for it, or with the
// whole staging area when the connection it belonged to is gone (a new
// connection gets a new memfd).
//
// Thread safety: every method is thread-safe.
#ifndef KVTIER_SRC_CLIENT_STAGING_H_
#define KVTIER_SRC_CLIENT_STAGING_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>

#include "kvtier/store.h"
#include "util/thread_annotations.h"
#include "wire/region.h"

namespace kvtier::client {

class Staging {
 public:
  explicit Staging(std::shared_ptr<wire::SharedRegion> region);
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  struct Extent {
    uint64_t offset = 0;
    uint64_t bytes = 0;  // 0: none
    explicit operator bool() const { return bytes != 0; }
  };
  // An extent of at least `bytes`, waiting until `deadline` for room; an
  // empty one at the deadline, or at once when it could never fit.
  Extent Allocate(uint64_t bytes, Clock::time_point deadline);
  void Free(const Extent& e);

  uint8_t* data(const Extent& e) const { return region_->data() + e.offset; }
  const std::shared_ptr<wire::SharedRegion>& region() const { return region_; }

 private:
  const std::shared_ptr<wire::SharedRegion> region_;
  Mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, uint64_t> free_ GUARDED_BY(mu_);  // offset -> bytes, coalesced
};

}  // namespace kvtier::client

#endif  // KVTIER_SRC_CLIENT_STAGING_H_
