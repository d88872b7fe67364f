// kvtier-service-bench (`kvtier bench --service`): the service against the
// embedded store it serves, in one run, on one machine (issue 19).
//
//   small requests  LookupPrefix of 32 keys, p50/p99 per call, at 1 and N
//                   clients: service processes against embedded threads
//   bulk RAM reads  2 MiB gets of blocks the RAM tier holds, N client
//                   processes reading into registered memory (and, for
//                   comparison, through their staging), and one client's
//                   get_batch of 64 blocks (an engine's prefix load),
//                   against the host's best multi-threaded memcpy of the
//                   same run
//   bulk disk       O_DIRECT-bound gets and durable puts (a store without a
//                   RAM tier), service processes against embedded threads
//   scaling         aggregate rates at 1, 2, 4 and 8 clients
//
// Every client is a process of its own (this program re-run as --role
// client), started together at one instant and stopped at another. Each row
// runs four times, embedded, service, service, embedded, and keeps each
// arm's better run: whichever went second on a store wrote into a fuller
// one, and on a 2-core VM its durable puts came out up to 1.7x slower.
// The embedded arm's buffers sit on the pages the clients' shareable memory
// gets (huge pages only where the host reserved hugetlb pages): the store
// copies I/O from 4 KiB pages through its own buffers and goes zero-copy from
// huge ones, which is a property of the memory, not of the service.
// --embedded-huge-pages gives the embedded arm huge pages regardless: what an
// engine whose own buffers are on THP pays for sharing them through the
// service. Prints a
// table, or JSON with --json; each figure carries its ratio to its limit.
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/common.h"
#include "harness/copy_limit.h"
#include "kvtier/service.h"
#include "kvtier/store.h"

extern char** environ;

namespace {

using kvtier::Clock;
using kvtier::NamespaceId;
using kvtier::Store;

constexpr size_t kSmallKeys = 4096;
constexpr size_t kLookupBatch = 32;
// Blocks of one get_batch: a 2,750-token prefix of Qwen3-0.6B is 171 blocks
// of 1.75 MiB; 64 of 2 MiB keeps the bench's buffers at 128 MiB.
constexpr size_t kGetBatchBlocks = 64;

// Async gets one client keeps in flight (an engine's overlapped loads).
constexpr size_t kAsyncDepth = 8;

bool IsBatch(const std::string& op) { return op.rfind("ram_get_batch", 0) == 0; }
bool IsAsync(const std::string& op) { return op.rfind("ram_get_async", 0) == 0; }
// A worker's buffer: one block, a batch of them, or one per async get in flight.
size_t BufferBytes(const std::string& op, size_t block) {
  return std::max<size_t>(block, 4096) * (IsBatch(op) ? kGetBatchBlocks : IsAsync(op) ? kAsyncDepth : 1);
}

struct Args {
  std::string role = "parent";
  std::string dir = "./kvtier-service-bench";
  double seconds = 2.0;
  std::vector<int> clients = {1, 2, 4, 8};
  size_t block = 2 << 20;
  size_t ram_blocks = 512;   // 1 GiB held by the RAM tier: more than the caches (the H200 host's L3 is 300 MiB)
  size_t disk_blocks = 256;  // 512 MiB on disk
  bool json = false;
  bool zero_copy_small_pages = false;  // Options::zero_copy_small_pages of the served stores
  bool embedded_huge_pages = false;    // embedded arm on huge pages even where clients are not
  int64_t reply_spin_us = -1;  // the clients' ServiceClientOptions::reply_spin_us (-1: by core count)
  int64_t reader_spin_us = 0;  // the service's ServiceOptions::reader_spin_us (-1: by core count)
  int64_t client_read_threads = -1;  // the service's ServiceOptions::client_read_threads
  int64_t stream_min_kib = -1;  // Options::ram_streaming_copy_min_bytes in KiB (-1: the default)
  int64_t split_min_kib = -1;  // Options::ram_split_copy_min_bytes in KiB (0: never; -1: the store's default)
  int64_t copy_spin_us = 0;    // Options::ram_copy_spin_us
  bool shared_tier = false;     // the served RAM tier in /dev/shm, as `kvtier serve` keeps it (and lends it)
  bool lent_tier = true;        // clients' ServiceClientOptions::read_lent_tier
  bool client_memory = true;    // clients' ServiceClientOptions::service_reads_memory
  bool private_thp = false;     // memory not registered: private, on transparent huge pages
  bool disk = true;             // the disk rows (--no-disk: the RAM and lookup rows alone)
  bool ram = true;              // the lookup and RAM rows (--disk-only: the disk rows alone)
  bool warm_up = true;          // one untimed get per client first (--no-warm-up: timed from the first)
  // client and echo roles
  std::string socket, op, out;
  int fd = -1;
  int64_t start_ns = 0;
  std::string go;  // client: after its untimed first op, wait for this file to name the start
  uint64_t seed = 0;
  NamespaceId ns = 0;
};

// How many blocks an op's keys range over: the RAM tier's working set for
// the RAM rows, the disk store's for the rest.
size_t BlocksOf(const std::string& op, const Args& a) {
  return op.rfind("ram_get", 0) == 0 ? a.ram_blocks : a.disk_blocks;
}

kvtier::NamespaceSpec Spec(const std::string& model) {
  kvtier::NamespaceSpec s;
  s.model_id = model;
  s.dtype = "bf16";
  s.layout = "bench";
  return s;
}

double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

int64_t NowNs() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }
void SleepUntilNs(int64_t ns) {
  const Clock::time_point at{std::chrono::nanoseconds(ns)};
  std::this_thread::sleep_until(at);
}

// What one client (or thread) did between start and stop.
struct Result {
  uint64_t ops = 0, bytes = 0, errors = 0;
  std::vector<float> lat_us;  // a sample
  double cpu_s = 0;  // a client process's CPU (every thread of it) while timed
  void Write(const std::string& path) const {
    std::ofstream o(path);
    o << ops << " " << bytes << " " << errors << " " << cpu_s << " " << lat_us.size() << "\n";
    for (float v : lat_us) o << v << "\n";
  }
  static Result Read(const std::string& path) {
    Result r;
    std::ifstream in(path);
    size_t n = 0;
    in >> r.ops >> r.bytes >> r.errors >> r.cpu_s >> n;
    r.lat_us.resize(n);
    for (float& v : r.lat_us) in >> v;
    return r;
  }
};

struct Summary {
  uint64_t ops = 0, bytes = 0, errors = 0;
  double seconds = 0, p50 = 0, p99 = 0;
  // CPU while timed: the clients' processes, and the process that serves
  // (the service, or the embedded store with its callers' threads).
  double client_cpu_s = 0, server_cpu_s = 0;
  // CPU microseconds per MiB moved, both sides together.
  double CpuUsPerMib() const { return bytes > 0 ? (client_cpu_s + server_cpu_s) * 1e6 / (bytes / 1048576.0) : 0; }
  double gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
  double ops_per_s() const { return seconds > 0 ? ops / seconds : 0; }
};

