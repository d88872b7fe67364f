#include "harness/steady.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>

#include "harness/designs.h"

namespace kvbench {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// One time window of the mixed phase.
struct Window {
  double get_s = 0, put_s = 0;
  uint64_t get_ops = 0, put_ops = 0, got_bytes = 0, put_bytes = 0;
  uint64_t misses = 0, wrong = 0, hits_ram = 0, hits_disk = 0;
  uint64_t device_bytes = 0;  // written by the process during the window
  std::vector<double> get_us, put_us;
  std::map<uint64_t, std::vector<double>> get_us_by_size;  // a mix's gets, per block size

  double Seconds() const { return get_s + put_s; }
  double Gbps() const { return Seconds() > 0 ? double(got_bytes + put_bytes) / Seconds() / 1e9 : 0; }
  double WriteAmp() const { return put_bytes > 0 ? double(device_bytes) / double(put_bytes) : 0; }
};

double Pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

double Median(std::vector<double> v) { return Pct(std::move(v), 0.5); }

// Segments small enough that eviction has many to choose from, large enough
// for a few blocks each.
uint64_t SegmentBytes(uint64_t capacity, uint64_t block) {
  const uint64_t by_capacity = capacity / 16 / kMiB * kMiB;
  const uint64_t by_block = (4 * block + kMiB - 1) / kMiB * kMiB;
  return std::max({kMiB, by_capacity, by_block});
}

// "2 MiB", or "mixed 64 KiB/512 KiB/2 MiB".
std::string SizesLabel(const std::vector<uint64_t>& sizes) {
  if (sizes.size() == 1) return HumanBytes(sizes[0]);
  std::string s = "mixed ";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? "/" : "") + HumanBytes(sizes[i]);
  return s;
}

// Which size each block id has: the one size, or one of a mix drawn by a
// hash of the id (the same in every design).
class BlockSizes {
 public:
  explicit BlockSizes(const std::vector<uint64_t>& sizes) : sizes_(sizes) {}
  uint64_t Of(uint64_t id) const {
    if (sizes_.size() == 1) return sizes_[0];
    uint64_t x = id + 0x9E3779B97F4A7C15ull;  // SplitMix64's finalizer
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return sizes_[(x ^ (x >> 31)) % sizes_.size()];
  }
  uint64_t Mean() const {
    uint64_t sum = 0;
    for (uint64_t v : sizes_) sum += v;
    return sum / sizes_.size();
  }
  uint64_t Largest() const { return *std::max_element(sizes_.begin(), sizes_.end()); }
  const std::vector<uint64_t>& all() const { return sizes_; }
  // `ids` grouped by size, in first-seen order within each group.
  std::map<uint64_t, std::vector<uint64_t>> Group(const std::vector<uint64_t>& ids) const {
    std::map<uint64_t, std::vector<uint64_t>> by;
    for (uint64_t id : ids) by[Of(id)].push_back(id);
    return by;
  }

 private:
  std::vector<uint64_t> sizes_;
};

// One batch of gets or puts, as one call per block size; what they did.
struct BatchResult {
  double seconds = 0;
  uint64_t ops = 0, bytes = 0, misses = 0, bad = 0;
  std::vector<double> lat_us;
  std::map<uint64_t, std::vector<double>> lat_us_by_size;
  std::vector<uint64_t> missed_ids;
  std::string first_error;
};

BatchResult RunBatch(Design* d, bool get, const std::vector<uint64_t>& ids, const BlockSizes& sizes,
                     const Payloads& payloads) {
  BatchResult b;
  for (const auto& [size, group] : sizes.Group(ids)) {
    const auto t0 = SteadyClock::now();
    RunStats rs = get ? d->Get(group, size, payloads) : d->Put(group, size, payloads);
    b.seconds += SecondsSince(t0);
    b.ops += group.size();
    b.misses += rs.misses;
    b.bad += rs.bad;
    b.bytes += (group.size() - (get ? rs.misses : 0)) * size;
    b.lat_us.insert(b.lat_us.end(), rs.lat_us.begin(), rs.lat_us.end());
    std::vector<double>& by = b.lat_us_by_size[size];
    by.insert(by.end(), rs.lat_us.begin(), rs.lat_us.end());
    b.missed_ids.insert(b.missed_ids.end(), rs.missed_ids.begin(), rs.missed_ids.end());
    if (b.first_error.empty()) b.first_error = rs.first_error;
  }
  return b;
}

