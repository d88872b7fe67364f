// BlockSink: what the GPU path (src/cuda) and the service (src/service) need
// of a store beyond the public Store API. The GPU path fills RAM-tier
// reservations from the device itself, so it needs the tier and a put that
// commits such a reservation instead of copying a payload; the service needs
// puts and gets bounded by when they may still touch a client's memory.
//
// Thread safety: as Store (every method from any thread).
#ifndef KVTIER_SRC_STORE_BLOCK_SINK_H_
#define KVTIER_SRC_STORE_BLOCK_SINK_H_

#include <span>
#include <string_view>

#include "kvtier/store.h"
#include "tier/ram_tier.h"

namespace kvtier {

class BlockSink {
 public:
  virtual ~BlockSink() = default;
  // The host RAM tier, or null when it is off. Owned by the store.
  virtual RamTier* ram_tier() = 0;
  // A put that waits for ring space when `blocking` but not for durability;
  // `done` reports durability. With a non-empty `reservation` (a RAM-tier
  // block the caller filled), `payload` is ignored: the reservation's pieces
  // are written through and it is committed to the tier instead of a copy.
  // A non-null `checksum` is the payload's XXH3 computed where the bytes
  // came from: the put does not hash them again. With `borrow`, `payload`
  // stays valid until `done` runs, so it may be written from where it is.
  // A blocking put still waiting for room at `start_by` completes TimedOut
  // without having read `payload`: a service's client may reuse its memory
  // once it has stopped waiting, so nothing may be read from it later.
  virtual void PutInternal(NamespaceId ns, std::string_view key, std::span<const Fragment> payload,
                           RamTier::Pin reservation, bool blocking, PutCallback done,
                           const uint64_t* checksum = nullptr, bool borrow = false,
                           Clock::time_point start_by = kNoDeadline) = 0;
  // GetAsync whose read starts by `start_by` (as GetBatch's deadline): not
  // started by then, it completes TimedOut and `out` is never touched; once
  // started it completes, and may read straight into `out`. What a service
  // asks for a client that gives no deadline of its own.
  virtual void GetStartingBy(NamespaceId ns, std::string_view key, std::span<const MutableFragment> out,
                             Clock::time_point start_by, GetCallback done) = 0;
  // True when a put of `payload_bytes` would find room in the write queue
  // now, so that a blocking PutInternal would not wait. A hint: another put
  // may take the room first, and the blocking put then waits for the writer.
  virtual bool WriteQueueHasRoom(uint64_t payload_bytes) = 0;
  // Counts gets served from the RAM tier by a reader that pinned the blocks
  // itself (the GPU path, a service's lent tier), so that StoreStats' gets,
  // hits_ram and bytes_read_ram cover them as they cover Get's own hits.
  virtual void CountRamHits(uint64_t blocks, uint64_t bytes) = 0;
};

// The sink of a Store made by Store::Open; null for any other Store.
BlockSink* BlockSinkOf(Store* store);

}  // namespace kvtier

#endif  // KVTIER_SRC_STORE_BLOCK_SINK_H_
