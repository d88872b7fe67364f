// kvtier rm DIR --ns N KEY... [--keys-from FILE]: remove keys (Store::RemoveBatch:
// one index flush per 4,096); `--all-blocks` with no key drops the whole
// namespace (takes the lock). An empty key list alone is refused: a script
// whose key list came out empty must not wipe a namespace.
#include <fstream>
#include <iostream>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct Rm {
  StoreArgs a;
  std::string ns;
  std::vector<std::string> keys;
  std::string keys_from;
  bool all = false;
};

// Hex keys from `path` ("-": standard input), one per line; blank lines and
// lines starting with '#' are skipped. A bad line names its number.
Status ReadKeyFile(const std::string& path, std::vector<std::string>* keys) {
  std::ifstream file;
  if (path != "-") {
    file.open(path);
    if (!file) return Status::InvalidArgument("--keys-from " + path + ": cannot read it");
  }
  std::istream& s = path == "-" ? std::cin : file;
  std::string line;
  for (size_t no = 1; std::getline(s, line); ++no) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    const size_t e = line.find_last_not_of(" \t\r");
    const std::string hex = line.substr(b, e - b + 1);
    std::string k;
    Status p = ParseHexKey(hex, &k);
    if (!p.ok()) return Status::InvalidArgument("--keys-from " + path + " line " + std::to_string(no) + ": " + p.message());
    keys->push_back(hex);
  }
  if (s.bad()) return Status::InvalidArgument("--keys-from " + path + ": read error");
  return Status::OK();
}

int Run(Rm in) {
  if (!in.keys_from.empty()) {
    Status r = ReadKeyFile(in.keys_from, &in.keys);
    if (!r.ok()) return Fail("rm", kExitUsage, r.message());
  }
  if (in.keys.empty() && !in.all && !in.keys_from.empty())
    return Fail("rm", kExitUsage, "--keys-from " + in.keys_from + " holds no key: nothing removed");
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
    auto list = ListNamespacesCounted(*store);
    if (list.ok())
      for (const NamespaceInfo& n : *list)
        if (n.id == ns) blocks = n.blocks;
    Status st = store->RemoveNamespace(ns);
    if (!st.ok()) return Fail("rm", kExitProblems, in.a.dir + ": removing namespace " + in.ns + ": " + st.ToString());
    removed = blocks;
    out["namespace_removed"] = true;
  } else {
    // One flush per 4,096 keys, not one per key.
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
  sub->add_option("--keys-from", in->keys_from, "Also the hex keys in FILE, one per line ('-': standard input)");
  sub->add_flag("--all-blocks", in->all, "Drop the namespace and every block in it (no KEY)");
  sub->add_option("--ns", in->ns, "Namespace (display name or 16-hex id)")->required();
  AddJsonFlag(sub, &in->a.json);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
