// The writer's passes: records placed in the open segment, contiguous runs
// queued as one I/O each, the pass written and handed to the committer.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "log/writer.h"

namespace kvtier {

namespace {
constexpr uint64_t kPage = format::kPage;
}  // namespace

Writer::Place Writer::PlaceRecord(WriteOp& op, const Touched& touched) {
  if (format::IsCompact(op.flags) && pos_.next_seq > format::kCompactMaxSequence) {
    // A compact header holds 48 bits of sequence (2.8e14 puts).
    op.status = Status::NoSpace("sequence numbers of compact records are exhausted");
    return Place::kFailed;
  }
  const uint64_t seg_size = d_.table->segment_size();
  // A dense record that follows the previous one in the ring follows it on
  // disk. Any other starts on a fresh page, a dense one at its offset within
  // its ring page, so that the pages in between can be written from the ring
  // as they are (WriteGroup). Every write ends on a page: the record must fit
  // with its padding.
  auto where = [&]() -> uint64_t {
    if (op.dense() && dense_mem_end_ == op.alloc.data) return pos_.off;
    const uint64_t page = format::AlignUp(pos_.off);
    return op.dense() ? page + reinterpret_cast<uintptr_t>(op.alloc.data) % kPage : page;
  };
  uint64_t at = where();
  if (pos_.seg == UINT32_MAX || format::AlignUp(at + op.rec_bytes) > seg_size || d_.committer->IsPoisoned(pos_.seg)) {
    dense_mem_end_ = nullptr;
    if (pos_.seg != UINT32_MAX) {
      SealOpenSegment();
      pass_sealed_ = true;
    }
    Status st = OpenNextSegment(touched);
    if (st.code() == Code::kAborted) return Place::kEndGroup;  // victim is in this group
    if (!st.ok()) {
      op.status = st;
      return Place::kFailed;
    }
    at = where();  // fits: dense records are at most a quarter of a segment
  }
  op.segment = pos_.seg;
  op.generation = pos_.gen;
  op.offset = at;
  op.sequence = pos_.next_seq++;
  pos_.off = at + op.rec_bytes;
  dense_mem_end_ = op.dense() ? op.alloc.data + op.rec_bytes : nullptr;
  format::EncodeRecordHeader(HeaderOf(op), op.key, op.alloc.data);
  return Place::kPlaced;
}

// The writer stage: place a pass of records, write them, hand the pass to
// the committer. While the committer fdatasyncs and commits pass N, the writer is
// already writing pass N+1, so the device never idles waiting for a sync.
void Writer::WriteGroup(std::vector<WriteOp>& group) {
  Touched touched;
  WriteRuns runs(d_.max_write_chunk_bytes);
  for (size_t begin = 0; begin < group.size();) {
    touched.clear();
    runs.Clear();
    pass_sealed_ = false;
    const Clock::time_point pass = Clock::now();
    const size_t end = PlacePass(group, begin, &touched);
    const Clock::time_point placed = Clock::now();
    for (size_t i = begin; i < end; ++i) {
      group[i].times.pass = pass;
      group[i].times.placed = placed;
    }
    QueueWrites(group, begin, end, &runs);
    SubmitPass(group, begin, end, touched, &runs);
    begin = end;
  }
}

// Places records from `begin`; stops early when rollover would reclaim a
// segment this pass is still writing, or when the pass's dense runs could
// need more than the staging buffer for their partial first and last pages.
// Returns the end of the pass.
size_t Writer::PlacePass(std::vector<WriteOp>& group, size_t begin, Touched* touched) {
  dense_mem_end_ = nullptr;  // pos_.off is on a page: nothing continues
  uint64_t scratch = 0;
  size_t end = begin;
  for (; end < group.size(); ++end) {
    WriteOp& op = group[end];
    if (op.dense() && dense_mem_end_ != op.alloc.data) {
      if (end > begin && scratch + 2 * kPage > kStagingBytes) break;
      scratch += 2 * kPage;
    }
    Place r = PlaceRecord(op, *touched);
    if (r == Place::kEndGroup) break;
    if (r == Place::kPlaced) touched->insert(op.segment);
  }
  if (end == begin) {  // could not place even one: reclaim is blocked
    group[end].status = Status::NoSpace("no segment can be reclaimed");
    ++end;
  }
  pos_.off = format::AlignUp(pos_.off);  // the pass's last write is padded to a page
  return end;
}

namespace {
// A run of dense records: from an op, the ops after it that follow it on
// disk and in memory (ops that failed placement hold no space and are
// skipped).
struct DenseRun {
  size_t last, next;  // the run's last op, where to continue after it
};

std::vector<DenseRun> FindDenseRuns(const std::vector<WriteOp>& group, size_t begin, size_t end) {
  std::vector<DenseRun> runs;
  for (size_t i = begin; i < end;) {
    if (!group[i].status.ok() || !group[i].dense()) {
      ++i;
      continue;
    }
    size_t last = i, j = i + 1;
    for (; j < end; ++j) {
      const WriteOp& o = group[j];
      if (!o.status.ok()) continue;
      const WriteOp& p = group[last];
      if (!o.dense() || o.segment != p.segment || o.offset != p.offset + p.rec_bytes ||
          o.alloc.data != p.alloc.data + p.rec_bytes)
        break;
      last = j;
    }
    runs.push_back(DenseRun{last, j});
    i = j;
  }
  return runs;
}
}  // namespace

// One I/O per run that is contiguous on disk and in memory (records copied
// into the ring merge; borrowed payloads are written where they are). A run
// of dense records shares its first and last pages with other ring memory:
// those go through the staging buffer, zero outside the run.
void Writer::QueueWrites(std::vector<WriteOp>& group, size_t begin, size_t end, WriteRuns* runs) {
  const std::vector<DenseRun> dense = FindDenseRuns(group, begin, end);
  const uint64_t stage_need = 2 * kPage * dense.size();  // a run's partial first and last page
  if (staging_.size() < stage_need && !staging_.Reset(std::max(stage_need, kStagingBytes))) {
    // Records placed after unwritten ones must not be acknowledged: fail the
    // pass and retire its segments, as a failed write does.
    for (size_t i = begin; i < end; ++i)
      if (group[i].status.ok()) {
        group[i].status = Status::NoSpace("out of memory for the write staging buffer");
        d_.committer->Poison(group[i].segment);
      }
  }
  uint8_t* scratch_page = staging_.data();
  size_t run = 0;
  for (size_t i = begin; i < end;) {
    WriteOp& op = group[i];
    if (!op.status.ok()) {
      ++i;
      continue;
    }
    File* file = d_.table->file(op.segment);
    if (op.dense()) {
      const auto [last, next] = dense[run++];
      // The run is [f0, f1) on disk and starts at m0 in the ring, at the same
      // offset within a page (PlaceRecord).
      const uint64_t f0 = op.offset, f1 = group[last].offset + group[last].rec_bytes;
      uint8_t* const m0 = op.alloc.data;
      for (uint64_t pg = format::PageStart(f0); pg < f1;) {
        if (pg >= f0 && pg + kPage <= f1) {  // whole pages of the run
          const uint64_t stop = format::PageStart(f1);
          runs->Add(file, pg, m0 + (pg - f0), stop - pg);
          pg = stop;
          continue;
        }
        const uint64_t lo = std::max(pg, f0), hi = std::min(pg + kPage, f1);
        std::memset(scratch_page, 0, kPage);
        std::memcpy(scratch_page + (lo - pg), m0 + (lo - f0), hi - lo);
        runs->Add(file, pg, scratch_page, kPage);
        scratch_page += kPage;
        pg += kPage;
      }
      i = next;
      continue;
    }
    iovec whole{op.alloc.data, op.rec_bytes};
    std::span<const iovec> pieces = op.pieces.empty() ? std::span<const iovec>(&whole, 1) : op.pieces;
    uint64_t at = op.offset;
    for (const iovec& piece : pieces) {
      runs->Add(file, at, static_cast<uint8_t*>(piece.iov_base), piece.iov_len);
      at += piece.iov_len;
    }
    ++i;
  }
}

// Writes the pass, fails (and poisons) what a failed write touched, and hands
// the pass to the committer with the append position after it.
void Writer::SubmitPass(std::vector<WriteOp>& group, size_t begin, size_t end,
                           const Touched& touched, WriteRuns* runs) {
  std::vector<IoRequest>& reqs = runs->requests();
  if (!reqs.empty()) d_.io->Submit(reqs).IgnoreError();  // per-request statuses below
  const Clock::time_point written = Clock::now();
  d_.counters->registered_writes.Set(d_.io->stats().registered_buffer_requests);
  std::unordered_map<File*, Status> failed;
  for (const IoRequest& rq : reqs) {
    if (!rq.status.ok() && !failed.count(rq.file)) failed[rq.file] = rq.status;
    if (rq.status.ok()) d_.counters->device_bytes_written.Add(rq.len);
  }
  CommitJob job;
  for (size_t i = begin; i < end; ++i) {
    WriteOp& op = group[i];
    op.times.written = written;
    if (op.status.ok()) {
      auto f = failed.find(d_.table->file(op.segment));
      if (f != failed.end()) {
        op.status = f->second.WithContext("writing record");
        d_.committer->Poison(op.segment);
      }
    }
    job.ops.push_back(std::move(op));
  }
  job.touched.assign(touched.begin(), touched.end());
  job.sealed = pass_sealed_;
  if (pos_.seg != UINT32_MAX) d_.table->SetUsed(pos_.seg, pos_.off);
  job.frontier.epoch = pos_.epoch;
  job.frontier.offset = pos_.seg == UINT32_MAX ? d_.table->segment_size() : pos_.off;
  job.frontier.next_sequence = pos_.next_seq;
  d_.committer->HandOff(std::move(job));
}

}  // namespace kvtier
