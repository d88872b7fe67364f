#include "harness/designs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <list>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include "kvtier/store.h"

namespace kvbench {
namespace {

std::string ErrnoText(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

// Runs fn(op index, thread index) for every op on `threads` threads, each
// taking the next op when it is done with one (queue depth = threads).
template <typename Fn>
void RunOnThreads(uint32_t threads, size_t n, Fn fn) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> ts;
  for (uint32_t t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (size_t i; (i = next.fetch_add(1)) < n;) fn(i, t);
    });
  for (auto& t : ts) t.join();
}

// Collects errors from worker threads.
struct ErrorSink {
  std::mutex mu;
  std::atomic<uint64_t> bad{0}, misses{0};
  std::string first;
  std::vector<uint64_t> missed;
  void Fail(const std::string& e) {
    bad.fetch_add(1);
    std::lock_guard<std::mutex> l(mu);
    if (first.empty()) first = e;
  }
  void Miss(uint64_t id) {
    misses.fetch_add(1);
    Fail("miss");
    std::lock_guard<std::mutex> l(mu);
    missed.push_back(id);
  }
  void Into(RunStats* s) {
    s->bad = bad.load();
    s->misses = misses.load();
    s->first_error = first;
    s->missed_ids = std::move(missed);
  }
};

// A byte budget over blocks by id: most recently admitted or touched
// first; admitting past the limit gives back the oldest ids to delete.
// Thread-safe. Used by the designs that have no capacity of their own.
class ByteBudget {
 public:
  explicit ByteBudget(uint64_t limit) : limit_(limit) {}
  std::vector<uint64_t> Admit(uint64_t id, size_t size) {
    std::vector<uint64_t> evict;
    std::lock_guard<std::mutex> l(mu_);
    auto it = where_.find(id);
    if (it != where_.end()) {
      order_.erase(it->second.first);
      bytes_ -= it->second.second;
    }
    order_.push_front(id);
    where_[id] = {order_.begin(), size};
    bytes_ += size;
    while (bytes_ > limit_ && order_.size() > 1) {
      const uint64_t old = order_.back();
      order_.pop_back();
      bytes_ -= where_[old].second;
      where_.erase(old);
      evict.push_back(old);
    }
    return evict;
  }
  // Moves `id` to the front; false when it is not held.
  bool Touch(uint64_t id) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = where_.find(id);
    if (it == where_.end()) return false;
    order_.splice(order_.begin(), order_, it->second.first);
    return true;
  }

 private:
  const uint64_t limit_;
  std::mutex mu_;
  std::list<uint64_t> order_;
  std::unordered_map<uint64_t, std::pair<std::list<uint64_t>::iterator, size_t>> where_;
  uint64_t bytes_ = 0;
};

// Per-queue-slot I/O buffers, one set per block size (a mixed-size run
// moves a few sizes), kept across calls and written once when allocated
// (see Design::Prepare). Ensure picks the set that operator[] indexes.
class SlotBufs {
 public:
  void Ensure(size_t slots, size_t size) {
    std::vector<AlignedBuf>& set = sets_[size];
    if (set.size() < slots) {
      if (sets_.size() > kMaxSizes) {  // bound the memory: start over with this size
        sets_.clear();
        Ensure(slots, size);
        return;
      }
      set.clear();
      for (size_t i = 0; i < slots; ++i) {
        set.emplace_back(size);
        std::memset(set.back().data(), 0, size);
      }
    }
    current_ = &set;
  }
  uint8_t* operator[](size_t i) const { return (*current_)[i].data(); }

 private:
  static constexpr size_t kMaxSizes = 4;
  std::map<size_t, std::vector<AlignedBuf>> sets_;
  std::vector<AlignedBuf>* current_ = nullptr;
};

