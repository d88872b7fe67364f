#include "io/posix_io_queue.h"

#include <vector>

#include "io/io_errors.h"

namespace kvtier {

Status RunRequestSync(IoRequest& r) {
  r.status = ValidateRequest(r);
  if (r.status.ok() && r.len != 0) {
    if (r.op == IoRequest::Op::kRead && r.iov != nullptr) {
      r.status = r.file->ReadAtV(r.offset, {r.iov, r.iovcnt});
    } else if (r.op == IoRequest::Op::kRead) {
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
    while (Reap(true) > 0) {
    }
    Status first;
    for (IoRequest& r : requests) {
      if (!RunRequestSync(r).ok() && first.ok()) first = r.status;
    }
    return first;
  }

  void Enqueue(IoRequest* request) override { pending_.push_back(request); }

  // Runs everything enqueued, in order; what on_done enqueues meanwhile waits
  // for the next call.
  size_t Reap(bool wait) override {
    (void)wait;
    std::vector<IoRequest*> batch;
    batch.swap(pending_);
    running_ = batch.size();
    for (IoRequest* r : batch) {
      --running_;  // final before its on_done runs, as on the io_uring queue
      (void)RunRequestSync(*r);  // calls on_done
    }
    return batch.size();
  }

  size_t Outstanding() const override { return pending_.size() + running_; }

  unsigned depth() const override { return depth_; }
  const char* backend() const override { return "posix"; }

 private:
  const unsigned depth_;
  std::vector<IoRequest*> pending_;  // enqueued, not yet run
  size_t running_ = 0;               // requests of the batch Reap is running, not yet started
};

}  // namespace

std::unique_ptr<IoQueue> NewPosixIoQueue(unsigned depth) {
  return std::make_unique<PosixIoQueue>(depth == 0 ? 1 : depth);
}

}  // namespace kvtier