Summary Summarize(const std::vector<Result>& rs, double seconds) {
  Summary s;
  s.seconds = seconds;
  std::vector<float> all;
  for (const Result& r : rs) {
    s.ops += r.ops;
    s.bytes += r.bytes;
    s.errors += r.errors;
    s.client_cpu_s += r.cpu_s;
    all.insert(all.end(), r.lat_us.begin(), r.lat_us.end());
  }
  if (!all.empty()) {
    std::sort(all.begin(), all.end());
    s.p50 = all[all.size() / 2];
    s.p99 = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  }
  return s;
}

std::vector<std::string> SmallKeys() {
  std::vector<std::string> k;
  for (size_t i = 0; i < kSmallKeys; ++i) k.push_back(kvbench::MakeKey(7, i));
  return k;
}

// RAM-tier GetAsync, kAsyncDepth in flight, each slot's next issued (on
// this thread) when its get lands, until `stop_ns`; gets that land after it
// are not counted.
Result AsyncGets(Store* store, NamespaceId ns, uint64_t seed, int64_t stop_ns, uint8_t* buf, size_t block,
                 size_t blocks, const kvbench::Payloads& payloads) {
  Result r;
  std::mt19937_64 rng(seed);
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<size_t, int64_t>> landed;  // slot, bytes (-1: failed)
  std::vector<uint64_t> ids(kAsyncDepth);
  std::vector<Clock::time_point> t0(kAsyncDepth);
  auto issue = [&](size_t slot) {
    ids[slot] = rng() % blocks;
    t0[slot] = Clock::now();
    kvtier::MutableFragment f{buf + slot * block, block};
    store->GetAsync(ns, kvbench::MakeKey(1, ids[slot]), {&f, 1}, kvtier::kNoDeadline,
                    [&, slot](kvtier::Result<size_t> got) {
                      std::lock_guard<std::mutex> l(mu);
                      landed.emplace_back(slot, got.ok() ? static_cast<int64_t>(*got) : -1);
                      cv.notify_one();
                    });
  };
  size_t inflight = 0;
  for (size_t slot = 0; slot < kAsyncDepth; ++slot, ++inflight) issue(slot);
  while (inflight > 0) {
    std::pair<size_t, int64_t> got;
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return !landed.empty(); });
      got = landed.front();
      landed.pop_front();
    }
    --inflight;
    const auto [slot, n] = got;
    const bool counted = NowNs() < stop_ns;
    if (counted) {
      if (n != static_cast<int64_t>(block)) {
        ++r.errors;
      } else {
        r.bytes += block;
        if (r.ops % 64 == 0 && !payloads.Verify(ids[slot], block, buf + slot * block)) ++r.errors;  // a sample
      }
      ++r.ops;
      if (r.lat_us.size() < 200000) r.lat_us.push_back(static_cast<float>(kvbench::MicrosSince(t0[slot])));
      issue(slot);
      ++inflight;
    }
  }
  return r;
}

// One worker's loop of `op` against `store` until `stop_ns`. `buf` is where
// gets land (registered memory, for a client that registered it).
Result Work(Store* store, NamespaceId ns, const std::string& op, uint64_t seed, int64_t stop_ns, uint8_t* buf,
            size_t block, size_t blocks, const kvbench::Payloads& payloads) {
  if (IsAsync(op)) return AsyncGets(store, ns, seed, stop_ns, buf, block, blocks, payloads);
  Result r;
  std::mt19937_64 rng(seed);
  const std::vector<std::string> small = SmallKeys();
  uint64_t put_id = 1000000 + seed * 1000000;
  while (NowNs() < stop_ns) {
    const auto t0 = Clock::now();
    if (op == "lookup") {
      std::vector<std::string_view> keys;
      const size_t at = rng() % (kSmallKeys - kLookupBatch);
      for (size_t i = 0; i < kLookupBatch; ++i) keys.push_back(small[at + i]);
      auto n = store->LookupPrefix(ns, keys);
      if (!n.ok() || *n != kLookupBatch) ++r.errors;
    } else if (op == "ram_get" || op == "disk_get") {
      const uint64_t id = rng() % blocks;
      auto n = store->Get(ns, kvbench::MakeKey(1, id), buf, block);
      if (!n.ok() || *n != block) {
        ++r.errors;
      } else {
        r.bytes += block;
        if (r.ops % 64 == 0 && !payloads.Verify(id, block, buf)) ++r.errors;  // a sample, verified
      }
    } else if (op == "ram_get_batch") {
      // An engine's load: many RAM hits in one call, into its own memory.
      std::vector<std::string> keys(kGetBatchBlocks);
      std::vector<kvtier::MutableFragment> frags(kGetBatchBlocks);
      std::vector<kvtier::GetItem> items(kGetBatchBlocks);
      std::vector<uint64_t> ids(kGetBatchBlocks);
      for (size_t i = 0; i < kGetBatchBlocks; ++i) {
        ids[i] = rng() % blocks;
        keys[i] = kvbench::MakeKey(1, ids[i]);
        frags[i] = kvtier::MutableFragment{buf + i * block, block};
        items[i] = kvtier::GetItem{keys[i], {&frags[i], 1}};
      }
      auto got = store->GetBatch(ns, items);
      for (size_t i = 0; i < got.size(); ++i) {
        if (!got[i].ok() || *got[i] != block) ++r.errors;
        else r.bytes += block;
      }
      const size_t at = r.ops % kGetBatchBlocks;  // a sample, verified
      if (!payloads.Verify(ids[at], block, buf + at * block)) ++r.errors;
    } else if (op == "put") {
      const uint64_t id = put_id++;
      payloads.Fill(id, block, buf);
      if (store->Put(ns, kvbench::MakeKey(2, id), buf, block).ok()) r.bytes += block;
      else ++r.errors;
    }
    ++r.ops;
    if (r.lat_us.size() < 200000) r.lat_us.push_back(static_cast<float>(kvbench::MicrosSince(t0)));
  }
  return r;
}