// Returns false for an unknown name or a bad value.
bool ApplyOverride(const std::string& kv, kvtier::Options* o) {
  const size_t eq = kv.find('=');
  if (eq == std::string::npos) return false;
  const std::string k = kv.substr(0, eq);
  if (k == "reinsert_max_fraction" || k == "hot_region_fraction" || k == "reclaim_window_fraction") {
    char* end = nullptr;
    const std::string text = kv.substr(eq + 1);
    const double f = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !(f >= 0 && f <= 1)) return false;
    (k == "hot_region_fraction"       ? o->hot_region_fraction
     : k == "reclaim_window_fraction" ? o->reclaim_window_fraction
                                      : o->reinsert_max_fraction) = f;
    return true;
  }
  auto v = ParseBytes(kv.substr(eq + 1));
  if (!v) return false;
  if (k == "read_threads") o->read_threads = static_cast<uint32_t>(*v);
  else if (k == "reinsert_min_hits") o->reinsert_min_hits = static_cast<uint32_t>(*v);
  else if (k == "queue_depth") o->queue_depth = static_cast<uint32_t>(*v);
  else if (k == "max_write_chunk_bytes") o->max_write_chunk_bytes = static_cast<uint32_t>(*v);
  else if (k == "group_commit_bytes") o->group_commit_bytes = *v;
  else if (k == "write_queue_bytes") o->write_queue_bytes = *v;
  else if (k == "segment_size_bytes") o->segment_size_bytes = *v;
  else if (k == "zero_copy_min_bytes") o->zero_copy_min_bytes = *v;
  else if (k == "dense_record_max_bytes") o->dense_record_max_bytes = *v;
  else if (k == "verify_ram_hits" && *v <= 1) o->verify_ram_hits = *v == 1;
  else if (k == "zero_copy_small_pages" && *v <= 1) o->zero_copy_small_pages = *v == 1;
  else if (k == "read_on_caller_thread" && *v <= 1) o->read_on_caller_thread = *v == 1;
  else if (k == "ram_tier_chunk_bytes" && *v <= UINT32_MAX) o->ram_tier_chunk_bytes = static_cast<uint32_t>(*v);
  else return false;
  return true;
}

// ---------------------------------------------------------------------------
class KvtierDesign final : public Design {
 public:
  KvtierDesign(const DesignConfig& c, bool ram) : cfg_(c), ram_(ram) {}
  ~KvtierDesign() override {
    if (store_) store_->Close().IgnoreError();
  }
  const char* name() const override { return ram_ ? "kvtier-ram" : "kvtier"; }

  Status Open(const std::string& dir) override {
    kvtier::Options o;
    if (cfg_.kvtier_capacity_bytes > 0) o.capacity_bytes = cfg_.kvtier_capacity_bytes;
    if (ram_) {
      if (cfg_.kvtier_ram_bytes == 0) return Status::InvalidArgument("kvtier-ram: no RAM tier size");
      o.ram_tier_bytes = cfg_.kvtier_ram_bytes;
      // Anonymous memory: the bench deletes each design's folder, and a
      // /dev/shm file would outlive it (and be adopted across the bench's
      // own reopens, which must start cold).
      o.ram_tier_shared_memory = false;
    }
    for (const std::string& kv : cfg_.kvtier_overrides) ApplyOverride(kv, &o);
    auto s = kvtier::Store::Open(dir, o);
    if (!s.ok()) return s.status();
    store_ = std::move(s).value();
    caller_thread_below_ = o.read_on_caller_thread ? o.zero_copy_min_bytes : 0;
    write_queue_bytes_ = o.write_queue_bytes;
    kvtier::NamespaceSpec spec;
    spec.name = "bench";
    spec.model_id = "kvtier-bench";
    spec.dtype = "bf16";
    auto ns = store_->RegisterNamespace(spec);
    if (!ns.ok()) return ns.status();
    ns_ = *ns;
    return Status::OK();
  }

  Status Close() override {
    if (!store_) return Status::OK();
    Status s = store_->Close();
    store_.reset();
    return s;
  }

  // One buffer per put in flight: puts hand their buffer to kvtier
  // (PutAsyncBorrowed), as an engine hands over its staging buffers. At most
  // 3/4 of the store's write queue (records carry a header and the key), past
  // which puts would be answered NotAdmitted instead of measured.
  size_t Window(size_t block_bytes) const {
    const size_t asked =
        std::max<size_t>(cfg_.queue_depth, std::max<uint64_t>(1, cfg_.put_inflight_bytes / block_bytes));
    const uint64_t fits = write_queue_bytes_ / 4 * 3 / (block_bytes + 4096);
    return std::max<size_t>(1, std::min<uint64_t>(asked, fits));
  }
  // Buffers for the puts' window and for the gets' queue depth.
  void Prepare(size_t block_bytes) override {
    bufs_.Ensure(std::max<size_t>(Window(block_bytes), cfg_.queue_depth), block_bytes);
  }

