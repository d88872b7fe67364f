#include "metrics.h"

#include <sstream>

namespace kvtier::cli {

namespace {

// Label values escape backslash, quote and newline.
std::string Label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

class Exposition {
 public:
  void Metric(const std::string& name, const char* type, const std::string& help) {
    out_ << "# HELP kvtier_" << name << " " << help << "\n# TYPE kvtier_" << name << " " << type << "\n";
    cur_ = name;
  }
  void Sample(double v, const std::string& labels = "") {
    out_ << "kvtier_" << cur_ << (labels.empty() ? "" : "{" + labels + "}") << " ";
    if (v == static_cast<double>(static_cast<uint64_t>(v)) && v < 1e18) out_ << static_cast<uint64_t>(v);
    else out_ << v;
    out_ << "\n";
    json_[cur_ + (labels.empty() ? "" : "{" + labels + "}")] = v;
  }
  void One(const std::string& name, const char* type, const std::string& help, double v) {
    Metric(name, type, help);
    Sample(v);
  }
  std::string text() const { return out_.str(); }
  const nlohmann::json& json() const { return json_; }

 private:
  std::ostringstream out_;
  std::string cur_;
  nlohmann::json json_ = nlohmann::json::object();
};

void ServiceMetrics(const ServiceStats& sv, Exposition& e) {
  e.One("service_clients", "gauge", "Clients connected to the service.", sv.clients);
  e.One("service_connections_total", "counter", "Clients accepted since the service started.",
        static_cast<double>(sv.connections));
  e.One("service_requests_total", "counter", "Requests answered.", static_cast<double>(sv.requests));
  e.One("service_malformed_total", "counter", "Frames refused as malformed.", static_cast<double>(sv.malformed));
  e.One("service_over_cap_total", "counter", "Puts refused for a client's in-flight cap.",
        static_cast<double>(sv.over_cap));
  e.One("service_regions", "gauge", "Shared-memory regions mapped for clients.", static_cast<double>(sv.regions));
  e.One("service_region_populated_bytes_total", "counter",
        "Bytes of clients' regions the service mapped ahead of their first copy.",
        static_cast<double>(sv.region_bytes_populated));
  e.One("service_tier_maps_total", "counter", "RAM tier files lent to clients, read-only, for their own copies.",
        static_cast<double>(sv.tier_maps));
  e.One("service_tier_lent_blocks_total", "counter", "RAM-tier blocks pinned for clients' own copies.",
        static_cast<double>(sv.tier_lent_blocks));
  e.One("service_tier_pinned_bytes", "gauge", "RAM-tier bytes clients hold pinned now.",
        static_cast<double>(sv.tier_pinned_bytes));
  e.One("service_pooled_gets_total", "counter", "Gets and get_batch requests run on the service's get threads.",
        static_cast<double>(sv.pooled_gets));
  e.One("service_pooled_puts_total", "counter",
        "Blocking puts that found the write queue full and waited for room on a service thread.",
        static_cast<double>(sv.pooled_puts));
  e.One("service_client_memory_puts_total", "counter",
        "Puts whose payload the service read from the client's own memory (one copy) instead of its staging.",
        static_cast<double>(sv.client_memory_puts));
  e.One("service_client_memory_split_puts_total", "counter",
        "Of those, puts read by several service threads at once (--client-read-threads).",
        static_cast<double>(sv.client_memory_split_puts));
  e.One("service_polled_requests_total", "counter",
        "Requests a connection's reader caught while polling for them (--reader-spin-us) instead of being woken.",
        static_cast<double>(sv.polled_requests));
  auto per_ns = [&](const char* name, const char* type, const char* help, auto value) {
    e.Metric(name, type, help);
    for (const ServiceNamespaceStats& n : sv.namespaces)
      e.Sample(static_cast<double>(value(n)),
               "namespace=\"" + Label(n.name) + "\",ns_id=\"" + NamespaceIdToHex(n.id) + "\"");
  };
  per_ns("namespace_puts_total", "counter", "Puts acknowledged, per namespace.",
         [](const ServiceNamespaceStats& n) { return n.puts; });
  per_ns("namespace_put_bytes_total", "counter", "Payload bytes put, per namespace.",
         [](const ServiceNamespaceStats& n) { return n.put_bytes; });
  per_ns("namespace_gets_total", "counter", "Gets, per namespace.",
         [](const ServiceNamespaceStats& n) { return n.gets; });
  per_ns("namespace_hits_total", "counter", "Gets served, per namespace.",
         [](const ServiceNamespaceStats& n) { return n.hits; });
  per_ns("namespace_hit_bytes_total", "counter", "Payload bytes served, per namespace.",
         [](const ServiceNamespaceStats& n) { return n.hit_bytes; });
  per_ns("namespace_hit_tokens_total", "counter", "Tokens served from the store, per namespace (blocks x block_tokens).",
         [](const ServiceNamespaceStats& n) { return n.hits * n.block_tokens; });
  per_ns("namespace_put_tokens_total", "counter", "Tokens stored, per namespace (blocks x block_tokens).",
         [](const ServiceNamespaceStats& n) { return n.puts * n.block_tokens; });
  per_ns("namespace_misses_total", "counter", "Gets that found nothing, per namespace.",
         [](const ServiceNamespaceStats& n) { return n.misses; });
  per_ns("namespace_lookup_keys_total", "counter", "Keys asked by prefix lookups, per namespace.",
         [](const ServiceNamespaceStats& n) { return n.lookup_keys; });
  per_ns("namespace_lookup_hits_total", "counter", "Keys found by prefix lookups, per namespace.",
         [](const ServiceNamespaceStats& n) { return n.lookup_hits; });
}

}  // namespace

std::string RenderMetrics(const MetricsInput& in, nlohmann::json* json) {
  const Stats& s = in.stats;
  uint64_t blocks = 0, bytes = 0;
  for (const NamespaceInfo& n : in.namespaces) {
    blocks += n.blocks;
    bytes += n.payload_bytes;
  }
  uint32_t open = 0;
  for (const SegmentInfo& g : in.segments) open += g.state == SegmentState::kOpen;
  Exposition e;
  const bool ram = s.ram_capacity_bytes > 0;
  e.Metric("blocks", "gauge", "Blocks stored, by tier.");
  e.Sample(static_cast<double>(blocks), "tier=\"disk\"");
  if (ram) e.Sample(static_cast<double>(s.ram_blocks), "tier=\"ram\"");
  e.Metric("bytes", "gauge", "Payload bytes stored, by tier.");
  e.Sample(static_cast<double>(bytes), "tier=\"disk\"");
  if (ram) e.Sample(static_cast<double>(s.ram_payload_bytes), "tier=\"ram\"");
  if (ram) {
    e.One("ram_capacity_bytes", "gauge", "Bytes of host memory the RAM tier holds blocks in.",
          static_cast<double>(s.ram_capacity_bytes));
    e.One("ram_used_bytes", "gauge", "RAM-tier memory its blocks take, in whole chunks (above the payload bytes by the chunks' rounding).",
          static_cast<double>(s.ram_used_bytes));
    e.One("ram_prefaulted_bytes", "gauge", "RAM-tier memory faulted in by its prefault after open (the capacity once done).",
          static_cast<double>(s.ram_prefaulted_bytes));
    e.One("ram_evictions_total", "counter", "Blocks evicted from the RAM tier (still on disk).", static_cast<double>(s.ram_evictions));
    e.One("ram_evicted_bytes_total", "counter", "Payload bytes evicted from the RAM tier.", static_cast<double>(s.ram_evicted_bytes));
    e.One("ram_adopted_blocks", "gauge", "Blocks adopted from the shared-memory tier at open.", static_cast<double>(s.ram_adopted_blocks));
    e.One("ram_adopt_dropped_blocks", "gauge", "Blocks of the shared-memory tier dropped at open (failed a check).",
          static_cast<double>(s.ram_adopt_dropped));
    e.One("ram_shared_memory", "gauge", "1 when the RAM tier lives in /dev/shm (kept across restarts).", s.ram_shared_memory ? 1.0 : 0.0);
  }
  e.Metric("namespace_blocks", "gauge", "Blocks stored per namespace.");
  for (const NamespaceInfo& n : in.namespaces)
    e.Sample(static_cast<double>(n.blocks), "namespace=\"" + Label(n.spec.DisplayName()) + "\",ns_id=\"" + NamespaceIdToHex(n.id) + "\"");
  e.Metric("namespace_bytes", "gauge", "Payload bytes stored per namespace.");
  for (const NamespaceInfo& n : in.namespaces)
    e.Sample(static_cast<double>(n.payload_bytes), "namespace=\"" + Label(n.spec.DisplayName()) + "\",ns_id=\"" + NamespaceIdToHex(n.id) + "\"");
  e.One("namespaces", "gauge", "Registered namespaces.", static_cast<double>(in.namespaces.size()));
  if (in.namespace_counts_age_s >= 0)
    e.One("namespace_counts_age_seconds", "gauge",
          "Age of the namespaces and their block and byte counts (kvtier serve --metrics-count-interval).",
          in.namespace_counts_age_s);
  e.One("capacity_bytes", "gauge", "Byte budget for segment files (of the opening process).", static_cast<double>(s.capacity_bytes));
  e.One("used_bytes", "gauge", "Bytes appended to live segments.", static_cast<double>(s.used_bytes));
  e.Metric("segments", "gauge", "Segment files by state.");
  e.Sample(s.segments_sealed, "state=\"sealed\"");
  e.Sample(open, "state=\"open\"");
  e.Sample(s.segments_free, "state=\"free\"");
  e.One("hot_region_segments", "gauge", "Segments of the hot region, where reclaim keeps blocks read again and again.",
        static_cast<double>(s.segments_hot));
  e.One("puts_total", "counter", "Puts acknowledged durable.", static_cast<double>(s.puts));
  e.One("put_bytes_total", "counter", "Payload bytes of puts acknowledged durable.", static_cast<double>(s.put_bytes));
  e.One("puts_not_admitted_total", "counter", "Puts declined (queue full or admission policy).", static_cast<double>(s.puts_not_admitted));
  e.One("puts_failed_total", "counter", "Puts that failed.", static_cast<double>(s.puts_failed));
  e.One("gets_total", "counter", "Gets requested.", static_cast<double>(s.gets));
  e.Metric("hits_total", "counter", "Gets served, by source.");
  e.Sample(static_cast<double>(s.hits_ram), "source=\"ram\"");
  e.Sample(static_cast<double>(s.hits_disk), "source=\"disk\"");
  e.One("misses_total", "counter", "Gets that found nothing (including checksum failures and deadline misses).", static_cast<double>(s.misses));
  e.Metric("read_bytes_total", "counter", "Payload bytes returned by gets, by source.");
  e.Sample(static_cast<double>(s.bytes_read_ram), "source=\"ram\"");
  e.Sample(static_cast<double>(s.bytes_read_disk), "source=\"disk\"");
  e.One("get_deadline_misses_total", "counter", "Async gets completed as a miss because their deadline passed.", static_cast<double>(s.get_deadline_misses));
  e.One("checksum_failures_total", "counter", "Records that failed a check on read (served as a miss).", static_cast<double>(s.checksum_failures));
  e.One("ram_checksum_failures_total", "counter", "RAM-tier copies that no longer matched their checksum (dropped, read from disk).", static_cast<double>(s.ram_checksum_failures));
  e.One("stale_entries_dropped_total", "counter", "Index entries dropped because their segment was reused.", static_cast<double>(s.stale_entries_dropped));
  e.One("lookups_total", "counter", "LookupPrefix calls.", static_cast<double>(s.lookups));
  e.One("contains_total", "counter", "Contains calls.", static_cast<double>(s.contains));
  e.One("removes_total", "counter", "Keys asked to be removed (by Remove, or in a RemoveBatch).", static_cast<double>(s.removes));
  e.One("touches_total", "counter", "Keys a TouchBatch found stored and marked as read, so reclaim keeps them.", static_cast<double>(s.touches));
  e.One("device_written_bytes_total", "counter", "Bytes written to segment files.", static_cast<double>(s.device_bytes_written));
  e.One("device_read_bytes_total", "counter", "Bytes read from segment files.", static_cast<double>(s.device_bytes_read));
  e.One("zero_copy_put_bytes_total", "counter", "Payload bytes written from the caller's or RAM tier's pages (no copy).", static_cast<double>(s.zero_copy_put_bytes));
  e.One("direct_read_bytes_total", "counter", "Payload bytes read straight into callers' pages (no copy).", static_cast<double>(s.direct_read_bytes));
  e.One("disk_reads_timed_total", "counter", "Gets that reached the device, whose phases the disk_read_*_seconds_total counters sum.", static_cast<double>(s.disk_reads_timed));
  e.One("disk_read_queue_seconds_total", "counter", "Time those gets waited for a read thread.", static_cast<double>(s.disk_read_queue_ns) * 1e-9);
  e.One("disk_read_index_seconds_total", "counter", "Time those gets spent in the index lookup.", static_cast<double>(s.disk_read_index_ns) * 1e-9);
  e.One("disk_read_device_seconds_total", "counter", "Time those gets spent from submitting the read to reaping it.", static_cast<double>(s.disk_read_device_ns) * 1e-9);
  e.One("puts_timed_total", "counter", "Acknowledged puts, whose phases the put_*_seconds_total counters sum.", static_cast<double>(s.puts_timed));
  e.One("put_encode_seconds_total", "counter", "Time those puts spent on the caller's thread: room in the write queue, the copy and the checksum.", static_cast<double>(s.put_encode_ns) * 1e-9);
  e.One("put_queue_seconds_total", "counter", "Time those puts waited for the writer thread.", static_cast<double>(s.put_queue_ns) * 1e-9);
  e.One("put_place_seconds_total", "counter", "Time those puts spent being placed (segment roll-over and reclaim included).", static_cast<double>(s.put_place_ns) * 1e-9);
  e.One("put_write_seconds_total", "counter", "Time those puts spent in the device write.", static_cast<double>(s.put_write_ns) * 1e-9);
  e.One("put_sync_seconds_total", "counter", "Time those puts waited for the committer and fdatasync.", static_cast<double>(s.put_sync_ns) * 1e-9);
  e.One("put_commit_seconds_total", "counter", "Time those puts spent in the index commit up to their acknowledgment.", static_cast<double>(s.put_commit_ns) * 1e-9);
  e.One("disk_read_finish_seconds_total", "counter", "Time those gets spent verifying, admitting to the RAM tier and completing.", static_cast<double>(s.disk_read_finish_ns) * 1e-9);
  e.One("small_page_copies_total", "counter", "Large puts and gets copied because the caller's memory is on 4 KiB pages.", static_cast<double>(s.small_page_copies));
  e.One("registered_writes_total", "counter", "Device writes from io_uring-registered memory (write ring, RAM tier).", static_cast<double>(s.registered_writes));
  e.One("syncs_total", "counter", "fdatasync calls.", static_cast<double>(s.syncs));
  e.One("remote_connected", "gauge", "1 while the shared tier on Ceph is connected.", s.remote_connected ? 1.0 : 0.0);
  e.One("remote_hits_total", "counter", "Gets served from the shared tier on Ceph.", static_cast<double>(s.hits_remote));
  e.One("remote_read_bytes_total", "counter", "Payload bytes served from the shared tier.", static_cast<double>(s.bytes_read_remote));
  e.One("remote_misses_total", "counter", "Remote reads that failed (deadline, checksum, vanished object).", static_cast<double>(s.remote_misses));
  e.One("remote_uploads_total", "counter", "Sealed segments uploaded to the shared tier.", static_cast<double>(s.remote_uploads));
  e.One("remote_upload_bytes_total", "counter", "Bytes uploaded to the shared tier.", static_cast<double>(s.remote_upload_bytes));
  e.One("remote_admitted_to_ram_total", "counter", "Shared-tier hits copied into the RAM tier.", static_cast<double>(s.remote_admitted_to_ram));
  e.One("remote_orphans_removed_total", "counter", "Shared-tier objects no catalog entry named, removed.", static_cast<double>(s.remote_orphans_removed));
  e.One("group_commits_total", "counter", "Group commits.", static_cast<double>(s.group_commits));
  e.One("write_amplification", "gauge", "Device bytes written per payload byte put.", s.write_amplification);
  e.One("evictions_total", "counter", "Segments reclaimed.", static_cast<double>(s.evictions));
  e.One("disk_full_events_total", "counter", "New segment files that found the disk full (the store shrank instead).",
        static_cast<double>(s.disk_full_events));
  e.One("capacity_configured_bytes", "gauge",
        "The byte budget asked for, where the disk could not hold it (else 0).",
        static_cast<double>(s.capacity_configured_bytes));
  e.One("evicted_blocks_total", "counter", "Blocks dropped by reclaim.", static_cast<double>(s.evicted_blocks));
  e.One("evicted_bytes_total", "counter", "Payload bytes dropped by reclaim.", static_cast<double>(s.evicted_bytes));
  e.One("reinsertions_total", "counter", "Hot blocks reinserted on reclaim.", static_cast<double>(s.reinsertions));
  e.One("reinserted_bytes_total", "counter", "Payload bytes reinserted on reclaim.", static_cast<double>(s.reinserted_bytes));
  e.One("reinserted_from_ram_total", "counter", "Reinsertions copied from the RAM tier, not read from the disk.",
        static_cast<double>(s.reinserted_from_ram));
  e.One("reclaims_not_oldest_total", "counter",
        "Reclaims that took a segment other than the oldest, leaving hot blocks where they lie.",
        static_cast<double>(s.reclaims_not_oldest));
  e.One("recovered_from_crash", "gauge", "1 when the last open ran crash recovery.", s.recovered_from_crash ? 1 : 0);
  e.One("recovery_scanned_bytes", "gauge", "Bytes scanned by recovery at open.", static_cast<double>(s.recovery_scanned_bytes));
  e.One("open_seconds", "gauge", "Seconds the last open took.", s.open_seconds);
  e.One("lookup_map_ready", "gauge", "1 once lookups answer from the in-memory map (loaded after open).",
        s.lookup_map_ready ? 1 : 0);
  e.One("lookup_map_entries", "gauge", "Entries in the in-memory lookup map.",
        static_cast<double>(s.lookup_map_entries));
  e.One("index_writes_refused", "gauge",
        "1 while the index refuses writes after a failed write of its files (reopen the store to write again).",
        s.index_writes_refused ? 1 : 0);
  if (in.service != nullptr) ServiceMetrics(*in.service, e);
  if (json != nullptr) *json = e.json();
  return e.text();
}

}  // namespace kvtier::cli
