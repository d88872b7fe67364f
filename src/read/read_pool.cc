#include "read/read_pool.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "format/record.h"
#include "read/read_buffers.h"
#include "util/aligned_buffer.h"
#include "util/checksum.h"
#include "util/page_backing.h"

namespace kvtier {

namespace {
constexpr uint64_t kPage = format::kPage;
// Heap bounce buffers a read thread keeps for reads it could have made
// direct (caller memory on 4 KiB pages): 32 x 2 MiB blocks.
constexpr size_t kChosenBounceBytes = 64u << 20;

// Copies n bytes from src into `out` starting at payload position `at`.
void ScatterAt(std::span<const MutableFragment> out, uint64_t at, const uint8_t* src, uint64_t n) {
  for (const MutableFragment& f : out) {
    if (n == 0) break;
    if (at >= f.size) {
      at -= f.size;
      continue;
    }
    const uint64_t k = std::min<uint64_t>(n, f.size - at);
    std::memcpy(static_cast<uint8_t*>(f.data) + at, src, k);
    src += k;
    n -= k;
    at = 0;
  }
}

// The pieces of one read of a direct record's pages: its header page into
// `edges`, the payload's `whole` pages into the caller's `out`, and its tail
// page (when `tail`) into edges + kPage. Returns the bytes they hold.
uint64_t DirectPieces(std::span<const MutableFragment> out, uint64_t whole, bool tail, uint8_t* edges,
                      std::vector<iovec>* pieces) {
  pieces->clear();
  pieces->push_back(iovec{edges, kPage});
  uint64_t done = 0;
  for (const MutableFragment& f : out) {
    if (done == whole) break;
    const uint64_t n = std::min<uint64_t>(f.size, whole - done);
    if (n == 0) continue;
    pieces->push_back(iovec{f.data, n});
    done += n;
  }
  if (tail) pieces->push_back(iovec{edges + kPage, kPage});
  return kPage + whole + (tail ? kPage : 0);
}

uint64_t Ns(Clock::duration d) {
  return static_cast<uint64_t>(std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
}

void NoteReadTimes(Counters& c, const ReadTimes& t, Clock::time_point reaped, Clock::time_point completed) {
  c.disk_reads_timed.Add();
  c.disk_read_queue_ns.Add(Ns(t.taken - t.queued));
  c.disk_read_index_ns.Add(Ns(t.submitted - t.taken));
  c.disk_read_device_ns.Add(Ns(reaped - t.submitted));
  c.disk_read_finish_ns.Add(Ns(completed - reaped));
}

void MissRead(const ReadPool::Deps& d, const std::shared_ptr<ReadOp>& op, Status why) {
  d.counters->misses.Add();
  CompleteRead(op, std::move(why));
}

void AdmitToRam(const ReadPool::Deps& d, const ReadOp& op, std::span<const Fragment> payload,
                const format::IndexValue& v) {
  // A Remove (or disk eviction) that ran since the index lookup would not
  // have seen this copy, so look again and take it back if the entry changed.
  uint64_t token = d.ram->Insert(op.ns, op.key, payload, v.payload_checksum, /*only_if_absent=*/true);
  if (token != 0) {
    auto again = d.index->Get(op.ns, op.key);
    if (!again.ok() || !again->has_value() || (*again)->sequence != v.sequence) d.ram->EraseIf(op.ns, op.key, token);
  }
}

// Verifies a record read for `op` (entry `v`) and completes the op: a hit,
// or a miss whose entry is handed to `drop`. `rec` is the record's start;
// when `direct`, only its header page (and after it the tail page), the
// payload's whole pages already in op->out. The caller has unpinned the
// segment (the bytes are in `rec` and op->out). The read's phases (`times`,
// reaped at `reaped`) are counted before it completes, so that a caller who
// reads the stats after its get finds them.
void CompleteRecord(const ReadPool::Deps& d, const std::shared_ptr<ReadOp>& op, const format::IndexValue& v,
                    const uint8_t* rec, bool direct, const Status& io_status, uint64_t device_bytes,
                    const ReadTimes& times, Clock::time_point reaped) {
  Counters& c = *d.counters;
  const auto note_times = [&] { NoteReadTimes(c, times, reaped, Clock::now()); };
  if (!io_status.ok()) {
    note_times();
    if (io_status.code() == Code::kCorruption) {  // short read: truncated segment
      c.checksum_failures.Add();
      d.drop(op->ns, op->key, v.sequence);
      MissRead(d, op, Status::NotFound("record unreadable: " + io_status.message()));
    } else {
      MissRead(d, op, io_status);
    }
    return;
  }
  c.device_bytes_read.Add(device_bytes);
  // Verify everything the record says against what the index expects.
  const uint64_t have = direct ? kPage : v.RecordBytes();
  std::string_view key;
  auto h = format::DecodeRecordHeader({rec, have}, d.stored_payload_limit, &key);
  bool good = h.ok() && format::RecordAgainstEntry(*h, key, op->ns, op->key, v) == 0;
  const uint64_t whole = v.payload_len / kPage * kPage;
  const uint8_t* payload = rec + v.PayloadOffset();
  if (good) {
    if (direct) {
      // The payload's whole pages are in the caller's fragments, the rest in
      // the bounce page after the header.
      Xxh3Stream st;
      uint64_t left = whole;
      for (const MutableFragment& f : op->out) {
        if (left == 0) break;
        const uint64_t n = std::min<uint64_t>(left, f.size);
        st.Update(f.data, n);
        left -= n;
      }
      st.Update(rec + kPage, v.payload_len - whole);
      good = st.Digest() == h->payload_checksum;
    } else {
      good = format::Checksum(payload, h->payload_len) == h->payload_checksum;
    }
  }
  if (!good) {
    c.checksum_failures.Add();
    d.drop(op->ns, op->key, v.sequence);
    note_times();
    MissRead(d, op, Status::NotFound("record failed verification (counted, entry dropped)"));
    return;
  }
  if (!op->Claim()) {  // the deadline won
    note_times();
    return;
  }
  if (direct) {
    ScatterAt(op->out, whole, rec + kPage, v.payload_len - whole);
  } else {
    ScatterAt(op->out, 0, payload, v.payload_len);
  }
  c.hits_disk.Add();
  c.bytes_read_disk.Add(v.payload_len);
  if (direct) c.direct_read_bytes.Add(whole);
  d.note_hit(v);
  if (d.ram != nullptr) {
    // The copy to admit, gathered before `done` lets the caller reuse `out`.
    std::vector<Fragment> admit;
    if (direct) {
      uint64_t left = v.payload_len;
      for (const MutableFragment& f : op->out) {
        if (left == 0) break;
        const uint64_t n = std::min<uint64_t>(left, f.size);
        admit.push_back(Fragment{f.data, n});
        left -= n;
      }
    } else {
      admit.push_back(Fragment{payload, v.payload_len});
    }
    // Admit before completing: the caller may change its buffer at once,
    // and a get that has returned must find the block in RAM on the next call.
    AdmitToRam(d, *op, admit, v);
  }
  note_times();
  op->done(static_cast<size_t>(v.payload_len));
}
// Where a read's lookup left it.
enum class Found {
  kRead,    // *v and its pinned *file: the caller reads the record and unpins
  kDone,    // completed here: an index error, a miss, a stale entry, a buffer too small
  kPassed,  // as large as `pass_from` or more: untouched, nothing pinned
};

// The index lookup that every read starts with, shared by the readers and
// the callers' threads. A stale entry (its segment reused) is dropped and
// answered as a miss, or handed to the shared tier.
Found LookUpRecord(const ReadPool::Deps& d, const std::shared_ptr<ReadOp>& op, uint64_t pass_from,
                   format::IndexValue* v, File** file) {
  auto e = d.index->Get(op->ns, op->key);
  if (!e.ok()) {
    CompleteRead(op, e.status());
    return Found::kDone;
  }
  if (!e->has_value()) {
    if (!d.remote_get(op)) MissRead(d, op, Status::NotFound("no such key"));
    return Found::kDone;
  }
  *v = **e;
  if (v->payload_len > op->out_total) {
    CompleteRead(op, Status::BufferTooSmall("block has " + std::to_string(v->payload_len) + " bytes, buffer " +
                                            std::to_string(op->out_total)));
    return Found::kDone;
  }
  if (v->payload_len >= pass_from) return Found::kPassed;
  *file = d.table->Pin(v->segment, v->generation);
  if (*file == nullptr) {  // segment reused or missing: the entry is stale
    d.drop(op->ns, op->key, v->sequence);
    if (!d.remote_get(op)) MissRead(d, op, Status::NotFound("block was evicted"));
    return Found::kDone;
  }
  return Found::kRead;
}
}  // namespace

// One reader thread's state: its queue, its bounce buffers and a slot per
// read in flight. Used only by its thread.
class ReadPool::Reader {
 public:
  explicit Reader(const Deps& d)
      : d_(d),
        c_(*d.counters),
        // A slot per read in flight, big enough for every record a get
        // reads whole (below zero_copy_min_bytes, plus the page a dense
        // record may start inside; direct reads need two pages).
        bufs_(d.queue_depth,
              format::RecordBytes(format::kMaxKeyBytes, std::min<uint64_t>(d.zero_copy_min_bytes, 1u << 20), 0) +
                  kPage),
        ios_(d.queue_depth) {
    for (size_t i = 0; i < ios_.size(); ++i) {
      ios_[i] = std::make_unique<ReadIo>();
      ios_[i]->reader = this;
      ios_[i]->slot = i;
      free_.push_back(ios_.size() - 1 - i);  // hand out low slots first: less slab memory touched
    }
  }

