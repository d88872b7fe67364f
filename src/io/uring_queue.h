// The "io_uring" IoQueue (liburing).
//
// One ring per queue. Submit and Reap keep up to depth() requests in flight,
// reap completions in bulk, resubmit the rest of short transfers and retry
// -EINTR/-EAGAIN; Submit returns only when the kernel is done with every
// buffer. Enqueued requests are tracked in slots (a slot's index is the SQE's
// user data), so new requests join while others are in flight. Requests in
// flight together run concurrently and in no particular order, so they must
// not overlap in the file when one of them writes.
//
// Requests whose File has no descriptor (fd() < 0: simulations and wrappers)
// run synchronously through File::ReadAt/WriteAt instead.
//
// Files are registered with the ring (IOSQE_FIXED_FILE: the kernel skips
// looking the descriptor up and taking a reference per request). A slot of
// a sparse file table is given to a file on its first request, keyed by
// File::uid() so that a descriptor number reused for another file never
// reaches the old file's slot. When every slot is taken, one is given to a
// new file only while nothing is in flight (the least recently used), so no
// queued request can see its slot change; until then the new file's
// requests name its descriptor.
//
// The ring is created with IORING_SETUP_SINGLE_ISSUER|DEFER_TASKRUN where the
// kernel has them (else COOP_TASKRUN, else no flags). Such a ring belongs to
// one thread: it is bound to the first thread that calls Submit, Reap or
// RegisterBuffers, and if a later call comes from another thread while
// nothing is in flight the ring is rebuilt for it (slow, but correct). Not
// thread-safe: one queue per thread.
#ifndef KVTIER_IO_URING_QUEUE_H_
#define KVTIER_IO_URING_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/io.h"

namespace kvtier {

// Largest transfer one submission entry asks for; longer requests are
// split (the kernel caps a read or write near 2 GiB anyway).
inline constexpr size_t kUringMaxTransfer = size_t{1} << 30;

// Counters of one UringIoQueue, for tests and diagnostics.
struct UringQueueStats {
  uint64_t sqes = 0;             // submission entries issued
  uint64_t fixed_sqes = 0;       // ... of which used a registered buffer
  uint64_t resubmissions = 0;    // short transfers continued, EINTR/EAGAIN retried
  uint64_t sync_fallbacks = 0;   // requests run through File::ReadAt/WriteAt
  uint64_t ring_rebuilds = 0;    // rings recreated for a new thread
  uint64_t buffer_appends = 0;   // RegisterBuffers calls that only added regions (see there)
  uint64_t fixed_file_sqes = 0;  // entries that named a registered file
  uint64_t file_registrations = 0;  // files given a slot of the ring's file table
  unsigned file_slots = 0;       // size of that table (0: none; the kernel refused it)
  unsigned setup_flags = 0;      // IORING_SETUP_* the ring was created with
};

// Creates an io_uring queue of `depth` (>= 1) entries. `max_transfer` (a
// multiple of 4096) caps one submission entry; tests lower it to force
// continuation of partial transfers, and `file_slots` to fill the file table. Errors: FromErrno of io_uring_setup
// (e.g. ENOSYS, EPERM when disabled, ENOMEM).
// Slots of the registered file table a queue asks for (fewer where
// RLIMIT_NOFILE is lower; 0 turns registration off).
inline constexpr unsigned kUringFileSlots = 256;

Result<std::unique_ptr<IoQueue>> NewUringIoQueue(unsigned depth, size_t max_transfer = kUringMaxTransfer,
                                                 unsigned file_slots = kUringFileSlots);

// Counters of a queue made by NewUringIoQueue; zeros for any other queue.
UringQueueStats GetUringQueueStats(const IoQueue& queue);

// Why IoUringAvailable() is false ("" when it is true).
std::string IoUringUnavailableReason();

}  // namespace kvtier

#endif  // KVTIER_IO_URING_QUEUE_H_
