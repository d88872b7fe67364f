// kvtier_remote_bench: the shared tier on Ceph against `rados bench` on the
// same cluster, in the same run (ratios, not absolute numbers).
//
//   kvtier_remote_bench --conf CEPH.CONF [--pool kvtier] [--dir TMP]
//       [--convs 128] [--blocks 8] [--block-kib 2048] [--window 16]
//       [--segment-mib 256] [--object-mib 16] [--rados-seconds 10]
//       [--write-depths 16,32,64] [--write-sizes-mib 4,16] [--upload-write-mib N]
//
// 1. `rados bench` writes of each of `write-sizes-mib` at each of
//    `write-depths` in flight (the cluster's write limit is the best of
//    them), then its sequential and its random reads of 4 MiB objects (16 in
//    flight, as the bulk gets). The best write runs again right after step 2
//    and the reads right after step 3a; the better figure of each is the one
//    compared with.
// 2. Node A (a store in DIR/a) writes `convs` conversations of `blocks`
//    blocks each with the tier off and seals its last segment, then reopens
//    with the tier on, which uploads every sealed segment. Upload throughput
//    = uploaded bytes / (reopen to last upload): read back + RADOS writes.
//    Then the same bytes' writes alone, from memory, in the upload's pieces
//    and window through kvtier's RADOS client: what the writes reach without
//    the read-back.
// 3. Node B (DIR/b, empty) imports the catalog, then
//    a. bulk: gets every uploaded block, `window` gets in flight;
//    b. revisit trace: conversations in a shuffled order, each a
//       LookupPrefix of its keys then a GetBatch of the matched prefix;
//       latency per revisit (p50/p99) and blocks served / blocks asked.
//    Every block read is compared with what A wrote.
// Prints a table and one JSON line. Exit 1 when a block did not verify.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "format/record.h"
#include "kvtier/store.h"
#include "remote/rados_client.h"
#include "remote/shared_tier.h"

namespace {

using Clock = std::chrono::steady_clock;
double Secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Args {
  std::string conf, pool = "kvtier", dir;
  // Segments and objects as the store's defaults (Options).
  uint32_t convs = 128, blocks = 8, block_kib = 2048, window = 16, segment_mib = 256, object_mib = 16,
           rados_seconds = 10;
  std::vector<uint32_t> write_depths = {16, 32, 64};
  std::vector<uint32_t> write_sizes_mib = {4, 16};
  uint32_t upload_write_mib = 0;  // 0: the store's default
  bool help = false;
};

// "16,32,64": numbers from 1 to `most`.
bool ParseList(const std::string& v, unsigned long most, std::vector<uint32_t>* out) {
  out->clear();
  for (size_t at = 0; at <= v.size();) {
    const size_t comma = std::min(v.find(',', at), v.size());
    const unsigned long d = std::stoul(v.substr(at, comma - at));
    if (d == 0 || d > most) return false;
    out->push_back(static_cast<uint32_t>(d));
    at = comma + 1;
  }
  return true;
}

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      a->help = true;
      return false;
    }
    if (i + 1 >= argc) return false;
    std::string v = argv[++i];
    if (k == "--conf") a->conf = v;
    else if (k == "--pool") a->pool = v;
    else if (k == "--dir") a->dir = v;
    else if (k == "--convs") a->convs = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--blocks") a->blocks = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--block-kib") a->block_kib = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--window") a->window = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--segment-mib") a->segment_mib = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--object-mib") a->object_mib = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--rados-seconds") a->rados_seconds = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--upload-write-mib") a->upload_write_mib = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--write-depths") {
      if (!ParseList(v, 1024, &a->write_depths)) return false;
    } else if (k == "--write-sizes-mib") {
      if (!ParseList(v, 64, &a->write_sizes_mib)) return false;
    } else return false;
  }
  return !a->conf.empty() && !a->write_depths.empty() && !a->write_sizes_mib.empty();
}

// One progress line per phase, on stderr (the results go to stdout).
void Step(const std::string& what) {
  static int n = 0;
  std::fprintf(stderr, "[%d] %s\n", ++n, what.c_str());
}

// Runs a shell command and returns its output.
std::string Sh(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[1024];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  ::pclose(p);
  return out;
}

// "Bandwidth (MB/sec):   123.4" from rados bench output, in MB/s.
double RadosBandwidth(const std::string& out) {
  size_t at = out.find("Bandwidth (MB/sec):");
  if (at == std::string::npos) return 0;
  return std::atof(out.c_str() + at + std::strlen("Bandwidth (MB/sec):"));
}

