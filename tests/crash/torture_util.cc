#include "crash/torture_util.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include "doubles/fault_injection.h"
#include "doubles/sim_power_loss.h"
#include "kvtier/store.h"
#include "store/store_test_util.h"

namespace kvtier::testing {

namespace {

// One log entry, written with a single write() so a kill never splits it.
struct LogRec {
  char type;         // 'I' submitted, 'A' acknowledged OK, 'E' failed, 'W' wrong bytes seen
  uint8_t code;      // Status code for 'E'
  uint16_t pad;
  uint32_t key;
  int32_t version;   // -1: remove
  uint32_t op_no;
};
static_assert(sizeof(LogRec) == 16);

struct Op {
  uint32_t no;
  int32_t version;  // -1: remove
  enum class S : uint8_t { kPending, kAcked, kDeclined } s = S::kPending;
  Code error = Code::kOk;  // what the call returned, when it failed
};

struct KeyModel {
  int32_t state = -1;       // last verified outcome (-1: absent)
  int32_t max_version = -1;
  std::vector<Op> ops;      // since the last verification, in submission order
};

uint32_t PayloadSize(uint32_t key, int32_t version, uint32_t max_payload) {
  uint64_t h = (uint64_t{key} * 0x9E3779B97F4A7C15ull) ^ (uint64_t(uint32_t(version)) * 0xBF58476D1CE4E5B9ull);
  h ^= h >> 29;
  return 1 + static_cast<uint32_t>(h % max_payload);
}

std::vector<uint8_t> Expected(NamespaceId ns, uint32_t key, int32_t version, uint32_t max_payload) {
  return Payload(ns, Key(key), PayloadSize(key, version, max_payload), static_cast<uint32_t>(version));
}

// Ends the child at once, like a crash: no atexit handlers, no destructors,
// and no sanitizer exit hooks (TSan's _exit interceptor would report the
// store's still-running threads as leaked and turn the status into 66).
[[noreturn]] void ExitNow(int code) {
  ::syscall(SYS_exit_group, code);
  __builtin_unreachable();
}

void WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w <= 0) ExitNow(90);
    c += w;
    n -= static_cast<size_t>(w);
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Options StoreOptions(const TortureConfig& c) {
  Options o;
  o.segment_size_bytes = 1 << 20;
  o.capacity_bytes = c.eviction ? (6ull << 20) : (512ull << 20);
  o.write_queue_bytes = 2 << 20;
  o.group_commit_bytes = 256 << 10;
  o.read_threads = 1;
  o.queue_depth = 8;
  o.reinsert_hot_blocks = true;
  o.reinsert_max_fraction = 0.25;
  // A block read once is kept, and the hot region is 2 of the 6 segments:
  // crashes then land while blocks move into the region and while the
  // region's own oldest segment is reclaimed.
  o.reinsert_min_hits = 1;
  o.hot_region_fraction = 0.34;
  // Reclaims choose among the 3 oldest of the other segments, so crashes
  // also land after a segment younger than the oldest was taken.
  o.reclaim_window_fraction = 0.5;
  o.checkpoint_interval_bytes = 512 << 10;
  o.max_payload_bytes = 1 << 20;
  o.use_direct_io = c.crash == TortureConfig::Crash::kKill;
  return o;
}

// ---- The child ----------------------------------------------------------------

class Child {
 public:
  Child(const TortureConfig& c, std::vector<KeyModel>& model, std::string store, std::string work,
        uint64_t seed, bool index_lost, int ready_fd)
      : c_(c), model_(model), store_(std::move(store)), work_(std::move(work)), rng_(seed),
        index_lost_(index_lost), ready_fd_(ready_fd) {}