// --role client: connects, registers its buffer when asked, waits for the
// start instant, works, writes its result.
int RunClient(const Args& a) {
  kvtier::Options o;
  // Room for what a client has in flight through staging (async gets: all of them).
  o.client.staging_bytes =
      std::max<uint64_t>({4 * a.block, 16 << 20, IsAsync(a.op) ? 2 * BufferBytes(a.op, a.block) : 0});
  o.client.client_name = "bench " + a.op;
  o.client.reply_spin_us = static_cast<int32_t>(a.reply_spin_us);
  o.client.read_lent_tier = a.lent_tier;
  o.client.service_reads_memory = a.client_memory;
  auto s = Store::Open("unix:" + a.socket, o);
  if (!s.ok()) {
    std::fprintf(stderr, "client: %s\n", s.status().ToString().c_str());
    return 2;
  }
  const bool registered = a.op.find("staged") == std::string::npos;
  const std::string op = registered ? a.op : a.op.substr(0, a.op.find("_staged"));
  (void)(*s)->RegisterNamespace(Spec(op == "lookup" ? "bench/small" : op == "disk_get" || op == "put" ? "bench/disk" : "bench/ram"));
  const size_t bytes = BufferBytes(op, a.block);
  // An engine's shareable buffer: on huge pages where the host reserved
  // some. A hugetlb memfd truncates without any reserved; its mapping then
  // fails, and the buffer falls back to ordinary pages.
  void* mapped = MAP_FAILED;
  int fd = -1;
  // Or, not registered, a process's private memory on transparent huge
  // pages (a tensor or array on a host that gives them), 2 MiB-aligned.
  if (!registered && a.private_thp) {
    constexpr size_t kHuge = 2 << 20;
    void* raw = mmap(nullptr, bytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw != MAP_FAILED) {
      mapped = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(raw) + kHuge - 1) & ~uintptr_t{kHuge - 1});
      (void)madvise(mapped, bytes, MADV_HUGEPAGE);
      std::memset(mapped, 0, bytes);
    }
  }
  for (const unsigned flags : {MFD_CLOEXEC | MFD_HUGETLB, MFD_CLOEXEC}) {
    if (mapped != MAP_FAILED) break;
    fd = memfd_create("bench-buffer", flags);
    if (fd < 0) continue;
    if (ftruncate(fd, static_cast<off_t>(bytes)) == 0)
      mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (mapped != MAP_FAILED) break;
    close(fd);
    fd = -1;
  }
  if (mapped == MAP_FAILED) {
    std::fprintf(stderr, "client: no shareable buffer of %zu bytes: %s\n", bytes, std::strerror(errno));
    return 4;
  }
  auto* buf = static_cast<uint8_t*>(mapped);
  if (registered && !(*s)->RegisterMemory(buf, bytes, fd, 0).ok()) return 5;
  kvbench::Payloads payloads(a.block);
  // One untimed get first: a client's first call pays what a running engine
  // pays once, not per load (the service maps registered memory ahead of use
  // since it is registered, but a get may come before that ends).
  if (a.warm_up && op != "put" && op != "lookup")  // ops that start within 1 ms: at least one
    (void)Work(s->get(), a.ns, op, a.seed, NowNs() + 1000000, buf, a.block, BlocksOf(op, a), payloads);
  int64_t start = a.start_ns;
  if (!a.go.empty()) {  // ready: the parent names the start once every client is
    std::ofstream(a.out + ".ready").put('1');
    for (int i = 0; i < 120000 && !(std::ifstream(a.go) >> start); ++i) usleep(1000);
    if (start == 0) return 6;
  }
  SleepUntilNs(start);
  const double cpu0 = ProcessCpuSeconds();
  Result r = Work(s->get(), a.ns, op, a.seed, start + static_cast<int64_t>(a.seconds * 1e9), buf, a.block,
                  BlocksOf(op, a), payloads);
  r.cpu_s = ProcessCpuSeconds() - cpu0;
  r.Write(a.out);
  return 0;
}

// --role echo: the other end of a bare socket round trip, in a process of
// its own: answers every request with a reply of a lookup's size.
constexpr size_t kLookupRequestBytes = 24 + 8 + 4 + kLookupBatch * (4 + 32);
constexpr size_t kLookupReplyBytes = 24 + 1 + 4 + 8;
int RunEcho(const Args& a) {
  std::vector<char> buf(kLookupRequestBytes), reply(kLookupReplyBytes, 'r');
  for (;;) {
    size_t got = 0;
    while (got < buf.size()) {
      const ssize_t n = read(a.fd, buf.data() + got, buf.size() - got);
      if (n <= 0) return 0;
      got += static_cast<size_t>(n);
    }
    if (write(a.fd, reply.data(), reply.size()) != static_cast<ssize_t>(reply.size())) return 0;
  }
}

// The floor under any request through the service: `n` pairs of processes
// doing a lookup-sized request and reply on a bare Unix socket.
Summary SocketRoundTrip(const Args& a, int n) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  self[len > 0 ? len : 0] = '\0';
  std::vector<int> mine;
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) break;
    // The child gets its end as fd 3 and nothing else of ours: an end left
    // open there would keep it from ever seeing EOF.
    std::vector<std::string> args = {self, "--role", "echo", "--fd", "3"};
    std::vector<char*> argv;
    for (std::string& x : args) argv.push_back(x.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
    pid_t pid;
    if (posix_spawn(&pid, self, &fa, nullptr, argv.data(), environ) == 0) pids.push_back(pid);
    posix_spawn_file_actions_destroy(&fa);
    close(sv[1]);
    mine.push_back(sv[0]);
  }
  const int64_t start = NowNs() + 100000000, stop = start + static_cast<int64_t>(a.seconds * 1e9);
  std::vector<Result> rs(mine.size());
  std::vector<std::thread> ts;
  for (size_t i = 0; i < mine.size(); ++i)
    ts.emplace_back([&, i] {
      std::vector<char> req(kLookupRequestBytes, 'q'), reply(kLookupReplyBytes);
      SleepUntilNs(start);
      while (NowNs() < stop) {
        const auto t0 = Clock::now();
        if (write(mine[i], req.data(), req.size()) != static_cast<ssize_t>(req.size())) break;
        size_t got = 0;
        while (got < reply.size()) {
          const ssize_t r = read(mine[i], reply.data() + got, reply.size() - got);
          if (r <= 0) return;
          got += static_cast<size_t>(r);
        }
        ++rs[i].ops;
        if (rs[i].lat_us.size() < 200000) rs[i].lat_us.push_back(static_cast<float>(kvbench::MicrosSince(t0)));
      }
    });
  for (auto& t : ts) t.join();
  for (int fd : mine) close(fd);
  for (pid_t p : pids) waitpid(p, nullptr, 0);
  return Summarize(rs, a.seconds);
}

// Starts `n` client processes doing `op` together; their summary.
Summary ServiceRun(const Args& a, const std::string& socket, NamespaceId ns, const std::string& op, int n) {
  // Every client connects and makes its untimed first get (a batch's lands
  // in 128 MiB the service has not touched yet), then says it is ready; the
  // start is named once all are (a go file), for all at once.
  const std::string go = a.dir + "/go";
  ::unlink(go.c_str());
  std::vector<pid_t> pids;
  std::vector<std::string> outs;
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  self[len > 0 ? len : 0] = '\0';
  for (int i = 0; i < n; ++i) {
    outs.push_back(a.dir + "/client-" + std::to_string(i) + ".out");
    std::vector<std::string> args = {self, "--role", "client", "--socket", socket, "--op", op,
                                     "--go", go, "--seconds", std::to_string(a.seconds),
                                     "--seed", std::to_string(i + 1), "--ns", std::to_string(ns), "--out", outs.back(),
                                     "--reply-spin-us", std::to_string(a.reply_spin_us),
                                     "--block", std::to_string(a.block), "--ram-blocks", std::to_string(a.ram_blocks),
                                     "--disk-blocks", std::to_string(a.disk_blocks)};
    if (!a.warm_up) args.push_back("--no-warm-up");
    if (!a.lent_tier) args.push_back("--no-lent-tier");
    if (!a.client_memory) args.push_back("--no-client-memory-reads");
    if (a.private_thp) args.push_back("--private-thp");
    std::vector<char*> argv;
    for (std::string& x : args) argv.push_back(x.data());
    argv.push_back(nullptr);
    pid_t pid;
    ::unlink((outs.back() + ".ready").c_str());
    if (posix_spawn(&pid, self, nullptr, nullptr, argv.data(), environ) == 0) pids.push_back(pid);
  }
  // Until every client is ready or has exited (reported below).
  std::vector<int> exited(pids.size(), -1);  // the status of a client reaped early
  for (bool waiting = true; waiting;) {
    waiting = false;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (exited[i] != -1 || ::access((outs[i] + ".ready").c_str(), F_OK) == 0) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) exited[i] = status;
      else waiting = true;
    }
    if (waiting) usleep(1000);
  }
  const int64_t start = NowNs() + 20000000;  // 20 ms: every client sees it first
  {
    const std::string tmp = go + ".tmp";
    std::ofstream(tmp) << start;
    ::rename(tmp.c_str(), go.c_str());
  }
  // This process only serves meanwhile: its CPU over the window is the
  // service's.
  SleepUntilNs(start);
  const double cpu0 = ProcessCpuSeconds();
  SleepUntilNs(start + static_cast<int64_t>(a.seconds * 1e9));
  const double service_cpu = ProcessCpuSeconds() - cpu0;
  std::vector<Result> rs;
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = exited[i];
    if (status == -1) waitpid(pids[i], &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      rs.push_back(Result::Read(outs[i]));
      continue;
    }
    std::fprintf(stderr, "service bench: client %zu of %s %s %d\n", i, op.c_str(),
                 WIFEXITED(status) ? "exited with" : "died of signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    rs.push_back(Result{0, 0, 1, {}, 0});
  }
  Summary s = Summarize(rs, a.seconds);
  s.server_cpu_s = service_cpu;
  return s;
}

