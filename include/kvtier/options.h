// Options for opening a Store. Every field has a default that suits a single
// NVMe drive; units are in the names.
//
// Contract: Store::Open copies the Options; changing them afterwards has no
// effect. Open checks them and answers InvalidArgument naming the field that
// is out of range. Fields marked "layout" take effect only when a store is
// created. What the defaults were chosen from is measured in
// docs/benchmarks.md; this header says what each field does, not how fast.
#ifndef KVTIER_OPTIONS_H_
#define KVTIER_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kvtier/io.h"

namespace kvtier {

// The shared tier on Ceph (docs/shared-tier.md): sealed segments are
// uploaded as RADOS objects and blocks other nodes uploaded are served on a
// local miss. Off by default; needs a build with librados (else Open fails
// with NotSupported when enabled).
struct RemoteTierOptions {
  bool enabled = false;
  // ceph.conf to read; empty means librados' default search path.
  std::string ceph_conf;
  // Pool, and the client identity (client.<client_id>, its keyring as the
  // Ceph config names it).
  std::string pool = "kvtier";
  std::string client_id = "admin";
  // RADOS namespace inside the pool: nodes share blocks only within one.
  std::string rados_namespace;
  // Bytes of segment objects the shared tier may hold; beyond it the oldest
  // uploads are deleted (by any node). 0 = unlimited.
  uint64_t budget_bytes = 0;
  // Every remote read completes by this time (or the get's own deadline,
  // whichever is sooner); a late read is a miss.
  uint32_t read_deadline_ms = 200;
  // How often the catalog is read for other nodes' uploads.
  uint32_t poll_interval_ms = 1000;
  // A segment is stored as objects of at most this size (RADOS' default
  // osd_max_object_size is 128 MiB). A multiple of 4 MiB. RADOS applies the
  // writes to one object in turn, so an upload keeps 16 writes in flight
  // only across 16 objects: a default segment (256 MiB) makes 16 of 16 MiB.
  uint64_t object_bytes = 16ull << 20;
  // An upload writes each part in RADOS writes of at most this size, a
  // multiple of 4 MiB, at most 64 MiB: fewer, larger writes cost the client
  // (librados' C API copies each write) and the OSD less per byte. About
  // 128 MiB of them are in flight.
  uint64_t upload_write_bytes = 16ull << 20;
  // Bound on each upload, catalog and delete operation (and on connecting).
  uint32_t op_timeout_ms = 10000;
  // Copy blocks served from the shared tier into the RAM tier (when the
  // store has one), so a revisit is served from host memory. Only the RAM
  // tier: a block written to the local log would be uploaded a second time.
  bool admit_to_ram = true;
  // Objects of this RADOS namespace that no catalog entry names (an upload
  // cut short by a crash, a delete that failed) are removed once they are
  // older than orphan_grace_ms, checked every orphan_sweep_interval_ms (0 =
  // never). The grace must exceed the longest upload of any node.
  uint32_t orphan_sweep_interval_ms = 10 * 60 * 1000;
  uint32_t orphan_grace_ms = 30 * 60 * 1000;
  // A clean Close() seals the open segment and waits this long for the
  // uploads to finish (Store::ShareNow), so the last blocks written are
  // shared without a reopen; not while the cluster is unreachable. 0: close
  // at once (they go up once the segment is sealed after a reopen).
  uint32_t close_upload_timeout_ms = 30 * 1000;
};

// Opening a store served by `kvtier serve` (include/kvtier/service.h):
// Store::Open("unix:/path/to.sock", options) connects to a service;
// Store::Open("auto:/store/folder", options) connects to the service of that
// folder, starting one first when none runs. Only these fields (and
// read_only) apply then; the store's own options are the service's.
struct ServiceClientOptions {
  // A sealed memfd shared with the service, through which payloads that are
  // not in registered memory (Store::RegisterMemory) cross. Also bounds the
  // bytes of such puts and gets in flight.
  uint64_t staging_bytes = 256ull << 20;
  // Threads, the caller's included, that copy a GetBatch's blocks out of
  // staging or the lent tier into memory that is not registered: one
  // thread's copy bounds that path well below what the service fills staging
  // at. The helpers also copy GetAsync's blocks out of the lent tier (with
  // 1, the connection's reader thread does). 0: the cores, at most 8. The
  // helpers start with the first such call.
  uint32_t copy_threads = 0;
  // A get into memory that is not registered reads the service's RAM tier
  // itself where the service lends it (mapped read-only): the service pins
  // the blocks, and the client copies and verifies them, one copy on the
  // host instead of two through staging. Blocks the tier does not hold, and
  // gets into registered memory, go to the service as before.
  bool read_lent_tier = true;
  // A put from memory that is not registered (blocking Put and PutBatch,
  // PutAsyncBorrowed) is read by the service straight from this process
  // (process_vm_readv, into its RAM tier): one copy on the host instead of
  // two through staging, where the service has a RAM tier (without one a
  // staged put is one copy, and puts stay staged). The kernel allows it for
  // the service's user (or root); under Yama's ptrace_scope 1 the client
  // names the service's pid with PR_SET_PTRACER, a process-wide setting.
  // Where the service cannot read, puts go through staging. PutAsync always
  // copies into staging, since its caller may reuse the buffer at once.
  bool service_reads_memory = true;
  // Bound on the wait for any reply (a get's own deadline, when sooner).
  // The service reads and writes registered memory itself, so it is told
  // to start nothing on a request's memory later than a quarter of this (at
  // most 5 s) before the wait ends: once a put, get or GetBatch has returned,
  // even TimedOut, the service no longer touches its buffers (short of one
  // device I/O slower than that margin), and the caller may reuse them.
  uint32_t op_timeout_ms = 60000;
  // A blocking request busy-waits this long for its reply before it sleeps,
  // reading the socket itself meanwhile: a reply takes one socket round
  // trip, and a sleeping caller pays a wake-up (and the reader thread's
  // hand-over) on top of it. 0: sleep at once. -1: 50 on hosts of 8 cores or
  // more, else 0 (where spinning callers take the cores the service and
  // the other clients need).
  int32_t reply_spin_us = -1;
  // How long to wait for a connection, and (auto:) for a service being
  // started by this or another client to listen.
  uint32_t connect_timeout_ms = 10000;
  // Shown in the service's log; empty: "pid N".
  std::string client_name;
  // auto: the `kvtier` program that serves; empty: $KVTIER_BIN, else the
  // kvtier beside this library's folder (../bin/kvtier), else on PATH.
  std::string serve_program;
  // auto: a service started by a client exits this long after its last
  // client left (the next client starts it again).
  uint32_t idle_exit_s = 30;
  // auto: arguments added to `kvtier serve` (e.g. "--ram-tier 64G").
  std::string serve_args;
};

struct Options {
  // --- Store folder ---------------------------------------------------------
  // Create the folder and a new store when `dir` holds none.
  bool create_if_missing = true;
  // Fail when a store already exists in `dir`.
  bool error_if_exists = false;
  // Open for reading only: no lock is taken, nothing is written, no recovery
  // runs (records acknowledged after the last index checkpoint of a crashed
  // store stay invisible until a read-write open). For tools.
  bool read_only = false;
  // New files 0660 and folders 0770 instead of 0600 / 0700.
  bool group_access = false;