  RunStats Put(const std::vector<uint64_t>& ids, size_t size, const Payloads& payloads) override {
    RunStats rs;
    rs.lat_us.assign(ids.size(), 0);
    const size_t window = Window(size);
    ErrorSink errs;
    std::mutex mu;
    std::condition_variable cv;
    std::vector<size_t> free_slots;
    for (size_t s = window; s-- > 0;) free_slots.push_back(s);
    size_t inflight = 0;
    Prepare(size);
    for (size_t i = 0; i < ids.size(); ++i) {
      size_t slot;
      {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return !free_slots.empty(); });
        slot = free_slots.back();
        free_slots.pop_back();
        ++inflight;
      }
      uint8_t* const buf = bufs_[slot];
      payloads.Fill(ids[i], size, buf);
      const std::string key = MakeKey(cfg_.key_seed, ids[i]);
      kvtier::Fragment f{buf, size};
      const auto t0 = SteadyClock::now();
      store_->PutAsyncBorrowed(ns_, key, std::span<const kvtier::Fragment>(&f, 1), [&, i, t0, slot](Status st) {
        rs.lat_us[i] = MicrosSince(t0);
        if (!st.ok()) errs.Fail("put: " + st.ToString());
        std::lock_guard<std::mutex> l(mu);
        free_slots.push_back(slot);
        --inflight;
        cv.notify_one();
      });
    }
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return inflight == 0; });
    errs.Into(&rs);
    return rs;
  }

  RunStats Get(const std::vector<uint64_t>& ids, size_t size, const Payloads& payloads) override {
    if (size < caller_thread_below_) return GetOnThreads(ids, size, payloads);
    RunStats rs;
    rs.lat_us.assign(ids.size(), 0);
    const uint32_t qd = std::max<uint32_t>(1, cfg_.queue_depth);
    Prepare(size);
    std::vector<kvtier::MutableFragment> frags(qd);
    for (uint32_t s = 0; s < qd; ++s) frags[s] = {bufs_[s], size};
    struct Done {
      uint32_t slot;
      size_t i;
      Result<size_t> r;
    };
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Done> done;
    std::vector<uint32_t> free_slots;
    for (uint32_t s = 0; s < qd; ++s) free_slots.push_back(s);
    size_t next = 0, inflight = 0;
    while (next < ids.size() || inflight > 0) {
      while (next < ids.size() && !free_slots.empty()) {
        const uint32_t slot = free_slots.back();
        free_slots.pop_back();
        const size_t i = next++;
        ++inflight;
        const std::string key = MakeKey(cfg_.key_seed, ids[i]);
        const auto t0 = SteadyClock::now();
        store_->GetAsync(ns_, key, std::span<const kvtier::MutableFragment>(&frags[slot], 1),
                         kvtier::kNoDeadline, [&, slot, i, t0](Result<size_t> r) {
                           rs.lat_us[i] = MicrosSince(t0);
                           std::lock_guard<std::mutex> l(mu);
                           done.push_back(Done{slot, i, std::move(r)});
                           cv.notify_one();
                         });
      }
      std::deque<Done> batch;
      {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return !done.empty(); });
        batch.swap(done);
      }
      for (Done& d : batch) {
        --inflight;
        if (!d.r.ok()) {
          if (d.r.status().IsNotFound()) {
            ++rs.misses;
            rs.missed_ids.push_back(ids[d.i]);
          }
          ++rs.bad;
          if (rs.first_error.empty()) rs.first_error = "get: " + d.r.status().ToString();
        } else if (*d.r != size || !payloads.Verify(ids[d.i], size, bufs_[d.slot])) {
          ++rs.bad;
          if (rs.first_error.empty()) rs.first_error = "get: block did not verify";
        }
        free_slots.push_back(d.slot);
      }
    }
    return rs;
  }

  // GetBatch calls of `batch` keys from queue-depth threads, each thread
  // with its own buffers: the store reads a batch's misses side by side.
  RunStats GetBatches(const std::vector<uint64_t>& ids, size_t size, const Payloads& payloads,
                      uint32_t batch) override {
    RunStats rs;
    const uint32_t threads = std::max<uint32_t>(1, cfg_.queue_depth);
    batch = std::max<uint32_t>(1, batch);
    const size_t calls = (ids.size() + batch - 1) / batch;
    rs.lat_us.assign(calls, 0);
    bufs_.Ensure(size_t{threads} * batch, size);
    ErrorSink errs;
    RunOnThreads(threads, calls, [&](size_t c, uint32_t t) {
      const size_t first = c * batch, n = std::min<size_t>(batch, ids.size() - first);
      std::vector<std::string> keys(n);
      std::vector<kvtier::MutableFragment> frags(n);
      std::vector<kvtier::GetItem> items(n);
      for (size_t j = 0; j < n; ++j) {
        keys[j] = MakeKey(cfg_.key_seed, ids[first + j]);
        frags[j] = {bufs_[size_t{t} * batch + j], size};
        items[j] = {keys[j], std::span<const kvtier::MutableFragment>(&frags[j], 1)};
      }
      const auto t0 = SteadyClock::now();
      auto rs_batch = store_->GetBatch(ns_, items);
      rs.lat_us[c] = MicrosSince(t0);
      for (size_t j = 0; j < n; ++j) {
        const Result<size_t>& r = rs_batch[j];
        if (!r.ok() && r.status().IsNotFound()) {
          errs.Miss(ids[first + j]);
        } else if (!r.ok()) {
          errs.Fail("get: " + r.status().ToString());
        } else if (*r != size || !payloads.Verify(ids[first + j], size, static_cast<const uint8_t*>(frags[j].data))) {
          errs.Fail("get: block did not verify");
        }
      }
    });
    errs.Into(&rs);
    return rs;
  }

  // Blocks the store reads on its caller's thread: blocking Gets from
  // queue-depth threads, the way file-per-block reads its files (GetAsync
  // would hand each to a read thread and back).
  RunStats GetOnThreads(const std::vector<uint64_t>& ids, size_t size, const Payloads& payloads) {
    RunStats rs;
    rs.lat_us.assign(ids.size(), 0);
    ErrorSink errs;
    Prepare(size);
    RunOnThreads(std::max<uint32_t>(1, cfg_.queue_depth), ids.size(), [&](size_t i, uint32_t t) {
      const auto t0 = SteadyClock::now();
      auto r = store_->Get(ns_, MakeKey(cfg_.key_seed, ids[i]), bufs_[t], size);
      rs.lat_us[i] = MicrosSince(t0);
      if (!r.ok() && r.status().IsNotFound()) {
        errs.Miss(ids[i]);
      } else if (!r.ok()) {
        errs.Fail("get: " + r.status().ToString());
      } else if (*r != size || !payloads.Verify(ids[i], size, bufs_[t])) {
        errs.Fail("get: block did not verify");
      }
    });
    errs.Into(&rs);
    return rs;
  }

  Result<size_t> LookupPrefix(const std::vector<std::string>& keys) override {
    std::vector<std::string_view> views(keys.begin(), keys.end());
    return store_->LookupPrefix(ns_, views);
  }

  bool TierCounters(TierCounts* out) override {
    const kvtier::Stats st = store_->GetStats();
    out->hits_ram = st.hits_ram;
    out->hits_disk = st.hits_disk;
    out->bytes_ram = st.bytes_read_ram;
    out->bytes_disk = st.bytes_read_disk;
    out->ram_evictions = st.ram_evictions;
    out->segment_write_amp = st.write_amplification;
    out->reinserted_bytes = st.reinserted_bytes;
    out->index_sst_bytes = st.index_sst_bytes;
    out->index_written_bytes = st.index_written_bytes;
    out->index_memtable_bytes = st.index_memtable_bytes;
    out->lookup_map_ready = st.lookup_map_ready;
    return true;
  }

 private:
  DesignConfig cfg_;
  bool ram_;
  SlotBufs bufs_;
  std::unique_ptr<kvtier::Store> store_;
  kvtier::NamespaceId ns_ = 0;
  uint64_t caller_thread_below_ = 0;  // gets of smaller blocks: GetOnThreads
  uint64_t write_queue_bytes_ = kvtier::Options{}.write_queue_bytes;  // Window()'s bound
};