  [[noreturn]] void Run() {
    Options o = StoreOptions(c_);
    small_limits_ = c_.vary_opener_limits && rng_() % 2 == 0;
    if (small_limits_) {
      // Smaller than blocks already stored: reads, recovery and verify must
      // judge those by the format, not by this opener's options.
      o.max_payload_bytes = c_.max_payload / 2;
      o.write_queue_bytes = 1 << 20;
      o.group_commit_bytes = 128 << 10;
    }
    std::shared_ptr<SimPowerLossFileSystem> sim;
    if (c_.crash == TortureConfig::Crash::kPowerLoss) {
      sim = std::make_shared<SimPowerLossFileSystem>(DefaultFileSystem(IoBackend::kPosix), rng_());
      sim->SetWatchedPath("/index/");
      const uint64_t at = 1 + rng_() % c_.max_crash_op;
      SimPowerLossFileSystem* raw = sim.get();
      const std::string crash_path = work_ + "/crash";
      in_open_.store(true);
      sim->SetCrashAt(at, [raw, crash_path, this] {
        crashing_.store(true);
        PowerLossReport r = raw->Crash();
        char line[200];
        int n = std::snprintf(line, sizeof line, "%d %llu %llu %llu %d %llu %llu %llu\n", static_cast<int>(r.mode),
                              static_cast<unsigned long long>(r.writes_pending),
                              static_cast<unsigned long long>(r.writes_torn),
                              static_cast<unsigned long long>(r.names_undone), in_open_.load() ? 1 : 0,
                              static_cast<unsigned long long>(r.watched_pending),
                              static_cast<unsigned long long>(r.watched_lost),
                              static_cast<unsigned long long>(faults_ ? faults_->Faults(FaultOp::kSync) : 0));
        int fd = ::open(crash_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
          WriteAll(fd, line, static_cast<size_t>(n));
          ::close(fd);
        }
        ExitNow(0);
      });
      o.file_system = sim;
      if (c_.fail_a_sync && rng_() % 2 == 0) {
        faults_ = std::make_shared<FaultInjectionFileSystem>(sim);
        o.file_system = faults_;
      }
    } else {
      o.io_backend = IoBackend::kAuto;
    }
    auto opened = Store::Open(store_, o);
    in_open_.store(false);
    if (!opened.ok()) Fail("reopen failed: " + opened.status().ToString(), 20);
    store_ptr_ = std::move(opened).value();
    Store* s = store_ptr_.get();
    auto ns = s->RegisterNamespace(TestSpec("torture/model"));
    if (!ns.ok()) Fail("RegisterNamespace: " + ns.status().ToString(), 21);
    ns_ = *ns;
    Verify(s);
    log_fd_ = ::open((work_ + "/log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0600);
    if (log_fd_ < 0) Fail("cannot open log", 22);
    // Armed once open (recovery's own syncs stay sound): one of the next few
    // syncs of a segment fails.
    if (faults_ != nullptr) faults_->SetFault(FaultOp::kSync, FaultSpec::Nth(1 + rng_() % 6).OnPaths("segments/"));
    char b = 1;
    WriteAll(ready_fd_, &b, 1);
    Workload(s);
  }

 private:
  [[noreturn]] void Fail(const std::string& msg, int code) {
    // Errors from the crashed file system while the crashing thread finishes
    // Crash() are not failures: that thread is about to _exit.
    while (crashing_.load()) std::this_thread::sleep_for(std::chrono::seconds(1));
    int fd = ::open((work_ + "/fail").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      WriteAll(fd, msg.data(), msg.size());
      ::close(fd);
    }
    ExitNow(code);
  }

  // What a failure note needs to be read: the key's verified state, its ops
  // since (op number, version, a/p/d for acked, pending, declined, and the
  // error a failed call returned), and
  // where its index entry points.
  std::string History(Store* s, uint32_t k, const KeyModel& m) {
    std::ostringstream h;
    h << "; verified state " << m.state << ", ops";
    for (const Op& op : m.ops)
      h << ' ' << op.no << ':' << op.version << ':'
        << (op.s == Op::S::kAcked ? 'a' : op.s == Op::S::kPending ? 'p' : 'd')
        << (op.error != Code::kOk ? std::string("(") + CodeName(op.error) + ")" : std::string());
    auto b = s->Stat(ns_, Key(k));
    if (b.ok())
      h << "; entry segment " << b->segment << " gen " << b->generation << " offset " << b->offset << " sequence "
        << b->sequence;
    return h.str();
  }

  // Checks every key against the model and writes what was found.
  void Verify(Store* s) {
    uint64_t checked = 0, present = 0, lost = 0, wrong = 0, unexpected = 0;
    std::string problems, obs;
    auto note = [&](const std::string& p) {
      if (problems.size() < 4000) problems += "P " + p + "\n";
    };
    for (uint32_t k = 0; k < c_.keys; ++k) {
      KeyModel& m = model_[k];
      // Allowed outcomes: the last acknowledged op's (or the verified state),
      // and those of every later op that was not acknowledged.
      std::vector<int32_t> allowed;
      size_t last_acked = SIZE_MAX;
      for (size_t i = 0; i < m.ops.size(); ++i)
        if (m.ops[i].s == Op::S::kAcked) last_acked = i;
      allowed.push_back(last_acked == SIZE_MAX ? m.state : m.ops[last_acked].version);
      for (size_t i = last_acked == SIZE_MAX ? 0 : last_acked + 1; i < m.ops.size(); ++i)
        if (m.ops[i].s == Op::S::kPending) allowed.push_back(m.ops[i].version);
      const bool absent_ok = c_.eviction || std::count(allowed.begin(), allowed.end(), -1) > 0;
      ++checked;
      auto got = s->GetVector(ns_, Key(k));
      int32_t seen = -1;
      if (!got.ok()) {
        if (!got.status().IsNotFound()) Fail("Get " + std::to_string(k) + ": " + got.status().ToString(), 23);
        if (!absent_ok) {
          ++lost;
          note("key " + std::to_string(k) + " acknowledged (version " + std::to_string(allowed[0]) +
               ") but absent after reopen");
        }
      } else {
        ++present;
        for (int32_t v = m.max_version; v >= 0; --v)
          if (*got == Expected(ns_, k, v, c_.max_payload)) {
            seen = v;
            break;
          }
        if (seen < 0) {
          ++wrong;
          note("key " + std::to_string(k) + ": " + std::to_string(got->size()) +
               " bytes match no version ever put");
        } else if (std::count(allowed.begin(), allowed.end(), seen) == 0) {
          // With the index lost, recovery rebuilds from the segments: a
          // removed block may come back (its bytes are right).
          if (!index_lost_) {
            ++unexpected;
            note("key " + std::to_string(k) + ": version " + std::to_string(seen) + " is not allowed (last acked " +
                 std::to_string(allowed[0]) + ")" + History(s, k, m));
          }
        }
      }
      obs += std::to_string(seen) + "\n";
    }
    if (!c_.eviction) {
      Stats st = s->GetStats();
      if (st.segments_total * (1ull << 20) >= StoreOptions(c_).capacity_bytes)
        Fail("no-eviction variant reached its capacity: raise capacity or fresh_store_every", 24);
    }
    uint64_t verified = 0, corrupt = 0;
    if (c_.verify_after_recovery) {
      VerifyOptions vo;
      vo.deep = true;
      auto rep = s->Verify(vo);
      if (!rep.ok()) Fail("Verify after recovery: " + rep.status().ToString(), 33);
      verified = 1;
      corrupt = rep->records_corrupt;
      for (const std::string& p : rep->problems)
        if (corrupt > 0 && p.find("fail verification") != std::string::npos) note("deep verify after recovery: " + p);
    }
    std::string out = "S " + std::to_string(checked) + " " + std::to_string(present) + " " + std::to_string(lost) +
                      " " + std::to_string(wrong) + " " + std::to_string(unexpected) + " " +
                      std::to_string(small_limits_) + " " + std::to_string(verified) + " " + std::to_string(corrupt) +
                      "\n" + problems + "O\n" + obs;
    const std::string tmp = work_ + "/verify.tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) Fail("cannot write verify result", 25);
    WriteAll(fd, out.data(), out.size());
    ::close(fd);
    if (::rename(tmp.c_str(), (work_ + "/verify").c_str()) != 0) Fail("rename verify", 26);
    // The verified state is the new base of the model (in this child too).
    std::istringstream in(obs);
    for (uint32_t k = 0; k < c_.keys; ++k) {
      in >> model_[k].state;
      model_[k].ops.clear();
    }
  }

  void Log(char type, uint32_t key, int32_t version, uint32_t op_no, Code code = Code::kOk) {
    LogRec r{type, static_cast<uint8_t>(code), 0, key, version, op_no};
    WriteAll(log_fd_, &r, sizeof r);
  }

  int32_t NextVersion(uint32_t k) { return ++model_[k].max_version; }

  void CheckRead(uint32_t k) {
    auto got = store_ptr_->GetVector(ns_, Key(k));
    if (!got.ok()) {
      if (!got.status().IsNotFound()) Fail("Get: " + got.status().ToString(), 27);
      return;
    }
    for (int32_t v = model_[k].max_version; v >= 0; --v)
      if (*got == Expected(ns_, k, v, c_.max_payload)) return;
    Log('W', k, -1, 0);
    Fail("wrong bytes returned by Get of key " + std::to_string(k) + " during the workload", 28);
  }

  [[noreturn]] void Workload(Store* s) {
    std::uniform_int_distribution<uint32_t> pick(0, c_.keys - 1);
    for (uint64_t n = 0;; ++n) {
      if (c_.crash == TortureConfig::Crash::kPowerLoss && n > 100000) Fail("crash point never reached", 29);
      const uint32_t r = rng_() % 100;
      if (r < 40) {
        uint32_t k = pick(rng_);
        int32_t v = NextVersion(k);
        auto p = Expected(ns_, k, v, c_.max_payload);
        uint32_t no = ++op_no_;
        Log('I', k, v, no);
        Status st = s->Put(ns_, Key(k), p.data(), p.size());
        Log(st.ok() ? 'A' : 'E', k, v, no, st.code());
      } else if (r < 55) {
        const size_t count = 2 + rng_() % 7;
        std::vector<uint32_t> keys;
        while (keys.size() < count) {
          uint32_t k = pick(rng_);
          if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
        }
        std::vector<std::vector<uint8_t>> payloads;
        std::vector<int32_t> versions;
        std::vector<uint32_t> nos;
        std::vector<std::string> names;
        for (uint32_t k : keys) {
          versions.push_back(NextVersion(k));
          payloads.push_back(Expected(ns_, k, versions.back(), c_.max_payload));
          names.push_back(Key(k));
          nos.push_back(++op_no_);
          Log('I', k, versions.back(), nos.back());
        }
        std::vector<Fragment> frags(keys.size());
        std::vector<PutItem> items(keys.size());
        for (size_t i = 0; i < keys.size(); ++i) {
          frags[i] = Fragment{payloads[i].data(), payloads[i].size()};
          items[i] = PutItem{names[i], std::span<const Fragment>(&frags[i], 1)};
        }
        std::vector<Status> st = s->PutBatch(ns_, items);
        for (size_t i = 0; i < keys.size(); ++i)
          Log(st[i].ok() ? 'A' : 'E', keys[i], versions[i], nos[i], st[i].code());
      } else if (r < 65) {
        const size_t count = 1 + rng_() % 4;
        for (size_t i = 0; i < count; ++i) {
          uint32_t k = pick(rng_);
          int32_t v = NextVersion(k);
          auto p = Expected(ns_, k, v, c_.max_payload);
          uint32_t no = ++op_no_;
          Log('I', k, v, no);
          Fragment f{p.data(), p.size()};
          s->PutAsync(ns_, Key(k), std::span<const Fragment>(&f, 1), [this, k, v, no](Status st) {
            Log(st.ok() ? 'A' : 'E', k, v, no, st.code());
          });
        }
        if (rng_() % 2 == 0) {
          Status st = s->Flush();
          if (!st.ok()) Fail("Flush: " + st.ToString(), 30);
        }
      } else if (r < 75) {
        // A remove, or a batch of them (one flush; a key may come twice).
        const size_t count = rng_() % 2 == 0 ? 1 : 2 + rng_() % 4;
        std::vector<uint32_t> keys, nos;
        std::vector<std::string> names;
        for (size_t i = 0; i < count; ++i) {
          keys.push_back(pick(rng_));
          names.push_back(Key(keys.back()));
          nos.push_back(++op_no_);
          Log('I', keys.back(), -1, nos.back());
        }
        const std::vector<std::string_view> views(names.begin(), names.end());
        Status st = count == 1 ? s->Remove(ns_, names[0]) : s->RemoveBatch(ns_, views, nullptr);
        for (size_t i = 0; i < count; ++i) Log(st.ok() ? 'A' : 'E', keys[i], -1, nos[i], st.code());
      } else if (r < 80) {
        // A use counted without a read (an engine's upper tier served the
        // blocks): more blocks become hot, and reclaim rewrites them.
        std::vector<std::string> names;
        for (size_t i = 1 + rng_() % 4; i > 0; --i) names.push_back(Key(pick(rng_)));
        const std::vector<std::string_view> views(names.begin(), names.end());
        Status st = s->TouchBatch(ns_, views, nullptr);
        if (!st.ok()) Fail("TouchBatch: " + st.ToString(), 34);
      } else if (r < 97) {
        CheckRead(pick(rng_));
      } else if (r < 99 || !c_.eviction) {
        Status st = s->Flush();
        if (!st.ok()) Fail("Flush: " + st.ToString(), 31);
      } else {
        Stats st = s->GetStats();
        Status e = s->EvictTo(st.used_bytes / 2);
        if (!e.ok()) Fail("EvictTo: " + e.ToString(), 32);
      }
    }
  }

  const TortureConfig& c_;
  std::vector<KeyModel>& model_;
  std::string store_, work_;
  std::mt19937_64 rng_;
  bool index_lost_;
  int ready_fd_;
  int log_fd_ = -1;
  uint32_t op_no_ = 0;
  NamespaceId ns_ = 0;
  std::shared_ptr<FaultInjectionFileSystem> faults_;  // fail_a_sync: fails one segment sync
  std::unique_ptr<Store> store_ptr_;
  std::atomic<bool> in_open_{false};
  std::atomic<bool> crashing_{false};
  bool small_limits_ = false;
};

// ---- The parent ---------------------------------------------------------------

void Problem(TortureResult* r, const std::string& p) {
  if (r->problems.size() < 12) r->problems.push_back(p);
}

// Folds a round's log into the model.
void ApplyLog(const std::string& log, std::vector<KeyModel>& model, TortureResult* res) {
  std::map<uint32_t, std::pair<uint32_t, size_t>> where;  // op_no -> (key, index in ops)
  for (size_t off = 0; off + sizeof(LogRec) <= log.size(); off += sizeof(LogRec)) {
    LogRec r;
    std::memcpy(&r, log.data() + off, sizeof r);
    if (r.key >= model.size()) continue;
    KeyModel& m = model[r.key];
    if (r.type == 'I') {
      m.max_version = std::max(m.max_version, r.version);
      where[r.op_no] = {r.key, m.ops.size()};
      m.ops.push_back(Op{r.op_no, r.version});
    } else if (r.type == 'A' || r.type == 'E') {
      auto it = where.find(r.op_no);
      if (it == where.end()) continue;
      Op& op = model[it->second.first].ops[it->second.second];
      if (r.type == 'E') op.error = static_cast<Code>(r.code);
      if (r.type == 'A') {
        op.s = Op::S::kAcked;
        ++(op.version < 0 ? res->acked_removes : res->acked_puts);
      } else if (static_cast<Code>(r.code) == Code::kIOError) {
        if (op.version >= 0) ++res->put_io_errors;  // outcome unknown: stays pending
      } else if (static_cast<Code>(r.code) == Code::kNotAdmitted ||
                 static_cast<Code>(r.code) == Code::kInvalidArgument) {
        op.s = Op::S::kDeclined;  // nothing stored, by contract (over this opener's payload limit)
      }  // other errors: outcome unknown, stays pending
    } else if (r.type == 'W') {
      ++res->wrong_bytes;
      Problem(res, "wrong bytes for key " + std::to_string(r.key) + " during the workload");
    }
  }
}

}  // namespace

std::string TortureResult::Summary() const {
  std::ostringstream o;
  o << "rounds=" << rounds << " crashes=" << crashes << " crashes_in_open=" << crashes_in_open
    << " verified_rounds=" << verified_rounds << " blocks_checked=" << blocks_checked
    << " blocks_present=" << blocks_present << " acked_puts=" << acked_puts << " acked_removes=" << acked_removes
    << " acked_lost=" << acked_lost << " wrong_bytes=" << wrong_bytes << " unexpected=" << unexpected
    << " reopen_failures=" << reopen_failures << " child_failures=" << child_failures
    << " index_losses=" << index_losses;
  if (small_limit_rounds > 0) o << " small_limit_rounds=" << small_limit_rounds;
  if (verifies > 0) o << " deep_verifies=" << verifies << " corrupt_after_recovery=" << corrupt_after_recovery;
  if (injected_sync_failures > 0)
    o << " injected_sync_failures=" << injected_sync_failures << " put_io_errors=" << put_io_errors;
  if (writes_pending + names_undone > 0)
    o << " unsynced_writes=" << writes_pending << " torn_writes=" << writes_torn << " names_undone=" << names_undone
      << " index_unsynced_writes=" << index_writes_pending << " index_writes_lost=" << index_writes_lost
      << " modes(drop/keep/subset/tear)=" << mode_counts[0] << "/" << mode_counts[1] << "/" << mode_counts[2]
      << "/" << mode_counts[3];
  for (const std::string& p : problems) o << "\n  " << p;
  return o.str();
}

uint32_t RoundsFromEnv(const char* name, uint32_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  long n = std::strtol(v, nullptr, 10);
  return n > 0 ? static_cast<uint32_t>(n) : fallback;
}

namespace {

TortureResult RunTortureHere(const std::string& dir, const TortureConfig& c) {
  TortureResult res;
  std::mt19937_64 rng(c.seed);
  std::vector<KeyModel> model(c.keys);
  std::filesystem::create_directories(dir);
  const std::string work = dir + "/work";
  std::filesystem::create_directories(work);
  uint32_t store_no = 0;
  std::string store = dir + "/store0";
  bool index_lost = false;  // until a round has verified the rebuilt index
  for (uint32_t round = 0; round < c.rounds; ++round) {
    if (!c.eviction && c.fresh_store_every > 0 && round > 0 && round % c.fresh_store_every == 0) {
      std::filesystem::remove_all(store);
      store = dir + "/store" + std::to_string(++store_no);
      model.assign(c.keys, KeyModel{});
      index_lost = false;
    }
    if (c.index_loss_probability > 0 && round > 0 &&
        std::uniform_real_distribution<double>(0, 1)(rng) < c.index_loss_probability) {
      std::filesystem::remove_all(store + "/index");
      index_lost = true;
      ++res.index_losses;
    }
    for (const char* f : {"/log", "/verify", "/fail", "/crash"}) std::filesystem::remove(work + f);
    int ready[2];
    if (pipe(ready) != 0) {
      Problem(&res, "pipe failed");
      ++res.child_failures;
      break;
    }
    const uint64_t child_seed = rng();
    pid_t pid = fork();
    if (pid < 0) {
      Problem(&res, "fork failed");
      ++res.child_failures;
      break;
    }
    if (pid == 0) {
      ::close(ready[0]);
      Child(c, model, store, work, child_seed, index_lost, ready[1]).Run();
    }
    ::close(ready[1]);
    ++res.rounds;
    char b;
    const bool got_ready = ::read(ready[0], &b, 1) == 1;
    ::close(ready[0]);
    if (c.crash == TortureConfig::Crash::kKill && got_ready) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % (uint64_t{c.max_kill_delay_ms} * 1000 + 1)));
      ::kill(pid, SIGKILL);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    const bool clean_exit = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (c.crash == TortureConfig::Crash::kKill ? killed : clean_exit) {
      ++res.crashes;
    } else {
      std::string why = ReadFile(work + "/fail");
      if (WIFEXITED(status) && WEXITSTATUS(status) == 20) ++res.reopen_failures;
      else ++res.child_failures;
      Problem(&res, "round " + std::to_string(round) + ": child status " + std::to_string(status) + ": " + why);
    }
    if (c.crash == TortureConfig::Crash::kPowerLoss) {
      std::istringstream cr(ReadFile(work + "/crash"));
      int mode = -1, in_open = 0;
      uint64_t pending = 0, torn = 0, undone = 0, index_pending = 0, index_lost = 0, injected = 0;
      if (cr >> mode >> pending >> torn >> undone >> in_open >> index_pending >> index_lost >> injected) {
        res.injected_sync_failures += injected;
        res.index_writes_pending += index_pending;
        res.index_writes_lost += index_lost;
        if (mode >= 0 && mode < 4) ++res.mode_counts[mode];
        res.writes_pending += pending;
        res.writes_torn += torn;
        res.names_undone += undone;
        res.crashes_in_open += in_open;
      }
    }
    // What the child verified becomes the model's base; then its workload.
    std::istringstream vin(ReadFile(work + "/verify"));
    std::string tag;
    if (vin >> tag && tag == "S") {
      uint64_t checked, present, lost, wrong, unexpected, small, verified, corrupt;
      vin >> checked >> present >> lost >> wrong >> unexpected >> small >> verified >> corrupt;
      ++res.verified_rounds;
      res.small_limit_rounds += small;
      res.verifies += verified;
      res.corrupt_after_recovery += corrupt;
      res.blocks_checked += checked;
      res.blocks_present += present;
      res.acked_lost += lost;
      res.wrong_bytes += wrong;
      res.unexpected += unexpected;
      std::string line;
      std::getline(vin, line);
      while (std::getline(vin, line) && line != "O")
        Problem(&res, "round " + std::to_string(round) + ": " + line.substr(2));
      for (uint32_t k = 0; k < c.keys; ++k) {
        vin >> model[k].state;
        model[k].ops.clear();
      }
      ApplyLog(ReadFile(work + "/log"), model, &res);
      index_lost = false;
    }
    if (!res.ok() && res.problems.size() >= 12) break;
  }
  return res;
}

// ---- The driver process -------------------------------------------------------
//
// RunTorture runs the rounds in a fresh process (this test binary, exec'd
// with kDriverEnv set and a filter selecting TortureDriver.DISABLED_Run): a
// child forked from a process that ever opened a store would inherit RocksDB's
// Env thread-pool state without its threads and wait forever for background
// work. The driver never opens a store, so its forks are safe and cheap.

constexpr char kDriverEnv[] = "KVTIER_TORTURE_DRIVER";

void WriteText(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
  }
  std::filesystem::rename(tmp, path);
}

