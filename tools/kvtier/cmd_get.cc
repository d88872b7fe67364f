// kvtier get DIR --ns N KEY [-o FILE]: a block's payload, checksum verified
// by the store on the way (read-only).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct Get {
  StoreArgs a;
  std::string ns, key, output;
};

int Run(const Get& in) {
  std::string key;
  Status k = ParseHexKey(in.key, &key);
  if (!k.ok()) return Fail("get", kExitUsage, k.message());
  if (in.a.json && in.output.empty()) return Fail("get", kExitUsage, "--json prints metadata and needs -o FILE for the payload");
  int rc = kExitOk;
  auto store = OpenStore("get", in.a, OpenMode::kReadOnly, &rc);
  if (!store) return rc;
  NamespaceId ns;
  if (!ResolveNamespace("get", store.get(), in.ns, &ns)) return kExitProblems;
  auto data = store->GetVector(ns, key);
  if (!data.ok()) {
    const std::string why = data.status().IsNotFound()
                                ? "no block " + in.key + " in namespace " + in.ns +
                                      " (absent, evicted, or it failed its checksum: " + data.status().message() + ")"
                                : data.status().ToString();
    return Fail("get", kExitProblems, in.a.dir + ": " + why);
  }
  Status cs = store->Close();
  if (!cs.ok()) return Fail("get", kExitProblems, in.a.dir + ": closing: " + cs.ToString());
  FILE* f = in.output.empty() || in.output == "-" ? stdout : std::fopen(in.output.c_str(), "wb");
  if (f == nullptr) return Fail("get", kExitProblems, "cannot create " + in.output + ": " + std::strerror(errno));
  const bool ok = std::fwrite(data->data(), 1, data->size(), f) == data->size();
  const bool closed = f == stdout ? std::fflush(f) == 0 : std::fclose(f) == 0;
  if (!ok || !closed) return Fail("get", kExitProblems, "writing " + (in.output.empty() ? std::string("stdout") : in.output) + ": " + std::strerror(errno));
  if (in.a.json) {
    PrintJson({{"key", ToHex(key)}, {"ns_id", NamespaceIdToHex(ns)}, {"payload_bytes", data->size()}, {"output", in.output}, {"checksum_verified", true}});
  } else if (f != stdout) {
    std::cerr << "wrote " << data->size() << " bytes to " << in.output << " (checksum verified)\n";
  }
  return kExitOk;
}

}  // namespace

Command AddGet(CLI::App& root) {
  auto in = std::make_shared<Get>();
  CLI::App* sub = root.add_subcommand("get", "Write a block's payload to a file or stdout, checksum verified (read-only)");
  AddDirArg(sub, &in->a);
  sub->add_option("KEY", in->key, "Key as hex")->required();
  sub->add_option("--ns", in->ns, "Namespace (display name or 16-hex id)")->required();
  sub->add_option("-o,--output", in->output, "Output file (default stdout)");
  AddJsonFlag(sub, &in->a.json);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
