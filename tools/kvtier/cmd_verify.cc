// kvtier verify DIR [--deep]: scan every record and cross-check the index
// both ways (read-only). Exit 1 when anything is wrong.
#include <iostream>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct Verify {
  StoreArgs a;
  bool deep = false;
};

int Run(const Verify& in) {
  int rc = kExitOk;
  auto store = OpenStore("verify", in.a, OpenMode::kReadOnly, &rc);
  if (!store) return rc;
  Progress progress(in.deep ? "verify --deep" : "verify");
  VerifyOptions vo;
  vo.deep = in.deep;
  vo.progress = [&](uint64_t done, uint64_t total) { progress.Update(done, total); };
  const auto t0 = std::chrono::steady_clock::now();
  auto r = store->Verify(vo);
  progress.Finish();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Status cs = store->Close();
  if (!r.ok()) return Fail("verify", kExitProblems, in.a.dir + ": " + r.status().ToString());
  if (!cs.ok()) return Fail("verify", kExitProblems, in.a.dir + ": closing: " + cs.ToString());
  const VerifyReport& v = *r;
  if (in.a.json) {
    PrintJson({{"dir", in.a.dir}, {"deep", in.deep}, {"ok", v.ok()},
               {"records_scanned", v.records_scanned}, {"records_ok", v.records_ok},
               {"records_corrupt", v.records_corrupt}, {"index_entries", v.index_entries},
               {"entries_without_record", v.entries_without_record},
               {"records_without_entry", v.records_without_entry}, {"stale_entries", v.stale_entries},
               {"bytes_scanned", v.bytes_scanned}, {"stale_tail_bytes", v.stale_tail_bytes},
               {"seconds", secs}, {"problems", v.problems}});
  } else {
    Table t({"CHECK", "COUNT"}, {1});
    t.Add({"records scanned", std::to_string(v.records_scanned)});
    t.Add({"records ok", std::to_string(v.records_ok)});
    t.Add({"corrupt regions", std::to_string(v.records_corrupt)});
    t.Add({"index entries", std::to_string(v.index_entries)});
    t.Add({"entries without record", std::to_string(v.entries_without_record)});
    t.Add({"stale entries", std::to_string(v.stale_entries)});
    t.Add({"records without entry", std::to_string(v.records_without_entry)});
    t.Add({"stale bytes of earlier segment lives", std::to_string(v.stale_tail_bytes)});
    std::cout << t.Render();
    std::cout << "scanned " << FormatBytes(v.bytes_scanned) << " in " << secs << " s"
              << (in.deep ? " (payload checksums checked)" : " (headers only; --deep checks payloads)") << "\n";
    if (v.records_without_entry > 0 && v.ok())
      std::cout << "note: records without entry are removed or superseded blocks, or blocks written after the "
                   "last checkpoint of a crashed store (the next read-write open re-indexes them)\n";
    for (const std::string& p : v.problems) std::cout << "problem: " << p << "\n";
    std::cout << (v.ok() ? "OK\n" : "PROBLEMS FOUND (run `kvtier repair " + in.a.dir + "`)\n");
  }
  return v.ok() ? kExitOk : kExitProblems;
}

}  // namespace

Command AddVerify(CLI::App& root) {
  auto in = std::make_shared<Verify>();
  CLI::App* sub = root.add_subcommand("verify", "Check every record and cross-check index and segments (read-only; exit 1 on problems)");
  AddDirArg(sub, &in->a);
  sub->add_flag("--deep", in->deep, "Also read every payload and check its checksum");
  AddJsonFlag(sub, &in->a.json);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
