// Puts whose payload lies in the client's own memory (wire::PeerMemory): the
// service reads it once, straight into the RAM-tier block the put commits
// (or into a buffer of its own where the tier is off or has no room), and
// the store writes the disk record from there. One copy on the host, as an
// embedded put's, where staging takes two (the client's into staging, then
// the service's out of it).
#include <algorithm>
#include <cstdlib>

#include "service/connection.h"
#include "util/copy_checksum.h"

namespace kvtier::service {

namespace {

// Page-aligned, so that the store writes it to the device as it is.
std::shared_ptr<uint8_t> AlignedBuffer(uint64_t bytes) {
  constexpr uint64_t kPage = 4096;
  void* p = std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

// The kernel's copy lands a piece at a time, each hashed (marks included)
// while the cache still holds it: one pass over memory, as a copy fused with
// its hash is, instead of a copy and then a hash of 2 MiB gone to memory.
constexpr uint64_t kReadPiece = RamTier::kMarkBytes;

// One piece of the destination and where its bytes lie in the client.
struct ReadPiece {
  std::vector<Fragment> from;
  MutableFragment to;
};

Result<std::vector<ReadPiece>> SplitIntoPieces(std::span<const Fragment> remote,
                                               std::span<const MutableFragment> local) {
  std::vector<ReadPiece> pieces;
  size_t ri = 0;
  uint64_t roff = 0;
  for (const MutableFragment& l : local) {
    for (uint64_t off = 0; off < l.size; off += kReadPiece) {
      const uint64_t n = std::min<uint64_t>(kReadPiece, l.size - off);
      ReadPiece p{{}, MutableFragment{static_cast<uint8_t*>(l.data) + off, n}};
      for (uint64_t need = n; need > 0;) {
        if (ri == remote.size()) return Status::InvalidArgument("the client's pieces are shorter than the payload");
        const uint64_t take = std::min<uint64_t>(need, remote[ri].size - roff);
        if (take > 0) p.from.push_back(Fragment{static_cast<const uint8_t*>(remote[ri].data) + roff, take});
        roff += take;
        need -= take;
        if (roff == remote[ri].size) ++ri, roff = 0;
      }
      pieces.push_back(std::move(p));
    }
  }
  return pieces;
}

// Reads every piece and hashes each in order as soon as it and those
// before it have landed. By this thread alone (helpers null), each piece
// hashed while the cache still holds it; or by the helpers too, this
// thread reading only while the next piece in order is not in, so that the
// sequential hash runs beside the reads instead of after them all.
Status ReadAndHash(const wire::PeerMemory& client, std::span<const ReadPiece> pieces, Xxh3Copy* sum,
                   WorkerPool* helpers) {
  std::vector<Status> read(pieces.size());
  Status first_error;
  auto read_one = [&](size_t i) { read[i] = client.Read(pieces[i].from, {&pieces[i].to, 1}); };
  auto hash_one = [&](size_t i) {
    if (!first_error.ok()) return;
    if (!read[i].ok()) {
      first_error = read[i];
      return;
    }
    sum->Hash(pieces[i].to.data, pieces[i].to.size);
  };
  if (helpers != nullptr) {
    helpers->ForEachInOrder(pieces.size(), read_one, hash_one);
    return first_error;
  }
  for (size_t i = 0; i < pieces.size() && first_error.ok(); ++i) read_one(i), hash_one(i);
  return first_error;
}

}  // namespace

void Connection::PutFromClientMemory(const wire::FrameHeader& h, wire::PutRequest req, Clock::time_point start_by) {
  if (peer_memory_ == nullptr || core_->sink == nullptr) {
    ++core_->malformed;
    return Reply(h, Status::InvalidArgument("a put names this client's own memory, which the service said at hello "
                                            "it does not read"));
  }
  std::vector<Fragment> remote;
  uint64_t bytes = 0;
  for (const wire::WireFragment& f : req.payload) {
    if (f.region != wire::kClientMemoryRegion || f.size > (uint64_t{1} << 40) || bytes + f.size < bytes) {
      ++core_->malformed;
      return Reply(h, Status::InvalidArgument("a put's pieces in the client's own memory are mixed with registered "
                                              "regions or oversized"));
    }
    remote.push_back(Fragment{reinterpret_cast<const void*>(static_cast<uintptr_t>(f.offset)), f.size});
    bytes += f.size;
  }
  // Admission bounds what a client makes the service allocate for it.
  if (!AdmitPut(h, bytes)) return;
  ClientMemoryPut p{h, req.ns, std::move(req.key), std::move(remote), bytes, req.blocking, start_by};
  auto put = [self = shared_from_this(), p = std::move(p)] { self->ReadClientMemoryAndPut(p); };
  // As OnPut: queued here when the write queue has room, else on a pool
  // thread, so that this client's other requests are still read.
  if (!req.blocking || core_->sink->WriteQueueHasRoom(bytes)) return put();
  ++core_->pooled_puts;
  core_->puts.Submit(id_, std::move(put));
}

void Connection::ReadClientMemoryAndPut(const ClientMemoryPut& p) {
  auto self = shared_from_this();
  const wire::FrameHeader h = p.h;
  const NamespaceId ns = p.ns;
  const uint64_t bytes = p.bytes;
  PutCallback done = [self, h, ns, bytes](Status s) {
    if (s.ok()) self->core_->access.CountPut(ns, bytes);
    self->Reply(h, s);
    self->Finish(bytes);
  };
  // Past it the client may have stopped waiting and reused its memory.
  if (Clock::now() >= p.start_by) return done(Status::TimedOut("put deadline passed before the service reached it"));
  BlockSink* sink = core_->sink;
  RamTier* tier = sink->ram_tier();
  RamTier::Pin slot = tier != nullptr && bytes != 0 ? tier->Reserve(ns, p.key, bytes) : RamTier::Pin();
  std::shared_ptr<uint8_t> own;
  std::vector<MutableFragment> local;
  if (slot) {
    for (const RamTier::Piece& piece : slot.pieces()) local.push_back(MutableFragment{piece.data, piece.size});
  } else {
    own = AlignedBuffer(bytes);
    if (own == nullptr && bytes != 0) return done(Status::NoSpace("no memory for a put of " + std::to_string(bytes)));
    local.push_back(MutableFragment{own.get(), bytes});
  }
  Xxh3Copy sum(bytes);
  std::vector<Xxh3Mark> marks;
  const bool want_marks = slot && tier->WantsMarks(bytes);
  if (want_marks) sum.RecordMarks(RamTier::kMarkBytes, &marks);
  Status st = ReadPayload(p.remote, local, &sum);
  if (!st.ok()) {
    slot.Release();
    // NotSupported tells the client to send it again through staging.
    return done(Status::NotSupported("the service cannot read this client's memory: " + st.message()));
  }
  ++core_->client_memory_puts;
  const uint64_t checksum = sum.Digest();
  if (slot) {
    if (want_marks && !marks.empty()) tier->SetMarks(slot, std::move(marks));
    return sink->PutInternal(ns, p.key, {}, std::move(slot), p.blocking, std::move(done), &checksum, false,
                             p.start_by);
  }
  const Fragment payload{own.get(), bytes};
  sink->PutInternal(ns, p.key, {&payload, 1}, RamTier::Pin(), p.blocking,
                    [own, done = std::move(done)](Status s) { done(std::move(s)); }, &checksum, /*borrow=*/true,
                    p.start_by);
}

// A put's payload split among threads only while at most as many such
// reads run as the pool has helpers: with more, every core already reads.
Status Connection::ReadPayload(std::span<const Fragment> remote, std::span<const MutableFragment> local,
                               Xxh3Copy* sum) {
  auto pieces = SplitIntoPieces(remote, local);
  if (!pieces.ok()) return pieces.status();
  WorkerPool& pool = core_->client_reads;
  const uint32_t running = core_->client_reads_running.fetch_add(1) + 1;
  const bool split = pieces->size() > 1 && running <= pool.helpers();
  Status st = ReadAndHash(*peer_memory_, *pieces, sum, split ? &pool : nullptr);
  core_->client_reads_running.fetch_sub(1);
  if (st.ok() && split) ++core_->client_memory_split_puts;
  return st;
}

}  // namespace kvtier::service