// The same work on threads of this process against the embedded store.
// Whether a client's shareable buffer gets huge pages here: RunClient's
// memfd, tried the same way.
bool ClientMemoryIsHuge(size_t bytes) {
  const int fd = memfd_create("bench-probe", MFD_CLOEXEC | MFD_HUGETLB);
  if (fd < 0) return false;
  bool huge = false;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (m != MAP_FAILED) {
      huge = true;
      munmap(m, bytes);
    }
  }
  close(fd);
  return huge;
}

Summary EmbeddedRun(const Args& a, Store* store, NamespaceId ns, const std::string& op, int n) {
  // Buffers on the clients' kind of pages (see the top of this file).
  const bool was_huge = kvbench::HugePageBuffers();
  kvbench::SetHugePageBuffers(a.embedded_huge_pages || ClientMemoryIsHuge(BufferBytes(op, a.block)));
  struct Restore {
    bool on;
    ~Restore() { kvbench::SetHugePageBuffers(on); }
  } restore{was_huge};
  // Buffers touched before the start, as the clients' (MAP_POPULATE) are.
  std::vector<kvbench::AlignedBuf> bufs;
  for (int i = 0; i < n; ++i) {
    bufs.emplace_back(BufferBytes(op, a.block));
    std::memset(bufs.back().data(), 0, bufs.back().size());
  }
  const int64_t start = NowNs() + 50000000;
  std::vector<Result> rs(n);
  std::vector<std::thread> ts;
  kvbench::Payloads payloads(a.block);
  for (int i = 0; i < n; ++i)
    ts.emplace_back([&, i] {
      kvbench::AlignedBuf& buf = bufs[i];
      SleepUntilNs(start);
      rs[i] = Work(store, ns, op, i + 1, start + static_cast<int64_t>(a.seconds * 1e9), buf.data(), a.block,
                   BlocksOf(op, a), payloads);
    });
  SleepUntilNs(start);
  const double cpu0 = ProcessCpuSeconds();
  for (auto& t : ts) t.join();
  Summary s = Summarize(rs, a.seconds);
  s.server_cpu_s = ProcessCpuSeconds() - cpu0;  // the store's threads and its callers'
  return s;
}

// The host's best copy of `block`-sized pieces, over the copy kernels
// (harness/copy_limit.h) and 1..max threads, from a source as large as the
// RAM tier's working set (so caches do not hold it, as they do not hold the
// tier) into one block-sized buffer per thread, as a lone get does; or, with
// `dest_bytes`, into that many bytes shared out among the threads, each
// filling its share block after block, as a row's batches fill their
// clients' buffers (past the L3, a destination the cache cannot hold costs
// the copy a write to memory that a block-sized one never makes).
struct CopyLimit {
  double gbps = 0;
  int threads = 1;
  std::string kernel = "memcpy";
  // The best over the kernels at each thread count swept: what that many
  // copies in flight, one thread each, can reach (a client's lone get is
  // copied on one thread once several run; RamTier::SharesCopy).
  std::map<int, double> by_threads;
};

// `also`: thread counts swept besides 1, 2, 4, ... max_threads (the clients').
CopyLimit BestCopy(size_t block, size_t source_blocks, int max_threads, double seconds,
                   const std::vector<kvbench::CopyKernel>& kernels, const std::vector<int>& also = {},
                   size_t dest_bytes = 0) {
  kvbench::AlignedBuf source(block * source_blocks);
  std::memset(source.data(), 1, block * source_blocks);
  const size_t dest_blocks = dest_bytes / block;
  kvbench::AlignedBuf shared_dst(dest_blocks * block);
  std::memset(shared_dst.data(), 2, shared_dst.size());
  CopyLimit best;
  std::set<int> counts(also.begin(), also.end());
  for (int t = 1; t < max_threads; t *= 2) counts.insert(t);
  counts.insert(max_threads);
  for (const kvbench::CopyKernel& k : kernels) {
    for (int t : counts) {
      std::atomic<uint64_t> bytes{0};
      const int64_t stop = NowNs() + static_cast<int64_t>(seconds * 1e9);
      std::vector<std::thread> ts;
      for (int i = 0; i < t; ++i)
        ts.emplace_back([&, i] {
          // This thread's destination: its share of dest_blocks (at least
          // one block, at most all of them), or a block of its own.
          const size_t share = std::max<size_t>(1, dest_blocks / static_cast<size_t>(t));
          const size_t first = dest_blocks > 0 ? (static_cast<size_t>(i) * share) % dest_blocks : 0;
          const size_t slots = dest_blocks > 0 ? std::min(share, dest_blocks - first) : 1;
          kvbench::AlignedBuf own(dest_blocks > 0 ? 0 : block);
          std::memset(own.data(), 2, own.size());
          uint8_t* dst = dest_blocks > 0 ? shared_dst.data() + first * block : own.data();
          std::mt19937_64 rng(i);
          uint64_t n = 0;
          for (size_t slot = 0; NowNs() < stop; slot = (slot + 1) % slots) {
            k.copy(dst + slot * block, source.data() + (rng() % source_blocks) * block, block);
            n += block;
          }
          bytes += n;
        });
      for (auto& x : ts) x.join();
      const double gbps = bytes.load() / seconds / 1e9;
      best.by_threads[t] = std::max(best.by_threads[t], gbps);
      if (gbps > best.gbps) {
        best.gbps = gbps;
        best.threads = t;
        best.kernel = k.name;
      }
    }
  }
  return best;
}

// A store and its service; destroyed with them (Store::Destroy), so that a
// RAM tier in /dev/shm, which outlives its store by design, does not
// outlive the bench.
struct Served {
  Served() = default;
  Served(Served&&) = default;
  ~Served() {
    service.reset();
    if (store == nullptr) return;
    store.reset();
    (void)Store::Destroy(dir);
  }
  std::string dir;
  std::unique_ptr<Store> store;
  std::unique_ptr<kvtier::Service> service;
  std::string socket;
};

