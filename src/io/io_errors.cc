#include "io/io_errors.h"

namespace kvtier {

Status TransferError(int err, bool write, const std::string& path, uint64_t offset, size_t n) {
  std::string context = write ? "write " : "read ";
  context += path;
  context += " at offset " + std::to_string(offset) + " (" + std::to_string(n) + " bytes)";
  return Status::FromErrno(err, context);
}

Status ShortReadError(const std::string& path, uint64_t offset, size_t n, size_t got) {
  return Status::Corruption("short read " + path + ": wanted " + std::to_string(n) +
                            " bytes at offset " + std::to_string(offset) + ", end of file after " +
                            std::to_string(got));
}

Status StalledWriteError(const std::string& path, uint64_t offset, size_t n, size_t done) {
  return Status::IOError("short write " + path + ": wrote " + std::to_string(done) + " of " +
                         std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                         ", then no progress");
}

Status ValidateRequest(const IoRequest& r) {
  if (r.file == nullptr) return Status::InvalidArgument("io request without a file");
  if (r.iov != nullptr) {
    if (r.op != IoRequest::Op::kRead) {
      return Status::InvalidArgument("vectored io request on " + r.file->path() + " is not a read");
    }
    size_t sum = 0;
    for (unsigned i = 0; i < r.iovcnt; ++i) {
      if (r.iov[i].iov_base == nullptr && r.iov[i].iov_len != 0) {
        return Status::InvalidArgument("vectored read on " + r.file->path() + " with a piece without a buffer");
      }
      sum += r.iov[i].iov_len;
    }
    if (sum != r.len) {
      return Status::InvalidArgument("vectored read on " + r.file->path() + ": its pieces hold " +
                                     std::to_string(sum) + " bytes, not " + std::to_string(r.len));
    }
    return Status::OK();
  }
  if (r.buf == nullptr && r.len != 0) {
    return Status::InvalidArgument("io request on " + r.file->path() + " without a buffer");
  }
  return Status::OK();
}

}  // namespace kvtier