  // --- Layout (fixed when the store is created; ignored afterwards) ----------
  // Size of each segment file. A multiple of 1 MiB, at least 1 MiB.
  uint64_t segment_size_bytes = 256ull << 20;

  // --- Capacity ------------------------------------------------------------
  // Byte budget for segment files. When the writer needs a new segment and the
  // budget is used, the oldest segment is reclaimed whole (FIFO). Rounded down
  // to whole segments; at least 2 segments. 0 means 8 GiB.
  uint64_t capacity_bytes = 0;
  // Reinsert blocks read since they were written when their segment is
  // reclaimed (hot-block reinsertion), at most this fraction of a segment.
  // The defaults keep the hot set at the least rewriting of the settings
  // measured (docs/benchmarks.md, "Steady state").
  bool reinsert_hot_blocks = true;
  double reinsert_max_fraction = 0.5;
  // Reads since written that make a block hot, from the disk and the RAM
  // tier together: two keep blocks a cold revisit read once from being
  // rewritten. 0 counts as 1.
  uint32_t reinsert_min_hits = 2;
  // Up to this fraction of the segments form a hot region: reinserted blocks
  // are written there, apart from new puts, so a hot set that fits is not
  // rewritten each time the log comes round (docs/benchmarks.md, "Steady
  // state"). Its oldest segment is reclaimed once it holds its share. 0
  // writes them again at the start of the reclaimed segment instead. In
  // [0, 1).
  double hot_region_fraction = 0.5;
  // Which segment a reclaim takes: of the oldest this fraction of the sealed
  // segments (outside the hot region), the one whose hot blocks (read at
  // least reinsert_min_hits times since written) take the fewest bytes, so
  // that hot blocks stay where they lie instead of being rewritten. Only
  // segments read within the last lap of the log count as hot, so blocks no
  // longer read leave too. A window of one segment or less is strict FIFO.
  // Wider windows rewrite less and miss more (docs/benchmarks.md, "Steady
  // state"). In [0, 1].
  double reclaim_window_fraction = 0.25;
  // Give the space of segments left free (EvictTo, a capacity lowered by a
  // full disk) back to the device (fallocate punch hole / TRIM). A segment
  // reclaimed to be written again keeps its space either way: its pages are
  // rewritten at once, and its stale bytes are harmless (docs/format.md).
  bool punch_holes = true;

