// kvtier rm DIR --ns N KEY...: remove keys; `--all-blocks` with no key drops
// the whole namespace (takes the lock). An empty key list alone is refused:
// a script whose key list came out empty must not wipe a namespace.
#include <iostream>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct Rm {
  StoreArgs a;
  std::string ns;
  std::vector<std::string> keys;
  bool all = false;
};

int Run(const Rm& in) {
  if (in.keys.empty() && !in.all)
    return Fail("rm", kExitUsage, "no KEY given: name the keys to remove, or pass --all-blocks to drop namespace " +
                                      in.ns + " with every block in it");
  if (!in.keys.empty() && in.all) return Fail("rm", kExitUsage, "--all-blocks takes no KEY");
  std::vector<std::string> keys;
  for (const std::string& h : in.keys) {
    std::string k;
    Status p = ParseHexKey(h, &k);
    if (!p.ok()) return Fail("rm", kExitUsage, p.message());
    keys.push_back(std::move(k));
  }
  int rc = kExitOk;
  auto store = OpenStore("rm", in.a, OpenMode::kWrite, &rc);
  if (!store) return rc;
  NamespaceId ns;
  if (!ResolveNamespace("rm", store.get(), in.ns, &ns)) return kExitProblems;
  uint64_t removed = 0, absent = 0;
  nlohmann::json out{{"dir", in.a.dir}, {"ns_id", NamespaceIdToHex(ns)}};
  if (keys.empty()) {
    uint64_t blocks = 0;
    auto list = store->ListNamespaces();
    if (list.ok())
      for (const NamespaceInfo& n : *list)
        if (n.id == ns) blocks = n.blocks;
    Status st = store->RemoveNamespace(ns);
    if (!st.ok()) return Fail("rm", kExitProblems, in.a.dir + ": removing namespace " + in.ns + ": " + st.ToString());
    removed = blocks;
    out["namespace_removed"] = true;
  } else {
    // One flush for the list, whatever its length.
    const std::vector<std::string_view> views(keys.begin(), keys.end());
    std::vector<bool> present;
    Status st = store->RemoveBatch(ns, views, &present);
    if (!st.ok()) return Fail("rm", kExitProblems, in.a.dir + ": removing: " + st.ToString());
    for (bool p : present) ++(p ? removed : absent);
    out["namespace_removed"] = false;
  }
  Status cs = store->Close();
  if (!cs.ok()) return Fail("rm", kExitProblems, in.a.dir + ": closing: " + cs.ToString());
  out["blocks_removed"] = removed;
  out["keys_absent"] = absent;
  if (in.a.json) {
    PrintJson(out);
  } else if (keys.empty()) {
    std::cout << "removed namespace " << in.ns << " (" << NamespaceIdToHex(ns) << ") and its " << removed << " blocks\n";
  } else {
    std::cout << "removed " << removed << " blocks" << (absent ? ", " + std::to_string(absent) + " keys were absent" : "") << "\n";
  }
  return kExitOk;
}

}  // namespace

Command AddRm(CLI::App& root) {
  auto in = std::make_shared<Rm>();
  CLI::App* sub = root.add_subcommand("rm", "Remove blocks by key, or drop a whole namespace with --all-blocks (takes the lock)");
  AddDirArg(sub, &in->a);
  sub->add_option("KEY", in->keys, "Keys as hex");
  sub->add_flag("--all-blocks", in->all, "Drop the namespace and every block in it (no KEY)");
  sub->add_option("--ns", in->ns, "Namespace (display name or 16-hex id)")->required();
  AddJsonFlag(sub, &in->a.json);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
