// kvtier repair DIR: rebuild the index from the segment files, dropping what
// does not verify (takes the lock).
#include <iostream>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct Repair {
  StoreArgs a;
};

int Run(const Repair& in) {
  // Store::Repair never creates a store; report a missing one like every
  // other command does.
  auto d = Store::Describe(in.a.dir);
  if (!d.ok()) return Fail("repair", kExitCannotOpen, "cannot open store " + in.a.dir + ": " + d.status().ToString());
  Progress progress("repair");
  const auto t0 = std::chrono::steady_clock::now();
  Options o;
  if (!in.a.capacity.empty()) {
    auto cap = ParseSize(in.a.capacity);
    if (!cap.ok()) return Fail("repair", kExitUsage, "--capacity: " + cap.status().message());
    o.capacity_bytes = *cap;
  }
  auto r = Store::Repair(in.a.dir, o, [&](uint64_t done, uint64_t total) { progress.Update(done, total); });
  progress.Finish();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.ok()) {
    const Status& st = r.status();
    const int code = st.code() == Code::kBusy || st.code() == Code::kNotFound ? kExitCannotOpen : kExitProblems;
    return Fail("repair", code, "cannot repair " + in.a.dir + ": " + st.ToString() +
                                    (st.code() == Code::kBusy ? " (repair needs the store to itself)" : ""));
  }
  const RepairReport& p = *r;
  if (in.a.json) {
    PrintJson({{"dir", in.a.dir}, {"records_scanned", p.records_scanned}, {"records_indexed", p.records_indexed},
               {"records_dropped", p.records_dropped}, {"regions_cleared", p.regions_cleared},
               {"entries_before", p.entries_before},
               {"entries_after", p.entries_after}, {"damaged_index_moved_to", p.damaged_index_moved_to},
               {"seconds", secs}});
  } else {
    Table t({"REPAIR", "COUNT"}, {1});
    t.Add({"records scanned", std::to_string(p.records_scanned)});
    t.Add({"records indexed", std::to_string(p.records_indexed)});
    t.Add({"dropped (corrupt or unknown namespace)", std::to_string(p.records_dropped)});
    t.Add({"corrupt regions cleared", std::to_string(p.regions_cleared)});
    t.Add({"index entries before", std::to_string(p.entries_before)});
    t.Add({"index entries after", std::to_string(p.entries_after)});
    std::cout << t.Render() << "index rebuilt from the segments in " << secs << " s\n";
    if (!p.damaged_index_moved_to.empty())
      std::cout << "the old index could not be opened; it was moved to " << p.damaged_index_moved_to
                << " (delete it once you no longer need it)\n";
  }
  return kExitOk;
}

}  // namespace

Command AddRepair(CLI::App& root) {
  auto in = std::make_shared<Repair>();
  CLI::App* sub = root.add_subcommand("repair", "Rebuild the index from the segments, dropping what does not verify (takes the lock)");
  AddDirArg(sub, &in->a);
  sub->add_option("--capacity", in->a.capacity, "Byte budget while open (e.g. 8G)");
  AddJsonFlag(sub, &in->a.json);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
