#include "remote/chunk_reader.h"

#include <pthread.h>

#include <algorithm>

namespace kvtier::remote {

ChunkReader::ChunkReader(ReadFn read, unsigned threads) : read_(std::move(read)) {
  for (unsigned i = 0; i < std::max(threads, 1u); ++i) {
    threads_.emplace_back([this] { ThreadLoop(); });
    pthread_setname_np(threads_.back().native_handle(), "kvtier-upread");
  }
}

ChunkReader::~ChunkReader() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

uint64_t ChunkReader::Start(uint32_t seg, uint32_t gen, uint64_t off, void* buf, size_t len) {
  uint64_t ticket;
  {
    MutexLock l(&mu_);
    ticket = next_ticket_++;
    queued_.push_back(Job{ticket, seg, gen, off, buf, len});
  }
  wake_.notify_one();
  return ticket;
}

Status ChunkReader::Wait(uint64_t ticket) {
  MutexLock l(&mu_);
  for (;;) {
    auto it = finished_.find(ticket);
    if (it != finished_.end()) {
      Status st = std::move(it->second);
      finished_.erase(it);
      return st;
    }
    l.Wait(done_);
  }
}

void ChunkReader::ThreadLoop() {
  MutexLock l(&mu_);
  for (;;) {
    // A stop still finishes what is queued: a caller may be waiting for it,
    // and its buffer is not to be written after the reader is gone.
    if (queued_.empty()) {
      if (stop_) return;
      l.Wait(wake_);
      continue;
    }
    const Job job = queued_.front();
    queued_.pop_front();
    l.Unlock();
    Status st = read_(job.seg, job.gen, job.off, job.buf, job.len);
    l.Lock();
    finished_.emplace(job.ticket, std::move(st));
    done_.notify_all();
  }
}

}  // namespace kvtier::remote