  // --- Admission (SSD endurance) --------------------------------------------
  // Maximum payload bytes written per day (a token bucket that refills
  // continuously; its burst is one hour's worth or 1 GiB, whichever is
  // larger). Puts beyond it complete with NotAdmitted. 0 = unlimited.
  uint64_t write_budget_bytes_per_day = 0;
  // Admit a key only the second time it is put within a window of recent
  // first puts (a bounded set of key hashes). The first put returns
  // NotAdmitted.
  bool admit_on_second_put = false;
  uint32_t second_put_window = 1u << 20;

  // --- Warnings ----------------------------------------------------------------
  // Called (from any of the store's threads, so it must be thread-safe) with
  // one line for each condition an operator should hear of that is no error:
  // the byte budget capped to what the disk can hold, the disk filling up
  // before the budget, the index refusing writes after a failed write of its
  // files. Null: the line goes to stderr, prefixed "kvtier: ".
  std::function<void(const std::string& line)> warn;

  // --- I/O -------------------------------------------------------------------
  // The file system all I/O goes through; null means DefaultFileSystem(io_backend).
  std::shared_ptr<FileSystem> file_system;
  IoBackend io_backend = IoBackend::kAuto;
  // Open segment files with O_DIRECT (falls back to buffered where refused).
  bool use_direct_io = true;
  // I/Os in flight per queue.
  uint32_t queue_depth = 32;
  // Threads serving reads (each with its own queue).
  uint32_t read_threads = 4;
  // A blocking Get (no deadline) reads its record on the caller's thread
  // with one blocking read, instead of handing it to a read thread and
  // waiting for it: a small record through a buffer, a large one straight
  // into the caller's pages where they allow it (page-aligned; huge pages
  // unless zero_copy_small_pages). Two thread crossings cost more than a
  // small read, and add a fixed cost to every large one. Async gets, batches
  // and large records into other memory use the threads.
  bool read_on_caller_thread = true;
  // Largest single write submitted to the device; larger runs are split so
  // that reads do not queue behind one huge write.
  uint32_t max_write_chunk_bytes = 4u << 20;
  // Page-aligned payloads of at least this many bytes are written to the
  // device from where they are (the caller's pages for Put/PutBatch/
  // PutAsyncBorrowed, the RAM tier's chunks) and read straight into
  // page-aligned caller buffers. Smaller ones are copied through the write
  // ring, where consecutive records merge into one device write, and read
  // with their header in one request: below a few hundred KiB the extra
  // device request costs more than the copy it saves.
  uint64_t zero_copy_min_bytes = 256u << 10;
  // Whether zero-copy also applies to caller memory on 4 KiB pages. Off (the
  // default): a payload goes straight from or into the caller's memory only
  // when every page of it is a huge page (THP or hugetlbfs; the kernel is
  // asked per buffer with PAGEMAP_SCAN, Linux 6.7+), and memory on 4 KiB pages
  // is copied through kvtier's own huge-page buffers instead: an O_DIRECT I/O
  // from 4 KiB pages pins every page and gives the device a segment per page,
  // which can cost more than the copy (docs/benchmarks.md, "Zero-copy only
  // from huge pages"). Turn it on where pinning is cheap (bare metal without
  // an IOMMU in the way) to save the copy's CPU. Where the kernel cannot tell
  // (before 6.7) or THP is "never", zero-copy applies whatever the pages.
  // Stats::small_page_copies counts the copies.
  bool zero_copy_small_pages = false;
  // Records with payloads below zero_copy_min_bytes (always copied through
  // the write ring) and of at most this many bytes are written dense: back
  // to back on 8-byte boundaries, so that only the last page of each write
  // is padded instead of every record's (a 4 KiB payload with its header
  // would otherwise take two pages). 0 gives every record its own pages. At most 4 MiB; Open
  // lowers it to a quarter of the segment size. Stores of format 2 (made by
  // older builds) never get dense records (docs/format.md).
  uint64_t dense_record_max_bytes = 256u << 10;

