// kvtier export DIR --ns N -o ARCHIVE [--zstd[=LEVEL]]: one namespace's blocks
// into a checksummed archive (read-only on the store).
#include <iostream>

#include "archive.h"
#include "commands.h"

namespace kvtier::cli {

namespace {

struct Export {
  StoreArgs a;
  std::string ns, output;
  bool compress = false;
  int level = 3;
  int zstd = 0;  // effective level, 0 = off
};

constexpr uint64_t kBatchBytes = 64ull << 20;

int Run(Export& in) {
  if (in.level < 1 || in.level > 19) return Fail("export", kExitUsage, "--zstd-level must be 1..19");
  in.zstd = in.compress ? in.level : 0;
  int rc = kExitOk;
  auto store = OpenStore("export", in.a, OpenMode::kReadOnly, &rc);
  if (!store) return rc;
  NamespaceId ns;
  if (!ResolveNamespace("export", store.get(), in.ns, &ns)) return kExitProblems;
  auto list = store->ListNamespaces();
  if (!list.ok()) return Fail("export", kExitProblems, in.a.dir + ": " + list.status().ToString());
  NamespaceSpec spec;
  for (const NamespaceInfo& n : *list)
    if (n.id == ns) spec = n.spec;
  std::vector<std::pair<std::string, uint64_t>> blocks;
  uint64_t total = 0;
  Status ls = store->ListBlocks(ns, "", [&](const BlockInfo& b) {
    blocks.emplace_back(b.key, b.payload_bytes);
    total += b.payload_bytes;
    return true;
  });
  if (!ls.ok()) return Fail("export", kExitProblems, in.a.dir + ": " + ls.ToString());
  auto w = ArchiveWriter::Create(in.output, ns, spec, in.zstd);
  if (!w.ok()) return Fail("export", kExitProblems, w.status().ToString());

  Progress progress("export");
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t done = 0, exported = 0, skipped = 0;
  std::vector<std::string> skipped_why;
  for (size_t i = 0; i < blocks.size();) {
    size_t j = i;
    uint64_t bytes = 0;
    while (j < blocks.size() && (j == i || bytes + blocks[j].second <= kBatchBytes)) bytes += blocks[j++].second;
    std::vector<std::vector<uint8_t>> bufs(j - i);
    std::vector<MutableFragment> frags(j - i);
    std::vector<GetItem> items(j - i);
    for (size_t k = i; k < j; ++k) {
      bufs[k - i].resize(blocks[k].second);
      frags[k - i] = {bufs[k - i].data(), bufs[k - i].size()};
      items[k - i] = {blocks[k].first, {&frags[k - i], 1}};
    }
    auto results = store->GetBatch(ns, items);
    for (size_t k = i; k < j; ++k) {
      const auto& r = results[k - i];
      if (!r.ok()) {
        ++skipped;
        if (skipped_why.size() < 10) skipped_why.push_back(ToHex(blocks[k].first) + ": " + r.status().ToString());
        continue;
      }
      Status as = (*w)->Add(blocks[k].first, bufs[k - i].data(), *r);
      if (!as.ok()) return Fail("export", kExitProblems, as.ToString());
      ++exported;
      done += *r;
    }
    progress.Update(done, total);
    i = j;
  }
  Status fs = (*w)->Finish();
  progress.Finish();
  if (!fs.ok()) return Fail("export", kExitProblems, fs.ToString());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Status cs = store->Close();
  if (!cs.ok()) return Fail("export", kExitProblems, in.a.dir + ": closing: " + cs.ToString());
  if (in.a.json) {
    PrintJson({{"archive", in.output}, {"ns_id", NamespaceIdToHex(ns)}, {"namespace", spec.DisplayName()},
               {"blocks", exported}, {"payload_bytes", done}, {"archive_bytes", (*w)->file_bytes()},
               {"zstd_level", in.zstd}, {"skipped", skipped}, {"skipped_reasons", skipped_why}, {"seconds", secs}});
  } else {
    std::cout << "exported " << exported << " blocks (" << FormatBytes(done) << ") of " << spec.DisplayName()
              << " to " << in.output << " (" << FormatBytes((*w)->file_bytes())
              << (in.zstd ? ", zstd level " + std::to_string(in.zstd) : std::string(", uncompressed")) << ")\n";
    if (skipped) std::cout << "skipped " << skipped << " blocks that could not be read:\n";
    for (const std::string& s : skipped_why) std::cout << "  " << s << "\n";
  }
  return skipped ? kExitProblems : kExitOk;
}

}  // namespace

Command AddExport(CLI::App& root) {
  auto in = std::make_shared<Export>();
  CLI::App* sub = root.add_subcommand("export", "Write one namespace's blocks to a checksummed archive (read-only)");
  AddDirArg(sub, &in->a);
  sub->add_option("--ns", in->ns, "Namespace (display name or 16-hex id)")->required();
  sub->add_option("-o,--output", in->output, "Archive file to write")->required();
  sub->add_flag("--zstd", in->compress, "Compress the archive body with zstd");
  sub->add_option("--zstd-level", in->level, "zstd level 1..19")->capture_default_str();
  AddJsonFlag(sub, &in->a.json);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