  void Run(ReadPool* pool);

 private:
  // One get's I/O: the whole record into `bounce`, or (direct) the header
  // page and tail page into `bounce` and the payload's whole pages straight
  // into the caller's fragments.
  struct ReadIo {
    Reader* reader = nullptr;
    size_t slot = 0;  // also this read's ReadBuffers slot
    std::shared_ptr<ReadOp> op;
    format::IndexValue v;
    uint8_t* bounce = nullptr;
    uint64_t first = 0;  // file offset of bounce[0] when not direct
    bool direct = false;
    int left = 0;                 // requests still in flight
    Status status;                // the first failure
    uint64_t device_bytes = 0;
    ReadTimes times;
    std::vector<IoRequest> reqs;  // enqueued on the queue; never grown while in flight
    std::vector<iovec> pieces;    // a direct read's: header page, the caller's pages, tail page
  };

  size_t busy() const { return ios_.size() - free_.size(); }
  // Requires busy() < ios_.size().
  size_t Acquire() {
    const size_t b = free_.back();
    free_.pop_back();
    ios_[b]->reqs.clear();
    return b;
  }
  // Drops the op (its requests are cleared by the next Acquire: Release
  // runs inside one of their on_done).
  void Release(size_t b) {
    ios_[b]->op.reset();
    free_.push_back(b);
  }
  // Looks up and enqueues reads (at most the free slots' count of them);
  // those that need no I/O complete at once.
  void StartReads(std::vector<std::shared_ptr<ReadOp>>& ops);
  // Starts one looked-up read: false when it completed at once.
  void Enqueue(const std::shared_ptr<ReadOp>& op, const format::IndexValue& v, File* file, const ReadTimes& times);
  // Verifies a record read for an op and completes it (from
  // IoRequest::on_done, when the last of its requests is done).
  void FinishRead(ReadIo& io);

