// Lock-free counters behind Store::GetStats(), shared by the rooms that count
// (store, log, read). Relaxed atomics: each counter is exact, a snapshot of
// several is not a consistent cut.
#ifndef KVTIER_SRC_UTIL_COUNTERS_H_
#define KVTIER_SRC_UTIL_COUNTERS_H_

#include <atomic>
#include <cstdint>

namespace kvtier {

struct Counter {
  std::atomic<uint64_t> v{0};
  void Add(uint64_t n = 1) { v.fetch_add(n, std::memory_order_relaxed); }
  uint64_t Get() const { return v.load(std::memory_order_relaxed); }
  void Set(uint64_t n) { v.store(n, std::memory_order_relaxed); }
};

struct Counters {
  Counter puts, put_bytes, puts_not_admitted, puts_failed;
  Counter gets, hits_ram, hits_disk, misses, bytes_read_ram, bytes_read_disk;
  Counter get_deadline_misses, checksum_failures, stale_entries_dropped;
  Counter lookups, contains, removes, touches;
  Counter device_bytes_written, device_bytes_read, syncs, group_commits;
  Counter zero_copy_put_bytes, direct_read_bytes, registered_writes, small_page_copies;
  Counter remote_admitted_to_ram;
  Counter evictions, evicted_blocks, evicted_bytes, reinsertions, reinserted_bytes, reinserted_from_ram;
  Counter reclaims_not_oldest;
  Counter disk_full_events;
  // Where disk reads spend their time (Stats::disk_reads_timed).
  Counter disk_reads_timed, disk_read_queue_ns, disk_read_index_ns, disk_read_device_ns, disk_read_finish_ns;
  // Where acknowledged puts spend their time (Stats::puts_timed).
  Counter puts_timed, put_encode_ns, put_queue_ns, put_place_ns, put_write_ns, put_sync_ns, put_commit_ns;
  Counter recovery_scanned_bytes, recovery_reindexed, recovery_torn_bytes;
  std::atomic<bool> recovered_from_crash{false};
  std::atomic<double> open_seconds{0};
};

}  // namespace kvtier

#endif  // KVTIER_SRC_UTIL_COUNTERS_H_
