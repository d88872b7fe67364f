// kvtier ls DIR [--ns N] [--prefix HEX] [--after HEX] [--limit K]: index entries (read-only).
#include <iostream>
#include <unordered_map>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct Ls {
  StoreArgs a;
  std::string ns, prefix, after;
  uint64_t limit = 0;
};

int Run(const Ls& in) {
  std::string prefix;
  if (!in.prefix.empty()) {
    Status p = ParseHexKey(in.prefix, &prefix);
    if (!p.ok()) return Fail("ls", kExitUsage, "--prefix: " + p.message());
  }
  if (!prefix.empty() && in.ns.empty()) return Fail("ls", kExitUsage, "--prefix needs --ns");
  ListCursor after;
  if (!in.after.empty()) {
    Status p = ParseHexKey(in.after, &after.key);
    if (!p.ok()) return Fail("ls", kExitUsage, "--after: " + p.message());
    if (in.ns.empty()) return Fail("ls", kExitUsage, "--after needs --ns");
  }
  int rc = kExitOk;
  auto store = OpenStore("ls", in.a, OpenMode::kReadOnly, &rc);
  if (!store) return rc;
  NamespaceId ns = 0;
  if (!in.ns.empty() && !ResolveNamespace("ls", store.get(), in.ns, &ns)) return kExitProblems;
  after.ns = ns;
  std::unordered_map<NamespaceId, std::string> names;
  auto list = store->ListNamespaces(NamespaceListing::kSpecsOnly);  // names only: no walk of the index
  if (list.ok())
    for (const NamespaceInfo& n : *list) names[n.id] = n.spec.DisplayName();

  std::vector<BlockInfo> blocks;
  Status st = store->ListBlocks(ns, prefix, in.after.empty() ? nullptr : &after, [&](const BlockInfo& b) {
    blocks.push_back(b);
    return in.limit == 0 || blocks.size() < in.limit;
  });
  if (!st.ok()) return Fail("ls", kExitProblems, in.a.dir + ": " + st.ToString());
  if (in.a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const BlockInfo& b : blocks)
      out.push_back({{"namespace", names[b.ns]}, {"ns_id", NamespaceIdToHex(b.ns)}, {"key", ToHex(b.key)},
                     {"payload_bytes", b.payload_bytes}, {"record_bytes", b.record_bytes},
                     {"segment", b.segment}, {"generation", b.generation}, {"offset", b.offset},
                     {"sequence", b.sequence}, {"written_unix_ms", b.written_unix_ms},
                     {"payload_checksum", b.payload_checksum}, {"hits", b.hits}});
    PrintJson(out);
  } else {
    Table t({"NAMESPACE", "KEY", "SIZE", "SEGMENT", "OFFSET", "AGE", "HITS"}, {2, 3, 4, 5, 6});
    for (const BlockInfo& b : blocks)
      t.Add({names[b.ns], ToHex(b.key), FormatBytes(b.payload_bytes), std::to_string(b.segment),
             std::to_string(b.offset), FormatAge(b.written_unix_ms), std::to_string(b.hits)});
    std::cout << t.Render();
  }
  Status cs = store->Close();
  if (!cs.ok()) return Fail("ls", kExitProblems, in.a.dir + ": closing: " + cs.ToString());
  return kExitOk;
}

}  // namespace

Command AddLs(CLI::App& root) {
  auto in = std::make_shared<Ls>();
  CLI::App* sub = root.add_subcommand("ls", "List blocks: key, size, segment, offset, age, hits (read-only)");
  AddDirArg(sub, &in->a);
  sub->add_option("--ns", in->ns, "Namespace (display name or 16-hex id); default all");
  sub->add_option("--prefix", in->prefix, "Only keys starting with these hex bytes (needs --ns)");
  sub->add_option("--after", in->after, "Start after this key (hex bytes; needs --ns): with --limit, a page at a time");
  sub->add_option("--limit", in->limit, "Print at most K blocks (0 = all)");
  AddJsonFlag(sub, &in->a.json);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
