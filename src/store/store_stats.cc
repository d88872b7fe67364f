// What the store tells about itself: its segments and its counters (Stats).
#include "store/store_impl.h"

namespace kvtier {

std::vector<SegmentInfo> StoreImpl::Segments() {
  std::vector<SegmentInfo> s = table_ ? table_->Snapshot() : std::vector<SegmentInfo>{};
  return s;
}

Stats StoreImpl::GetStats() {
  Stats s;
  s.puts = c_.puts.Get();
  s.put_bytes = c_.put_bytes.Get();
  s.puts_not_admitted = c_.puts_not_admitted.Get();
  s.puts_failed = c_.puts_failed.Get();
  s.gets = c_.gets.Get();
  s.hits_ram = c_.hits_ram.Get();
  s.hits_disk = c_.hits_disk.Get();
  s.misses = c_.misses.Get();
  s.bytes_read_ram = c_.bytes_read_ram.Get();
  s.bytes_read_disk = c_.bytes_read_disk.Get();
  s.get_deadline_misses = c_.get_deadline_misses.Get();
  s.checksum_failures = c_.checksum_failures.Get();
  s.stale_entries_dropped = c_.stale_entries_dropped.Get();
  s.lookups = c_.lookups.Get();
  s.contains = c_.contains.Get();
  s.removes = c_.removes.Get();
  s.touches = c_.touches.Get();
  s.device_bytes_written = c_.device_bytes_written.Get();
  s.device_bytes_read = c_.device_bytes_read.Get();
  s.zero_copy_put_bytes = c_.zero_copy_put_bytes.Get();
  s.direct_read_bytes = c_.direct_read_bytes.Get();
  s.disk_reads_timed = c_.disk_reads_timed.Get();
  s.disk_read_queue_ns = c_.disk_read_queue_ns.Get();
  s.disk_read_index_ns = c_.disk_read_index_ns.Get();
  s.disk_read_device_ns = c_.disk_read_device_ns.Get();
  s.disk_read_finish_ns = c_.disk_read_finish_ns.Get();
  s.puts_timed = c_.puts_timed.Get();
  s.put_encode_ns = c_.put_encode_ns.Get();
  s.put_queue_ns = c_.put_queue_ns.Get();
  s.put_place_ns = c_.put_place_ns.Get();
  s.put_write_ns = c_.put_write_ns.Get();
  s.put_sync_ns = c_.put_sync_ns.Get();
  s.put_commit_ns = c_.put_commit_ns.Get();
  s.small_page_copies = c_.small_page_copies.Get();
  s.remote_admitted_to_ram = c_.remote_admitted_to_ram.Get();
  s.registered_writes = c_.registered_writes.Get();
  s.syncs = c_.syncs.Get();
  s.group_commits = c_.group_commits.Get();
  s.write_amplification =
      s.put_bytes == 0 ? 0 : static_cast<double>(s.device_bytes_written) / static_cast<double>(s.put_bytes);
  s.evictions = c_.evictions.Get();
  s.disk_full_events = c_.disk_full_events.Get();
  s.evicted_blocks = c_.evicted_blocks.Get();
  s.evicted_bytes = c_.evicted_bytes.Get();
  s.reinsertions = c_.reinsertions.Get();
  s.reinserted_bytes = c_.reinserted_bytes.Get();
  s.reinserted_from_ram = c_.reinserted_from_ram.Get();
  s.reclaims_not_oldest = c_.reclaims_not_oldest.Get();
  s.recovered_from_crash = c_.recovered_from_crash.load();
  s.recovery_scanned_bytes = c_.recovery_scanned_bytes.Get();
  s.recovery_reindexed = c_.recovery_reindexed.Get();
  s.recovery_torn_bytes = c_.recovery_torn_bytes.Get();
  s.open_seconds = c_.open_seconds.load();
  s.io_backend = fs_ ? fs_->IoBackendName() : "";
  if (table_) {
    s.capacity_bytes = max_segments_ * description_.segment_size_bytes;
    if (max_segments_ < configured_segments_)
      s.capacity_configured_bytes = configured_segments_ * description_.segment_size_bytes;
    for (const SegmentInfo& seg : table_->Snapshot()) {
      ++s.segments_total;
      if (seg.state == SegmentState::kSealed) ++s.segments_sealed;
      if (seg.state == SegmentState::kFree) ++s.segments_free;
      if (seg.state != SegmentState::kFree) s.used_bytes += seg.used_bytes;
    }
    s.segments_hot = table_->CountHot();
    s.segment_entries_ignored = static_cast<uint32_t>(table_->Ignored().size());
  }
  if (index_) {
    s.blocks_estimate = index_->ApproximateEntries();
    const Index::Footprint f = index_->GetFootprint();
    s.index_sst_bytes = f.sst_bytes;
    s.index_memtable_bytes = f.memtable_bytes;
    s.index_written_bytes = f.written_bytes;
    s.lookup_map_ready = f.lookup_map_ready;
    s.lookup_map_entries = f.lookup_map_entries;
    s.index_writes_refused = f.writes_refused;
  }
  if (ram_) {
    RamTierStats r = ram_->GetStats();
    s.ram_capacity_bytes = r.capacity_bytes;
    s.ram_used_bytes = r.used_bytes;
    s.ram_payload_bytes = r.payload_bytes;
    s.ram_prefaulted_bytes = r.prefaulted_bytes;
    s.ram_blocks = r.blocks;
    s.ram_evictions = r.evictions;
    s.ram_evicted_bytes = r.evicted_bytes;
    s.ram_adopted_blocks = r.adopted_blocks;
    s.ram_adopt_dropped = r.adopt_dropped;
    s.ram_checksum_failures = r.checksum_failures;
    s.ram_shared_memory = r.shared;
  }
  RemoteStats(&s);  // store_remote.cc
  return s;
}

}  // namespace kvtier