// The request mix: which ids a batch gets and puts.
class Traffic {
 public:
  Traffic(uint64_t hot, uint64_t first_new) : hot_(hot), next_(first_new) {}
  // Appends one batch of `n` operations to `gets` / `puts`.
  void Batch(uint64_t n, std::vector<uint64_t>* gets, std::vector<uint64_t>* puts) {
    for (uint64_t i = 0; i < n; ++i) {
      if (rng_() % 10 < 7)
        gets->push_back(rng_() % 10 < 8 ? rng_() % hot_ : rng_() % next_);
      else
        puts->push_back(next_++);
    }
  }
  uint64_t hot() const { return hot_; }

 private:
  std::mt19937_64 rng_{21};
  uint64_t hot_, next_;
};

struct DesignRun {
  std::vector<Window> windows;
  Measurement get, put;
  std::map<uint64_t, std::vector<double>> get_us_by_size;  // the whole mixed phase
  double device_write_amp = 0, segment_write_amp = 0;
  bool has_segments = false;  // a kvtier design: the fields below are known
  uint64_t mixed_put_bytes = 0, reinserted_bytes = 0, index_sst_bytes = 0, index_written_bytes = 0;
  std::string error;
};

DesignRun RunDesign(const SteadyConfig& c, const std::string& name, const Payloads& payloads,
                    const std::function<void(const std::string&)>& progress) {
  DesignRun r;
  const BlockSizes sizes(c.sizes);
  const uint64_t n_cap = std::max<uint64_t>(4, c.capacity_bytes / sizes.Mean());
  const uint64_t hot = std::max<uint64_t>(1, n_cap / 4);
  const uint64_t mixed_puts = static_cast<uint64_t>(std::ceil(c.write_multiple * n_cap)) - n_cap;
  const uint64_t mixed_ops = mixed_puts * 10 / 3, per_window = std::max<uint64_t>(1, mixed_ops / c.windows);
  DesignConfig dc;
  dc.queue_depth = c.queue_depth;
  dc.kvtier_capacity_bytes = c.capacity_bytes;
  dc.kvtier_overrides = {"segment_size_bytes=" + std::to_string(SegmentBytes(c.capacity_bytes, sizes.Largest()))};
  // The run's --kvtier-option values after it, so that they win.
  dc.kvtier_overrides.insert(dc.kvtier_overrides.end(), c.kvtier_overrides.begin(), c.kvtier_overrides.end());
  if (name == "kvtier-ram") {  // room for twice the hot set
    uint64_t hot_bytes = 0;
    for (uint64_t id = 0; id < hot; ++id) hot_bytes += RamFootprint(sizes.Of(id), dc.kvtier_overrides);
    dc.kvtier_ram_bytes = 2 * hot_bytes + 64 * kMiB;
  }
  dc.file_byte_budget = c.capacity_bytes;
  auto d = MakeDesign(name, dc);
  const std::string path = c.dir + "/steady-" + name;
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (Status s = d->Open(path); !s.ok()) {
    r.error = s.ToString();
    return r;
  }
  for (uint64_t size : sizes.all()) d->Prepare(size);
  const std::string what = "steady " + SizesLabel(c.sizes) + " " + name;
  if (progress) progress(what + ": filling " + HumanBytes(n_cap * sizes.Mean()));
  std::vector<uint64_t> fill(n_cap);
  std::iota(fill.begin(), fill.end(), 0);
  if (!c.hot_first) std::shuffle(fill.begin(), fill.end(), std::mt19937_64(7));  // hot ids spread over the log
  BatchResult filled = RunBatch(d.get(), /*get=*/false, fill, sizes, payloads);
  if (filled.bad) r.error = "fill: " + filled.first_error;

  Traffic traffic(hot, n_cap);
  std::vector<uint64_t> again;  // hot ids that missed: put back, as an engine stores what it recomputed
  TierCounts prev{}, now{};
  d->TierCounters(&prev);
  const ProcCounters io0 = ProcCounters::Now();
  uint64_t mixed_put_bytes = 0;
  uint64_t window_io = io0.write_bytes;
  Window cur;
  uint64_t in_window = 0;
  for (uint64_t done = 0; done < mixed_ops && r.error.empty();) {
    if (progress && in_window == 0)
      progress(what + ": window " + std::to_string(r.windows.size() + 1) + " of " + std::to_string(c.windows));
    std::vector<uint64_t> gets, puts = std::move(again);
    again.clear();
    const uint64_t n = std::min<uint64_t>(4ull * c.queue_depth, mixed_ops - done);
    traffic.Batch(n, &gets, &puts);
    BatchResult g = RunBatch(d.get(), /*get=*/true, gets, sizes, payloads);
    BatchResult p = RunBatch(d.get(), /*get=*/false, puts, sizes, payloads);
    cur.get_s += g.seconds;
    cur.put_s += p.seconds;
    if (p.bad) r.error = "put: " + p.first_error;
    cur.get_ops += g.ops;
    cur.put_ops += p.ops;
    cur.misses += g.misses;
    cur.wrong += g.bad - g.misses;
    cur.got_bytes += g.bytes;
    cur.put_bytes += p.bytes;
    cur.get_us.insert(cur.get_us.end(), g.lat_us.begin(), g.lat_us.end());
    cur.put_us.insert(cur.put_us.end(), p.lat_us.begin(), p.lat_us.end());
    for (const auto& [size, us] : g.lat_us_by_size) {
      std::vector<double>& by = cur.get_us_by_size[size];
      by.insert(by.end(), us.begin(), us.end());
    }
    for (uint64_t id : g.missed_ids)
      if (id < traffic.hot()) again.push_back(id);
    mixed_put_bytes += p.bytes;
    done += n;
    in_window += n;
    if (in_window >= per_window || done >= mixed_ops) {
      if (d->TierCounters(&now)) {
        cur.hits_ram = now.hits_ram - prev.hits_ram;
        cur.hits_disk = now.hits_disk - prev.hits_disk;
        prev = now;
      } else {  // a design with one tier: every hit is a disk read
        cur.hits_disk = cur.get_ops - cur.misses;
      }
      const uint64_t written = ProcCounters::Now().write_bytes;
      cur.device_bytes = written - window_io;
      window_io = written;
      r.windows.push_back(std::move(cur));
      cur = Window{};
      in_window = 0;
    }
  }
  const ProcCounters io1 = ProcCounters::Now();
  r.has_segments = d->TierCounters(&now);
  r.mixed_put_bytes = mixed_put_bytes;
  r.reinserted_bytes = now.reinserted_bytes;
  r.index_sst_bytes = now.index_sst_bytes;
  r.index_written_bytes = now.index_written_bytes;
  if (Status s = d->Close(); !s.ok() && r.error.empty()) r.error = "close: " + s.ToString();
  std::filesystem::remove_all(path, ec);

  // The whole mixed phase, per operation.
  std::vector<double> get_us, put_us;
  double get_s = 0, put_s = 0;
  uint64_t got = 0, wrong = 0;
  for (const Window& w : r.windows) {
    get_us.insert(get_us.end(), w.get_us.begin(), w.get_us.end());
    put_us.insert(put_us.end(), w.put_us.begin(), w.put_us.end());
    for (const auto& [size, us] : w.get_us_by_size) {
      std::vector<double>& by = r.get_us_by_size[size];
      by.insert(by.end(), us.begin(), us.end());
    }
    get_s += w.get_s;
    put_s += w.put_s;
    got += w.got_bytes;
    wrong += w.wrong;
  }
  r.get.design = r.put.design = name;
  r.get.op = "get";
  r.put.op = "put";
  r.get.ops = get_us.size();
  r.put.ops = put_us.size();
  if (get_s > 0) r.get.gbps = double(got) / get_s / 1e9;
  if (put_s > 0) r.put.gbps = double(mixed_put_bytes) / put_s / 1e9;
  FillPercentiles(&get_us, &r.get);
  FillPercentiles(&put_us, &r.put);
  r.get.bad = wrong;  // a miss is a cache's answer; wrong bytes are a failure
  if (mixed_put_bytes > 0)
    r.device_write_amp = double(io1.write_bytes - io0.write_bytes) / double(mixed_put_bytes);
  r.segment_write_amp = now.segment_write_amp;
  r.put.write_amp = r.device_write_amp;
  return r;
}

}  // namespace