std::vector<uint8_t> Block(uint32_t conv, uint32_t i, size_t size) {
  std::vector<uint8_t> v(size);
  uint64_t x = (static_cast<uint64_t>(conv) << 32 | i) * 0x9E3779B97F4A7C15ull + 1;
  for (size_t o = 0; o + 8 <= size; o += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(v.data() + o, &x, 8);
  }
  return v;
}
std::string KeyOf(uint32_t conv, uint32_t i) {
  char k[64];
  std::snprintf(k, sizeof k, "conv%05u-block%04u-%016llx", conv, i,
                static_cast<unsigned long long>((conv * 1315423911ull) ^ i));
  return k;
}

kvtier::Options NodeOptions(const Args& a, const std::string& rados_ns) {
  kvtier::Options o;
  o.segment_size_bytes = static_cast<uint64_t>(a.segment_mib) << 20;
  o.capacity_bytes = 16ull << 30;
  o.remote.enabled = true;
  o.remote.ceph_conf = a.conf;
  o.remote.pool = a.pool;
  o.remote.rados_namespace = rados_ns;
  o.remote.poll_interval_ms = 200;
  o.remote.read_deadline_ms = 5000;
  o.remote.object_bytes = std::min<uint64_t>(static_cast<uint64_t>(a.object_mib) << 20, o.segment_size_bytes);
  if (a.upload_write_mib != 0) o.remote.upload_write_bytes = static_cast<uint64_t>(a.upload_write_mib) << 20;
  return o;
}