// ---------------------------------------------------------------------------
class FilePerBlockDesign final : public Design {
 public:
  FilePerBlockDesign(const DesignConfig& c, bool fsync) : cfg_(c), fsync_(fsync) {}
  const char* name() const override { return fsync_ ? "file-per-block-fsync" : "file-per-block"; }

  Status Open(const std::string& dir) override {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::IOError("create " + dir + ": " + ec.message());
    dir_ = dir;
    return Status::OK();
  }
  Status Close() override { return Status::OK(); }

  void Prepare(size_t block_bytes) override { bufs_.Ensure(std::max<uint32_t>(1, cfg_.queue_depth), block_bytes); }

  RunStats Put(const std::vector<uint64_t>& ids, size_t size, const Payloads& payloads) override {
    RunStats rs;
    rs.lat_us.assign(ids.size(), 0);
    ErrorSink errs;
    const uint32_t threads = std::max<uint32_t>(1, cfg_.queue_depth);
    Prepare(size);
    RunOnThreads(threads, ids.size(), [&](size_t i, uint32_t t) {
      payloads.Fill(ids[i], size, bufs_[t]);
      const auto t0 = SteadyClock::now();
      std::string err = WriteOne(ids[i], bufs_[t], size, t);
      if (err.empty() && cfg_.file_byte_budget > 0) err = Admit(ids[i], size);
      rs.lat_us[i] = MicrosSince(t0);
      if (!err.empty()) errs.Fail(err);
    });
    errs.Into(&rs);
    return rs;
  }