std::string EncodeConfig(const TortureConfig& c) {
  std::ostringstream o;
  o.precision(17);
  o << static_cast<int>(c.crash) << ' ' << c.eviction << ' ' << c.rounds << ' ' << c.seed << ' ' << c.keys << ' '
    << c.max_payload << ' ' << c.max_kill_delay_ms << ' ' << c.max_crash_op << ' ' << c.fresh_store_every << ' '
    << c.index_loss_probability << ' ' << c.vary_opener_limits << ' ' << c.verify_after_recovery << ' '
    << c.fail_a_sync << '\n';
  return o.str();
}

bool DecodeConfig(const std::string& text, TortureConfig* c) {
  std::istringstream in(text);
  int crash = 0;
  in >> crash >> c->eviction >> c->rounds >> c->seed >> c->keys >> c->max_payload >> c->max_kill_delay_ms >>
      c->max_crash_op >> c->fresh_store_every >> c->index_loss_probability >> c->vary_opener_limits >>
      c->verify_after_recovery >> c->fail_a_sync;
  c->crash = static_cast<TortureConfig::Crash>(crash);
  return static_cast<bool>(in) && (crash == 0 || crash == 1);
}

// Counters as one line of numbers, then one problem per line.
std::string EncodeResult(const TortureResult& r) {
  std::ostringstream o;
  for (uint64_t v : {r.rounds, r.crashes, r.crashes_in_open, r.verified_rounds, r.blocks_checked, r.blocks_present,
                     r.acked_puts, r.acked_removes, r.acked_lost, r.wrong_bytes, r.unexpected, r.reopen_failures,
                     r.child_failures, r.index_losses, r.writes_pending, r.writes_torn, r.names_undone,
                     r.index_writes_pending, r.index_writes_lost,
                     r.mode_counts[0], r.mode_counts[1], r.mode_counts[2], r.mode_counts[3],
                     r.small_limit_rounds, r.verifies, r.corrupt_after_recovery, r.injected_sync_failures,
                     r.put_io_errors})
    o << v << ' ';
  o << '\n';
  for (const std::string& p : r.problems) {
    std::string line = p;
    std::replace(line.begin(), line.end(), '\n', ' ');
    o << line << '\n';
  }
  return o.str();
}