Served Serve(const Args& a, const std::string& dir, uint64_t ram_bytes, uint64_t capacity) {
  Served s;
  kvtier::Options o;
  o.zero_copy_small_pages = a.zero_copy_small_pages;
  if (a.stream_min_kib >= 0) o.ram_streaming_copy_min_bytes = static_cast<uint64_t>(a.stream_min_kib) << 10;
  if (a.split_min_kib >= 0) o.ram_split_copy_min_bytes = static_cast<uint64_t>(a.split_min_kib) << 10;
  o.ram_copy_spin_us = static_cast<uint32_t>(a.copy_spin_us);
  o.ram_tier_bytes = ram_bytes;
  o.ram_tier_shared_memory = a.shared_tier;
  o.capacity_bytes = capacity;
  auto st = Store::Open(dir, o);
  if (!st.ok()) {
    std::fprintf(stderr, "open %s: %s\n", dir.c_str(), st.status().ToString().c_str());
    std::exit(1);
  }
  s.store = std::move(st).value();
  s.dir = dir;
  s.socket = dir + ".sock";
  kvtier::ServiceOptions so;
  so.socket_path = s.socket;
  so.reader_spin_us = static_cast<int32_t>(a.reader_spin_us);
  so.client_read_threads = static_cast<int32_t>(a.client_read_threads);
  so.log = [](const std::string&) {};
  auto sv = kvtier::Service::Start(s.store.get(), so);
  if (!sv.ok()) {
    std::fprintf(stderr, "serve: %s\n", sv.status().ToString().c_str());
    std::exit(1);
  }
  s.service = std::move(sv).value();
  return s;
}

void Fill(Store* store, NamespaceId ns, uint64_t key_seed, size_t count, size_t block, const kvbench::Payloads& p) {
  kvbench::AlignedBuf buf(std::max<size_t>(block, 4096));
  for (size_t i = 0; i < count; ++i) {
    p.Fill(i, block, buf.data());
    if (!store->Put(ns, kvbench::MakeKey(key_seed, i), buf.data(), block).ok()) {
      std::fprintf(stderr, "fill failed at %zu\n", i);
      std::exit(1);
    }
  }
}

// Where one arm's durable puts spent their time in the store
// (Stats::put_*_ns, summed over the arm's runs), beside the mean time its
// callers waited for each put.
struct PutPhases {
  double puts = 0, encode = 0, queue = 0, place = 0, write = 0, sync = 0, commit = 0;
  double caller_seconds = 0, caller_ops = 0;  // clients x seconds, puts they saw acknowledged
  void Add(const kvtier::Stats& before, const kvtier::Stats& after, const Summary& run, int clients) {
    puts += static_cast<double>(after.puts_timed - before.puts_timed);
    encode += static_cast<double>(after.put_encode_ns - before.put_encode_ns);
    queue += static_cast<double>(after.put_queue_ns - before.put_queue_ns);
    place += static_cast<double>(after.put_place_ns - before.put_place_ns);
    write += static_cast<double>(after.put_write_ns - before.put_write_ns);
    sync += static_cast<double>(after.put_sync_ns - before.put_sync_ns);
    commit += static_cast<double>(after.put_commit_ns - before.put_commit_ns);
    caller_seconds += run.seconds * clients;
    caller_ops += static_cast<double>(run.ops);
  }
  double Us(double ns) const { return puts > 0 ? ns / puts / 1e3 : 0; }
  double CallerUs() const { return caller_ops > 0 ? caller_seconds / caller_ops * 1e6 : 0; }
  double StoreUs() const { return Us(encode + queue + place + write + sync + commit); }
};

struct Row {
  std::string what, limit_name;
  int clients;
  Summary service, embedded;
  double limit = 0;  // the limit's value in the row's unit
  double verified = 0;  // RAM rows: the best verified copy (what any verified get could reach)
  // Lone gets' RAM rows: the best verified copy on as many threads as
  // clients, the ceiling of one get in flight per client on one thread each.
  double verified_same_threads = 0;
  // Batch rows: the best plain copy into as many destination bytes as the
  // row's clients' buffers hold (BestCopy's dest_bytes).
  double copy_same_destination = 0;
  std::string unit;  // "us" (p50), "GB/s"
  double value() const { return unit == "us" ? service.p50 : service.gbps(); }
};

std::string PhasesJson(const char* arm, const PutPhases& p) {
  char b[512];
  std::snprintf(b, sizeof b,
                "\"%s\": {\"puts\": %.0f, \"caller\": %.1f, \"store\": %.1f, \"encode\": %.1f, \"queue\": %.1f, "
                "\"place\": %.1f, \"write\": %.1f, \"sync\": %.1f, \"commit\": %.1f}",
                arm, p.puts, p.CallerUs(), p.StoreUs(), p.Us(p.encode), p.Us(p.queue), p.Us(p.place), p.Us(p.write),
                p.Us(p.sync), p.Us(p.commit));
  return b;
}

