// kvtier serve DIR: one process owns the store in DIR and serves every
// process on the node through a Unix socket (include/kvtier/service.h,
// docs/service.md).
//
// Signals: SIGTERM and SIGINT close it cleanly (in-flight requests finish,
// the store writes its clean-shutdown checkpoint); SIGHUP reopens the log
// file (for logrotate). With --idle-exit it also leaves once it has had no
// client for that long (how auto: services go away).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "commands.h"
#include "kvtier/service.h"
#include "metrics.h"

namespace kvtier::cli {

namespace {

struct ServeCmd {
  StoreArgs a;
  std::string socket;
  std::string socket_mode = "0660";
  std::string socket_group;
  std::string tenancy = "none";
  std::string metrics_listen = "127.0.0.1:9464";
  double metrics_count_interval_s = 30;
  std::string log_file;
  uint32_t idle_exit_s = 0;
  std::string ram_tier;
  std::string ram_chunk;
  bool no_ram_prefault = false;
  bool zero_copy_small_pages = false;
  std::string ram_streaming_min;
  std::string ram_split_copy_min;
  std::string client_inflight = "1G";
  std::string client_pinned = "4G";
  uint32_t max_clients = 256;
  int32_t reader_spin_us = 0;
  int32_t client_read_threads = -1;
  uint32_t ram_copy_spin_us = 0;
  std::string on_index_failure = "exit";
};

// The namespaces with their block and byte counts, for the metrics. Counting
// walks the whole index (seconds at tens of millions of blocks), so a scrape
// reuses the last count until it is `interval_s` old (0: counts every time).
// Thread-safe: concurrent scrapes wait for one count.
class NamespaceCounts {
 public:
  NamespaceCounts(Store* store, double interval_s) : store_(store), interval_s_(interval_s) {}
  void Get(std::vector<NamespaceInfo>* out, double* age_s) {
    std::lock_guard<std::mutex> l(mu_);
    const auto now = std::chrono::steady_clock::now();
    double age = std::chrono::duration<double>(now - at_).count();
    if (!counted_ || age >= interval_s_) {
      auto nss = store_->ListNamespaces();
      if (nss.ok()) {  // on an error the last count stands
        last_ = std::move(nss).value();
        at_ = now;
        counted_ = true;
        age = 0;
      }
    }
    *out = last_;
    *age_s = counted_ ? age : 0;
  }

 private:
  Store* const store_;
  const double interval_s_;
  std::mutex mu_;
  bool counted_ = false;
  std::chrono::steady_clock::time_point at_;
  std::vector<NamespaceInfo> last_;
};

// One line per event, time-stamped, to the log file (reopened on SIGHUP) or
// stderr.
class Log {
 public:
  explicit Log(std::string path) : path_(std::move(path)) { Reopen(); }
  ~Log() {
    if (f_ != nullptr && f_ != stderr) std::fclose(f_);
  }
  void Reopen() {
    std::lock_guard<std::mutex> l(mu_);
    if (path_.empty()) {
      f_ = stderr;
      return;
    }
    std::FILE* n = std::fopen(path_.c_str(), "a");
    if (n == nullptr) return;  // keep the old one
    if (f_ != nullptr && f_ != stderr) std::fclose(f_);
    f_ = n;
  }
  void Line(const std::string& msg) {
    char ts[32];
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    std::lock_guard<std::mutex> l(mu_);
    std::fprintf(f_, "%s kvtier serve: %s\n", ts, msg.c_str());
    std::fflush(f_);
  }

