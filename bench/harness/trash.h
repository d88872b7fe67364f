// Deleting each design's data without stalling the run: a finished design's
// folder is renamed into `<bench dir>/.trash` at once and its files are
// unlinked by a background thread. On a file system mounted with `discard`
// (the test VM's ext4) every unlink of a file with data costs a TRIM, a few
// milliseconds each, so the file-per-block designs' thousands of files took
// most of the quick preset's time when deleted in line.
//
// The deleter yields to measurements: while any Hold() guard lives it stops
// between two files, so unlinks (and their journal commits and TRIMs) do not
// overlap a timed section. Thread-safe.
#ifndef KVTIER_BENCH_HARNESS_TRASH_H_
#define KVTIER_BENCH_HARNESS_TRASH_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace kvbench {

class Trash {
 public:
  // `dir`: the bench folder; the trash is `dir/.trash` (created on first use).
  explicit Trash(std::string dir);
  // Drain()s.
  ~Trash();
  Trash(const Trash&) = delete;
  Trash& operator=(const Trash&) = delete;

  // At most this many trashed paths wait; Add catches up beyond it, so the
  // trash holds at most this many data sets on disk.
  static constexpr size_t kMaxPending = 3;

  // Moves `path` (file or folder, may be absent) into the trash; deleted in
  // the background. Falls back to deleting in line when the rename fails.
  void Add(const std::string& path);
  // Deletes everything still in the trash (in the background thread, not held
  // back any more) and waits; removes `.trash`. Later Adds start again.
  void Drain();

  // While the returned guard lives, the deleter pauses between files.
  class Guard {
   public:
    explicit Guard(Trash* t) : t_(t) {}
    Guard(Guard&& o) noexcept : t_(o.t_) { o.t_ = nullptr; }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    ~Guard();

   private:
    Trash* t_;
  };
  [[nodiscard]] Guard Hold();

  // Files unlinked so far (for the report).
  uint64_t files_deleted() const;

 private:
  void Loop();
  // Waits until not held (or draining); false when stopping.
  bool WaitToWork(std::unique_lock<std::mutex>& l);

  const std::string root_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> pending_;  // paths inside root_
  int holds_ = 0;
  bool draining_ = false, stop_ = false, busy_ = false;
  uint64_t seq_ = 0, files_ = 0;
  std::thread thread_;
};

}  // namespace kvbench

#endif  // KVTIER_BENCH_HARNESS_TRASH_H_