WorkloadResult RunSteadyState(const SteadyConfig& c, const Payloads& payloads,
                              const std::function<void(const std::string&)>& progress) {
  WorkloadResult w;
  w.name = "steady";
  const BlockSizes sizes(c.sizes);
  w.block_bytes = c.sizes.size() == 1 ? c.sizes[0] : 0;  // 0: mixed
  const uint64_t n_cap = std::max<uint64_t>(4, c.capacity_bytes / sizes.Mean());
  char params[400];
  std::snprintf(params, sizeof params,
                "%s blocks; capacity %s (%llu blocks, segments of %s), hot set %llu blocks (%s); %.1fx the "
                "capacity written; 70%% gets (80%% hot), 30%% puts; %u windows after the fill; queue depth %u",
                SizesLabel(c.sizes).c_str(), HumanBytes(c.capacity_bytes).c_str(),
                static_cast<unsigned long long>(n_cap),
                HumanBytes(SegmentBytes(c.capacity_bytes, sizes.Largest())).c_str(),
                static_cast<unsigned long long>(std::max<uint64_t>(1, n_cap / 4)),
                c.hot_first ? "written first" : "spread over the fill", c.write_multiple, c.windows,
                c.queue_depth);
  w.params = params;
  w.details = {{"capacity_bytes", c.capacity_bytes}, {"write_multiple", c.write_multiple}, {"sizes", c.sizes},
               {"hot_first", c.hot_first}, {"windows", nlohmann::json::array()}, {"goals", nlohmann::json::array()}};
  for (const std::string& name : c.designs) {
    DesignRun r = RunDesign(c, name, payloads, progress);
    if (!r.error.empty()) {
      Measurement m;
      m.design = name;
      m.op = "steady";
      m.bad = 1;
      m.note = r.error;
      w.results.push_back(m);
      continue;
    }
    char wa[160];
    std::snprintf(wa, sizeof wa, "device bytes written %.3fx the payload put after the fill", r.device_write_amp);
    r.put.note = wa;
    if (r.has_segments) {
      const double payload = std::max<double>(1, double(r.mixed_put_bytes));
      char more[320];
      std::snprintf(more, sizeof more,
                    "; segment bytes %.3fx; reclaim rewrote %s of live blocks (%.3fx the payload); index: %s of "
                    "tables, %s written by its flushes and compactions (%.3fx)",
                    r.segment_write_amp, HumanBytes(r.reinserted_bytes).c_str(), r.reinserted_bytes / payload,
                    HumanBytes(r.index_sst_bytes).c_str(), HumanBytes(r.index_written_bytes).c_str(),
                    r.index_written_bytes / payload);
      r.put.note += more;
    }
    // Every design's, so that --json compares them as the table does.
    nlohmann::json amp = {{"design", name}, {"device", r.device_write_amp}, {"payload_bytes", r.mixed_put_bytes}};
    if (r.has_segments) {
      amp["segments"] = r.segment_write_amp;
      amp["reinserted_bytes"] = r.reinserted_bytes;
      amp["index_sst_bytes"] = r.index_sst_bytes;
      amp["index_written_bytes"] = r.index_written_bytes;
    }
    w.details["write_amplification"].push_back(amp);
    w.results.push_back(r.get);
    w.results.push_back(r.put);
    w.notes.push_back(name +
                      " windows: GB/s | get p50/p99/p99.9 us | put p50/p99/p99.9 us | gets from RAM/disk/miss | w-amp");
    std::vector<double> rates;
    for (size_t i = 0; i < r.windows.size(); ++i) {
      const Window& x = r.windows[i];
      const double gets = std::max<double>(1, double(x.get_ops));
      char line[260];
      std::snprintf(line, sizeof line,
                    "  %2zu  %6.3f | %7.0f %7.0f %7.0f | %7.0f %7.0f %7.0f | %.2f / %.2f / %.2f | %.3f",
                    i + 1, x.Gbps(), Pct(x.get_us, .5), Pct(x.get_us, .99), Pct(x.get_us, .999), Pct(x.put_us, .5),
                    Pct(x.put_us, .99), Pct(x.put_us, .999), x.hits_ram / gets, x.hits_disk / gets,
                    x.misses / gets, x.WriteAmp());
      w.notes.push_back(line);
      rates.push_back(x.Gbps());
      w.details["windows"].push_back(
          {{"design", name}, {"window", i + 1}, {"seconds", x.Seconds()}, {"gbps", x.Gbps()},
           {"get_p50_us", Pct(x.get_us, .5)}, {"get_p99_us", Pct(x.get_us, .99)},
           {"get_p999_us", Pct(x.get_us, .999)}, {"put_p50_us", Pct(x.put_us, .5)},
           {"put_p99_us", Pct(x.put_us, .99)}, {"put_p999_us", Pct(x.put_us, .999)}, {"gets", x.get_ops},
           {"puts", x.put_ops}, {"ram_hits", x.hits_ram}, {"disk_hits", x.hits_disk}, {"misses", x.misses},
           {"wrong", x.wrong}, {"write_amp", x.WriteAmp()}});
    }
    // Once the hot set has been found, what a cache writes from then on: the
    // second half of the windows.
    if (r.windows.size() >= 2) {
      uint64_t dev = 0, put = 0;
      for (size_t i = r.windows.size() / 2; i < r.windows.size(); ++i) {
        dev += r.windows[i].device_bytes;
        put += r.windows[i].put_bytes;
      }
      const double later = put > 0 ? double(dev) / double(put) : 0;
      w.details["write_amplification_later_half"].push_back({{"design", name}, {"device", later}});
      char b[160];
      std::snprintf(b, sizeof b, "%s write amplification over the second half of the windows: %.3f", name.c_str(),
                    later);
      w.notes.push_back(b);
    }
    // The goals of issue 21, item 2.
    const double median = Median(rates), lowest = rates.empty() ? 0 : *std::min_element(rates.begin(), rates.end());
    const double p50 = r.get.p50_us.value_or(0), p999 = r.get.p999_us.value_or(0);
    auto goal = [&](const std::string& text, double value, double threshold, bool at_most) {
      const bool met = at_most ? value <= threshold : value >= threshold;
      w.details["goals"].push_back({{"design", name}, {"goal", text}, {"value", value}, {"threshold", threshold},
                                    {"met", met}});
      char b[200];
      std::snprintf(b, sizeof b, "%s goal: %s: %.3f (%s)", name.c_str(), text.c_str(), value, met ? "met" : "MISSED");
      w.notes.push_back(b);
    };
    goal("lowest window throughput / median >= 0.8", median > 0 ? lowest / median : 0, 0.8, false);
    goal("get p99.9 / p50 <= 3", p50 > 0 ? p999 / p50 : 0, 3.0, true);
    // A mix's p50 is its small blocks' and its p99.9 its large ones', so the
    // tail is judged within each size as well.
    if (c.sizes.size() > 1) {
      for (const auto& [size, us] : r.get_us_by_size) {
        const double s50 = Pct(us, .5), s999 = Pct(us, .999);
        w.details["get_by_size"].push_back({{"design", name}, {"block_bytes", size}, {"gets", us.size()},
                                            {"p50_us", s50}, {"p99_us", Pct(us, .99)}, {"p999_us", s999}});
        goal("get p99.9 / p50 <= 3 at " + HumanBytes(size), s50 > 0 ? s999 / s50 : 0, 3.0, true);
      }
    }
    if (c.sizes == std::vector<uint64_t>{2 * kMiB})
      goal("write amplification at 2 MiB <= 1.10", r.device_write_amp, 1.10, true);
  }
  return w;
}

}  // namespace kvbench