 private:
  std::string path_;
  std::mutex mu_;
  std::FILE* f_ = nullptr;
};

// A minimal HTTP endpoint for Prometheus: GET /metrics on a TCP socket,
// one request at a time, every read and write bounded.
class MetricsServer {
 public:
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& listen,
                                                      std::function<std::string()> render) {
    const size_t colon = listen.rfind(':');
    if (colon == std::string::npos) return Status::InvalidArgument("--metrics-listen wants HOST:PORT or off");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    if (::inet_pton(AF_INET, listen.substr(0, colon).c_str(), &addr.sin_addr) != 1)
      return Status::InvalidArgument("--metrics-listen: '" + listen.substr(0, colon) + "' is not an IPv4 address");
    auto port = ParseSize(listen.substr(colon + 1));
    if (!port.ok() || *port == 0 || *port > 65535) return Status::InvalidArgument("--metrics-listen: bad port");
    addr.sin_port = htons(static_cast<uint16_t>(*port));
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Status::FromErrno(errno, "socket");
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 16) != 0) {
      const int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "metrics endpoint " + listen);
    }
    auto m = std::unique_ptr<MetricsServer>(new MetricsServer(fd, std::move(render)));
    m->thread_ = std::thread([p = m.get()] { p->Loop(); });
    return m;
  }
  ~MetricsServer() {
    stop_.store(true);
    ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }

 private:
  MetricsServer(int fd, std::function<std::string()> render) : fd_(fd), render_(std::move(render)) {}
  void Loop() {
    while (!stop_.load()) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      timeval tv{2, 0};
      ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      ::setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      char buf[1024];
      const ssize_t n = ::recv(c, buf, sizeof buf - 1, 0);
      std::string req = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
      std::string body, status = "200 OK";
      if (req.rfind("GET /metrics", 0) == 0) {
        body = render_();
      } else {
        status = "404 Not Found";
        body = "kvtier serve: GET /metrics\n";
      }
      const std::string resp = "HTTP/1.0 " + status + "\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
      (void)!::send(c, resp.data(), resp.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }
  int fd_;
  std::function<std::string()> render_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// RAM tiers in /dev/shm whose folder was deleted by hand hold memory this
// service's tier may be short of: said once at start.
void LogOrphanedRamTiers(Log& log) {
  auto tiers = Store::ListRamTierFiles();
  if (!tiers.ok()) return;
  uint64_t n = 0, bytes = 0;
  for (const RamTierFile& t : *tiers) {
    if (t.state != RamTierFile::State::kOrphan) continue;
    ++n;
    bytes += t.bytes;
  }
  if (n > 0)
    log.Line("warning: " + std::to_string(n) + " orphaned RAM tier(s) in /dev/shm hold " + FormatBytes(bytes) +
             " (their store folders were deleted by hand): kvtier shm --remove-orphans --yes frees them");
}

int Run(const ServeCmd& in) {
  // Signals are taken by sigwait below; every thread started after this
  // inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  ServiceOptions so;
  so.socket_path = in.socket.empty() ? in.a.dir + "/" + kServiceSocketName : in.socket;
  try {
    so.socket_mode = static_cast<unsigned>(std::stoul(in.socket_mode, nullptr, 8));
  } catch (...) {
    return Fail("serve", kExitUsage, "--socket-mode wants octal permissions such as 0660");
  }
  so.socket_group = in.socket_group;
  if (in.tenancy == "uid") so.tenancy = ServiceOptions::Tenancy::kUid;
  else if (in.tenancy == "gid") so.tenancy = ServiceOptions::Tenancy::kGid;
  else if (in.tenancy != "none") return Fail("serve", kExitUsage, "--tenancy is none, uid or gid");
  auto inflight = ParseSize(in.client_inflight);
  if (!inflight.ok()) return Fail("serve", kExitUsage, "--client-inflight: " + inflight.status().message());
  so.max_client_inflight_bytes = *inflight;
  auto pinned = ParseSize(in.client_pinned);
  if (!pinned.ok()) return Fail("serve", kExitUsage, "--client-pinned: " + pinned.status().message());
  so.max_client_pinned_bytes = *pinned;
  so.max_clients = in.max_clients;
  if (in.reader_spin_us < -1) return Fail("serve", kExitUsage, "--reader-spin-us is -1 (by cores), 0 (off) or a time");
  so.reader_spin_us = in.reader_spin_us;
  if (in.client_read_threads == 0 || in.client_read_threads < -1)
    return Fail("serve", kExitUsage, "--client-read-threads is -1 (by cores) or a count of at least 1");
  so.client_read_threads = in.client_read_threads;
  Log log(in.log_file);
  so.log = [&log](const std::string& line) { log.Line(line); };

  Options o;
  o.create_if_missing = true;
  auto seg = ParseSize(in.a.segment_size);
  if (!seg.ok()) return Fail("serve", kExitUsage, "--segment-size: " + seg.status().message());
  o.segment_size_bytes = *seg;
  o.group_access = (so.socket_mode & 0070) != 0;
  // The size flags; one left empty keeps the store's default.
  const struct {
    const std::string& text;
    const char* flag;
    uint64_t* field;
  } sizes[] = {{in.a.capacity, "--capacity", &o.capacity_bytes},
               {in.ram_tier, "--ram-tier", &o.ram_tier_bytes},
               {in.ram_streaming_min, "--ram-streaming-min", &o.ram_streaming_copy_min_bytes},
               {in.ram_split_copy_min, "--ram-split-copy-min", &o.ram_split_copy_min_bytes}};
  for (const auto& s : sizes) {
    if (s.text.empty()) continue;
    auto n = ParseSize(s.text);
    if (!n.ok()) return Fail("serve", kExitUsage, std::string(s.flag) + ": " + n.status().message());
    *s.field = *n;
  }
  if (!in.ram_chunk.empty()) {
    auto n = ParseSize(in.ram_chunk);
    if (!n.ok()) return Fail("serve", kExitUsage, "--ram-chunk: " + n.status().message());
    if (*n > UINT32_MAX) return Fail("serve", kExitUsage, "--ram-chunk: at most 64M");
    o.ram_tier_chunk_bytes = static_cast<uint32_t>(*n);  // its range is checked by the store's open
  }
  o.ram_tier_prefault = !in.no_ram_prefault;
  o.zero_copy_small_pages = in.zero_copy_small_pages;
  o.ram_copy_spin_us = in.ram_copy_spin_us;  // checked by the store's open
  o.remote = in.a.remote;
  o.warn = [&log](const std::string& line) { log.Line("warning: " + line); };
  const Clock::time_point opening = Clock::now();
  auto store = Store::Open(in.a.dir, o);
  if (!store.ok()) return Fail("serve", kExitCannotOpen, "cannot open store " + in.a.dir + ": " + store.status().ToString());
  auto service = Service::Start(store->get(), so);
  if (!service.ok()) {
    (*store)->Close().IgnoreError();
    return Fail("serve", kExitCannotOpen, "cannot serve " + in.a.dir + ": " + service.status().ToString());
  }
  std::unique_ptr<MetricsServer> metrics;
  if (in.metrics_listen != "off") {
    Store* s = store->get();
    Service* sv = service->get();
    auto counts = std::make_shared<NamespaceCounts>(s, in.metrics_count_interval_s);
    auto m = MetricsServer::Start(in.metrics_listen, [s, sv, counts] {
      MetricsInput mi;
      mi.stats = s->GetStats();
      counts->Get(&mi.namespaces, &mi.namespace_counts_age_s);
      mi.segments = s->Segments();
      const ServiceStats st = sv->GetStats();
      mi.service = &st;
      return RenderMetrics(mi, nullptr);
    });
    if (m.ok()) metrics = std::move(m).value();
    else log.Line("warning: no metrics endpoint: " + m.status().ToString());
  }
  // Before "serving": whoever waits for that line has seen the warnings too.
  LogOrphanedRamTiers(log);
  const Stats started = (*store)->GetStats();
  const std::string ram =
      started.ram_capacity_bytes == 0
          ? ", no RAM tier"
          : ", RAM tier " + FormatBytes(started.ram_capacity_bytes) + " in " +
                (started.ram_shared_memory ? "/dev/shm" : "process memory") + ", " +
                FormatBytes(o.ram_tier_chunk_bytes) + " chunks, " + std::to_string(started.ram_adopted_blocks) +
                " blocks adopted";
  log.Line("serving " + in.a.dir + " on " + so.socket_path + " (store " + (*store)->Description().store_id + ram +
           (metrics ? ", metrics on http://" + in.metrics_listen + "/metrics" : "") + ")");

  // Wait for a signal, for the idle time to pass with no client, or for the
  // index to need a reopen.
  const bool exit_on_index_failure = in.on_index_failure == "exit";
  int exit_code = kExitOk;
  Clock::time_point idle_since = Clock::now();
  // A large tier takes seconds to fault in; the writer registers it with its
  // io_uring only then (docs/ram_tier.md, "Prefault").
  bool prefault_logged = !o.ram_tier_prefault || started.ram_capacity_bytes == 0;
  for (;;) {
    timespec tick{1, 0};
    const int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGHUP) {
      log.Reopen();
      log.Line("log reopened");
      continue;
    }
    if (sig == SIGTERM || sig == SIGINT) {
      log.Line(std::string("stopping on ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT"));
      break;
    }
    const Stats now = (*store)->GetStats();
    if (!prefault_logged && now.ram_prefaulted_bytes >= now.ram_capacity_bytes) {
      prefault_logged = true;
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.1f", std::chrono::duration<double>(Clock::now() - opening).count());
      log.Line("RAM tier faulted in: " + FormatBytes(now.ram_capacity_bytes) + ", within " + secs + " s of the store's open");
    }
    if (exit_on_index_failure && now.index_writes_refused) {
      // Only a reopen resumes writing, and a restart is the reopen that
      // every client already survives (they reconnect; nothing acknowledged
      // is lost). Serving on would refuse every put until someone noticed.
      log.Line("stopping: the store's index refuses writes until it is reopened (a write of its files failed, "
               "named above); exiting with code 75 for the supervisor to start the service again");
      exit_code = kExitRestart;
      break;
    }
    if (in.idle_exit_s == 0) continue;
    if ((*service)->GetStats().clients > 0) {
      idle_since = Clock::now();
    } else if (Clock::now() - idle_since >= std::chrono::seconds(in.idle_exit_s)) {
      log.Line("stopping: no client for " + std::to_string(in.idle_exit_s) + " s");
      break;
    }
  }
  metrics.reset();
  (*service)->Stop();
  Status st = (*store)->Close();
  if (!st.ok()) {
    // After an index failure the close cannot write its checkpoint: the
    // next open recovers as after a crash, losing nothing acknowledged.
    log.Line("closing the store: " + st.ToString());
    return exit_code != kExitOk ? exit_code : kExitProblems;
  }
  log.Line("stopped cleanly");
  return exit_code;
}

}  // namespace

