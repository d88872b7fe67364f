#include "harness/workloads.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>

#include "harness/fio.h"

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

void RemoveAll(const std::string& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
}

std::vector<uint64_t> Iota(uint64_t n) {
  std::vector<uint64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Measures one Put or Get over `ids`; write amplification spans the call and
// `after` (e.g. a Close that flushes), time only the call.
Measurement Measure(Design* d, const std::string& op, const std::vector<uint64_t>& ids,
                    size_t size, const Payloads& payloads,
                    const std::function<void()>& after = nullptr) {
  Measurement m;
  m.design = d->name();
  m.op = op;
  const ProcCounters c0 = ProcCounters::Now();
  const auto t0 = SteadyClock::now();
  RunStats rs = op == "put" ? d->Put(ids, size, payloads) : d->Get(ids, size, payloads);
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

// 1 and 2: sequential durable puts, then cold random gets of what was put.
void RunSequential(const BenchConfig& c, uint64_t size, const Payloads& payloads, int* step,
                   bool quiet, std::vector<WorkloadResult>* out) {
  const uint64_t n = std::max<uint64_t>(4, c.seq_bytes / size);
  WorkloadResult put, get;
  put.name = "seq-put";
  get.name = "cold-get";
  put.block_bytes = get.block_bytes = size;
  put.params = get.params = std::to_string(n) + " blocks (" + HumanBytes(n * size) +
                            ") per design, queue depth " + std::to_string(c.queue_depth) +
                            ", kvtier puts in flight: " + HumanBytes(c.put_inflight_bytes);
  if (c.fio.empty()) {
    put.notes.push_back("fio not found on PATH: no device-limit ratios (apt-get install fio)");
    get.notes = put.notes;
  } else {
    const std::string file = c.dir + "/fio.dat";
    Measurement w, r;
    Progress(Step(step, "seq-put " + HumanBytes(size) + " fio write"));
    Status s = RunFio(c.fio, file, "write", size, n * size, c.queue_depth, &w);
    if (s.ok()) {
      DropPageCache(c.dir + "/fio.dat");
      Progress(Step(step, "cold-get " + HumanBytes(size) + " fio randread"));
      s = RunFio(c.fio, file, "randread", size, n * size, c.queue_depth, &r);
    }
    RemoveAll(file);
    if (s.ok()) {
      put.results.push_back(w);
      get.results.push_back(r);
    } else {
      put.notes.push_back("fio failed: " + s.ToString());
    }
  }
  const DesignConfig dc = MakeDesignConfig(c);
  for (const std::string& name : c.designs) {
    const std::string path = c.dir + "/" + name;
    RemoveAll(path);
    auto d = MakeDesign(name, dc);
    Status s = d->Open(path);
    if (!s.ok()) {
      put.results.push_back(Failed(name, "put", s));
      continue;
    }
    std::vector<uint64_t> ids = Iota(n);
    Progress(Step(step, "seq-put " + HumanBytes(size) + " " + name));
    Status close_st;
    Measurement pm = Measure(d.get(), "put", ids, size, payloads, [&] { close_st = d->Close(); });
    put.results.push_back(pm);
    DropPageCache(path);
    s = close_st.ok() ? d->Open(path) : close_st;
    if (!s.ok()) {
      get.results.push_back(Failed(name, "get", s));
    } else {
      std::shuffle(ids.begin(), ids.end(), std::mt19937_64(7));
      Progress(Step(step, "cold-get " + HumanBytes(size) + " " + name));
      get.results.push_back(Measure(d.get(), "get", ids, size, payloads));
      d->Close().IgnoreError();
    }
    d.reset();
    if (!c.keep) RemoveAll(path);
  }
  ProgressDone();
  if (!quiet) {
    PrintTable(put);
    PrintTable(get);
  }
  out->push_back(std::move(put));
  out->push_back(std::move(get));
}

// Time from Open to the first verified block served.
Measurement TimeToFirstGet(Design* d, const std::string& path, uint64_t size,
                           const Payloads& payloads, uint64_t stored, const char* note) {
  Measurement m;
  m.design = d->name();
  m.op = "reopen";
  const auto t0 = SteadyClock::now();
  Status s = d->Open(path);
  if (!s.ok()) return Failed(d->name(), "reopen", s);
  RunStats rs = d->Get({stored - 1}, size, payloads);
  const double us = MicrosSince(t0);
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
  const DesignConfig dc = MakeDesignConfig(c);
  for (const std::string& name : c.designs) {
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
      RunStats all;
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
        wr.results.push_back(Measure(d.get(), "get", sample, size, payloads));
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
        const auto tc = SteadyClock::now();
        for (const auto& k : keys) d->LookupPrefix(k).status().IgnoreError();
        cold_keys_per_s = batches * b / SecondsSince(tc);
      }
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
        char cold[64];
        std::snprintf(cold, sizeof cold, "%.0f", cold_keys_per_s);
        m.note = "ops = keys; latency per batch of " + std::to_string(b) +
                 "; warm index (the first, cold pass did " + cold + " keys/s)";
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
// revisit looks up the document's prefix and loads it.
void RunRevisit(const BenchConfig& c, const Payloads& payloads, int* step, bool quiet,
                std::vector<WorkloadResult>* out) {
  const uint64_t block = uint64_t{c.block_tokens} * c.bytes_per_token;
  const uint64_t per_doc = c.revisit_doc_tokens / c.block_tokens;  // full blocks only
  WorkloadResult w;
  w.name = "revisit";
  w.block_bytes = block;
  w.params = std::to_string(c.revisit_docs) + " documents x " + std::to_string(c.revisit_doc_tokens) +
             " tokens (" + std::to_string(per_doc) + " blocks of " + std::to_string(c.block_tokens) +
             " tokens, Qwen3-0.6B bf16), " + std::to_string(c.revisit_rounds) +
             " rounds; put = first visit, get = one revisit (lookup + load of the prefix)";
  const DesignConfig dc = MakeDesignConfig(c);
  for (const std::string& name : c.designs) {
    const std::string path = c.dir + "/" + name;
    RemoveAll(path);
    auto d = MakeDesign(name, dc);
    Status s = d->Open(path);
    if (!s.ok()) {
      w.results.push_back(Failed(name, "put", s));
      continue;
    }
    std::vector<std::vector<uint64_t>> docs(c.revisit_docs);
    std::vector<uint64_t> all;
    for (uint32_t i = 0; i < c.revisit_docs; ++i)
      for (uint64_t j = 0; j < per_doc; ++j) {
        docs[i].push_back(1'000'000ull * (i + 1) + j);
        all.push_back(docs[i].back());
      }
    Progress(Step(step, "revisit " + name + " first visits"));
    w.results.push_back(Measure(d.get(), "put", all, block, payloads));
    if (!Cool(d.get(), path).ok()) continue;
    Measurement m;
    m.design = name;
    m.op = "get";
    std::vector<double> lat;
    uint64_t bytes = 0, revisits = 0, bad = 0;
    bool lookup_supported = true;
    const ProcCounters c0 = ProcCounters::Now();
    const auto t0 = SteadyClock::now();
    for (uint32_t r = 1; r < c.revisit_rounds; ++r) {
      Progress(Step(step, "revisit " + name + " round " + std::to_string(r + 1)));
      for (const auto& doc : docs) {
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
        bytes += hit * block;
        ++revisits;
      }
    }
    const double secs = SecondsSince(t0);
    const ProcCounters c1 = ProcCounters::Now();
    FillRates(revisits, bytes, secs, c0, c1, false, &m);
    FillPercentiles(&lat, &m);
    m.ops = revisits;
    m.bad = bad;
    uint64_t ram = 0, disk = 0;
    d->TierBytes(&ram, &disk);
    m.note = "ops = revisits, latency per revisit; served " + HumanBytes(bytes);
    if (name == "kvtier")
      m.note += " (RAM tier " + HumanBytes(ram) + ", disk " + HumanBytes(disk) + ")";
    else
      m.note += " (all from disk: O_DIRECT / direct reads)";
    if (!lookup_supported) m.note += "; no lookup call, gets until a miss";
    w.results.push_back(m);
    d->Close().IgnoreError();
    d.reset();
    if (!c.keep) RemoveAll(path);
  }
  if (Has(c.designs, "kvtier"))
    w.notes.push_back("kvtier has no RAM tier yet, so every revisit is served from disk");
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
    peak = std::max(peak, c.small_4k_blocks * 8192);
    peak = std::max(peak, c.small_64k_blocks * (65536 + 4096));
  }
  if (Has(c.workloads, "revisit"))
    peak = std::max(peak, uint64_t{c.revisit_docs} * (c.revisit_doc_tokens / c.block_tokens) *
                              (uint64_t{c.block_tokens} * c.bytes_per_token + 4096));
  // RocksDB keeps the WAL and the blob files until the WAL is recycled.
  return peak * 2;
}

void ScaleDown(BenchConfig* c, double f) {
  auto sc = [f](uint64_t v) { return v == 0 ? 0 : std::max<uint64_t>(1, static_cast<uint64_t>(v * f)); };
  c->seq_bytes = sc(c->seq_bytes);
  c->small_4k_blocks = sc(c->small_4k_blocks);
  c->small_64k_blocks = sc(c->small_64k_blocks);
  c->revisit_docs = static_cast<uint32_t>(sc(c->revisit_docs));
}

void RunAll(const BenchConfig& c, bool quiet, std::vector<WorkloadResult>* out) {
  const uint64_t max_block = std::max<uint64_t>(
      {c.sizes.empty() ? 0 : *std::max_element(c.sizes.begin(), c.sizes.end()), 65536,
       uint64_t{c.block_tokens} * c.bytes_per_token});
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
