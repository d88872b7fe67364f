// The Prometheus text exposition of a store (and, for `kvtier serve`, of the
// service in front of it): names prefixed kvtier_, counters suffixed _total.
// `kvtier stats` prints it; `kvtier serve --metrics-listen` serves it.
#ifndef KVTIER_TOOLS_KVTIER_METRICS_H_
#define KVTIER_TOOLS_KVTIER_METRICS_H_

#include <string>
#include <vector>

#include "cli.h"
#include "kvtier/service.h"

namespace kvtier::cli {

struct MetricsInput {
  Stats stats;
  std::vector<NamespaceInfo> namespaces;
  std::vector<SegmentInfo> segments;
  const ServiceStats* service = nullptr;  // only from a service
  // A service's namespaces and their counts come from a recount at most
  // every --metrics-count-interval: how old they are (< 0: counted now).
  double namespace_counts_age_s = -1;
};

// The exposition as text, and (when `json` is not null) the same samples as
// a JSON object keyed by name{labels}.
std::string RenderMetrics(const MetricsInput& in, nlohmann::json* json);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_METRICS_H_
