#include "harness/workloads.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <thread>

#include "harness/fio.h"
#include "harness/policy_replay.h"
#include "harness/steady.h"
#include "harness/trash.h"

namespace kvbench {
namespace {

namespace fs = std::filesystem;

bool Has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Capacity given to kvtier: the largest data set of the run with room for
// its record headers and a spare segment, and at least kvtier's default.
uint64_t KvtierCapacity(const BenchConfig& c) {
  const uint64_t need = PeakDiskBytes(c) * 3 / 2 + (1ull << 30);
  return std::max<uint64_t>(8ull << 30, (need + (256ull << 20) - 1) / (256ull << 20) * (256ull << 20));
}

DesignConfig MakeDesignConfig(const BenchConfig& c) {
  DesignConfig d;
  d.queue_depth = c.queue_depth;
  d.put_inflight_bytes = c.put_inflight_bytes;
  d.kvtier_capacity_bytes = KvtierCapacity(c);
  d.kvtier_overrides = c.kvtier_overrides;
  return d;
}

// kvtier-ram's tier for `n` blocks of `size` in seq: twice their footprint
// plus two blocks per shard (blocks hash to 16 shards of fixed size, so an
// exact fit would still evict: 25 blocks of 5 MiB in a 2x tier hit 84%), at
// most a quarter of the machine's memory.
uint64_t SeqRamBytes(const BenchConfig& c, uint64_t n, uint64_t size) {
  if (c.ram_tier_bytes > 0) return c.ram_tier_bytes;
  const uint64_t mem = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  const uint64_t want = (2 * n + 32) * RamFootprint(size, c.kvtier_overrides) + (64ull << 20);
  return std::min(want, std::max<uint64_t>(256ull << 20, mem / 4)) / (2ull << 20) * (2ull << 20);
}

// Finished designs' data goes here; set by RunAll.
Trash* g_trash = nullptr;

void RemoveAll(const std::string& p) {
  if (g_trash != nullptr) {
    g_trash->Add(p);
    return;
  }
  std::error_code ec;
  fs::remove_all(p, ec);
}

// Held around every timed section: the background deleter waits.
Trash::Guard Quiet() { return g_trash->Hold(); }

std::vector<uint64_t> Iota(uint64_t n) {
  std::vector<uint64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Measures one Put or Get over `ids`; write amplification spans the call and
// `after` (e.g. a Close that flushes), time only the call.
Measurement Measure(Design* d, const std::string& op, const std::vector<uint64_t>& ids,
                    size_t size, const Payloads& payloads,
                    const std::function<void()>& after = nullptr, uint32_t batch = 0) {
  Measurement m;
  m.design = d->name();
  m.op = op;
  d->Prepare(size);
  auto quiet = Quiet();
  const ProcCounters c0 = ProcCounters::Now();
  const auto t0 = SteadyClock::now();
  RunStats rs = op == "put"         ? d->Put(ids, size, payloads)
                : op == "get-batch" ? d->GetBatches(ids, size, payloads, batch)
                                    : d->Get(ids, size, payloads);
  const double secs = SecondsSince(t0);
  if (after) after();
  const ProcCounters c1 = ProcCounters::Now();
  FillRates(ids.size(), ids.size() * size, secs, c0, c1, op == "put", &m);
  FillPercentiles(&rs.lat_us, &m);
  m.bad = rs.bad;
  if (!rs.first_error.empty()) m.note = "first error: " + rs.first_error;
  return m;
}

Measurement Failed(const std::string& design, const std::string& op, const Status& s) {
  Measurement m;
  m.design = design;
  m.op = op;
  m.bad = 1;
  m.note = s.ToString();
  return m;
}

// Cold phase: close, drop the page cache of the design's files, reopen.
Status Cool(Design* d, const std::string& path) {
  Status s = d->Close();
  if (!s.ok()) return s;
  DropPageCache(path);
  return d->Open(path);
}

void AddNote(Measurement* m, const std::string& text) {
  if (!m->note.empty()) m->note += "; ";
  m->note += text;
}

// Reads served by the RAM tier and the disk between two snapshots, as a note
// and as the result's tier fields.
void NoteTiers(const TierCounts& a, const TierCounts& b, Measurement* m) {
  const uint64_t hr = b.hits_ram - a.hits_ram, hd = b.hits_disk - a.hits_disk;
  m->bytes_read_ram = double(b.bytes_ram - a.bytes_ram);
  m->bytes_read_disk = double(b.bytes_disk - a.bytes_disk);
  char buf[200];
  std::snprintf(buf, sizeof buf, "served from RAM %s (%llu gets), from disk %s (%llu gets): RAM hit ratio %.3f",
                HumanBytes(b.bytes_ram - a.bytes_ram).c_str(), static_cast<unsigned long long>(hr),
                HumanBytes(b.bytes_disk - a.bytes_disk).c_str(), static_cast<unsigned long long>(hd),
                hr + hd ? double(hr) / double(hr + hd) : 0.0);
  AddNote(m, buf);
}

uint64_t CapFor(const BenchConfig& c, const std::string& design, uint64_t n) {
  uint64_t cap = 0;
  if (design == "file-per-block") cap = c.fpb_max_files;
  if (design == "file-per-block-fsync") cap = c.fpb_fsync_max_files;
  if (design == "rocksdb-blob") cap = c.rocksdb_max_blocks;
  return cap ? std::min(n, cap) : n;
}

std::string Step(int* step, const std::string& what) {
  return "[" + std::to_string(++*step) + "] " + what;
}

// Bytes one fio run moves for `n` blocks of `size`: all of them, or at most
// --fio-bytes (a rate settles within a second; start-up is the same).
uint64_t FioBytes(const BenchConfig& c, uint64_t n, uint64_t size) {
  return c.fio_bytes == 0 ? n * size : std::min(n * size, std::max(c.fio_bytes / size, uint64_t{4}) * size);
}

// fio's sweep for `op` at `size` on `file` (quiet but for a progress line per
// configuration, after `label`): the device's best in `best`, the
// configuration that gave it in `winner`.
Status SweepDevice(const BenchConfig& c, const std::string& file, const std::string& op, uint64_t size,
                   uint64_t bytes, const std::string& label, int* step, Measurement* best, FioConfig* winner) {
  auto q = Quiet();
  const std::string what = label + " " + HumanBytes(size) + " fio ";
  return SweepFio(
      c.fio, file, op, size, bytes, SweepFor(op, c.fio_sweep, c.queue_depth), best,
      [&](const std::string& config) { Progress(Step(step, what + config)); }, winner);
}

// Device reads per operation since `reads_before` (ProcCounters), in `m`.
void NoteDeviceReads(uint64_t reads_before, Measurement* m) {
  const uint64_t reads = ProcCounters::Now().device_reads - reads_before;
  if (m->ops == 0 || reads == 0) return;
  m->device_reads_per_op = double(reads) / double(m->ops);
  char b[160];
  std::snprintf(b, sizeof b, "%.2f device reads per get (/sys/block: every process's reads on the machine count)",
                *m->device_reads_per_op);
  AddNote(m, b);
}

// The device's rate for the designs' key-by-key gets: random reads with one
// in flight on each of queue_depth jobs, as the designs' queue_depth
// threads each wait for their get. Every design needs a device read per cold
// get, so none can pass it key by key, where the sweep's best (deep queues,
// often sequential) says nothing about this pattern. Design "fio-key-by-key";
// a failure is a note in `wr` instead.
std::optional<Measurement> KeyByKeyLimit(const BenchConfig& c, const std::string& file, uint64_t size, uint64_t bytes, int* step,
                          WorkloadResult* wr) {
  auto q = Quiet();
  Progress(Step(step, "small-blocks " + HumanBytes(size) + " fio randread, " + std::to_string(c.queue_depth) +
                          " jobs of one read each"));
  Measurement m;
  Status s = RunFio(c.fio, file, "randread", size, bytes, /*queue_depth=*/1, &m, 0, c.queue_depth);
  m.design = "fio-key-by-key";
  if (!s.ok()) {
    wr->notes.push_back("fio at the gets' concurrency failed: " + s.ToString());
    return std::nullopt;
  }
  AddNote(&m, "random reads, " + std::to_string(c.queue_depth) +
                  " jobs of one read each (io_uring, O_DIRECT): the pattern of the designs' key-by-key gets");
  return m;
}

// The sweep's winner once more, after the designs ran (fio.h RecheckFio).
void RecheckDevice(const BenchConfig& c, const std::string& file, const std::string& op, uint64_t size,
                   uint64_t bytes, const std::string& label, int* step, const FioConfig& winner,
                   Measurement* best) {
  auto q = Quiet();
  Progress(Step(step, label + " " + HumanBytes(size) + " fio " + winner.rw + " again"));
  RecheckFio(c.fio, file, op, size, bytes, winner, best);
}

// The designs that get less data in the quick preset: RocksDB's synced puts
// are slow, and every file-per-block file costs a TRIM to delete.
bool SlowDesign(const std::string& design) {
  return design == "file-per-block" || design == "file-per-block-fsync" || design == "rocksdb-blob";
}

// Blocks of `size` a design moves in seq: --seq-bytes, or --seq-bytes-capped
// for the slow designs (their rates settle on less data).
uint64_t SeqBlocks(const BenchConfig& c, const std::string& design, uint64_t size) {
  uint64_t bytes = c.seq_bytes;
  if (c.seq_bytes_capped > 0 && SlowDesign(design)) bytes = std::min(bytes, c.seq_bytes_capped);
  return std::max<uint64_t>(4, bytes / size);
}

// 1 and 2: sequential durable puts, then cold random gets of what was put.
// kvtier-ram also reads everything back before closing (warm-get: served by
// its RAM tier), then cold like the others (its tier is empty after reopen).
void RunSequential(const BenchConfig& c, uint64_t size, const Payloads& payloads, int* step,
                   bool quiet, std::vector<WorkloadResult>* out) {
  const uint64_t n = SeqBlocks(c, "kvtier", size);
  WorkloadResult put, get, warm;
  put.name = "seq-put";
  get.name = "cold-get";
  warm.name = "warm-get";
  put.block_bytes = get.block_bytes = warm.block_bytes = size;
  put.params = get.params = std::to_string(n) + " blocks (" + HumanBytes(n * size) +
                            ") per design (fewer where ops says so), queue depth " +
                            std::to_string(c.queue_depth) + ", kvtier puts in flight: " +
                            HumanBytes(c.put_inflight_bytes);
  warm.params = "kvtier-ram reads back what it just put, before any close: " + std::to_string(n) +
                " blocks, RAM tier " + HumanBytes(SeqRamBytes(c, n, size)) + ", queue depth " +
                std::to_string(c.queue_depth);
  const std::string file = c.dir + "/fio.dat";
  uint64_t fio_bytes = 0;
  FioConfig put_winner, get_winner;
  bool swept = false;
  if (c.fio.empty()) {
    put.notes.push_back("fio not found on PATH: no device-limit ratios (apt-get install fio)");
    get.notes = put.notes;
  } else {
    fio_bytes = FioBytes(c, n, size);
    Measurement w, wd, r;
    Status s = SweepDevice(c, file, "put", size, fio_bytes, "seq-put", step, &w, &put_winner);
    RemoveAll(file);
    if (s.ok()) {
      // The same writes with an fdatasync per queue depth of them: the limit
      // at a kvtier put's durability.
      auto q = Quiet();
      Progress(Step(step, "seq-put " + HumanBytes(size) + " fio write + fdatasync"));
      s = RunFio(c.fio, file, "write", size, fio_bytes, c.queue_depth, &wd, c.queue_depth);
    }
    if (s.ok()) {
      RemoveAll(file);
      s = SweepDevice(c, file, "get", size, fio_bytes, "cold-get", step, &r, &get_winner);
    }
    RemoveAll(file);
    if (s.ok()) {
      put.results.push_back(w);
      put.results.push_back(wd);
      get.results.push_back(r);
      swept = true;
    } else {
      put.notes.push_back("fio failed: " + s.ToString());
    }
  }
  for (const std::string& name : c.designs) {
    const bool ram = name == "kvtier-ram";
    const uint64_t nd = SeqBlocks(c, name, size);
    DesignConfig dc = MakeDesignConfig(c);
    dc.kvtier_ram_bytes = SeqRamBytes(c, nd, size);
    const std::string path = c.dir + "/" + name;
    RemoveAll(path);
    auto d = MakeDesign(name, dc);
    Status s = d->Open(path);
    if (!s.ok()) {
      put.results.push_back(Failed(name, "put", s));
      continue;
    }
    std::vector<uint64_t> ids = Iota(nd);
    Progress(Step(step, "seq-put " + HumanBytes(size) + " " + name));
    Status close_st;
    if (!ram) {
      put.results.push_back(
          Measure(d.get(), "put", ids, size, payloads, [&] { close_st = d->Close(); }));
    } else {
      Measurement pm = Measure(d.get(), "put", ids, size, payloads);
      std::vector<uint64_t> shuffled = ids;
      std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(7));
      TierCounts t0, t1;
      d->TierCounters(&t0);
      Progress(Step(step, "warm-get " + HumanBytes(size) + " " + name));
      Measurement wm = Measure(d.get(), "get", shuffled, size, payloads);
      d->TierCounters(&t1);
      NoteTiers(t0, t1, &wm);
      warm.results.push_back(wm);
      // The put's write amplification includes the close, as for the others.
      const ProcCounters c0 = ProcCounters::Now();
      close_st = d->Close();
      const ProcCounters c1 = ProcCounters::Now();
      if (pm.write_amp)
        *pm.write_amp += double(c1.write_bytes - c0.write_bytes) / double(nd * size);
      put.results.push_back(pm);
    }
    if (nd != n) AddNote(&put.results.back(), "capped at " + HumanBytes(nd * size) + " (--seq-bytes-capped)");
    DropPageCache(path);
    s = close_st.ok() ? d->Open(path) : close_st;
    if (!s.ok()) {
      get.results.push_back(Failed(name, "get", s));
    } else {
      std::shuffle(ids.begin(), ids.end(), std::mt19937_64(7));
      Progress(Step(step, "cold-get " + HumanBytes(size) + " " + name));
      TierCounts t0, t1;
      d->TierCounters(&t0);
      get.results.push_back(Measure(d.get(), "get", ids, size, payloads));
      if (nd != n) AddNote(&get.results.back(), "capped at " + HumanBytes(nd * size) + " (--seq-bytes-capped)");
      if (ram && d->TierCounters(&t1)) NoteTiers(t0, t1, &get.results.back());
      d->Close().IgnoreError();
    }
    d.reset();
    if (!c.keep) RemoveAll(path);
  }
  if (swept) {
    RecheckDevice(c, file, "put", size, fio_bytes, "seq-put", step, put_winner, &put.results[0]);
    RecheckDevice(c, file, "get", size, fio_bytes, "cold-get", step, get_winner, &get.results[0]);
  }
  ProgressDone();
  if (!quiet) {
    PrintTable(put);
    PrintTable(get);
    if (!warm.results.empty()) PrintTable(warm);
  }
  out->push_back(std::move(put));
  out->push_back(std::move(get));
  if (!warm.results.empty()) out->push_back(std::move(warm));
}

// Time from Open to the first verified block served.
Measurement TimeToFirstGet(Design* d, const std::string& path, uint64_t size,
                           const Payloads& payloads, uint64_t stored, const char* note) {
  Measurement m;
  m.design = d->name();
  m.op = "reopen";
  double us = 0;
  RunStats rs;
  d->Prepare(size);
  {
    auto q = Quiet();
    const auto t0 = SteadyClock::now();
    Status s = d->Open(path);
    if (!s.ok()) return Failed(d->name(), "reopen", s);
    rs = d->Get({stored - 1}, size, payloads);
    us = MicrosSince(t0);
  }
  m.ops = 1;
  m.p50_us = m.p99_us = m.p999_us = us;
  m.bad = rs.bad;
  m.note = note;
  if (!rs.first_error.empty()) m.note += "; first error: " + rs.first_error;
  // Then a sample must still verify: the reopened store serves real data.
  std::vector<uint64_t> sample = Iota(stored);
  std::shuffle(sample.begin(), sample.end(), std::mt19937_64(11));
  sample.resize(std::min<uint64_t>(sample.size(), 1000));
  RunStats vs = d->Get(sample, size, payloads);
  m.bad += vs.bad;
  if (vs.bad && m.note.find("error") == std::string::npos)
    m.note += "; sample: " + vs.first_error;
  return m;
}

// 3, 5, 6: many small blocks; on the 4 KiB store also prefix lookups and the
// two reopen cases.
void RunSmall(const BenchConfig& c, uint64_t size, uint64_t count, const Payloads& payloads,
              int* step, bool quiet, std::vector<WorkloadResult>* out) {
  const bool with_lookup_reopen = size == 4096;
  WorkloadResult wr, lookup, reopen, kill;
  wr.name = "small-blocks";
  wr.block_bytes = size;
  wr.params = std::to_string(count) + " blocks (" + HumanBytes(count * size) +
              ") for kvtier; other designs capped (see ops), queue depth " +
              std::to_string(c.queue_depth);
  lookup.name = "prefix-lookup";
  lookup.block_bytes = size;
  lookup.params = std::to_string(c.lookup_keys) + " keys looked up in batches of " +
                  std::to_string(c.lookup_batch) + " on one thread, over the stored blocks";
  reopen.name = "reopen-clean";
  reopen.block_bytes = size;
  reopen.params = "open after a clean close of the small-block store, then the first get";
  kill.name = "reopen-kill";
  kill.block_bytes = size;
  kill.params = "a child process puts " + std::to_string(c.kill_blocks) +
                " blocks (capped as above) into a fresh store, gets every put acknowledged, "
                "then _exit()s without closing; open (recovery) + first get";
  // The device's best read at this block size (issue 21): the limit every
  // design's cold gets divide by ("x fio", x_best). One I/O per get is the
  // floor for all of them, so no design can pass it; kvtier reads its
  // record's sectors, a little more than the block.
  const std::string small_fio_file = c.dir + "/fio-small.dat";
  FioConfig small_winner;
  if (c.fio.empty()) {
    wr.notes.push_back("fio not found on PATH: no device limit for the gets");
  } else {
    Measurement r;
    Status s = SweepDevice(c, small_fio_file, "get", size, FioBytes(c, count, size), "small-blocks", step, &r,
                           &small_winner);
    if (s.ok()) wr.results.push_back(r);
    else wr.notes.push_back("fio failed: " + s.ToString());
    if (s.ok()) {
      if (auto k = KeyByKeyLimit(c, small_fio_file, size, FioBytes(c, count, size), step, &wr)) wr.results.push_back(*k);
    }
    RemoveAll(small_fio_file);
  }
  const DesignConfig dc = MakeDesignConfig(c);
  for (const std::string& name : c.designs) {
    if (name == "kvtier-ram") {
      // Its puts, lookups and reopen take kvtier's path (the tier is
      // write-through, anonymous memory here); its reads are in seq/revisit.
      wr.notes.push_back("kvtier-ram is not run here: same puts, lookups and reopen as kvtier; "
                         "see warm-get and revisit");
      continue;
    }
    const uint64_t n = CapFor(c, name, count);
    const std::string path = c.dir + "/" + name;
    RemoveAll(path);
    auto d = MakeDesign(name, dc);
    Status s = d->Open(path);
    if (!s.ok()) {
      wr.results.push_back(Failed(name, "put", s));
      continue;
    }
    Progress(Step(step, "small-blocks " + HumanBytes(size) + " " + name + " put " +
                            std::to_string(n)));
    const std::vector<uint64_t> ids = Iota(n);
    // Puts in slices so the progress line moves on long fills.
    {
      Measurement m;
      m.design = name;
      m.op = "put";
      std::vector<double> lat;
      lat.resize(n);  // touched now, so that the resident memory below is the store's
      lat.clear();
      RunStats all;
      d->Prepare(size);
      auto q = Quiet();
      const ProcCounters c0 = ProcCounters::Now();
      const auto t0 = SteadyClock::now();
      const uint64_t slice = std::max<uint64_t>(10000, n / 10);
      for (uint64_t i = 0; i < n; i += slice) {
        std::vector<uint64_t> part(ids.begin() + i, ids.begin() + std::min(n, i + slice));
        RunStats rs = d->Put(part, size, payloads);
        lat.insert(lat.end(), rs.lat_us.begin(), rs.lat_us.end());
        all.bad += rs.bad;
        if (all.first_error.empty()) all.first_error = rs.first_error;
        Progress(Step(step, "small-blocks " + HumanBytes(size) + " " + name + " put " +
                                std::to_string(std::min(n, i + slice)) + "/" + std::to_string(n)));
      }
      const double secs = SecondsSince(t0);
      // Before Close: w-amp below counts every byte the process wrote; this
      // is the store's segments alone (the rest is its index).
      TierCounts counts;
      const bool have_counts = d->TierCounters(&counts) && counts.segment_write_amp > 0;
      const uint64_t resident_full = ProcCounters::Now().resident_bytes;  // before Close frees the index
      const auto tc = SteadyClock::now();
      Status cs = d->Close();
      const double close_s = SecondsSince(tc);
      const ProcCounters c1 = ProcCounters::Now();
      FillRates(n, n * size, secs, c0, c1, true, &m);
      FillPercentiles(&lat, &m);
      m.bad = all.bad + (cs.ok() ? 0 : 1);
      char buf[96];
      std::snprintf(buf, sizeof buf, "close took %.2f s", close_s);
      m.note = buf;
      if (have_counts) {
        std::snprintf(buf, sizeof buf, "; segment bytes / payload %.3f (w-amp also counts the index)",
                      counts.segment_write_amp);
        m.note += buf;
        // The index's footprint at this scale (issue 21, item 5): its files
        // and memtables, and what the process's resident memory grew by.
        const double rss = double(resident_full) - double(c0.resident_bytes);
        char idx[200];
        std::snprintf(idx, sizeof idx, "; index: %s of tables + %s of memtables (%.1f B/block); resident memory "
                      "%s%s over the puts", HumanBytes(counts.index_sst_bytes).c_str(),
                      HumanBytes(counts.index_memtable_bytes).c_str(),
                      double(counts.index_sst_bytes + counts.index_memtable_bytes) / double(n), rss < 0 ? "-" : "+",
                      HumanBytes(static_cast<uint64_t>(std::abs(rss))).c_str());
        m.note += idx;
      }
      if (!all.first_error.empty()) m.note += "; first error: " + all.first_error;
      if (!cs.ok()) m.note += "; close: " + cs.ToString();
      wr.results.push_back(m);
    }
    DropPageCache(path);
    if (with_lookup_reopen) {
      // Clean reopen: time to the first served get, with a cold page cache.
      Progress(Step(step, "reopen-clean " + name));
      reopen.results.push_back(
          TimeToFirstGet(d.get(), path, size, payloads, n, "after a clean close"));
    } else {
      s = d->Open(path);
      if (!s.ok()) {
        wr.results.push_back(Failed(name, "get", s));
        continue;
      }
    }
    // Cold gets over a random sample.
    {
      std::vector<uint64_t> sample = ids;
      std::shuffle(sample.begin(), sample.end(), std::mt19937_64(5));
      sample.resize(std::min<uint64_t>(n, c.small_get_sample));
      if (Cool(d.get(), path).ok()) {
        Progress(Step(step, "small-blocks " + HumanBytes(size) + " " + name + " get"));
        const uint64_t reads = ProcCounters::Now().device_reads;
        Measurement m = Measure(d.get(), "get", sample, size, payloads);
        NoteDeviceReads(reads, &m);
        wr.results.push_back(m);
      }
      // The same keys again, cold, in batches (an engine loading a prefix).
      if (c.small_get_batch > 1 && Cool(d.get(), path).ok()) {
        Progress(Step(step, "small-blocks " + HumanBytes(size) + " " + name + " get-batch"));
        const uint64_t reads = ProcCounters::Now().device_reads;
        Measurement m = Measure(d.get(), "get-batch", sample, size, payloads, nullptr, c.small_get_batch);
        NoteDeviceReads(reads, &m);
        AddNote(&m, "ops = keys; latency per call of " + std::to_string(c.small_get_batch) + " keys");
        wr.results.push_back(m);
      }
    }
    if (with_lookup_reopen && c.lookup_keys > 0) {
      Progress(Step(step, "prefix-lookup " + name));
      const uint32_t b = std::max<uint32_t>(1, std::min<uint64_t>(c.lookup_batch, n));
      const uint64_t batches = std::max<uint64_t>(1, c.lookup_keys / b);
      // Batches of consecutive stored ids starting at random points, keys
      // built before timing (an engine has its hashes at hand).
      std::mt19937_64 rng(3);
      std::vector<std::vector<std::string>> keys(batches);
      for (auto& k : keys) {
        const uint64_t start = rng() % (n - b + 1);
        for (uint32_t j = 0; j < b; ++j) k.push_back(MakeKey(1, start + j));
      }
      Measurement m;
      m.design = name;
      m.op = "lookup";
      // A first pass over the same keys with the index cold (just reopened,
      // page cache dropped), then the measured pass: engines look up a
      // warm index.
      double cold_keys_per_s = 0;
      {
        auto q = Quiet();
        const auto tc = SteadyClock::now();
        for (const auto& k : keys) d->LookupPrefix(k).status().IgnoreError();
        cold_keys_per_s = batches * b / SecondsSince(tc);
      }
      // kvtier answers from an in-memory map once it has loaded after the
      // reopen (until then from RocksDB, which the cold pass may have
      // measured on a large store): the measured pass waits for it.
      double map_wait_s = 0;
      {
        TierCounts tc;
        const auto tw = SteadyClock::now();
        while (d->TierCounters(&tc) && !tc.lookup_map_ready && SecondsSince(tw) < 600)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        map_wait_s = SecondsSince(tw);
      }
      auto q = Quiet();
      std::vector<double> lat;
      lat.reserve(batches);
      uint64_t found = 0;
      Status err;
      const ProcCounters c0 = ProcCounters::Now();
      const auto t0 = SteadyClock::now();
      for (const auto& k : keys) {
        const auto tb = SteadyClock::now();
        auto r = d->LookupPrefix(k);
        lat.push_back(MicrosSince(tb));
        if (!r.ok()) {
          err = r.status();
          break;
        }
        found += *r;
      }
      const double secs = SecondsSince(t0);
      const ProcCounters c1 = ProcCounters::Now();
      if (!err.ok()) {
        m.note = err.ToString();
        if (err.code() != kvtier::Code::kNotSupported) m.bad = 1;
      } else {
        FillRates(batches * b, 0, secs, c0, c1, false, &m);
        FillPercentiles(&lat, &m);
        (void)c1;
        char cold[160];
        std::snprintf(cold, sizeof cold, "%.0f keys/s; the lookup map was ready %.1f s after it", cold_keys_per_s,
                      map_wait_s);
        m.note = "ops = keys; latency per batch of " + std::to_string(b) +
                 "; warm index (the first, cold pass did " + cold + ")";
        if (found != batches * b) {
          m.bad = batches * b - found;
          m.note += "; keys not found: " + std::to_string(batches * b - found);
        }
      }
      lookup.results.push_back(m);
    }
    d->Close().IgnoreError();
    d.reset();
    if (!c.keep) RemoveAll(path);

    if (with_lookup_reopen && !c.self_exe.empty() && c.kill_blocks > 0) {
      // Kill: a child fills a fresh store and dies without closing.
      const uint64_t n = CapFor(c, name, c.kill_blocks);
      const std::string kpath = c.dir + "/" + name + "-kill";
      RemoveAll(kpath);
      Progress(Step(step, "reopen-kill " + name + " (child fills " + std::to_string(n) + ")"));
      const pid_t pid = fork();
      if (pid == 0) {
        const std::string cnt = std::to_string(n), blk = std::to_string(size),
                          qd = std::to_string(c.queue_depth),
                          cap = std::to_string(dc.kvtier_capacity_bytes);
        execl(c.self_exe.c_str(), c.self_exe.c_str(), "--child-fill", "--child-design",
              name.c_str(), "--dir", kpath.c_str(), "--child-count", cnt.c_str(), "--child-block",
              blk.c_str(), "--queue-depth", qd.c_str(), "--child-capacity", cap.c_str(),
              static_cast<char*>(nullptr));
        _exit(127);
      }
      int wst = 0;
      waitpid(pid, &wst, 0);
      if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
        kill.results.push_back(Failed(
            name, "reopen",
            Status::IOError("fill child failed, status " + std::to_string(wst) + " (" + kpath + ")")));
      } else {
        DropPageCache(kpath);
        auto kd = MakeDesign(name, dc);
        kill.results.push_back(
            TimeToFirstGet(kd.get(), kpath, size, payloads, n, "after _exit() without close"));
        kd->Close().IgnoreError();
      }
      if (!c.keep) RemoveAll(kpath);
    }
  }
  if (!small_winner.rw.empty() && !wr.results.empty() && wr.results[0].design == "fio")
    RecheckDevice(c, small_fio_file, "get", size, FioBytes(c, count, size), "small-blocks", step, small_winner,
                  &wr.results[0]);
  // The key-by-key limit once more after the designs, as the sweep's winner:
  // the device's rate drifts between minutes, so the faster of the two counts.
  for (Measurement& m : wr.results) {
    if (m.design != "fio-key-by-key" || !m.ops_per_s) continue;
    if (auto again = KeyByKeyLimit(c, small_fio_file, size, FioBytes(c, count, size), step, &wr)) {
      const double before = *m.ops_per_s;
      if (again->ops_per_s && *again->ops_per_s > before) m = *again;
      char b[128];
      std::snprintf(b, sizeof b, "; before the designs %.0f reads/s, after them %.0f, the faster kept", before,
                    again->ops_per_s.value_or(0));
      m.note += b;
    }
  }
  RemoveAll(small_fio_file);
  ProgressDone();
  if (!quiet) {
    PrintTable(wr);
    if (with_lookup_reopen) {
      if (c.lookup_keys > 0) PrintTable(lookup);
      PrintTable(reopen);
      if (!c.self_exe.empty() && c.kill_blocks > 0) PrintTable(kill);
    }
  }
  out->push_back(std::move(wr));
  if (with_lookup_reopen) {
    if (c.lookup_keys > 0) out->push_back(std::move(lookup));
    out->push_back(std::move(reopen));
    if (!c.self_exe.empty() && c.kill_blocks > 0) out->push_back(std::move(kill));
  }
}

// 4: documents put once (first visit), then revisited round-robin: each
// revisit looks up the document's prefix and loads it. kvtier-ram's tier is
// smaller than the working set (--revisit-ram-fraction of it), and it keeps
// what the first visits wrote through (no close between visits); the other
// designs are closed and reopened with a cold page cache first.
void RunRevisit(const BenchConfig& c, const Payloads& payloads, int* step, bool quiet,
                std::vector<WorkloadResult>* out) {
  const uint64_t block = uint64_t{c.block_tokens} * c.bytes_per_token;
  const uint64_t per_doc = c.revisit_doc_tokens / c.block_tokens;  // full blocks only
  const uint64_t working_set = uint64_t{c.revisit_docs} * per_doc * block;
  // Whole chunks, and whole 2 MiB so the tier's mapping is not rounded;
  // at least one shard.
  auto tier_for = [&](double fraction) {
    return std::max<uint64_t>(
        16ull << 20,
        static_cast<uint64_t>(fraction * double(c.revisit_docs * per_doc * RamFootprint(block, c.kvtier_overrides))) /
            (2ull << 20) * (2ull << 20));
  };
  const uint64_t ram_bytes = tier_for(c.revisit_ram_fraction);
  WorkloadResult w;
  w.name = "revisit";
  w.block_bytes = block;
  w.params = std::to_string(c.revisit_docs) + " documents x " + std::to_string(c.revisit_doc_tokens) +
             " tokens (" + std::to_string(per_doc) + " blocks of " + std::to_string(c.block_tokens) +
             " tokens, Qwen3-0.6B bf16; working set " + HumanBytes(working_set) + "), " +
             std::to_string(c.revisit_rounds) +
             " rounds; put = first visit, get = one revisit (lookup + load of the prefix); "
             "kvtier-ram's RAM tier " + HumanBytes(ram_bytes);
  std::vector<std::vector<uint64_t>> docs(c.revisit_docs);
  std::vector<uint64_t> all;
  for (uint32_t i = 0; i < c.revisit_docs; ++i)
    for (uint64_t j = 0; j < per_doc; ++j) {
      docs[i].push_back(1'000'000ull * (i + 1) + j);
      all.push_back(docs[i].back());
    }
  for (const std::string& name : c.designs) {
    const bool ram = name == "kvtier-ram";
    DesignConfig dc = MakeDesignConfig(c);
    dc.kvtier_ram_bytes = ram_bytes;
    const std::string path = c.dir + "/" + name;
    RemoveAll(path);
    auto d = MakeDesign(name, dc);
    Status s = d->Open(path);
    if (!s.ok()) {
      w.results.push_back(Failed(name, "put", s));
      continue;
    }
    // The slow designs may rotate fewer documents (--revisit-docs-capped).
    const size_t ndocs = c.revisit_docs_capped > 0 && SlowDesign(name)
                             ? std::min<size_t>(docs.size(), c.revisit_docs_capped)
                             : docs.size();
    const std::vector<std::vector<uint64_t>> my_docs(docs.begin(), docs.begin() + ndocs);
    const std::vector<uint64_t> my_all(all.begin(), all.begin() + ndocs * per_doc);
    Progress(Step(step, "revisit " + name + " first visits"));
    w.results.push_back(Measure(d.get(), "put", my_all, block, payloads));
    if (ndocs < docs.size())
      AddNote(&w.results.back(), std::to_string(ndocs) + " of " + std::to_string(docs.size()) +
                                     " documents (--revisit-docs-capped)");
    if (!ram) {
      s = Cool(d.get(), path);
      if (!s.ok()) {
        w.results.push_back(Failed(name, "get", s));
        continue;
      }
    }
    Measurement m;
    m.design = name;
    m.op = "get";
    std::vector<double> lat;
    uint64_t bytes = 0, revisits = 0, bad = 0;
    bool lookup_supported = true;
    std::string first_error;
    TierCounts t0, t1;
    const bool tiers = d->TierCounters(&t0);
    d->Prepare(block);
    auto q = Quiet();
    const ProcCounters c0 = ProcCounters::Now();
    const auto start = SteadyClock::now();
    for (uint32_t r = 1; r < c.revisit_rounds; ++r) {
      Progress(Step(step, "revisit " + name + " round " + std::to_string(r + 1)));
      for (const auto& doc : my_docs) {
        const auto tr = SteadyClock::now();
        std::vector<std::string> keys;
        for (uint64_t id : doc) keys.push_back(MakeKey(1, id));
        size_t hit = doc.size();
        auto l = d->LookupPrefix(keys);
        if (l.ok()) {
          hit = *l;
        } else {
          lookup_supported = false;
        }
        std::vector<uint64_t> load(doc.begin(), doc.begin() + hit);
        RunStats rs = d->Get(load, block, payloads);
        lat.push_back(MicrosSince(tr));
        bad += rs.bad + (doc.size() - hit);
        if (first_error.empty()) first_error = rs.first_error;
        bytes += hit * block;
        ++revisits;
      }
    }
    const double secs = SecondsSince(start);
    const ProcCounters c1 = ProcCounters::Now();
    FillRates(revisits, bytes, secs, c0, c1, false, &m);
    FillPercentiles(&lat, &m);
    m.ops = revisits;
    m.bad = bad;
    m.note = "ops = revisits, latency per revisit; served " + HumanBytes(bytes);
    if (tiers && d->TierCounters(&t1)) {
      NoteTiers(t0, t1, &m);
    } else {
      m.note += " (all from disk: O_DIRECT / direct reads)";
    }
    if (!lookup_supported) m.note += "; no lookup call, gets until a miss";
    if (!first_error.empty()) m.note += "; first error: " + first_error;
    w.results.push_back(m);
    d->Close().IgnoreError();
    d.reset();
    if (!c.keep) RemoveAll(path);
  }
  if (Has(c.designs, "kvtier-ram") && c.revisit_rounds > 1) {
    // The same trace on the RAM tier alone, once per eviction policy: the
    // store cannot be told which policy to use (it runs S3-FIFO).
    std::vector<uint64_t> sizes = {ram_bytes};
    for (double f : c.policy_fractions)
      if (std::find(sizes.begin(), sizes.end(), tier_for(f)) == sizes.end()) sizes.push_back(tier_for(f));
    std::sort(sizes.begin(), sizes.end());
    for (uint64_t size : sizes) {
      Progress(Step(step, "revisit RAM-tier policy replay (S3-FIFO, LRU), tier " + HumanBytes(size)));
      auto rr = ReplayRevisitPolicies(docs, block, c.revisit_rounds, size);
      if (!rr.ok()) {
        w.notes.push_back("policy replay failed: " + rr.status().ToString());
        continue;
      }
      for (const ReplayResult& r : *rr) {
        PolicyResult p;
        p.policy = r.policy;
        p.ram_bytes = r.ram_bytes;
        p.working_set_bytes = working_set;
        p.hit_ratio = r.hit_ratio();
        p.bytes_ram = r.bytes_ram;
        p.bytes_disk = r.bytes_disk;
        w.policies.push_back(p);
      }
    }
  }
  ProgressDone();
  if (!quiet) PrintTable(w);
  out->push_back(std::move(w));
}

}  // namespace

