// kvtier evict DIR --to SIZE: reclaim oldest segments until used bytes <= SIZE
// (takes the lock).
#include <iostream>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct Evict {
  StoreArgs a;
  std::string to;
};

int Run(const Evict& in) {
  auto target = ParseSize(in.to);
  if (!target.ok()) return Fail("evict", kExitUsage, "--to: " + target.status().message());
  int rc = kExitOk;
  auto store = OpenStore("evict", in.a, OpenMode::kWrite, &rc);
  if (!store) return rc;
  const Stats before = store->GetStats();
  Status st = store->EvictTo(*target);
  if (!st.ok()) return Fail("evict", kExitProblems, in.a.dir + ": " + st.ToString());
  const Stats after = store->GetStats();
  Status cs = store->Close();
  if (!cs.ok()) return Fail("evict", kExitProblems, in.a.dir + ": closing: " + cs.ToString());
  if (in.a.json) {
    PrintJson({{"dir", in.a.dir}, {"target_bytes", *target}, {"used_bytes_before", before.used_bytes},
               {"used_bytes_after", after.used_bytes}, {"segments_evicted", after.evictions - before.evictions},
               {"blocks_evicted", after.evicted_blocks - before.evicted_blocks},
               {"bytes_evicted", after.evicted_bytes - before.evicted_bytes}});
  } else {
    std::cout << "used " << FormatBytes(before.used_bytes) << " -> " << FormatBytes(after.used_bytes)
              << " (target " << FormatBytes(*target) << "): " << (after.evictions - before.evictions)
              << " segments, " << (after.evicted_blocks - before.evicted_blocks) << " blocks, "
              << FormatBytes(after.evicted_bytes - before.evicted_bytes) << " evicted\n";
  }
  return kExitOk;
}

}  // namespace

Command AddEvict(CLI::App& root) {
  auto in = std::make_shared<Evict>();
  CLI::App* sub = root.add_subcommand("evict", "Free space: reclaim oldest segments until used <= SIZE (takes the lock)");
  AddDirArg(sub, &in->a);
  sub->add_option("--to", in->to, "Target used bytes, e.g. 1G, 512M, 0")->required();
  AddJsonFlag(sub, &in->a.json);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
