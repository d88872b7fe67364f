// Status builders shared by the I/O backends, so that the posix and io_uring
// paths report the same failure with the same code and the same words.
#ifndef KVTIER_IO_IO_ERRORS_H_
#define KVTIER_IO_IO_ERRORS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvtier/io.h"
#include "kvtier/status.h"

namespace kvtier {

// An errno from a positional read or write:
// "<read|write> PATH at offset O (N bytes): strerror".
Status TransferError(int err, bool write, const std::string& path, uint64_t offset, size_t n);

// End of file before `n` bytes were read (Corruption, "short read ...").
// `got` is how many bytes were read before the end.
Status ShortReadError(const std::string& path, uint64_t offset, size_t n, size_t got);

// A write that transferred nothing and reported no error (IOError).
Status StalledWriteError(const std::string& path, uint64_t offset, size_t n, size_t done);

// InvalidArgument when a request has no file or no buffer for a non-empty
// transfer; OK otherwise.
Status ValidateRequest(const IoRequest& r);

}  // namespace kvtier

#endif  // KVTIER_IO_IO_ERRORS_H_