int RunParent(const Args& a) {
  // A run killed before its end left its stores (and their /dev/shm tiers).
  for (const char* sub : {"/ram", "/disk"}) (void)Store::Destroy(a.dir + sub);
  std::string cmd = "rm -rf '" + a.dir + "' && mkdir -p '" + a.dir + "'";
  if (std::system(cmd.c_str()) != 0) return 1;
  kvbench::Payloads payloads(a.block);
  const int maxc = *std::max_element(a.clients.begin(), a.clients.end());
  std::fprintf(stderr, "service bench: filling (%zu RAM blocks, %zu disk blocks of %zu bytes, %zu small keys)\n",
               a.ram_blocks, a.disk_blocks, a.block, kSmallKeys);
  // RAM store: the RAM tier holds every RAM block and the small keys.
  Served ram = Serve(a, a.dir + "/ram", a.ram_blocks * a.block * 2 + (256ull << 20), 8ull << 30);
  const NamespaceId ram_ns = ram.store->RegisterNamespace(Spec("bench/ram")).value();
  const NamespaceId small_ns = ram.store->RegisterNamespace(Spec("bench/small")).value();
  if (a.ram) Fill(ram.store.get(), ram_ns, 1, a.ram_blocks, a.block, payloads);
  if (a.ram) {
    std::vector<uint8_t> b(4096, 7);
    for (const std::string& k : SmallKeys()) (void)ram.store->Put(small_ns, k, b.data(), b.size());
  }
  // Disk store: no RAM tier, so every get reads the device.
  Served disk = Serve(a, a.dir + "/disk", 0, 8ull << 30);
  const NamespaceId disk_ns = disk.store->RegisterNamespace(Spec("bench/disk")).value();
  if (a.disk) Fill(disk.store.get(), disk_ns, 1, a.disk_blocks, a.block, payloads);

  std::vector<Row> rows;
  PutPhases put_embedded, put_service;
  auto both = [&](Served& s, NamespaceId ns, const std::string& op, int n, const std::string& what) {
    std::fprintf(stderr, "service bench: %s, %d client(s)\n", what.c_str(), n);
    Row r;
    r.what = what;
    r.clients = n;
    const std::string embedded_op = op.substr(0, op.find("_staged"));
    const bool latency = op == "lookup";
    auto better = [latency](const Summary& x, const Summary& y) {
      return latency ? (x.p50 <= y.p50 ? x : y) : (x.gbps() >= y.gbps() ? x : y);
    };
    // Puts start each run from an empty store: a run into a fuller one
    // writes while eviction reclaims, and the arms would not meet the same
    // store (the gets' blocks are no longer read by then).
    auto fresh = [&] {
      if (embedded_op == "put") (void)s.store->EvictTo(0);
    };
    // A run, its puts' phases noted for its arm.
    auto run = [&](bool service) {
      fresh();
      const kvtier::Stats before = s.store->GetStats();
      Summary got = service ? ServiceRun(a, s.socket, ns, op, n) : EmbeddedRun(a, s.store.get(), ns, embedded_op, n);
      if (op == "put" && &s == &disk) (service ? put_service : put_embedded).Add(before, s.store->GetStats(), got, n);
      return got;
    };
    r.embedded = run(false);
    r.service = run(true);
    r.service = better(r.service, run(true));
    r.embedded = better(r.embedded, run(false));
    return r;
  };
  // Up to every core: the limit is the best the host does, not the best of as
  // many threads as there are clients.
  const int all_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int copy_threads = std::max({8, maxc, all_cores});
  const size_t copy_source = std::max<size_t>(a.ram_blocks, 64);
  const double copy_seconds = std::min(0.5, a.seconds);
  const CopyLimit mem =
      a.ram ? BestCopy(a.block, copy_source, copy_threads, copy_seconds, kvbench::CopyKernels()) : CopyLimit{};
  const CopyLimit verified =
      a.ram ? BestCopy(a.block, copy_source, copy_threads, copy_seconds, kvbench::VerifiedCopyKernels(), a.clients)
            : CopyLimit{};
  const double mem_gbps = mem.gbps;
  for (int n : a.ram ? std::vector<int>{1, maxc} : std::vector<int>{}) {
    Row r = both(ram, small_ns, "lookup", n, "lookup_prefix of 32 keys, p50");
    r.unit = "us";
    r.limit = r.embedded.p50;
    r.limit_name = "embedded p50";
    rows.push_back(r);
    Row floor;
    floor.what = "  bare socket round trip of that size, p50";
    floor.clients = n;
    floor.unit = "us";
    floor.service = SocketRoundTrip(a, n);
    floor.limit_name = "(the floor under the overhead)";
    rows.push_back(floor);
  }
  // A RAM row: GB/s against the copy best and the verified copy best.
  auto ram_row = [&](const std::string& op, int n, const std::string& what, const std::string& limit_name) {
    Row r = both(ram, ram_ns, op, n, what);
    r.unit = "GB/s";
    r.limit = mem_gbps;
    r.verified = verified.gbps;
    r.limit_name = limit_name;
    rows.push_back(r);
  };
  for (int n : a.ram ? a.clients : std::vector<int>{}) {
    ram_row("ram_get", n, "RAM-tier gets into registered memory",
            "copy best (" + mem.kernel + ", " + std::to_string(mem.threads) + " threads)");
    // Where the tier no longer shares a lone get over its copy threads (one
    // per core, at most 32; RamTier::SharesCopy), each runs on one thread.
    auto at = verified.by_threads.find(n);
    if (n * 4 > std::min(all_cores, 32) && at != verified.by_threads.end())
      rows.back().verified_same_threads = at->second;
  }
  // Engines load with get_batch: one client, and as many as the most clients
  // asked for, each loading its own batches at once.
  const std::string batch = "RAM-tier get_batch (" + std::to_string(kGetBatchBlocks) + " blocks), ";
  std::map<int, double> same_destination;  // clients -> the best copy into their buffers' bytes
  for (int n : a.ram ? std::set<int>{1, maxc} : std::set<int>{})
    same_destination[n] = BestCopy(a.block, copy_source, copy_threads, copy_seconds, kvbench::CopyKernels(), {},
                                   static_cast<size_t>(n) * BufferBytes("ram_get_batch", a.block))
                              .gbps;
  if (a.ram) {
    for (int n : std::set<int>{1, maxc}) {
      ram_row("ram_get_batch", n, batch + "registered", "copy best");
      rows.back().copy_same_destination = same_destination[n];
    }
    // Memory not registered: two copies through the client's staging, or
    // one out of the lent tier (a tier in /dev/shm, clients that read it).
    const bool lent = a.shared_tier && a.lent_tier;
    ram_row("ram_get_batch_staged", 1, batch + (lent ? "not registered, lent tier" : "staging (2 copies)"),
            "copy best");
    rows.back().copy_same_destination = same_destination[1];
    ram_row("ram_get_staged", maxc,
            std::string("RAM-tier gets, not registered, ") + (lent ? "lent tier" : "staging (2 copies)"), "copy best");
    for (int n : std::set<int>{1, maxc})
      ram_row("ram_get_async_staged", n,
              "RAM-tier async gets (" + std::to_string(kAsyncDepth) + " in flight), not registered, " +
                  (lent ? "lent tier" : "staging (2 copies)"),
              "copy best");
  }
  // Where the disk gets' time goes (Stats::disk_read_*_ns), mean per get
  // over every arm and client count of the rows below.
  const kvtier::Stats phases_before = disk.store->GetStats();
  for (int n : a.disk ? a.clients : std::vector<int>{}) {
    Row r = both(disk, disk_ns, "disk_get", n, "disk gets (O_DIRECT)");
    r.unit = "GB/s";
    r.limit = r.embedded.gbps();
    r.limit_name = "embedded, same threads";
    rows.push_back(r);
  }
  const kvtier::Stats phases_after = disk.store->GetStats();
  const double timed = static_cast<double>(phases_after.disk_reads_timed - phases_before.disk_reads_timed);
  auto phase_us = [&](uint64_t kvtier::Stats::*f) {
    return timed > 0 ? static_cast<double>(phases_after.*f - phases_before.*f) / timed / 1e3 : 0.0;
  };
  const double queue_us = phase_us(&kvtier::Stats::disk_read_queue_ns);
  const double index_us = phase_us(&kvtier::Stats::disk_read_index_ns);
  const double device_us = phase_us(&kvtier::Stats::disk_read_device_ns);
  const double finish_us = phase_us(&kvtier::Stats::disk_read_finish_ns);
  for (int n : a.disk ? a.clients : std::vector<int>{}) {
    Row r = both(disk, disk_ns, "put", n, "durable puts");
    r.unit = "GB/s";
    r.limit = r.embedded.gbps();
    r.limit_name = "embedded, same threads";
    rows.push_back(r);
  }
  // Into a store with a RAM tier, as `kvtier serve --ram-tier` runs: every
  // put is copied into the tier (write-through), so from registered memory,
  // or read from the client by the service, it is one host copy; staged
  // (memory not registered, --no-client-memory-reads) it is two.
  const NamespaceId tiered_ns = ram.store->RegisterNamespace(Spec("bench/disk")).value();
  for (const bool registered : {true, false}) {
    for (int n : a.disk ? std::set<int>{1, maxc} : std::set<int>{}) {
      Row r = both(ram, tiered_ns, registered ? "put" : "put_staged", n,
                   std::string("durable puts, RAM tier, ") +
                       (registered ? "registered"
                                   : a.client_memory ? "not registered, read from the client" : "not registered, staging"));
      r.unit = "GB/s";
      r.limit = r.embedded.gbps();
      r.limit_name = "embedded, same threads";
      rows.push_back(r);
    }
  }
  ram.service->Stop();
  disk.service->Stop();
  (void)ram.store->Close();
  (void)disk.store->Close();

  utsname u{};
  uname(&u);
  const unsigned cores = std::thread::hardware_concurrency();
  const bool client_huge = ClientMemoryIsHuge(std::max<size_t>(a.block, 4096));
  uint64_t errors = 0;
  for (const Row& r : rows) errors += r.service.errors + r.embedded.errors;
  if (a.json) {
    std::printf("{\"machine\": {\"cores\": %u, \"kernel\": \"%s\", \"block_bytes\": %zu, \"seconds\": %.2f, "
                "\"memcpy_gbps\": %.3f, \"copy_kernel\": \"%s\", \"copy_threads\": %d, "
                "\"verified_copy_gbps\": %.3f, \"verified_copy_kernel\": \"%s\", \"verified_copy_threads\": %d, "
                "\"reply_spin_us\": %lld, \"reader_spin_us\": %lld, \"client_read_threads\": %lld, \"copy_spin_us\": %lld, "
                "\"zero_copy_small_pages\": %s, \"client_huge_pages\": %s, \"embedded_huge_pages\": %s, "
                "\"shared_tier\": %s, \"lent_tier\": %s}, "
                "\"disk_get_phases_us\": {\"gets\": %.0f, \"queue\": %.1f, \"index\": %.1f, \"device\": %.1f, "
                "\"finish\": %.1f}, \"put_phases_us\": {%s, %s}, \"rows\": [\n",
                cores, u.release, a.block, a.seconds, mem_gbps, mem.kernel.c_str(), mem.threads, verified.gbps,
                verified.kernel.c_str(), verified.threads, static_cast<long long>(a.reply_spin_us),
                static_cast<long long>(a.reader_spin_us), static_cast<long long>(a.client_read_threads),
                static_cast<long long>(a.copy_spin_us), a.zero_copy_small_pages ? "true" : "false", client_huge ? "true" : "false",
                a.embedded_huge_pages || client_huge ? "true" : "false", a.shared_tier ? "true" : "false",
                a.lent_tier ? "true" : "false", timed, queue_us, index_us, device_us,
                finish_us, PhasesJson("embedded", put_embedded).c_str(), PhasesJson("service", put_service).c_str());
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const double ratio = r.unit == "us" ? r.service.p50 - r.embedded.p50 : (r.limit > 0 ? r.value() / r.limit : 0);
      std::printf("  {\"what\": \"%s\", \"clients\": %d, \"unit\": \"%s\", \"service\": %.3f, \"embedded\": %.3f, "
                  "\"service_p50_us\": %.1f, \"embedded_p50_us\": %.1f, \"service_p99_us\": %.1f, \"embedded_p99_us\": %.1f, "
                  "\"service_ops_per_s\": %.0f, "
                  "\"limit\": \"%s\", \"limit_value\": %.3f, \"%s\": %.3f, \"x_verified_copy\": %.3f, "
                  "\"verified_copy_same_threads_gbps\": %.3f, \"x_verified_copy_same_threads\": %.3f, "
                  "\"copy_same_destination_gbps\": %.3f, \"x_copy_same_destination\": %.3f, "
                  "\"service_cpu_us_per_mib\": %.1f, \"service_clients_cpu_s\": %.3f, \"service_cpu_s\": %.3f, "
                  "\"embedded_cpu_us_per_mib\": %.1f, \"errors\": %llu}%s\n",
                  r.what.c_str(), r.clients, r.unit.c_str(), r.value(),
                  r.unit == "us" ? r.embedded.p50 : r.embedded.gbps(), r.service.p50, r.embedded.p50, r.service.p99, r.embedded.p99,
                  r.service.ops_per_s(), r.limit_name.c_str(), r.limit, r.unit == "us" ? "overhead_us" : "x_limit",
                  ratio, r.verified > 0 ? r.value() / r.verified : 0.0, r.verified_same_threads,
                  r.verified_same_threads > 0 ? r.value() / r.verified_same_threads : 0.0,
                  r.copy_same_destination, r.copy_same_destination > 0 ? r.value() / r.copy_same_destination : 0.0,
                  r.service.CpuUsPerMib(), r.service.client_cpu_s, r.service.server_cpu_s, r.embedded.CpuUsPerMib(),
                  static_cast<unsigned long long>(r.service.errors + r.embedded.errors),
                  i + 1 < rows.size() ? "," : "");
    }
    std::printf("]}\n");
    return errors == 0 ? 0 : 1;
  }
  char limits[384] = "copy limits not measured (--disk-only)";
  if (a.ram)
    std::snprintf(limits, sizeof limits,
                  "copy best %.2f GB/s (%s, %d threads), verified copy best %.2f GB/s (%s, %d threads), copy best "
                  "into 1 / %d clients' batch buffers %.2f / %.2f GB/s",
                  mem_gbps, mem.kernel.c_str(), mem.threads, verified.gbps, verified.kernel.c_str(), verified.threads,
                  maxc, same_destination[1], same_destination[maxc]);
  std::printf("kvtier service bench: %u cores, Linux %s, %zu-byte blocks, %.1f s per run, %s; reply spin %lld us, "
              "reader spin %lld us (-1: by cores), client read threads %lld (-1: by cores), copy spin %lld us, zero-copy from 4 KiB pages %s; client memory on %s%s, embedded arm on "
              "%s; RAM tier in %s, clients %s\n\n",
              cores, u.release, a.block, a.seconds, limits, static_cast<long long>(a.reply_spin_us),
              static_cast<long long>(a.reader_spin_us), static_cast<long long>(a.client_read_threads),
              static_cast<long long>(a.copy_spin_us), a.zero_copy_small_pages ? "on" : "off", client_huge ? "huge pages" : "4 KiB pages",
              a.private_thp ? " (not registered: private, transparent huge pages)" : "",
              a.embedded_huge_pages || client_huge ? "huge pages" : "4 KiB pages",
              a.shared_tier ? "/dev/shm (lent)" : "anonymous memory (not lent)",
              a.lent_tier ? "read a lent tier" : "never read a lent tier");
  int width = 52;  // the longest workload's name
  for (const Row& r : rows) width = std::max(width, static_cast<int>(r.what.size()));
  std::printf("%-*s %7s %12s %12s %12s %12s %14s %14s  %s\n", width, "workload", "clients", "service", "embedded",
              "vs limit", "vs verified", "vs ver. N thr", "vs same dest", "limit");
  for (const Row& r : rows) {
    char sv[32], em[32], ratio[32], vr[32] = "-", vn[32] = "-", sd[32] = "-";
    if (r.unit == "us") {
      std::snprintf(sv, sizeof sv, "%.1f us", r.service.p50);
      std::snprintf(em, sizeof em, "%.1f us", r.embedded.p50);
      std::snprintf(ratio, sizeof ratio, "+%.1f us", r.service.p50 - r.embedded.p50);
    } else {
      std::snprintf(sv, sizeof sv, "%.2f GB/s", r.service.gbps());
      std::snprintf(em, sizeof em, "%.2f GB/s", r.embedded.gbps());
      std::snprintf(ratio, sizeof ratio, "%.2fx", r.limit > 0 ? r.value() / r.limit : 0);
      if (r.verified > 0) std::snprintf(vr, sizeof vr, "%.2fx", r.value() / r.verified);
      if (r.verified_same_threads > 0)
        std::snprintf(vn, sizeof vn, "%.2fx", r.value() / r.verified_same_threads);
      if (r.copy_same_destination > 0)
        std::snprintf(sd, sizeof sd, "%.2fx", r.value() / r.copy_same_destination);
    }
    std::printf("%-*s %7d %12s %12s %12s %12s %14s %14s  %s%s\n", width, r.what.c_str(), r.clients, sv, em, ratio, vr,
                vn, sd,
                r.limit_name.c_str(),
                r.service.errors + r.embedded.errors ? "  ERRORS" : "");
  }
  if (timed > 0)
    std::printf("\ndisk gets, mean per get of the rows above (%.0f gets): %.1f us waiting for a read thread, %.1f us "
                "in the index, %.1f us on the device (submitted to reaped), %.1f us verifying and completing\n",
                timed, queue_us, index_us, device_us, finish_us);
  // What moving a MiB cost in CPU: a copy on the host shows here even where
  // the disk bounds the rate.
  bool cpu_header = false;
  for (const Row& r : rows) {
    if (r.what.rfind("durable puts", 0) != 0) continue;
    if (!cpu_header) std::printf("\nCPU per MiB put (every thread of the clients and of the serving process):\n");
    cpu_header = true;
    std::printf("  %s, %d client(s): service arm %.0f us (clients %.0f, service %.0f), embedded %.0f us\n",
                r.what.c_str(), r.clients, r.service.CpuUsPerMib(),
                r.service.bytes > 0 ? r.service.client_cpu_s * 1e6 / (r.service.bytes / 1048576.0) : 0.0,
                r.service.bytes > 0 ? r.service.server_cpu_s * 1e6 / (r.service.bytes / 1048576.0) : 0.0,
                r.embedded.CpuUsPerMib());
  }
  for (const auto& [arm, ph] : {std::pair{"embedded", &put_embedded}, std::pair{"service", &put_service}})
    if (ph->puts > 0)
      std::printf("durable puts without a RAM tier, %s, mean per put of their rows above (%.0f puts): the caller waited %.1f us, the "
                  "store's phases %.1f: %.1f on the caller's thread (room, copy, checksum), %.1f waiting for the "
                  "writer, %.1f placing, %.1f writing, %.1f waiting for and in fdatasync, %.1f in the index\n",
                  arm, ph->puts, ph->CallerUs(), ph->StoreUs(), ph->Us(ph->encode), ph->Us(ph->queue),
                  ph->Us(ph->place), ph->Us(ph->write), ph->Us(ph->sync), ph->Us(ph->commit));
  return errors == 0 ? 0 : 1;
}

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) v.push_back(std::atoi(x.c_str()));
  return v;
}