  // --- Back-pressure ----------------------------------------------------------
  // Bytes of records waiting to be written (the write ring). Async puts that
  // do not fit complete at once with NotAdmitted; blocking puts wait. Also
  // bounds the largest record. Rounded up to 1 MiB.
  uint64_t write_queue_bytes = 256ull << 20;
  // A group commit writes and syncs up to this many bytes at once.
  uint64_t group_commit_bytes = 64ull << 20;
  // Async gets waiting for a read thread; beyond it they complete as a miss.
  // A blocking GetBatch keeps at most a quarter of it in flight and waits for
  // room, so one batch, however long, does not overflow it.
  uint32_t max_pending_reads = 4096;

  // --- Limits ----------------------------------------------------------------
  // Largest payload accepted by Put (at most write_queue_bytes and segment
  // size minus one page).
  uint64_t max_payload_bytes = 128ull << 20;

  // --- Host RAM tier (docs/ram_tier.md) ----------------------------------------
  // Bytes of host memory holding copies of blocks in front of the disk: a Put
  // is copied in and written through to the log (so RAM eviction never loses
  // data); a Get is served from it when present, else from disk and then
  // admitted. Eviction is S3-FIFO. 0 (the default) turns the tier off.
  uint64_t ram_tier_bytes = 0;
  // Keep the tier in /dev/shm/kvtier-<store id>.ram so that it survives a
  // process restart (not a reboot): the next open adopts every block whose
  // checksum and index entry still verify. Used only where /dev/shm has room
  // for the whole tier (else anonymous memory); never for read-only opens.
  bool ram_tier_shared_memory = true;
  // Fault the tier's memory in on a background thread after open, so that
  // early puts do not pay the kernel's page zeroing; the writer registers the
  // tier with its io_uring (puts are then written from its pages without
  // per-write pinning) only once that is done, since registering pins, and so
  // faults in, every page on the writer's thread. Off: the memory is faulted
  // in as blocks fill it, and the tier is never registered.
  bool ram_tier_prefault = true;
  // The tier's unit of memory: a block takes whole chunks, so a block smaller
  // than a chunk still takes one (a 4 KiB block in the default 64 KiB chunk
  // holds 16x its bytes; a 2 MiB block wastes at most 3%). Each chunk also
  // costs 324 bytes of the tier's metadata. Set it to about the blocks' size
  // for small blocks; larger blocks in smaller chunks copy in more pieces once
  // the tier has churned. A multiple of 4096 from 4 KiB to 64 MiB. A tier kept
  // in /dev/shm under another chunk size is not adopted (it starts empty).
  uint32_t ram_tier_chunk_bytes = 64u << 10;
  // Every RAM hit is checked against the block's XXH3 as it is copied out (a
  // hash of bytes still in cache); a block that changed in memory is dropped
  // and the get goes to disk. Off saves that hash (its cost: docs/benchmarks.md,
  // "What verifying every RAM hit costs").
  bool verify_ram_hits = true;
  // Threads that copy one GetBatch's RAM hits out (with their verification),
  // the caller included: one thread's copy and hash fall short of what the
  // host's memory can move, and on a server a core may move only a tenth of
  // what its memory can. 0: one per core, at most 32; 1: the caller alone.
  // The helpers work only while a GetBatch waits on them.
  uint32_t ram_copy_threads = 0;
  // Copies out of the RAM tier of at least this many bytes (one Get's block,
  // one GetBatch's blocks together, or all the reads copying at that moment
  // together) use non-temporal stores where the destination is aligned for
  // them: the bytes go to memory without the destination first being read
  // into the cache. That wins once the destinations cannot stay in the cache
  // anyway (an engine's load of a long prefix, or eight processes' batches at
  // once), and loses while they can. 0 (the default): half the last-level
  // cache the kernel reports; UINT64_MAX: never.
  uint64_t ram_streaming_copy_min_bytes = 0;
  // A single Get of a RAM-tier block of at least this many bytes is copied by
  // the copy threads together, each 256 KiB piece hashed as it is copied and
  // checked against the hash's state at its two ends, so that the pieces
  // chain to the block's checksum exactly as one pass would. The states are
  // recorded by the Put that filled the tier's copy (or, for a block the tier
  // took from disk or adopted, by its first read, which is one pass). Only
  // while at most a quarter as many reads as copy threads run at once:
  // beyond that the threads are busy with blocks of their own. On a host
  // whose cores each move a small share of its memory's bandwidth, that is
  // two to three times one core's rate for a lone get; on a host of few
  // cores it never shares. 0: never. A GetBatch copies such blocks as pieces
  // too, after its other blocks, so that its copy threads finish together.
  uint64_t ram_split_copy_min_bytes = 1ull << 20;
  // How long (microseconds, at most 10,000) an idle copy thread polls for
  // the next read before it sleeps, and a reader polls for its helpers'
  // pieces before it sleeps; each turn yields the core. With polling, lone
  // gets share their copy while their readers leave at least two copy
  // threads each (else four). Off by default: whether trading idle cores
  // for wake-ups pays depends on the host (docs/ram_tier.md); measure it
  // with `kvtier bench --service --copy-spin-us N` first.
  uint32_t ram_copy_spin_us = 0;

  // --- Recovery ---------------------------------------------------------------
  // Write an index checkpoint (so recovery needs no scan before it) every time
  // this many bytes have been appended, and when a segment is sealed.
  uint64_t checkpoint_interval_bytes = 1ull << 30;

  // --- Shared tier on Ceph (see RemoteTierOptions) ------------------------------
  RemoteTierOptions remote;

  // --- A store served by another process (unix: and auto: paths) -------------------
  ServiceClientOptions client;
};

}  // namespace kvtier

#endif  // KVTIER_OPTIONS_H_
