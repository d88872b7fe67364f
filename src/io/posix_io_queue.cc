#include "io/posix_io_queue.h"

#include "io/io_errors.h"

namespace kvtier {

Status RunRequestSync(IoRequest& r) {
  r.status = ValidateRequest(r);
  if (r.status.ok() && r.len != 0) {
    if (r.op == IoRequest::Op::kRead) {
      r.status = r.file->ReadAt(r.offset, r.buf, r.len);
    } else {
      r.status = r.file->WriteAt(r.offset, r.buf, r.len);
    }
  }
  if (r.on_done != nullptr) r.on_done(r);
  return r.status;
}

namespace {

class PosixIoQueue final : public IoQueue {
 public:
  explicit PosixIoQueue(unsigned depth) : depth_(depth) {}

  Status Submit(std::span<IoRequest> requests) override {
    Status first;
    for (IoRequest& r : requests) {
      if (!RunRequestSync(r).ok() && first.ok()) first = r.status;
    }
    return first;
  }

  unsigned depth() const override { return depth_; }
  const char* backend() const override { return "posix"; }

 private:
  const unsigned depth_;
};

}  // namespace

std::unique_ptr<IoQueue> NewPosixIoQueue(unsigned depth) {
  return std::make_unique<PosixIoQueue>(depth == 0 ? 1 : depth);
}

}  // namespace kvtier
