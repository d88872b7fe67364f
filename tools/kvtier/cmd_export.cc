// kvtier export DIR --ns N -o ARCHIVE [--zstd[=LEVEL]]: one namespace's blocks
// into a checksummed archive (read-only on the store).
#include <algorithm>
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

// One GetBatch: up to 64 MiB or 1,024 blocks.
constexpr uint64_t kBatchBytes = 64ull << 20;
constexpr size_t kBatchBlocks = 1024;

int Run(Export& in) {
  if (in.level < 1 || in.level > 19) return Fail("export", kExitUsage, "--zstd-level must be 1..19");
  in.zstd = in.compress ? in.level : 0;
  int rc = kExitOk;
  auto store = OpenStore("export", in.a, OpenMode::kReadOnly, &rc);
  if (!store) return rc;
  NamespaceId ns;
  if (!ResolveNamespace("export", store.get(), in.ns, &ns)) return kExitProblems;
  auto list = ListNamespacesCounted(*store);
  if (!list.ok()) return Fail("export", kExitProblems, in.a.dir + ": " + list.status().ToString());
  NamespaceSpec spec;
  uint64_t total = 0;  // for the progress line: the namespace's bytes when the export starts
  for (const NamespaceInfo& n : *list) {
    if (n.id != ns) continue;
    spec = n.spec;
    total = n.payload_bytes;
  }
  auto w = ArchiveWriter::Create(in.output, ns, spec, in.zstd);
  if (!w.ok()) return Fail("export", kExitProblems, w.status().ToString());

  // A batch at a time, each listed after the last key of the one before, so
  // memory holds one batch whatever the namespace's size.
  Progress progress("export");
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t done = 0, exported = 0, skipped = 0;
  std::vector<std::string> skipped_why;
  ListCursor cursor{ns, ""};
  for (bool more = true; more;) {
    std::vector<std::pair<std::string, uint64_t>> blocks;
    uint64_t bytes = 0;
    more = false;
    Status ls = store->ListBlocks(ns, "", cursor.key.empty() ? nullptr : &cursor,
                                  [&](const BlockInfo& b) {
                                    if (!blocks.empty() && (blocks.size() == kBatchBlocks ||
                                                            bytes + b.payload_bytes > kBatchBytes)) {
                                      more = true;
                                      return false;
                                    }
                                    blocks.emplace_back(b.key, b.payload_bytes);
                                    bytes += b.payload_bytes;
                                    return true;
                                  });
    if (!ls.ok()) return Fail("export", kExitProblems, in.a.dir + ": " + ls.ToString());
    if (blocks.empty()) break;
    cursor.key = blocks.back().first;
    std::vector<std::vector<uint8_t>> bufs(blocks.size());
    std::vector<MutableFragment> frags(blocks.size());
    std::vector<GetItem> items(blocks.size());
    for (size_t k = 0; k < blocks.size(); ++k) {
      bufs[k].resize(blocks[k].second);
      frags[k] = {bufs[k].data(), bufs[k].size()};
      items[k] = {blocks[k].first, {&frags[k], 1}};
    }
    auto results = store->GetBatch(ns, items);
    for (size_t k = 0; k < blocks.size(); ++k) {
      const auto& r = results[k];
      if (!r.ok()) {
        ++skipped;
        if (skipped_why.size() < 10) skipped_why.push_back(ToHex(blocks[k].first) + ": " + r.status().ToString());
        continue;
      }
      Status as = (*w)->Add(blocks[k].first, bufs[k].data(), *r);
      if (!as.ok()) return Fail("export", kExitProblems, as.ToString());
      ++exported;
      done += *r;
    }
    progress.Update(done, std::max(total, done));
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
