// The "posix" IoQueue: runs each request in turn through File::ReadAt /
// File::WriteAt. Used when io_uring is unavailable, for files without a kernel
// descriptor, and by wrapper file systems (fault injection) so that their
// hooks see batched I/O too.
#ifndef KVTIER_IO_POSIX_IO_QUEUE_H_
#define KVTIER_IO_POSIX_IO_QUEUE_H_

#include <memory>

#include "kvtier/io.h"

namespace kvtier {

// Runs one request synchronously through its File and returns (and stores in
// r.status) the outcome. A zero-length request succeeds without touching the
// file.
Status RunRequestSync(IoRequest& r);

// A queue that issues requests one at a time, in order. depth() reports
// `depth` (it only bounds nothing here; kept so callers size batches the same
// way on every backend). Not thread-safe, like every IoQueue.
std::unique_ptr<IoQueue> NewPosixIoQueue(unsigned depth);

}  // namespace kvtier

#endif  // KVTIER_IO_POSIX_IO_QUEUE_H_
