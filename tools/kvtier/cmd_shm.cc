// kvtier shm [--remove-orphans [--yes]] [STORE_ID...]: the shared-memory RAM
// tiers on this machine (/dev/shm/kvtier-<store id>.ram), or those of the
// stores named, and what became of their stores.
// A tier outlives its process by design (the next open adopts it); one whose
// folder was deleted by hand holds its memory until reboot unless removed.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct Shm {
  std::vector<std::string> ids;  // empty: every tier
  bool remove_orphans = false;
  bool yes = false;
  bool json = false;
};

const char* StateName(RamTierFile::State s) {
  switch (s) {
    case RamTierFile::State::kOpen: return "open";
    case RamTierFile::State::kKept: return "kept";
    case RamTierFile::State::kOrphan: return "orphan";
    case RamTierFile::State::kUnknown: return "unknown";
  }
  return "?";
}

// What the state column says beside the state's name.
std::string Detail(const RamTierFile& t) {
  switch (t.state) {
    case RamTierFile::State::kOpen: return "in use by pid " + std::to_string(t.holder_pid);
    case RamTierFile::State::kKept: return "adopted at the store's next open";
    case RamTierFile::State::kOrphan: return t.why;
    case RamTierFile::State::kUnknown: return "no folder noted";
  }
  return {};
}

nlohmann::json ToJson(const RamTierFile& t) {
  nlohmann::json j = {{"path", t.path}, {"store_id", t.store_id}, {"bytes", t.bytes},
                      {"folder", t.folder}, {"state", StateName(t.state)}, {"detail", Detail(t)}};
  if (t.state == RamTierFile::State::kOpen) j["holder_pid"] = t.holder_pid;
  return j;
}

int Run(const Shm& in) {
  auto tiers = Store::ListRamTierFiles();
  if (!tiers.ok()) return Fail("shm", kExitProblems, tiers.status().ToString());
  if (!in.ids.empty())
    std::erase_if(*tiers, [&](const RamTierFile& t) {
      return std::find(in.ids.begin(), in.ids.end(), t.store_id) == in.ids.end();
    });
  uint64_t orphan_bytes = 0, orphans = 0;
  for (const RamTierFile& t : *tiers)
    if (t.state == RamTierFile::State::kOrphan) {
      orphan_bytes += t.bytes;
      ++orphans;
    }
  if (!in.remove_orphans) {
    if (in.json) {
      nlohmann::json out = nlohmann::json::array();
      for (const RamTierFile& t : *tiers) out.push_back(ToJson(t));
      PrintJson(out);
      return kExitOk;
    }
    if (tiers->empty()) std::cout << "no kvtier RAM tiers in /dev/shm\n";
    for (const RamTierFile& t : *tiers)
      std::cout << t.store_id << "  " << FormatBytes(t.bytes) << "  " << StateName(t.state) << " ("
                << Detail(t) << ")  " << (t.folder.empty() ? "-" : t.folder) << "\n";
    if (orphans > 0)
      std::cout << orphans << " orphan(s) hold " << FormatBytes(orphan_bytes)
                << ": kvtier shm --remove-orphans --yes frees them\n";
    return kExitOk;
  }
  if (!in.yes) {
    for (const RamTierFile& t : *tiers)
      if (t.state == RamTierFile::State::kOrphan) std::cerr << "would remove " << t.path << " (" << t.why << ")\n";
    return Fail("shm", kExitUsage,
                "this removes " + std::to_string(orphans) + " orphaned RAM tier(s), " + FormatBytes(orphan_bytes) +
                    " (cached copies only: their blocks are on disk, or gone with their folder); run again with "
                    "--yes to do it");
  }
  nlohmann::json removed = nlohmann::json::array();
  int rc = kExitOk;
  uint64_t freed = 0;
  for (const RamTierFile& t : *tiers) {
    if (t.state != RamTierFile::State::kOrphan) continue;
    Status st = Store::RemoveOrphanRamTier(t.store_id);  // checked again: it may have changed since
    if (!st.ok()) {
      rc = Fail("shm", kExitProblems, t.path + ": " + st.ToString());
      continue;
    }
    freed += t.bytes;
    removed.push_back(ToJson(t));
    if (!in.json) std::cout << "removed " << t.path << " (" << FormatBytes(t.bytes) << ", " << t.why << ")\n";
  }
  if (in.json) PrintJson({{"removed", removed}, {"freed_bytes", freed}});
  else std::cout << "freed " << FormatBytes(freed) << "\n";
  return rc;
}

}  // namespace

Command AddShm(CLI::App& root) {
  auto in = std::make_shared<Shm>();
  CLI::App* sub = root.add_subcommand(
      "shm", "List the stores' shared-memory RAM tiers on this machine; remove those whose folder is gone");
  sub->add_option("store_id", in->ids, "Only the tiers of these stores (32 hex digits each)");
  sub->add_flag("--remove-orphans", in->remove_orphans,
                "Remove the tiers whose folder is gone or holds another store (asks for --yes)");
  sub->add_flag("--yes", in->yes, "With --remove-orphans: really remove them");
  AddJsonFlag(sub, &in->json);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