bool DecodeResult(const std::string& text, TortureResult* r) {
  std::istringstream in(text);
  for (uint64_t* v : {&r->rounds, &r->crashes, &r->crashes_in_open, &r->verified_rounds, &r->blocks_checked,
                      &r->blocks_present, &r->acked_puts, &r->acked_removes, &r->acked_lost, &r->wrong_bytes,
                      &r->unexpected, &r->reopen_failures, &r->child_failures, &r->index_losses,
                      &r->writes_pending, &r->writes_torn, &r->names_undone, &r->index_writes_pending,
                      &r->index_writes_lost, &r->mode_counts[0],
                      &r->mode_counts[1], &r->mode_counts[2], &r->mode_counts[3], &r->small_limit_rounds,
                      &r->verifies, &r->corrupt_after_recovery, &r->injected_sync_failures, &r->put_io_errors})
    if (!(in >> *v)) return false;
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line))
    if (!line.empty()) r->problems.push_back(line);
  return true;
}

std::string Tail(const std::string& s, size_t n) { return s.size() <= n ? s : "..." + s.substr(s.size() - n); }

}  // namespace

bool RunTortureDriver(std::string* error) {
  const char* dir = std::getenv(kDriverEnv);
  if (dir == nullptr || *dir == '\0') {
    *error = std::string(kDriverEnv) + " is not set: this entry point is run only by RunTorture";
    return false;
  }
  TortureConfig c;
  if (!DecodeConfig(ReadFile(std::string(dir) + "/config"), &c)) {
    *error = std::string("cannot parse ") + dir + "/config";
    return false;
  }
  WriteText(std::string(dir) + "/result", EncodeResult(RunTortureHere(dir, c)));
  return true;
}