uint64_t PeakDiskBytes(const BenchConfig& c) {
  uint64_t peak = 0;
  if (Has(c.workloads, "seq"))
    for (uint64_t s : c.sizes) peak = std::max(peak, std::max<uint64_t>(4, c.seq_bytes / s) * (s + 4096));
  if (Has(c.workloads, "small")) {
    peak = std::max(peak, c.small_4k_blocks * 5120);  // a 4 KiB record or file, its key, index row or inode
    peak = std::max(peak, c.small_64k_blocks * (65536 + 4096));
  }
  if (Has(c.workloads, "revisit"))
    peak = std::max(peak, uint64_t{c.revisit_docs} * (c.revisit_doc_tokens / c.block_tokens) *
                              (uint64_t{c.block_tokens} * c.bytes_per_token + 4096));
  if (Has(c.workloads, "steady")) peak = std::max(peak, c.steady_capacity_bytes * 2);
  // RocksDB keeps the WAL and the blob files until the WAL is recycled (2x),
  // and the data sets of up to Trash::kMaxPending finished designs wait for
  // deletion while the next one fills.
  const uint64_t rocks = Has(c.designs, "rocksdb-blob") ? 2 : 1;
  const uint64_t pending = std::min<uint64_t>(Trash::kMaxPending, c.designs.empty() ? 0 : c.designs.size() - 1);
  return peak * (rocks + pending);
}

