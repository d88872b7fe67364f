// WriteRuns: a pass's device writes, merged into one request per run that
// is contiguous both on disk and in memory, and split at `max_chunk` bytes
// so that reads can slip between long writes.
//
// Not thread-safe: the writer's, one pass at a time.
#ifndef KVTIER_SRC_LOG_WRITE_RUNS_H_
#define KVTIER_SRC_LOG_WRITE_RUNS_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kvtier/io.h"

namespace kvtier {

class WriteRuns {
 public:
  explicit WriteRuns(uint64_t max_chunk) : max_chunk_(max_chunk) {}

  // Writes `len` bytes at `mem` to `file` at offset `at`.
  void Add(File* file, uint64_t at, uint8_t* mem, uint64_t len) {
    for (uint64_t done = 0; done < len;) {
      IoRequest* last = reqs_.empty() ? nullptr : &reqs_.back();
      const uint64_t left = len - done;
      if (last != nullptr && last->file == file && last->offset + last->len == at + done &&
          static_cast<uint8_t*>(last->buf) + last->len == mem + done && last->len < max_chunk_) {
        const uint64_t n = std::min<uint64_t>(left, max_chunk_ - last->len);
        last->len += n;
        done += n;
        continue;
      }
      IoRequest rq;
      rq.op = IoRequest::Op::kWrite;
      rq.file = file;
      rq.offset = at + done;
      rq.buf = mem + done;
      rq.len = std::min<uint64_t>(left, max_chunk_);
      done += rq.len;
      reqs_.push_back(rq);
    }
  }
  std::vector<IoRequest>& requests() { return reqs_; }
  void Clear() { reqs_.clear(); }

 private:
  const uint64_t max_chunk_;
  std::vector<IoRequest> reqs_;
};

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_WRITE_RUNS_H_