  RunStats Get(const std::vector<uint64_t>& ids, size_t size, const Payloads& payloads) override {
    RunStats rs;
    rs.lat_us.assign(ids.size(), 0);
    ErrorSink errs;
    const uint32_t threads = std::max<uint32_t>(1, cfg_.queue_depth);
    Prepare(size);
    RunOnThreads(threads, ids.size(), [&](size_t i, uint32_t t) {
      const auto t0 = SteadyClock::now();
      std::string err = ReadOne(ids[i], bufs_[t], size);
      if (err.empty() && cfg_.file_byte_budget > 0) err = Touch(ids[i]);
      rs.lat_us[i] = MicrosSince(t0);
      if (err == "miss") {
        errs.Miss(ids[i]);
      } else if (!err.empty()) {
        errs.Fail(err);
      } else if (!payloads.Verify(ids[i], size, bufs_[t])) {
        errs.Fail("get: block did not verify");
      }
    });
    errs.Into(&rs);
    return rs;
  }

  Result<size_t> LookupPrefix(const std::vector<std::string>& keys) override {
    size_t n = 0;
    for (const std::string& k : keys) {
      struct stat st;
      if (::stat(PathOfKey(k).c_str(), &st) != 0) break;
      ++n;
    }
    return n;
  }

 private:
  // dir/ab/abcd...: 256 hash-sharded folders (flat files in each), so even
  // 2M blocks stay below 10k entries per folder.
  std::string PathOf(uint64_t id) const { return PathOfKey(MakeKey(cfg_.key_seed, id)); }
  std::string PathOfKey(const std::string& k) const {
    static const char* hex = "0123456789abcdef";
    std::string h(64, '0');
    for (size_t i = 0; i < 32; ++i) {
      h[2 * i] = hex[static_cast<uint8_t>(k[i]) >> 4];
      h[2 * i + 1] = hex[static_cast<uint8_t>(k[i]) & 15];
    }
    return dir_ + "/" + h.substr(0, 2) + "/" + h;
  }