void ScaleDown(BenchConfig* c, double f) {
  auto sc = [f](uint64_t v) { return v == 0 ? 0 : std::max<uint64_t>(1, static_cast<uint64_t>(v * f)); };
  c->seq_bytes = sc(c->seq_bytes);
  c->small_4k_blocks = sc(c->small_4k_blocks);
  c->small_64k_blocks = sc(c->small_64k_blocks);
  c->revisit_docs = static_cast<uint32_t>(sc(c->revisit_docs));
}

void RunAll(const BenchConfig& c, bool quiet, std::vector<WorkloadResult>* out) {
  Trash trash(c.dir);
  g_trash = &trash;
  struct Reset {
    ~Reset() { g_trash = nullptr; }
  } reset;
  const uint64_t max_block = std::max<uint64_t>(
      {c.sizes.empty() ? 0 : *std::max_element(c.sizes.begin(), c.sizes.end()), 65536,
       uint64_t{c.block_tokens} * c.bytes_per_token,
       c.steady_sizes.empty() ? 0 : *std::max_element(c.steady_sizes.begin(), c.steady_sizes.end()),
       std::count(c.steady_sizes.begin(), c.steady_sizes.end(), 0) ? kSteadyMixSizes.back() : 0});  // mix: largest last
  const Payloads payloads(max_block);
  int step = 0;
  if (Has(c.workloads, "seq"))
    for (uint64_t s : c.sizes) RunSequential(c, s, payloads, &step, quiet, out);
  if (Has(c.workloads, "small")) {
    if (c.small_4k_blocks) RunSmall(c, 4096, c.small_4k_blocks, payloads, &step, quiet, out);
    if (c.small_64k_blocks) RunSmall(c, 65536, c.small_64k_blocks, payloads, &step, quiet, out);
  }
  if (Has(c.workloads, "revisit") && c.revisit_docs > 0 && c.revisit_rounds > 0)
    RunRevisit(c, payloads, &step, quiet, out);
  if (Has(c.workloads, "steady") && c.steady_capacity_bytes > 0) {
    SteadyConfig sc;
    sc.capacity_bytes = c.steady_capacity_bytes;
    sc.queue_depth = c.queue_depth;
    sc.dir = c.dir;
    sc.designs = c.designs;
    sc.kvtier_overrides = c.kvtier_overrides;
    sc.hot_first = c.steady_hot_first;
    sc.write_multiple = c.steady_write_multiple;
    for (uint64_t size : c.steady_sizes) {
      sc.sizes = size == 0 ? kSteadyMixSizes : std::vector<uint64_t>{size};
      WorkloadResult w = RunSteadyState(sc, payloads, [&](const std::string& what) { Progress(Step(&step, what)); });
      ProgressDone();
      if (!quiet) PrintTable(w);
      out->push_back(std::move(w));
    }
  }
  Progress(Step(&step, "deleting what is left of the designs' data"));
  trash.Drain();
  ProgressDone();
}

void ChildFill(const std::string& design, const std::string& dir, uint64_t count, uint64_t block,
               uint32_t queue_depth, uint64_t capacity) {
  DesignConfig dc;
  dc.queue_depth = queue_depth;
  dc.kvtier_capacity_bytes = capacity;
  auto d = MakeDesign(design, dc);
  if (!d) {
    std::fprintf(stderr, "kvtier-bench child: unknown design %s\n", design.c_str());
    _exit(2);
  }
  Status s = d->Open(dir);
  if (!s.ok()) {
    std::fprintf(stderr, "kvtier-bench child: open %s: %s\n", dir.c_str(), s.ToString().c_str());
    _exit(3);
  }
  const Payloads payloads(std::max<uint64_t>(block, 65536));
  RunStats rs = d->Put(Iota(count), block, payloads);
  if (rs.bad) {
    std::fprintf(stderr, "kvtier-bench child: %llu puts failed: %s\n",
                 static_cast<unsigned long long>(rs.bad), rs.first_error.c_str());
    _exit(4);
  }
  // Every put is acknowledged (durable for kvtier, rocksdb-blob and
  // file-per-block-fsync); die without a clean close.
  _exit(0);
}

}  // namespace kvbench
