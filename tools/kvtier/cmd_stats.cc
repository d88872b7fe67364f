// kvtier stats DIR: Prometheus text exposition of a store (read-only; the
// exposition itself is in metrics.cc). DIR may be a service (unix:PATH):
// then the counters are the service's, live.
//
// Gauges (usage, segments, blocks and bytes per namespace) describe the store
// on disk. Operation counters (hits, misses, checksum failures, evictions,
// write amplification) are kept in memory by the process that has the store
// open: printed here they are those of this inspection (mostly zero); an
// engine exports its own with the same names.
#include <iostream>

#include "commands.h"
#include "metrics.h"

namespace kvtier::cli {

namespace {

struct StatsCmd {
  StoreArgs a;
};

int Run(const StatsCmd& in) {
  int rc = kExitOk;
  auto store = OpenStore("stats", in.a, OpenMode::kReadOnly, &rc);
  if (!store) return rc;
  auto nss = ListNamespacesCounted(*store);
  if (!nss.ok()) return Fail("stats", kExitProblems, in.a.dir + ": " + nss.status().ToString());
  std::vector<SegmentInfo> segs = store->Segments();
  const Stats s = store->GetStats();
  Status cs = store->Close();
  if (!cs.ok()) return Fail("stats", kExitProblems, in.a.dir + ": closing: " + cs.ToString());
  MetricsInput mi;
  mi.stats = s;
  mi.namespaces = std::move(nss).value();
  mi.segments = std::move(segs);
  nlohmann::json json;
  const std::string text = RenderMetrics(mi, &json);
  if (in.a.json) PrintJson(json);
  else std::cout << text;
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