// The upload's RADOS writes alone: `bytes` from memory, in the pieces,
// stripes and window an upload of that many bytes uses, through kvtier's own
// RADOS client; the objects are removed after. MB/s, or 0 on a failure.
double UploadWritesAloneMbs(const Args& a, const kvtier::Options& o, const std::string& rados_ns, uint64_t bytes) {
  using kvtier::remote::RadosClient;
  auto c = RadosClient::Connect({a.conf, "admin", a.pool, rados_ns + "-writes", 10000});
  if (!c.ok()) return 0;
  const auto shape = kvtier::remote::UploadShape::Of(o.remote);
  const uint64_t part = o.remote.object_bytes, segment = o.segment_size_bytes;
  const uint64_t parts_per_segment = (segment + part - 1) / part;
  auto piece = RadosClient::WriteBuffer::Allocate(shape.write_bytes);  // as the upload's, sent without a copy
  if (!piece.ok()) return 0;
  std::memset(piece->data(), 0, piece->size());
  for (size_t i = 0; i < piece->size(); i += 8) piece->data()[i] = static_cast<uint8_t>(i >> 12);
  std::vector<std::string> objects;
  RadosClient::AsyncWrites writes(c->get());
  std::deque<uint64_t> window;
  const auto t0 = Clock::now();
  bool ok = true;
  for (uint64_t seg = 0; ok && seg * segment < bytes; ++seg) {
    for (uint64_t p = 0; p < parts_per_segment; ++p) objects.push_back("w." + std::to_string(seg) + ".p" + std::to_string(p));
    const size_t first = objects.size() - parts_per_segment;
    for (uint64_t off = 0; ok && off < part; off += shape.write_bytes)  // striped, as an upload
      for (uint64_t p = 0; ok && p < parts_per_segment; ++p) {
        if (window.size() == shape.writes_in_flight) {
          ok = writes.Wait(window.front()).ok();
          window.pop_front();
        }
        const size_t len = static_cast<size_t>(std::min<uint64_t>(shape.write_bytes, part - off));
        auto t = writes.Start(objects[first + p], *piece, len, off, off == 0);
        ok = ok && t.ok();
        if (t.ok()) window.push_back(*t);
      }
  }
  ok = writes.Drain().ok() && ok;
  const double secs = Secs(Clock::now() - t0);
  for (const std::string& obj : objects)  // a cluster gone would cost a timeout per object
    if ((*c)->Remove(obj).code() == kvtier::Code::kTimedOut) break;
  return ok ? static_cast<double>(objects.size() * part) / 1e6 / secs : 0;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

template <typename F>
bool WaitUntil(F pred, double seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  bool parsed = false;
  try {
    parsed = Parse(argc, argv, &a);
  } catch (const std::exception&) {  // std::stoul on a value that is no number
    parsed = false;
  }
  if (!parsed) {
    std::fprintf(a.help ? stdout : stderr,
                 "usage: kvtier_remote_bench --conf CEPH.CONF [--pool P] [--dir TMP] [--convs N] [--blocks N]\n"
                 "       [--block-kib N] [--window N] [--segment-mib N] [--object-mib N]\n"
                 "       [--rados-seconds N] [--write-depths 16,32,64] [--write-sizes-mib 4,16]\n"
                 "       [--upload-write-mib N]\n");
    return a.help ? 0 : 2;
  }
  if (a.dir.empty()) a.dir = std::filesystem::temp_directory_path() / ("kvtier-remote-bench-" + std::to_string(::getpid()));
  std::filesystem::remove_all(a.dir);
  std::filesystem::create_directories(a.dir);
  const std::string rados_ns = "bench-" + std::to_string(::getpid());
  const size_t block = static_cast<size_t>(a.block_kib) << 10;

  // 1. The cluster's own limit, same run. `rados bench` waits for as long as
  // the cluster does not answer (an OSD down): bounded, so the run fails
  // saying so instead of hanging.
  const std::string rb = "timeout -k 5 " + std::to_string(a.rados_seconds + 60) + " rados -c " + a.conf + " -p " +
                         a.pool + " bench " + std::to_string(a.rados_seconds);
  // The write limit is the best of a sweep of write sizes and depths: one
  // size or depth alone is not the cluster's best (docs/benchmarks.md).
  // Each sweep run removes its objects as it ends.
  auto write_cmd = [&](uint32_t mib, uint32_t depth, const std::string& run) {
    return rb + " write -b " + std::to_string(static_cast<uint64_t>(mib) << 20) + " -t " + std::to_string(depth) +
           " --run-name " + run;
  };
  double rados_write = 0, rados_write_4m = 0;
  uint32_t write_depth = a.write_depths.front(), write_mib = a.write_sizes_mib.front();
  uint32_t depth_4m = a.write_depths.front();
  std::string sweep_json;
  for (uint32_t mib : a.write_sizes_mib)
    for (uint32_t t : a.write_depths) {
      Step("rados bench write, " + std::to_string(mib) + " MiB, " + std::to_string(t) + " in flight, " +
           std::to_string(a.rados_seconds) + " s");
      const std::string run = "kvsweep" + std::to_string(mib) + "m" + std::to_string(t);
      const double mbs = RadosBandwidth(Sh(write_cmd(mib, t, run) + " 2>&1"));
      char item[64];
      std::snprintf(item, sizeof item, "%s\"%uMiB@%u\":%.1f", sweep_json.empty() ? "" : ",", mib, t, mbs);
      sweep_json += item;
      if (mbs > rados_write) {
        rados_write = mbs;
        write_depth = t;
        write_mib = mib;
      }
      if (mib == 4 && mbs > rados_write_4m) {
        rados_write_4m = mbs;
        depth_4m = t;
      }
    }
  // Objects for the reads: 4 MiB, as before the size sweep, at the best
  // depth for that size; a write as any other, so it counts for the limit.
  Step("rados bench write, 4 MiB, " + std::to_string(depth_4m) + " in flight, objects kept for the reads");
  const std::string kept_write_cmd = write_cmd(4, depth_4m, "kvrb") + " --no-cleanup 2>&1";
  rados_write = std::max(rados_write, RadosBandwidth(Sh(kept_write_cmd)));
  if (rados_write <= 0) {
    std::fprintf(stderr, "kvtier_remote_bench: `rados bench` wrote nothing within %u s: is the cluster healthy "
                         "(`ceph -c %s -s`)?\n", a.rados_seconds + 60, a.conf.c_str());
    return 1;
  }
  // Its reads run twice: right after its writes (fresh, like ours after
  // upload) and after our bulk gets; the ratio uses the better of the two.
  Step("rados bench seq read");
  const double rados_read_fresh = RadosBandwidth(Sh(rb + " seq -t 16 --run-name kvrb 2>&1"));
  Step("rados bench rand read");
  const double rados_rand_fresh = RadosBandwidth(Sh(rb + " rand -t 16 --run-name kvrb 2>&1"));
  double rados_read = 0, rados_rand = 0;

  // 2. Node A writes and uploads.
  Step("node A: local puts, then uploads after a reopen");
  std::vector<uint64_t> sums(static_cast<size_t>(a.convs) * a.blocks);
  kvtier::NamespaceSpec spec;
  spec.model_id = "bench/llama-8b-like";
  spec.dtype = "bf16";
  spec.block_tokens = 16;
  // A writes with the tier off, then reopens with it on: the reopen queues
  // every sealed segment, so the upload is timed alone (no local puts
  // competing for the disk).
  kvtier::Options local_only = NodeOptions(a, rados_ns);
  local_only.remote.enabled = false;
  auto sa = kvtier::Store::Open(a.dir + "/a", local_only);
  if (!sa.ok()) {
    std::fprintf(stderr, "open A: %s\n", sa.status().ToString().c_str());
    return 1;
  }
  auto& A = *sa;
  auto nsa = A->RegisterNamespace(spec);
  if (!nsa.ok()) return 1;
  const auto t0 = Clock::now();
  for (uint32_t c = 0; c < a.convs; ++c)
    for (uint32_t i = 0; i < a.blocks; ++i) {
      auto b = Block(c, i, block);
      sums[c * a.blocks + i] = kvtier::format::Checksum(b.data(), b.size());
      kvtier::Status st = A->Put(*nsa, KeyOf(c, i), b.data(), b.size());
      if (!st.ok()) {
        std::fprintf(stderr, "put: %s\n", st.ToString().c_str());
        return 1;
      }
    }
  // Fill the segment that holds the last trace block until it is sealed.
  {
    auto last = A->Stat(*nsa, KeyOf(a.convs - 1, a.blocks - 1));
    std::vector<uint8_t> filler(block, 1);
    for (uint32_t k = 0; last.ok(); ++k) {
      bool sealed_last = false;
      for (const auto& s : A->Segments())
        if (s.id == last->segment && s.state == kvtier::SegmentState::kSealed) sealed_last = true;
      if (sealed_last) break;
      A->Put(*nsa, "filler-" + std::to_string(k), filler.data(), filler.size()).IgnoreError();
    }
  }
  const double put_s = Secs(Clock::now() - t0);
  if (!A->Close().ok()) return 1;
  sa = kvtier::Store::Open(a.dir + "/a", NodeOptions(a, rados_ns));
  if (!sa.ok()) {
    std::fprintf(stderr, "reopen A: %s\n", sa.status().ToString().c_str());
    return 1;
  }
  const auto tu = Clock::now();
  uint32_t sealed = 0;
  for (const auto& s : A->Segments()) sealed += s.state == kvtier::SegmentState::kSealed;
  if (!WaitUntil([&] { return A->GetStats().remote_uploads >= sealed; }, 600)) {
    std::fprintf(stderr, "uploads did not finish\n");
    return 1;
  }
  const double upload_s = Secs(Clock::now() - tu);
  const kvtier::Stats sa_stats = A->GetStats();
  const double upload_mbs = static_cast<double>(sa_stats.remote_upload_bytes) / 1e6 / upload_s;
  // What the upload's writes reach without the read-back from the local
  // disk, and its ratio to the limit: the part of the gap that the client
  // API and the write pattern set, whatever the store does.
  Step("the upload's writes alone, from memory");
  const double writes_alone = UploadWritesAloneMbs(a, NodeOptions(a, rados_ns), rados_ns, sa_stats.remote_upload_bytes);
  Step("rados bench write, again");
  // Its first write's objects go first: `rados bench` cleans up only the
  // run it recorded last, and two runs' objects filled the test cluster.
  const std::string rados_cleanup =
      "timeout -k 5 120 rados -c " + a.conf + " -p " + a.pool + " cleanup --run-name kvrb >/dev/null 2>&1";
  Sh(rados_cleanup);
  rados_write = std::max(rados_write, RadosBandwidth(Sh(kept_write_cmd)));
  // The best write, when it is another, once more too (a fresh cluster
  // wrote at 343-546 MB/s in runs minutes apart): the best of all is the limit.
  if (write_mib != 4 || write_depth != depth_4m)
    rados_write = std::max(rados_write, RadosBandwidth(Sh(write_cmd(write_mib, write_depth, "kvagain") + " 2>&1")));

  // 3. Node B.
  Step("node B: catalog import, bulk remote gets, revisit trace");
  auto sb = kvtier::Store::Open(a.dir + "/b", NodeOptions(a, rados_ns));
  if (!sb.ok()) return 1;
  auto& B = *sb;
  auto nsb = B->RegisterNamespace(spec);
  if (!nsb.ok()) return 1;
  const auto ti = Clock::now();
  WaitUntil([&] { return B->GetStats().remote_segments_imported >= sa_stats.remote_uploads; }, 120);
  const double import_s = Secs(Clock::now() - ti);

  // 3a. Bulk remote gets, `window` in flight.
  std::vector<std::pair<uint32_t, uint32_t>> present;
  for (uint32_t c = 0; c < a.convs; ++c)
    for (uint32_t i = 0; i < a.blocks; ++i) present.emplace_back(c, i);
  std::atomic<uint64_t> bad{0}, got{0}, missed{0};
  {
    std::mutex m;
    std::condition_variable cv;
    uint32_t in_flight = 0;
    std::vector<std::vector<uint8_t>> bufs(a.window, std::vector<uint8_t>(block));
    std::vector<uint32_t> free_bufs;
    for (uint32_t w = 0; w < a.window; ++w) free_bufs.push_back(w);
    const auto tg = Clock::now();
    for (const auto& [c, i] : present) {
      uint32_t slot;
      {
        std::unique_lock<std::mutex> l(m);
        cv.wait(l, [&] { return !free_bufs.empty(); });
        slot = free_bufs.back();
        free_bufs.pop_back();
        ++in_flight;
      }
      const uint64_t want = sums[c * a.blocks + i];
      kvtier::MutableFragment f{bufs[slot].data(), block};
      B->GetAsync(*nsb, KeyOf(c, i), {&f, 1}, kvtier::kNoDeadline, [&, slot, want](kvtier::Result<size_t> r) {
        if (r.ok()) {
          if (*r != block || kvtier::format::Checksum(bufs[slot].data(), *r) != want) bad.fetch_add(1);
          else got.fetch_add(1);
        } else {
          missed.fetch_add(1);
        }
        std::lock_guard<std::mutex> l(m);
        free_bufs.push_back(slot);
        --in_flight;
        cv.notify_all();
      });
    }
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return in_flight == 0; });
    const double s = Secs(Clock::now() - tg);
    std::printf("bulk remote get: %llu blocks in %.2f s, %.1f MB/s (%llu misses, %llu bad)\n",
                static_cast<unsigned long long>(got.load()), s,
                static_cast<double>(got.load()) * static_cast<double>(block) / 1e6 / s,
                static_cast<unsigned long long>(missed.load()), static_cast<unsigned long long>(bad.load()));
    const double get_mbs = static_cast<double>(got.load()) * static_cast<double>(block) / 1e6 / s;
    rados_read = std::max(rados_read_fresh, RadosBandwidth(Sh(rb + " seq -t 16 --run-name kvrb 2>&1")));
    rados_rand = std::max(rados_rand_fresh, RadosBandwidth(Sh(rb + " rand -t 16 --run-name kvrb 2>&1")));
    Sh(rados_cleanup);

    // 3b. Revisit trace.
    std::vector<uint32_t> order(a.convs);
    for (uint32_t c = 0; c < a.convs; ++c) order[c] = c;
    std::mt19937 rng(42);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<double> lat_ms;
    uint64_t asked = 0, served = 0;
    std::vector<uint8_t> dst(static_cast<size_t>(a.blocks) * block);
    const auto tr = Clock::now();
    for (uint32_t c : order) {
      const auto t = Clock::now();
      std::vector<std::string> keys;
      for (uint32_t i = 0; i < a.blocks; ++i) keys.push_back(KeyOf(c, i));
      std::vector<std::string_view> views(keys.begin(), keys.end());
      auto n = B->LookupPrefix(*nsb, views);
      size_t hit = n.ok() ? *n : 0;
      std::vector<kvtier::MutableFragment> frags(hit);
      std::vector<kvtier::GetItem> items(hit);
      for (size_t i = 0; i < hit; ++i) {
        frags[i] = {dst.data() + i * block, block};
        items[i] = {keys[i], {&frags[i], 1}};
      }
      auto rs = B->GetBatch(*nsb, items);
      lat_ms.push_back(Secs(Clock::now() - t) * 1e3);
      asked += a.blocks;
      for (size_t i = 0; i < rs.size(); ++i) {
        if (!rs[i].ok()) break;
        if (kvtier::format::Checksum(dst.data() + i * block, *rs[i]) != sums[c * a.blocks + i]) {
          bad.fetch_add(1);
          break;
        }
        ++served;
      }
    }
    const double trace_s = Secs(Clock::now() - tr);
    const kvtier::Stats sb_stats = B->GetStats();
    std::printf("\n%-40s %12s\n", "measure", "value");
    std::printf("%-40s %12.1f\n", "rados bench write, best (MB/s)", rados_write);
    std::printf("%-40s %12u\n", "  its write size (MiB)", write_mib);
    std::printf("%-40s %12u\n", "  its depth (writes in flight)", write_depth);
    std::printf("%-40s %12.1f\n", "rados bench write 4 MiB, best (MB/s)", rados_write_4m);
    std::printf("%-40s %12.1f\n", "rados bench seq read, fresh (MB/s)", rados_read_fresh);
    std::printf("%-40s %12.1f\n", "rados bench seq read, best (MB/s)", rados_read);
    std::printf("%-40s %12.1f\n", "kvtier upload (MB/s)", upload_mbs);
    std::printf("%-40s %12.2f\n", "  ratio to rados write", rados_write > 0 ? upload_mbs / rados_write : 0);
    std::printf("%-40s %12.1f\n", "its writes alone, from memory (MB/s)", writes_alone);
    std::printf("%-40s %12.2f\n", "  ratio to rados write", rados_write > 0 ? writes_alone / rados_write : 0);
    std::printf("%-40s %12.2f\n", "upload / its writes alone", writes_alone > 0 ? upload_mbs / writes_alone : 0);
    std::printf("%-40s %12.1f\n", "kvtier remote get, bulk (MB/s)", get_mbs);
    std::printf("%-40s %12.1f\n", "rados bench rand read, best (MB/s)", rados_rand);
    std::printf("%-40s %12.2f\n", "  ratio to rados seq read", rados_read > 0 ? get_mbs / rados_read : 0);
    std::printf("%-40s %12.2f\n", "  ratio to rados rand read", rados_rand > 0 ? get_mbs / rados_rand : 0);
    std::printf("%-40s %12.2f\n", "A: local puts done (s)", put_s);
    std::printf("%-40s %12.2f\n", "A: upload after reopen (s)", upload_s);
    std::printf("%-40s %12.2f\n", "B: catalog imported (s)", import_s);
    std::printf("%-40s %12.3f\n", "trace: blocks served / asked", asked ? double(served) / double(asked) : 0);
    std::printf("%-40s %12.1f\n", "trace: revisit p50 (ms)", Percentile(lat_ms, 0.5));
    std::printf("%-40s %12.1f\n", "trace: revisit p99 (ms)", Percentile(lat_ms, 0.99));
    std::printf("%-40s %12.1f\n", "trace: MB/s", double(served) * double(block) / 1e6 / trace_s);
    std::printf(
        "{\"rados_write_mbs\":%.1f,\"rados_write_mib\":%u,\"rados_write_4mib_mbs\":%.1f,\"rados_write_depth\":%u,\"rados_write_sweep_mbs\":{%s},\"rados_read_fresh_mbs\":%.1f,\"rados_read_mbs\":%.1f,\"rados_rand_mbs\":%.1f,"
        "\"upload_mbs\":%.1f,\"upload_writes_alone_mbs\":%.1f,\"get_mbs\":%.1f,\"upload_ratio\":%.3f,\"get_ratio\":%.3f,\"get_ratio_rand\":%.3f,"
        "\"trace_served\":%llu,\"trace_asked\":%llu,"
        "\"trace_p50_ms\":%.2f,\"trace_p99_ms\":%.2f,\"remote_hits\":%llu,\"checksum_failures\":%llu,\"bad\":%llu}\n",
        rados_write, write_mib, rados_write_4m, write_depth, sweep_json.c_str(), rados_read_fresh, rados_read, rados_rand, upload_mbs,
        writes_alone, get_mbs,
        rados_write > 0 ? upload_mbs / rados_write : 0, rados_read > 0 ? get_mbs / rados_read : 0,
        rados_rand > 0 ? get_mbs / rados_rand : 0, static_cast<unsigned long long>(served),
        static_cast<unsigned long long>(asked), Percentile(lat_ms, 0.5), Percentile(lat_ms, 0.99),
        static_cast<unsigned long long>(sb_stats.hits_remote),
        static_cast<unsigned long long>(sb_stats.remote_checksum_failures),
        static_cast<unsigned long long>(bad.load()));
  }
  B->Close().IgnoreError();
  A->Close().IgnoreError();
  std::filesystem::remove_all(a.dir);
  // The run's objects live in their own RADOS namespace: remove them all.
  const std::string r = "rados -c " + a.conf + " -p " + a.pool + " -N " + rados_ns;
  Sh(r + " ls 2>/dev/null | xargs -r -n 64 " + r + " rm >/dev/null 2>&1");
  return bad.load() == 0 ? 0 : 1;
}