  const Deps& d_;
  Counters& c_;
  std::unique_ptr<IoQueue> queue_;
  ReadBuffers bufs_;
  std::vector<std::unique_ptr<ReadIo>> ios_;
  std::vector<size_t> free_;
};

ReadPool::ReadPool(Deps deps) : d_(std::move(deps)) {
  for (unsigned i = 0; i < d_.threads; ++i) readers_.push_back(std::make_unique<Reader>(d_));
  for (auto& r : readers_) threads_.emplace_back([this, reader = r.get()] { reader->Run(this); });
}

ReadPool::~ReadPool() { Stop(); }

ReadPool::Admit ReadPool::Submit(std::shared_ptr<ReadOp> op, WhenFull when_full) {
  {
    MutexLock l(&mu_);
    while (when_full == WhenFull::kWait && !stop_ && queue_.size() >= d_.max_pending) {
      ++room_waiters_;
      bool woken = true;
      if (op->start_by == kNoDeadline) l.Wait(room_cv_);
      else woken = l.WaitUntil(room_cv_, op->start_by);
      --room_waiters_;
      if (!woken) break;  // its batch's deadline passed: refused as full
    }
    if (stop_) return Admit::kClosed;
    if (queue_.size() >= d_.max_pending) return Admit::kFull;
    op->queued = Clock::now();
    queue_.push_back(std::move(op));
  }
  cv_.notify_one();
  return Admit::kQueued;
}

void ReadPool::Stop() {
  {
    MutexLock l(&mu_);
    stop_ = true;
    while (on_callers_ > 0) l.Wait(callers_cv_);  // reads on callers' threads use the index too
  }
  cv_.notify_all();
  room_cv_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

bool ReadPool::Take(size_t room, bool idle, std::vector<std::shared_ptr<ReadOp>>* batch,
                    const std::function<void()>& on_idle) {
  MutexLock l(&mu_);
  if (idle) {
    if (queue_.empty() && !stop_ && on_idle) {  // idle: the reader registers what it used
      l.Unlock();
      on_idle();
      l.Lock();
    }
    while (queue_.empty() && !stop_) l.Wait(cv_);
    if (queue_.empty() && stop_) return false;
  }
  // Share the waiting reads among the threads (each keeps its own ring busy)
  // rather than letting one thread take them all.
  const size_t share = std::min<size_t>(room, (queue_.size() + d_.threads - 1) / d_.threads);
  while (!queue_.empty() && batch->size() < share) {
    batch->push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  if (room_waiters_ > 0 && !batch->empty()) room_cv_.notify_all();
  return true;
}

void ReadPool::Reader::Run(ReadPool* pool) {
  auto q = d_.fs->NewIoQueue(d_.queue_depth);
  if (q.ok()) queue_ = std::move(q).value();
  std::vector<std::shared_ptr<ReadOp>> batch;
  const std::function<void()> register_used = [this] {
    if (queue_ != nullptr && bufs_.NeedsRegister()) bufs_.Register(queue_.get());
  };
  // Streaming: take reads while this thread has free slots, and come back
  // for more as soon as any read in flight is done, so one large read never
  // holds up the small ones behind it.
  for (;;) {
    batch.clear();
    const size_t b = busy();
    if (b < ios_.size() && !pool->Take(ios_.size() - b, b == 0, &batch, register_used)) return;
    if (queue_ == nullptr) {
      for (auto& op : batch) CompleteRead(op, q.status());
      continue;
    }
    StartReads(batch);
    if (queue_->Outstanding() > 0) queue_->Reap(/*wait=*/true);  // runs FinishRead of what is done
  }
}

void ReadPool::Reader::StartReads(std::vector<std::shared_ptr<ReadOp>>& ops) {
  // Each read completes on its own (IoRequest::on_done, inside Reap) as soon
  // as its I/O does.
  const auto now = Clock::now();
  for (auto& op : ops) {
    if (!op->pending()) continue;  // expired while queued
    if (op->deadline <= now || op->start_by <= now) {
      if (op->Expire()) {
        c_.misses.Add();
        c_.get_deadline_misses.Add();
        op->done(Status::TimedOut("deadline passed before the read started"));
      }
      continue;
    }
    if (op->start_by != kNoDeadline && !op->Start()) continue;  // the timer expired it just now
    format::IndexValue v;
    File* file = nullptr;
    ReadTimes times{op->queued, Clock::now(), {}};
    if (LookUpRecord(d_, op, UINT64_MAX, &v, &file) != Found::kRead) continue;
    times.submitted = Clock::now();
    Enqueue(op, v, file, times);
  }
}

void ReadPool::Reader::Enqueue(const std::shared_ptr<ReadOp>& op, const format::IndexValue& v, File* file,
                               const ReadTimes& times) {
  // Straight into the caller's pages when the layout allows and nothing can
  // complete the op early: a deadline miss promises `out` is never touched
  // afterwards, which an in-flight read could not keep.
  const uint64_t whole = v.payload_len / kPage * kPage;
  bool direct = op->deadline == kNoDeadline && whole > 0 && v.payload_len >= d_.zero_copy_min_bytes &&
                format::PayloadAligned(v.key_len, v.payload_len, v.flags) && PageRun(op->out.data(), op->out.size(), whole);
  const size_t b = Acquire();  // Take handed out no more ops than free slots
  // A whole read covers the record's sectors (a dense one may share them):
  // its pages, or less where the device reads smaller granules.
  const uint64_t granule = file->read_align();
  const uint64_t first = format::PageStart(v.offset, granule);
  const uint64_t paged = format::PagedBytes(v.offset, v.RecordBytes(), granule);
  if (direct && bufs_.BounceFits(b, paged, kChosenBounceBytes) &&
      !ZeroCopyPagesOk(op->out.data(), op->out.size(), whole, d_.zero_copy_small_pages)) {
    direct = false;  // 4 KiB pages: read into a huge-page bounce buffer and copy
    c_.small_page_copies.Add();
  }
  uint8_t* const bounce = bufs_.Get(b, direct ? 2 * kPage : paged);
  if (bounce == nullptr) {
    Release(b);
    d_.table->Unpin(v.segment);
    CompleteRead(op, Status::NoSpace("out of memory for a read buffer"));
    return;
  }
  ReadIo& io = *ios_[b];
  io.op = op;
  io.v = v;
  io.bounce = bounce;
  io.first = first;
  io.direct = direct;
  io.status = Status::OK();
  io.device_bytes = 0;
  io.times = times;
  auto add = [&](uint64_t offset, void* buf, uint64_t len) {
    IoRequest rq;
    rq.op = IoRequest::Op::kRead;
    rq.file = file;
    rq.offset = offset;
    rq.buf = buf;
    rq.len = len;
    rq.user = &io;
    rq.on_done = [](IoRequest& r) {
      auto* done_io = static_cast<ReadIo*>(r.user);
      if (r.status.ok()) {
        done_io->device_bytes += r.len;
      } else if (done_io->status.ok()) {
        done_io->status = r.status;
      }
      if (--done_io->left == 0) {
        done_io->reader->FinishRead(*done_io);
        done_io->reader->Release(done_io->slot);
      }
    };
    io.reqs.push_back(rq);
  };
  if (!direct) {
    add(first, io.bounce, paged);
  } else {
    // One read of the record's pages, scattered: the header page (header
    // and key) and the tail page to the bounce buffer, the payload's whole
    // pages straight to the caller's.
    add(v.offset, nullptr, DirectPieces(op->out, whole, v.payload_len > whole, io.bounce, &io.pieces));
    io.reqs.back().iov = io.pieces.data();
    io.reqs.back().iovcnt = static_cast<unsigned>(io.pieces.size());
  }
  // Enqueued once complete: the vector no longer moves, and on_done runs
  // only inside Reap.
  io.left = static_cast<int>(io.reqs.size());
  for (IoRequest& rq : io.reqs) queue_->Enqueue(&rq);
}

void ReadPool::Reader::FinishRead(ReadIo& io) {
  const auto reaped = Clock::now();
  d_.table->Unpin(io.v.segment);
  const uint8_t* rec = io.bounce + (io.direct ? 0 : io.v.offset - io.first);
  CompleteRecord(d_, io.op, io.v, rec, io.direct, io.status, io.device_bytes, io.times, reaped);
}

bool ReadPool::ReadDirectOnCaller(const std::shared_ptr<ReadOp>& op, const format::IndexValue& v, File* file,
                                  const ReadTimes& times) {
  const uint64_t whole = v.payload_len / kPage * kPage;
  if (whole == 0 || !format::PayloadAligned(v.key_len, v.payload_len, v.flags) ||
      !PageRun(op->out.data(), op->out.size(), whole) ||
      !ZeroCopyPagesOk(op->out.data(), op->out.size(), whole, d_.zero_copy_small_pages)) {
    return false;
  }
  // The header page and the tail page; the payload's whole pages go to the
  // caller's, all in one read of the record's pages (as a reader does).
  thread_local AlignedBuffer edges(2 * kPage);
  if (edges.data() == nullptr) return false;
  std::vector<iovec> pieces;
  const uint64_t bytes = DirectPieces(op->out, whole, v.payload_len > whole, edges.data(), &pieces);
  const Status st = file->ReadAtV(v.offset, pieces);
  const auto reaped = Clock::now();
  d_.table->Unpin(v.segment);
  CompleteRecord(d_, op, v, edges.data(), /*direct=*/true, st, st.ok() ? bytes : 0, times, reaped);
  return true;
}

bool ReadPool::ReadOnCaller(const std::shared_ptr<ReadOp>& op) {
  {
    MutexLock l(&mu_);
    if (stop_) return false;  // Submit answers Closed
    ++on_callers_;
  }
  const bool served = ServeOnCaller(op);
  {
    MutexLock l(&mu_);
    if (--on_callers_ == 0 && stop_) callers_cv_.notify_all();
  }
  return served;
}

bool ReadPool::ServeOnCaller(const std::shared_ptr<ReadOp>& op) {
  format::IndexValue v;
  File* file = nullptr;
  const auto taken = Clock::now();
  const Found found = LookUpRecord(d_, op, UINT64_MAX, &v, &file);
  if (found != Found::kRead) return found == Found::kDone;
  const ReadTimes times{taken, taken, Clock::now()};  // no queue: this thread reads
  if (v.payload_len >= d_.zero_copy_min_bytes) {
    // Large: straight into the caller's pages with one blocking read, when
    // they allow it; else to the readers, whose buffers take it.
    if (ReadDirectOnCaller(op, v, file, times)) return true;
    d_.table->Unpin(v.segment);
    return false;
  }
  // One bounce buffer per calling thread, grown to the largest record read.
  thread_local AlignedBuffer bounce;
  const uint64_t granule = file->read_align();  // the record's sectors, not its pages, where the device allows
  const uint64_t first = format::PageStart(v.offset, granule);
  const uint64_t paged = format::PagedBytes(v.offset, v.RecordBytes(), granule);
  if (bounce.size() < paged) bounce = AlignedBuffer(paged);
  Status st = bounce.data() == nullptr ? Status::NoSpace("out of memory for a read buffer")
                                       : file->ReadAt(first, bounce.data(), paged);
  const auto reaped = Clock::now();
  d_.table->Unpin(v.segment);
  CompleteRecord(d_, op, v, bounce.data() + (v.offset - first), /*direct=*/false, st, st.ok() ? paged : 0, times,
                 reaped);
  return true;
}

}  // namespace kvtier