TortureResult RunTorture(const std::string& dir, const TortureConfig& c) {
  TortureResult res;
  auto fail = [&res](const std::string& why) {
    ++res.child_failures;
    res.problems.push_back("torture driver: " + why);
    return res;
  };
  std::filesystem::create_directories(dir);
  const std::string result_path = dir + "/result", out_path = dir + "/driver.out";
  std::filesystem::remove(result_path);
  WriteText(dir + "/config", EncodeConfig(c));

  // The driver's environment: ours, less gtest's variables (sharding or an
  // XML output file meant for this process), plus the driver's folder.
  // LD_BIND_NOW resolves every symbol once in the driver instead of again in
  // each forked child.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v(*e);
    if (v.starts_with("GTEST_") || v.starts_with(kDriverEnv) || v.starts_with("LD_BIND_NOW=")) continue;
    env.emplace_back(v);
  }
  env.push_back(std::string(kDriverEnv) + "=" + dir);
  env.push_back("LD_BIND_NOW=1");
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string a0 = "kvtier_crash_test", a1 = "--gtest_filter=TortureDriver.DISABLED_Run",
              a2 = "--gtest_also_run_disabled_tests";
  char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return fail(std::string("posix_spawn /proc/self/exe: ") + std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string result = ReadFile(result_path);
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) || result.empty() || !DecodeResult(result, &res))
    return fail("exit status " + std::to_string(status) + ", output: " + Tail(ReadFile(out_path), 2000));
  return res;
}

}  // namespace kvtier::testing
