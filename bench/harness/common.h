// Shared pieces of the kvtier-bench comparison harness: block contents that
// can be verified without storing them, latency samples, and the per-process
// counters (device bytes written, CPU time) each measurement is a delta of.
//
// Not thread-safe unless a function says so.
#ifndef KVTIER_BENCH_HARNESS_COMMON_H_
#define KVTIER_BENCH_HARNESS_COMMON_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvbench {

using SteadyClock = std::chrono::steady_clock;

inline double SecondsSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}
inline double MicrosSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double, std::micro>(SteadyClock::now() - t0).count();
}

// 32-byte keys, like the sha256 block hashes engines use. Key i of a given
// seed is the same in every design and every process (the kill-reopen child
// and its parent agree on it).
std::string MakeKey(uint64_t seed, uint64_t id);

// Block contents: a slice of one shared random buffer chosen by the block id,
// with the id stamped at the start and the end, so any misdirected, torn or
// stale read fails Verify(). Fill() and Verify() are thread-safe.
class Payloads {
 public:
  // Blocks of up to `max_block_bytes` (a multiple of 4 KiB).
  explicit Payloads(size_t max_block_bytes);
  // Writes block `id` of `size` bytes into `dst`.
  void Fill(uint64_t id, size_t size, uint8_t* dst) const;
  // True when `got` holds exactly block `id` of `size` bytes.
  bool Verify(uint64_t id, size_t size, const uint8_t* got) const;

 private:
  size_t Offset(uint64_t id) const;
  std::vector<uint8_t> base_;
};

// Whether AlignedBuf puts buffers of 2 MiB and more on transparent huge pages
// (the default, like pinned staging memory) or leaves every buffer on 4 KiB
// pages, the memory fio's own buffers have (--buffer-pages 4k). Set once,
// before any buffer is made.
void SetHugePageBuffers(bool on);
bool HugePageBuffers();

// Aligned heap buffer for O_DIRECT (4 KiB alignment).
class AlignedBuf {
 public:
  AlignedBuf() = default;
  explicit AlignedBuf(size_t size);
  ~AlignedBuf();
  AlignedBuf(AlignedBuf&& o) noexcept : p_(o.p_), size_(o.size_) { o.p_ = nullptr; o.size_ = 0; }
  AlignedBuf& operator=(AlignedBuf&& o) noexcept;
  AlignedBuf(const AlignedBuf&) = delete;
  AlignedBuf& operator=(const AlignedBuf&) = delete;
  uint8_t* data() const { return p_; }
  size_t size() const { return size_; }

 private:
  uint8_t* p_ = nullptr;
  size_t size_ = 0;
};

// Per-process counters; a measurement is the difference of two snapshots.
struct ProcCounters {
  uint64_t write_bytes = 0;    // /proc/self/io write_bytes (reached the block layer)
  uint64_t device_sectors_written = 0;  // sum over /sys/block/*/stat (fallback)
  uint64_t device_reads = 0;            // reads completed, summed likewise (every process's)
  double cpu_s = 0;            // user + system, all threads
  uint64_t resident_bytes = 0;  // /proc/self/statm: the process's resident memory
  static ProcCounters Now();
};

// One design's figures for one operation of one workload. Absent fields do
// not apply (printed as "-" and left out of the JSON).
struct Measurement {
  std::string design;  // "fio" | "kvtier" | "file-per-block" | ...
  std::string op;      // "put" | "get" | "lookup" | "reopen"
  std::optional<double> gbps, ops_per_s, p50_us, p99_us, p999_us, write_amp, cpu_s_per_gb;
  // Reads by tier (kvtier designs' gets): bytes served from RAM / from disk.
  std::optional<double> bytes_read_ram, bytes_read_disk;
  // Reads the machine's block devices completed per operation (gets): how
  // many device reads a design spends on one, whatever its code does.
  std::optional<double> device_reads_per_op;
  uint64_t ops = 0;        // operations measured (for the table only)
  uint64_t bad = 0;        // reads that failed verification or errored
  std::string note;        // shown under the table
};

// Sorts `lat_us` and fills p50/p99/p99.9 of `m`.
void FillPercentiles(std::vector<double>* lat_us, Measurement* m);

// Fills gbps/ops_per_s/write_amp/cpu_s_per_gb from a timed run of `ops`
// operations moving `payload_bytes`, with counters sampled around it.
void FillRates(uint64_t ops, uint64_t payload_bytes, double seconds, const ProcCounters& before,
               const ProcCounters& after, bool writes, Measurement* m);

// "64KiB", "2MiB", "1.5GiB".
std::string HumanBytes(uint64_t n);
// Parses "64K", "2M", "5MiB", "1G", "4096".
std::optional<uint64_t> ParseBytes(const std::string& s);

// Progress on stderr: one line, rewritten in place on a terminal.
void Progress(const std::string& line);
void ProgressDone();

}  // namespace kvbench

#endif  // KVTIER_BENCH_HARNESS_COMMON_H_