Command AddServe(CLI::App& root) {
  auto in = std::make_shared<ServeCmd>();
  CLI::App* sub = root.add_subcommand("serve", "Serve the store in DIR to every process on this machine (unix: clients)");
  AddDirArg(sub, &in->a);
  sub->add_option("--socket", in->socket, "Unix socket to listen on (default DIR/kvtier.sock)");
  sub->add_option("--socket-mode", in->socket_mode, "Permissions of the socket (octal)")->capture_default_str();
  sub->add_option("--socket-group", in->socket_group, "Group owning the socket (name or number)");
  sub->add_option("--tenancy", in->tenancy, "Keep namespaces apart per client uid or gid: none, uid, gid")
      ->capture_default_str();
  sub->add_option("--metrics-listen", in->metrics_listen, "HOST:PORT for Prometheus (GET /metrics), or off")
      ->capture_default_str();
  sub->add_option("--metrics-count-interval", in->metrics_count_interval_s,
                  "Seconds a scrape reuses the namespaces' block and byte counts (a recount walks the index; 0: every scrape)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--log", in->log_file, "Append log lines to this file (reopened on SIGHUP; default stderr)");
  sub->add_option("--idle-exit", in->idle_exit_s, "Leave after this many seconds without a client (0: never)")
      ->capture_default_str();
  AddCreateOptions(sub, &in->a);
  sub->add_option("--ram-tier", in->ram_tier, "Host RAM tier in front of the disk (e.g. 64G; default off)");
  sub->add_option("--ram-chunk", in->ram_chunk,
                  "The RAM tier's unit of memory: each block takes whole chunks (default 64K; for small blocks, "
                  "about their size; 4K to 64M; see docs/ram_tier.md)");
  sub->add_flag("--no-ram-prefault", in->no_ram_prefault,
                "Leave the RAM tier's memory to fault in as blocks fill it, instead of faulting it all in after "
                "open (see docs/ram_tier.md)");
  sub->add_flag("--zero-copy-small-pages", in->zero_copy_small_pages,
                "Read disk blocks straight into clients' shared memory on 4 KiB pages (see docs/service.md)");
  sub->add_option("--ram-streaming-min", in->ram_streaming_min,
                  "Copies out of the RAM tier of at least this size use streaming stores "
                  "(e.g. 1M; default half the last-level cache; see docs/ram_tier.md)");
  sub->add_option("--ram-split-copy-min", in->ram_split_copy_min,
                  "A lone get of a RAM-tier block of at least this size is copied and verified by several "
                  "threads at once (default 1M; 0: never; see docs/ram_tier.md)");
  sub->add_option("--client-pinned", in->client_pinned,
                  "RAM-tier bytes one client may hold pinned while it copies them itself (GPU loads)")
      ->capture_default_str();
  sub->add_option("--client-inflight", in->client_inflight, "Bytes of puts one client may have in flight")
      ->capture_default_str();
  sub->add_option("--max-clients", in->max_clients, "Clients served at once")->capture_default_str();
  sub->add_option("--ram-copy-spin-us", in->ram_copy_spin_us,
                  "Microseconds idle RAM-tier copy threads poll for the next read before they sleep, and lone "
                  "gets then share their copy more widely (0: sleep at once; see docs/ram_tier.md)")
      ->capture_default_str();
  sub->add_option("--reader-spin-us", in->reader_spin_us,
                  "Microseconds a connection polls for a client's next request while it waits for a reply "
                  "(0: sleep at once; -1: 3000 on hosts of 8 cores or more, else 0)")
      ->capture_default_str();
  sub->add_option("--on-index-failure", in->on_index_failure,
                  "When the index refuses writes until the store is reopened (a write of its files failed): exit "
                  "(code 75, for systemd's Restart=on-failure or auto: clients to start it again) or serve (reads "
                  "only, until restarted by hand)")
      ->capture_default_str()
      ->check(CLI::IsMember({"exit", "serve"}));
  sub->add_option("--client-read-threads", in->client_read_threads,
                  "Threads that read one put from a client's own memory (1: never split; -1: the connection's "
                  "and a quarter of the cores beside it, at most 4, and 1 below 8 cores)")
      ->capture_default_str();
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