size_t ParseBytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  switch (end != nullptr ? *end : 0) {
    case 'K': case 'k': v *= 1 << 10; break;
    case 'M': case 'm': v *= 1 << 20; break;
    case 'G': case 'g': v *= 1 << 30; break;
    default: break;
  }
  return static_cast<size_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "--role") a.role = next();
    else if (k == "--dir") a.dir = next();
    else if (k == "--seconds") a.seconds = std::atof(next().c_str());
    else if (k == "--clients") a.clients = ParseList(next());
    else if (k == "--block") a.block = ParseBytes(next());
    else if (k == "--ram-blocks") a.ram_blocks = std::strtoull(next().c_str(), nullptr, 10);
    else if (k == "--disk-blocks") a.disk_blocks = std::strtoull(next().c_str(), nullptr, 10);
    else if (k == "--json") a.json = true;
    else if (k == "--zero-copy-small-pages") a.zero_copy_small_pages = true;
    else if (k == "--embedded-huge-pages") a.embedded_huge_pages = true;
    else if (k == "--no-disk") a.disk = false;
    else if (k == "--disk-only") a.ram = false;
    else if (k == "--no-warm-up") a.warm_up = false;
    else if (k == "--stream-min-kib") a.stream_min_kib = std::strtoll(next().c_str(), nullptr, 10);
    else if (k == "--split-copy-min-kib") a.split_min_kib = std::strtoll(next().c_str(), nullptr, 10);
    else if (k == "--copy-spin-us") a.copy_spin_us = std::strtoll(next().c_str(), nullptr, 10);
    else if (k == "--shared-tier") a.shared_tier = true;
    else if (k == "--no-lent-tier") a.lent_tier = false;
    else if (k == "--no-client-memory-reads") a.client_memory = false;
    else if (k == "--private-thp") a.private_thp = true;
    else if (k == "--reply-spin-us") a.reply_spin_us = std::strtoll(next().c_str(), nullptr, 10);
    else if (k == "--reader-spin-us") a.reader_spin_us = std::strtoll(next().c_str(), nullptr, 10);
    else if (k == "--client-read-threads") a.client_read_threads = std::strtoll(next().c_str(), nullptr, 10);
    else if (k == "--socket") a.socket = next();
    else if (k == "--op") a.op = next();
    else if (k == "--out") a.out = next();
    else if (k == "--start-ns") a.start_ns = std::strtoll(next().c_str(), nullptr, 10);
    else if (k == "--go") a.go = next();
    else if (k == "--seed") a.seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (k == "--ns") a.ns = std::strtoull(next().c_str(), nullptr, 10);
    else if (k == "--fd") a.fd = std::atoi(next().c_str());
    else if (k == "--help" || k == "-h") {
      std::printf("usage: kvtier bench --service [--dir D] [--seconds S] [--clients 1,2,4,8] [--block 2M]\n"
                  "       [--ram-blocks N] [--disk-blocks N] [--reply-spin-us N] [--reader-spin-us N] [--client-read-threads N]\n"
                  "       [--zero-copy-small-pages] [--embedded-huge-pages] [--stream-min-kib K]\n"
                  "       [--split-copy-min-kib K] [--copy-spin-us N] [--shared-tier] [--no-lent-tier] [--no-client-memory-reads] [--private-thp] [--no-disk | --disk-only] [--no-warm-up]\n"
                  "       [--json]\n");
      return 0;
    } else {
      std::fprintf(stderr, "unknown argument %s (see --help)\n", k.c_str());
      return 2;
    }
  }
  if (a.clients.empty() || a.block < 4096 || a.seconds <= 0 || (!a.ram && !a.disk)) {
    std::fprintf(stderr, "bad arguments (see --help)\n");
    return 2;
  }
  if (a.role == "echo") return RunEcho(a);
  return a.role == "client" ? RunClient(a) : RunParent(a);
}
