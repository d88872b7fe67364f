// kvtier put DIR --ns N KEY FILE: store a file as a block (takes the lock).
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct Put {
  StoreArgs a;
  std::string ns, key, file;
};

int Run(const Put& in) {
  std::string key;
  Status k = ParseHexKey(in.key, &key);
  if (!k.ok()) return Fail("put", kExitUsage, k.message());
  std::ifstream f(in.file, std::ios::binary);
  if (!f) return Fail("put", kExitProblems, "cannot read " + in.file + ": " + std::strerror(errno));
  std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return Fail("put", kExitProblems, "reading " + in.file + ": " + std::strerror(errno));
  int rc = kExitOk;
  auto store = OpenStore("put", in.a, OpenMode::kCreate, &rc);
  if (!store) return rc;
  NamespaceId ns;
  if (!ResolveNamespace("put", store.get(), in.ns, &ns)) return kExitProblems;
  Status st = store->Put(ns, key, data.data(), data.size());
  if (!st.ok()) return Fail("put", kExitProblems, in.a.dir + ": putting " + in.file + ": " + st.ToString());
  auto info = store->Stat(ns, key);
  Status cs = store->Close();
  if (!cs.ok()) return Fail("put", kExitProblems, in.a.dir + ": closing: " + cs.ToString());
  if (in.a.json) {
    nlohmann::json j{{"key", ToHex(key)}, {"ns_id", NamespaceIdToHex(ns)}, {"payload_bytes", data.size()}};
    if (info.ok()) j.update({{"segment", info->segment}, {"offset", info->offset}, {"sequence", info->sequence}});
    PrintJson(j);
  } else {
    std::cout << "stored " << ToHex(key) << " (" << FormatBytes(data.size()) << ")";
    if (info.ok()) std::cout << " at segment " << info->segment << " offset " << info->offset;
    std::cout << "\n";
  }
  return kExitOk;
}

}  // namespace

Command AddPut(CLI::App& root) {
  auto in = std::make_shared<Put>();
  CLI::App* sub = root.add_subcommand("put", "Store a file as a block, durable on return (takes the lock)");
  AddDirArg(sub, &in->a);
  sub->add_option("KEY", in->key, "Key as hex")->required();
  sub->add_option("FILE", in->file, "File whose bytes become the payload")->required();
  sub->add_option("--ns", in->ns, "Namespace (display name or 16-hex id)")->required();
  AddJsonFlag(sub, &in->a.json);
  AddCreateOptions(sub, &in->a);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