  static int OpenMaybeDirect(const std::string& path, int flags, mode_t mode) {
    int fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, mode);
    if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    return fd;
  }

  std::string WriteOne(uint64_t id, const uint8_t* data, size_t size, uint32_t t) {
    const std::string path = PathOf(id);
    const std::string tmp = path + ".tmp" + std::to_string(t);
    int fd = OpenMaybeDirect(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 && errno == ENOENT) {
      std::error_code ec;
      std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
      if (ec) return "mkdir for " + path + ": " + ec.message();
      fd = OpenMaybeDirect(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    }
    if (fd < 0) return ErrnoText("open " + tmp, errno);
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) {
        const int e = n < 0 ? errno : EIO;
        ::close(fd);
        return ErrnoText("write " + tmp, e);
      }
      done += static_cast<size_t>(n);
    }
    if (fsync_ && ::fdatasync(fd) != 0) {
      const int e = errno;
      ::close(fd);
      return ErrnoText("fdatasync " + tmp, e);
    }
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoText("rename " + tmp, errno);
    if (fsync_) {
      const std::string parent = std::filesystem::path(path).parent_path().string();
      const int dfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd < 0) return ErrnoText("open " + parent, errno);
      const int rc = ::fsync(dfd);
      const int e = errno;
      ::close(dfd);
      if (rc != 0) return ErrnoText("fsync " + parent, e);
    }
    return "";
  }

  std::string ReadOne(uint64_t id, uint8_t* buf, size_t size) {
    const std::string path = PathOf(id);
    const int fd = OpenMaybeDirect(path, O_RDONLY, 0);
    if (fd < 0) return errno == ENOENT ? "miss" : ErrnoText("open " + path, errno);
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pread(fd, buf + done, size - done, static_cast<off_t>(done));
      if (n < 0) {
        const int e = errno;
        ::close(fd);
        return ErrnoText("read " + path, e);
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    if (done != size) return "short read " + path;
    return "";
  }

  // The byte budget (DesignConfig::file_byte_budget): a put over it
  // unlinks the least recently used files.
  std::string Admit(uint64_t id, size_t size) {
    for (uint64_t old : budget_.Admit(id, size))
      if (::unlink(PathOf(old).c_str()) != 0 && errno != ENOENT) return ErrnoText("unlink " + PathOf(old), errno);
    return "";
  }
  // A hit refreshes the file's mtime (what an LRU by mtime orders by) and its place.
  std::string Touch(uint64_t id) {
    if (!budget_.Touch(id)) return "";
    if (::utimensat(AT_FDCWD, PathOf(id).c_str(), nullptr, 0) != 0 && errno != ENOENT)
      return ErrnoText("utimensat " + PathOf(id), errno);
    return "";
  }

  DesignConfig cfg_;
  bool fsync_;
  std::string dir_;
  SlotBufs bufs_;
  ByteBudget budget_{cfg_.file_byte_budget};
};

// ---------------------------------------------------------------------------
class RocksBlobDesign final : public Design {
 public:
  explicit RocksBlobDesign(const DesignConfig& c) : cfg_(c) {}
  ~RocksBlobDesign() override { Close().IgnoreError(); }
  const char* name() const override { return "rocksdb-blob"; }

  Status Open(const std::string& dir) override {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.enable_blob_files = true;
    o.min_blob_size = 0;
    o.blob_file_size = 256ull << 20;
    if (cfg_.file_byte_budget > 0) {
      // Held to a budget by deleting the oldest writes, which a TTL matched
      // to the budget would drop: blob files small enough to become garbage
      // within the budget, and garbage collection of the oldest ones during
      // compaction, as RocksDB documents for workloads with deletes.
      o.blob_file_size = std::clamp<uint64_t>(cfg_.file_byte_budget / 8, 8ull << 20, 256ull << 20);
      o.enable_blob_garbage_collection = true;
      o.blob_garbage_collection_age_cutoff = 0.5;
    }
    o.compression = rocksdb::kNoCompression;
    o.blob_compression_type = rocksdb::kNoCompression;
    // Cold reads must come from disk, as for the other designs.
    o.use_direct_reads = true;
    o.max_background_jobs = 2;
    rocksdb::DB* db = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(o, dir, &db);
    if (!s.ok()) return Status::IOError("rocksdb open " + dir + ": " + s.ToString());
    db_.reset(db);
    return Status::OK();
  }

  Status Close() override {
    if (!db_) return Status::OK();
    rocksdb::Status s = db_->Close();
    db_.reset();
    if (!s.ok()) return Status::IOError("rocksdb close: " + s.ToString());
    return Status::OK();
  }

  void Prepare(size_t block_bytes) override { bufs_.Ensure(std::max<uint32_t>(1, cfg_.queue_depth), block_bytes); }

  RunStats Put(const std::vector<uint64_t>& ids, size_t size, const Payloads& payloads) override {
    RunStats rs;
    rs.lat_us.assign(ids.size(), 0);
    ErrorSink errs;
    const uint32_t threads = std::max<uint32_t>(1, cfg_.queue_depth);
    Prepare(size);
    rocksdb::WriteOptions wo;
    wo.sync = true;
    RunOnThreads(threads, ids.size(), [&](size_t i, uint32_t t) {
      payloads.Fill(ids[i], size, bufs_[t]);
      const std::string key = MakeKey(cfg_.key_seed, ids[i]);
      const auto t0 = SteadyClock::now();
      rocksdb::Status s =
          db_->Put(wo, key, rocksdb::Slice(reinterpret_cast<const char*>(bufs_[t]), size));
      if (s.ok() && cfg_.file_byte_budget > 0)
        for (uint64_t old : budget_.Admit(ids[i], size)) {
          s = db_->Delete(wo, MakeKey(cfg_.key_seed, old));
          if (!s.ok()) break;
        }
      rs.lat_us[i] = MicrosSince(t0);
      if (!s.ok()) errs.Fail("rocksdb put: " + s.ToString());
    });
    errs.Into(&rs);
    return rs;
  }

