// kvtier stats DIR: Prometheus text exposition of a store (read-only).
//
// Gauges (usage, segments, blocks and bytes per namespace) describe the store
// on disk. Operation counters (hits, misses, checksum failures, evictions,
// write amplification) are kept in memory by the process that has the store
// open: printed here they are those of this inspection (mostly zero); an
// engine exports its own with the same names.
#include <iostream>
#include <sstream>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct StatsCmd {
  StoreArgs a;
};

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

int Run(const StatsCmd& in) {
  int rc = kExitOk;
  auto store = OpenStore("stats", in.a, OpenMode::kReadOnly, &rc);
  if (!store) return rc;
  auto nss = store->ListNamespaces();
  if (!nss.ok()) return Fail("stats", kExitProblems, in.a.dir + ": " + nss.status().ToString());
  std::vector<SegmentInfo> segs = store->Segments();
  const Stats s = store->GetStats();
  Status cs = store->Close();
  if (!cs.ok()) return Fail("stats", kExitProblems, in.a.dir + ": closing: " + cs.ToString());
  uint64_t blocks = 0, bytes = 0;
  for (const NamespaceInfo& n : *nss) {
    blocks += n.blocks;
    bytes += n.payload_bytes;
  }
  uint32_t open = 0;
  for (const SegmentInfo& g : segs) open += g.state == SegmentState::kOpen;
  Exposition e;
  e.Metric("blocks", "gauge", "Blocks stored, by tier.");
  e.Sample(static_cast<double>(blocks), "tier=\"disk\"");
  e.Metric("bytes", "gauge", "Payload bytes stored, by tier.");
  e.Sample(static_cast<double>(bytes), "tier=\"disk\"");
  e.Metric("namespace_blocks", "gauge", "Blocks stored per namespace.");
  for (const NamespaceInfo& n : *nss)
    e.Sample(static_cast<double>(n.blocks), "namespace=\"" + Label(n.spec.DisplayName()) + "\",ns_id=\"" + NamespaceIdToHex(n.id) + "\"");
  e.Metric("namespace_bytes", "gauge", "Payload bytes stored per namespace.");
  for (const NamespaceInfo& n : *nss)
    e.Sample(static_cast<double>(n.payload_bytes), "namespace=\"" + Label(n.spec.DisplayName()) + "\",ns_id=\"" + NamespaceIdToHex(n.id) + "\"");
  e.One("namespaces", "gauge", "Registered namespaces.", static_cast<double>(nss->size()));
  e.One("capacity_bytes", "gauge", "Byte budget for segment files (of the opening process).", static_cast<double>(s.capacity_bytes));
  e.One("used_bytes", "gauge", "Bytes appended to live segments.", static_cast<double>(s.used_bytes));
  e.Metric("segments", "gauge", "Segment files by state.");
  e.Sample(s.segments_sealed, "state=\"sealed\"");
  e.Sample(open, "state=\"open\"");
  e.Sample(s.segments_free, "state=\"free\"");
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
  e.One("removes_total", "counter", "Remove calls.", static_cast<double>(s.removes));
  e.One("device_written_bytes_total", "counter", "Bytes written to segment files.", static_cast<double>(s.device_bytes_written));
  e.One("device_read_bytes_total", "counter", "Bytes read from segment files.", static_cast<double>(s.device_bytes_read));
  e.One("zero_copy_put_bytes_total", "counter", "Payload bytes written from the caller's or RAM tier's pages (no copy).", static_cast<double>(s.zero_copy_put_bytes));
  e.One("direct_read_bytes_total", "counter", "Payload bytes read straight into callers' pages (no copy).", static_cast<double>(s.direct_read_bytes));
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
  e.One("recovered_from_crash", "gauge", "1 when the last open ran crash recovery.", s.recovered_from_crash ? 1 : 0);
  e.One("recovery_scanned_bytes", "gauge", "Bytes scanned by recovery at open.", static_cast<double>(s.recovery_scanned_bytes));
  e.One("open_seconds", "gauge", "Seconds the last open took.", s.open_seconds);
  if (in.a.json) PrintJson(e.json());
  else std::cout << e.text();
  return kExitOk;
}

}  // namespace

Command AddStats(CLI::App& root) {
  auto in = std::make_shared<StatsCmd>();
  CLI::App* sub = root.add_subcommand("stats", "Counters and gauges in Prometheus text format, names prefixed kvtier_ (read-only)");
  AddDirArg(sub, &in->a);
  AddJsonFlag(sub, &in->a.json);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
