// kvtier info DIR: what a store is and holds. DIR may be a service
// (unix:PATH), which answers for the store it serves.

#include <cstdio>
#include <iostream>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct Info {
  StoreArgs a;
};

int Run(const Info& in) {
  int rc = kExitOk;
  auto store = OpenStore("info", in.a, OpenMode::kReadOnly, &rc);
  if (!store) return rc;
  const StoreDescription d = store->Description();
  const Stats st = store->GetStats();
  auto nss = ListNamespacesCounted(*store);
  if (!nss.ok()) return Fail("info", kExitProblems, in.a.dir + ": listing namespaces: " + nss.status().ToString());
  uint32_t open_segments = 0;
  for (const SegmentInfo& s : store->Segments())
    if (s.state == SegmentState::kOpen) ++open_segments;
  uint64_t blocks = 0, payload = 0;
  for (const NamespaceInfo& n : *nss) {
    blocks += n.blocks;
    payload += n.payload_bytes;
  }
  Status cs = store->Close();
  if (!cs.ok()) return Fail("info", kExitProblems, in.a.dir + ": closing: " + cs.ToString());
  store.reset();

  // The last checkpoint says whether the store was closed cleanly.
  std::string shutdown = "unknown";
  long pid = 0;
  bool in_use = false;
  const bool served = in.a.dir.rfind("unix:", 0) == 0 || in.a.dir.rfind("auto:", 0) == 0;
  if (served) {
    shutdown = "running: served by the kvtier service at " + in.a.dir;
    in_use = true;
  } else if (auto fst = Store::Inspect(in.a.dir); fst.ok()) {
    switch (fst->last_shutdown) {
      case FolderState::Shutdown::kNeverCheckpointed: shutdown = "never checkpointed"; break;
      case FolderState::Shutdown::kClean: shutdown = "clean"; break;
      case FolderState::Shutdown::kNotClean: shutdown = "not clean (the next read-write open recovers)"; break;
      case FolderState::Shutdown::kUnknown: break;
    }
    in_use = fst->in_use;
    pid = fst->holder_pid;
  }
  const double space_ratio = payload == 0 ? 0 : static_cast<double>(st.used_bytes) / static_cast<double>(payload);

  // What a writer would cap the budget to (Store::Open does, read-write).
  uint64_t disk_free = 0, held_bytes = 0;
  bool exceeds_disk = false;
  if (auto f = DefaultFileSystem()->FreeSpace(in.a.dir); !served && f.ok()) {
    disk_free = *f;
    held_bytes = uint64_t{st.segments_total} * d.segment_size_bytes;
    exceeds_disk = st.capacity_bytes > held_bytes + disk_free;
  }
  if (in.a.json) {
    nlohmann::json ns = nlohmann::json::array();
    for (const NamespaceInfo& n : *nss)
      ns.push_back({{"id", NamespaceIdToHex(n.id)}, {"name", n.spec.DisplayName()},
                    {"blocks", n.blocks}, {"payload_bytes", n.payload_bytes}});
    PrintJson({{"dir", in.a.dir},
               {"disk_free_bytes", disk_free},
               {"capacity_exceeds_disk", exceeds_disk},
               {"format_version", d.format_version},
               {"store_id", d.store_id},
               {"created_unix_ms", d.created_unix_ms},
               {"segment_size_bytes", d.segment_size_bytes},
               {"capacity_bytes", st.capacity_bytes},
               {"used_bytes", st.used_bytes},
               {"segments", {{"total", st.segments_total}, {"sealed", st.segments_sealed},
                             {"open", open_segments}, {"free", st.segments_free}, {"hot", st.segments_hot}}},
               {"blocks", blocks},
               {"payload_bytes", payload},
               {"namespaces", ns},
               {"last_shutdown", shutdown},
               {"in_use", in_use},
               {"in_use_by_pid", in_use ? pid : 0},
               {"recovered_from_crash", st.recovered_from_crash},
               {"write_amplification", st.write_amplification},
               {"disk_bytes_per_payload_byte", space_ratio},
               {"io_backend", st.io_backend},
               {"ram_tier", st.ram_capacity_bytes == 0
                                ? nlohmann::json(nullptr)
                                : nlohmann::json{{"capacity_bytes", st.ram_capacity_bytes},
                                                 {"used_bytes", st.ram_used_bytes},
                                                 {"payload_bytes", st.ram_payload_bytes},
                                                 {"blocks", st.ram_blocks},
                                                 {"evictions", st.ram_evictions},
                                                 {"shared_memory", st.ram_shared_memory}}}});
    return kExitOk;
  }
  char ratio[32], wa[32];
  std::snprintf(ratio, sizeof ratio, "%.3f", space_ratio);
  std::snprintf(wa, sizeof wa, "%.3f", st.write_amplification);
  const double pct = st.capacity_bytes == 0 ? 0 : 100.0 * static_cast<double>(st.used_bytes) / static_cast<double>(st.capacity_bytes);
  char pcts[16];
  std::snprintf(pcts, sizeof pcts, "%.1f%%", pct);
  std::cout << "store          " << in.a.dir << "\n"
            << "format version " << d.format_version << "\n"
            << "store id       " << d.store_id << "\n"
            << "created        " << FormatTime(d.created_unix_ms) << "\n"
            << "segment size   " << FormatBytes(d.segment_size_bytes) << "\n"
            << "capacity       " << FormatBytes(st.capacity_bytes) << " (budget of this open; set with --capacity)\n"
            << (exceeds_disk ? "               warning: more than the disk holds (" + FormatBytes(disk_free) +
                                   " free beside " + FormatBytes(held_bytes) +
                                   " of segment files): a writer caps it and says so\n"
                             : std::string())
            << "used           " << FormatBytes(st.used_bytes) << " (" << pcts << ")\n"
            << "segments       " << st.segments_total << " total: " << st.segments_sealed << " sealed, "
            << open_segments << " open, " << st.segments_free << " free; " << st.segments_hot
            << " of them the hot region's\n"
            << "blocks         " << blocks << " (" << FormatBytes(payload) << " payload)\n"
            << "disk/payload   " << ratio << " bytes on disk per payload byte\n"
            << "last shutdown  " << shutdown << "\n"
            << "in use         " << (in_use ? (pid > 0 ? "yes, by pid " + std::to_string(pid) : std::string("yes")) : std::string("no")) << "\n"
            << "recovered      " << (st.recovered_from_crash ? "yes" : "no")
            << " (read-only opens never run recovery)\n"
            << "write amp.     " << wa << " (this process)\n"
            << "io backend     " << st.io_backend << "\n";
  // Only a service (unix:) has one: other opens are read-only, without a tier.
  if (st.ram_capacity_bytes > 0)
    std::cout << "ram tier       " << st.ram_blocks << " blocks, " << FormatBytes(st.ram_payload_bytes) << " payload in "
              << FormatBytes(st.ram_used_bytes) << " of " << FormatBytes(st.ram_capacity_bytes) << " ("
              << (st.ram_shared_memory ? "shared memory" : "process memory") << "), " << st.ram_evictions
              << " evicted\n";
  std::cout << "\n";
  Table t({"NAMESPACE", "ID", "BLOCKS", "BYTES"}, {2, 3});
  for (const NamespaceInfo& n : *nss)
    t.Add({n.spec.DisplayName(), NamespaceIdToHex(n.id), std::to_string(n.blocks), FormatBytes(n.payload_bytes)});
  std::cout << t.Render();
  return kExitOk;
}

}  // namespace

Command AddInfo(CLI::App& root) {
  auto in = std::make_shared<Info>();
  CLI::App* sub = root.add_subcommand("info", "Format version, id, capacity and usage, segments, namespaces (read-only)");
  AddDirArg(sub, &in->a);
  AddJsonFlag(sub, &in->a.json);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