  RunStats Get(const std::vector<uint64_t>& ids, size_t size, const Payloads& payloads) override {
    RunStats rs;
    rs.lat_us.assign(ids.size(), 0);
    ErrorSink errs;
    const uint32_t threads = std::max<uint32_t>(1, cfg_.queue_depth);
    Prepare(size);
    RunOnThreads(threads, ids.size(), [&](size_t i, uint32_t t) {
      const std::string key = MakeKey(cfg_.key_seed, ids[i]);
      const auto t0 = SteadyClock::now();
      rocksdb::PinnableSlice v;
      rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), db_->DefaultColumnFamily(), key, &v);
      // Served into the caller's buffer, as the other designs do.
      if (s.ok() && v.size() == size) std::memcpy(bufs_[t], v.data(), size);
      rs.lat_us[i] = MicrosSince(t0);
      if (s.IsNotFound()) {
        errs.Miss(ids[i]);
      } else if (!s.ok()) {
        errs.Fail("rocksdb get: " + s.ToString());
      } else if (v.size() != size || !payloads.Verify(ids[i], size, bufs_[t])) {
        errs.Fail("rocksdb get: block did not verify");
      }
    });
    errs.Into(&rs);
    return rs;
  }

  Result<size_t> LookupPrefix(const std::vector<std::string>&) override {
    return Status::NotSupported("rocksdb-blob: existence needs a value read");
  }

 private:
  DesignConfig cfg_;
  SlotBufs bufs_;
  ByteBudget budget_{cfg_.file_byte_budget};  // order of writes: a hit does not refresh
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace

std::string CheckKvtierOverride(const std::string& kv) {
  kvtier::Options o;
  return ApplyOverride(kv, &o) ? "" : "bad --kvtier-option '" + kv + "' (want name=value; names: "
      "read_threads, queue_depth, max_write_chunk_bytes, group_commit_bytes, write_queue_bytes, "
      "segment_size_bytes, zero_copy_min_bytes, dense_record_max_bytes, verify_ram_hits=0|1, zero_copy_small_pages=0|1, "
      "read_on_caller_thread=0|1, ram_tier_chunk_bytes, reinsert_max_fraction=0-1, reinsert_min_hits, hot_region_fraction=0-1, reclaim_window_fraction=0-1)";
}

uint64_t RamFootprint(uint64_t block, const std::vector<std::string>& overrides) {
  kvtier::Options o;
  for (const std::string& kv : overrides) ApplyOverride(kv, &o);
  const uint64_t chunk = std::max<uint64_t>(o.ram_tier_chunk_bytes, 1);
  return std::max<uint64_t>(1, (block + chunk - 1) / chunk) * chunk;
}

std::unique_ptr<Design> MakeDesign(const std::string& name, const DesignConfig& config) {
  if (name == "kvtier") return std::make_unique<KvtierDesign>(config, false);
  if (name == "kvtier-ram") return std::make_unique<KvtierDesign>(config, true);
  if (name == "file-per-block") return std::make_unique<FilePerBlockDesign>(config, false);
  if (name == "file-per-block-fsync") return std::make_unique<FilePerBlockDesign>(config, true);
  if (name == "rocksdb-blob") return std::make_unique<RocksBlobDesign>(config);
  return nullptr;
}

const std::vector<std::string>& AllDesignNames() {
  static const std::vector<std::string> names = {"kvtier", "kvtier-ram", "file-per-block",
                                                 "file-per-block-fsync", "rocksdb-blob"};
  return names;
}

void DropPageCache(const std::string& dir) {
  // No sync first: every design here writes with O_DIRECT or syncs what it
  // writes (RocksDB's WAL and blob files), so the cached pages are clean and
  // DONTNEED drops them; a sync per file costs milliseconds on this disk.
  std::error_code ec;
  if (std::filesystem::is_regular_file(dir, ec)) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
    return;
  }
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

}  // namespace kvbench
