// kvtier import DIR ARCHIVE: check an archive completely, then store its
// namespace and blocks (takes the lock; creates the store if missing).
#include <iostream>

#include "archive.h"
#include "commands.h"

namespace kvtier::cli {

namespace {

struct Import {
  StoreArgs a;
  std::string archive;
};

constexpr uint64_t kBatchBytes = 64ull << 20;

int Run(const Import& in) {
  // Pass 1: every checksum, count and length, before anything is written.
  Result<ArchiveSummary> checked = Status::Aborted("not read");
  {
    Progress p("check archive");
    checked = ReadArchive(in.archive, nullptr, [&](uint64_t d, uint64_t t) { p.Update(d, t); });
  }
  if (!checked.ok()) {
    return Fail("import", kExitProblems, "refusing " + in.archive + ", nothing was imported: " + checked.status().ToString());
  }
  int rc = kExitOk;
  auto store = OpenStore("import", in.a, OpenMode::kCreate, &rc);
  if (!store) return rc;
  auto id = store->RegisterNamespace(checked->header.spec);
  if (!id.ok()) return Fail("import", kExitProblems, in.a.dir + ": registering namespace: " + id.status().ToString());
  if (*id != checked->header.ns_id)
    return Fail("import", kExitProblems, in.a.dir + ": namespace id " + NamespaceIdToHex(*id) + " differs from the archive's " +
                                             NamespaceIdToHex(checked->header.ns_id));

  // Pass 2: stage blocks and commit them in groups.
  std::vector<std::string> keys;
  std::vector<std::string> payloads;
  uint64_t staged = 0, imported = 0, bytes = 0, failed = 0;
  std::vector<std::string> failures;
  auto flush = [&]() {
    std::vector<Fragment> frags(keys.size());
    std::vector<PutItem> items(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      frags[i] = {payloads[i].data(), payloads[i].size()};
      items[i] = {keys[i], {&frags[i], 1}};
    }
    std::vector<Status> st = store->PutBatch(*id, items);
    for (size_t i = 0; i < st.size(); ++i) {
      if (st[i].ok()) {
        ++imported;
        bytes += payloads[i].size();
      } else {
        ++failed;
        if (failures.size() < 10) failures.push_back(ToHex(keys[i]) + ": " + st[i].ToString());
      }
    }
    keys.clear();
    payloads.clear();
    staged = 0;
  };
  const auto t0 = std::chrono::steady_clock::now();
  Progress p("import");
  auto r = ReadArchive(
      in.archive,
      [&](const ArchiveHeader&, std::string_view key, std::string_view payload) {
        keys.emplace_back(key);
        payloads.emplace_back(payload);
        staged += payload.size();
        if (staged >= kBatchBytes) flush();
        return Status::OK();
      },
      [&](uint64_t d, uint64_t t) { p.Update(d, t); });
  if (r.ok()) flush();
  p.Finish();
  Status cs = store->Close();
  if (!r.ok())
    return Fail("import", kExitProblems, in.archive + " changed while importing (" + r.status().ToString() + "); " +
                                             std::to_string(imported) + " blocks were stored");
  if (!cs.ok()) return Fail("import", kExitProblems, in.a.dir + ": closing: " + cs.ToString());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (in.a.json) {
    PrintJson({{"archive", in.archive}, {"dir", in.a.dir}, {"ns_id", NamespaceIdToHex(*id)},
               {"namespace", checked->header.spec.DisplayName()}, {"blocks", imported}, {"payload_bytes", bytes},
               {"failed", failed}, {"failures", failures}, {"seconds", secs}});
  } else {
    std::cout << "imported " << imported << " blocks (" << FormatBytes(bytes) << ") into namespace "
              << checked->header.spec.DisplayName() << " (" << NamespaceIdToHex(*id) << ") of " << in.a.dir << "\n";
    if (failed) std::cout << failed << " blocks were not stored:\n";
    for (const std::string& f : failures) std::cout << "  " << f << "\n";
  }
  return failed ? kExitProblems : kExitOk;
}

}  // namespace

Command AddImport(CLI::App& root) {
  auto in = std::make_shared<Import>();
  CLI::App* sub = root.add_subcommand("import", "Check an archive completely, then store its namespace and blocks (takes the lock)");
  AddDirArg(sub, &in->a);
  sub->add_option("ARCHIVE", in->archive, "Archive written by `kvtier export`")->required();
  AddJsonFlag(sub, &in->a.json);
  AddCreateOptions(sub, &in->a);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
