// ChunkReader: reads chunks of local segments ahead of the shared tier's
// uploads, on threads of its own.
//
// Why: an upload reads each chunk (one RADOS write, upload_write_bytes) back
// from its local segment before it writes it to RADOS. Read on the upload's thread, one at a time, the
// read-back took 60% of an upload's time on a 2-core VM (1.96 of 3.31 s for
// 2 GiB) while RADOS had room for more writes: the reads, not the cluster,
// set the rate. Reading a few chunks ahead, two at a time, overlaps them with
// the writes and gives the disk more than one read to serve.
//
// Thread-safe: Start and Wait may be called from one thread at a time (the
// upload's). Destruction waits for every read under way, so the buffers
// given to Start must outlive the reader.
#ifndef KVTIER_SRC_REMOTE_CHUNK_READER_H_
#define KVTIER_SRC_REMOTE_CHUNK_READER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "kvtier/status.h"
#include "util/thread_annotations.h"

namespace kvtier::remote {

class ChunkReader {
 public:
  // Reads bytes [off, off+len) of segment (seg, gen) into buf.
  using ReadFn = std::function<Status(uint32_t seg, uint32_t gen, uint64_t off, void* buf, size_t len)>;

  ChunkReader(ReadFn read, unsigned threads);
  ~ChunkReader();
  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;

  // Queues a read; reads start in the order queued. Returns its ticket.
  uint64_t Start(uint32_t seg, uint32_t gen, uint64_t off, void* buf, size_t len);
  // Waits for the read of `ticket` (from Start, waited for once) and
  // returns its status.
  [[nodiscard]] Status Wait(uint64_t ticket);

 private:
  struct Job {
    uint64_t ticket;
    uint32_t seg, gen;
    uint64_t off;
    void* buf;
    size_t len;
  };
  void ThreadLoop();

  const ReadFn read_;
  Mutex mu_;
  std::condition_variable wake_;  // a job queued, or stop
  std::condition_variable done_;  // a read finished
  std::deque<Job> queued_ GUARDED_BY(mu_);
  std::map<uint64_t, Status> finished_ GUARDED_BY(mu_);  // by ticket, until waited for
  uint64_t next_ticket_ GUARDED_BY(mu_) = 1;
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvtier::remote

#endif  // KVTIER_SRC_REMOTE_CHUNK_READER_H_
