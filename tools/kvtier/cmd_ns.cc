// kvtier ns DIR            list namespaces with their full specs (read-only)
// kvtier ns DIR create NAME [spec fields]   register one (takes the lock)
#include <iostream>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct Ns {
  StoreArgs a;
  CLI::App* create = nullptr;
  NamespaceSpec spec;
};

int List(const Ns& in) {
  int rc = kExitOk;
  auto store = OpenStore("ns", in.a, OpenMode::kReadOnly, &rc);
  if (!store) return rc;
  auto nss = ListNamespacesCounted(*store);
  if (!nss.ok()) return Fail("ns", kExitProblems, in.a.dir + ": " + nss.status().ToString());
  if (in.a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const NamespaceInfo& n : *nss) {
      nlohmann::json j = SpecToJson(n.spec);
      j["id"] = NamespaceIdToHex(n.id);
      j["blocks"] = n.blocks;
      j["payload_bytes"] = n.payload_bytes;
      out.push_back(j);
    }
    PrintJson(out);
  } else {
    if (nss->empty()) std::cout << "no namespaces in " << in.a.dir << "\n";
    for (const NamespaceInfo& n : *nss) {
      const NamespaceSpec& s = n.spec;
      std::cout << s.DisplayName() << "  (id " << NamespaceIdToHex(n.id) << ", " << n.blocks << " blocks, "
                << FormatBytes(n.payload_bytes) << ")\n";
      auto field = [](const char* k, const std::string& v) {
        std::cout << "  " << k << std::string(22 - std::string(k).size(), ' ') << (v.empty() ? "-" : v) << "\n";
      };
      field("model_id", s.model_id);
      field("model_revision", s.model_revision);
      field("weights_fingerprint", s.weights_fingerprint);
      field("tokenizer", s.tokenizer);
      field("adapter", s.adapter);
      field("dtype", s.dtype);
      field("layout", s.layout);
      field("block_tokens", s.block_tokens ? std::to_string(s.block_tokens) : "");
      field("block_bytes", s.block_bytes ? std::to_string(s.block_bytes) : "variable");
      field("tp", std::to_string(s.tp_rank) + " of " + std::to_string(s.tp_size));
      field("hash_scheme", s.hash_scheme);
      field("hash_seed", std::to_string(s.hash_seed));
      field("tenant_salt", s.tenant_salt.empty() ? "" : "set (hash kept)");
    }
  }
  Status cs = store->Close();
  if (!cs.ok()) return Fail("ns", kExitProblems, in.a.dir + ": closing: " + cs.ToString());
  return kExitOk;
}

int Create(const Ns& in) {
  Status v = in.spec.Validate();
  if (!v.ok()) return Fail("ns create", kExitUsage, v.message());
  int rc = kExitOk;
  auto store = OpenStore("ns create", in.a, OpenMode::kCreate, &rc);
  if (!store) return rc;
  // A display name must keep pointing at one namespace.
  auto existing = store->FindNamespace(in.spec.DisplayName());
  const NamespaceId want = in.spec.Fingerprint();
  if (existing.ok() && *existing != want) {
    return Fail("ns create", kExitProblems,
                in.a.dir + ": the name '" + in.spec.DisplayName() + "' is already used by namespace " +
                    NamespaceIdToHex(*existing) + " with a different spec");
  }
  auto id = store->RegisterNamespace(in.spec);
  if (!id.ok()) return Fail("ns create", kExitProblems, in.a.dir + ": " + id.status().ToString());
  Status cs = store->Close();
  if (!cs.ok()) return Fail("ns create", kExitProblems, in.a.dir + ": closing: " + cs.ToString());
  if (in.a.json) {
    nlohmann::json j = SpecToJson(in.spec);
    j["id"] = NamespaceIdToHex(*id);
    j["existed"] = existing.ok();
    PrintJson(j);
  } else {
    std::cout << (existing.ok() ? "exists   " : "created  ") << in.spec.DisplayName() << "  id "
              << NamespaceIdToHex(*id) << "\n";
  }
  return kExitOk;
}

}  // namespace

Command AddNs(CLI::App& root) {
  auto in = std::make_shared<Ns>();
  CLI::App* sub = root.add_subcommand("ns", "List namespaces with their specs; `ns DIR create NAME` adds one");
  AddDirArg(sub, &in->a);
  AddJsonFlag(sub, &in->a.json);
  CLI::App* c = sub->add_subcommand("create", "Register a namespace (takes the lock; creates the store if missing)");
  in->create = c;
  NamespaceSpec& s = in->spec;
  c->add_option("NAME", s.name, "Display name, e.g. qwen3-0.6b/bf16/tp0")->required();
  c->add_option("--model", s.model_id, "Model id, e.g. Qwen/Qwen3-0.6B")->required();
  c->add_option("--revision", s.model_revision, "Model revision (commit or tag)");
  c->add_option("--weights-fingerprint", s.weights_fingerprint, "Hash of the weights");
  c->add_option("--tokenizer", s.tokenizer, "Tokenizer id/revision");
  c->add_option("--adapter", s.adapter, "LoRA adapter id");
  c->add_option("--dtype", s.dtype, "KV dtype, e.g. bf16, fp8_e4m3");
  c->add_option("--layout", s.layout, "Block layout, e.g. vllm-cross-layer");
  c->add_option("--block-tokens", s.block_tokens, "Tokens per block");
  c->add_option("--block-bytes", s.block_bytes, "Exact payload bytes per block (0 = variable)");
  c->add_option("--tp-rank", s.tp_rank, "Tensor-parallel rank");
  c->add_option("--tp-size", s.tp_size, "Tensor-parallel size")->capture_default_str();
  c->add_option("--hash-scheme", s.hash_scheme, "Engine hash scheme, e.g. sha256_cbor");
  c->add_option("--hash-seed", s.hash_seed, "Engine hash seed");
  c->add_option("--tenant-salt", s.tenant_salt, "Tenant salt (only its hash is stored)");
  AddJsonFlag(c, &in->a.json);
  AddCreateOptions(c, &in->a);
  return {sub, [in] { return in->create->parsed() ? Create(*in) : List(*in); }};
}

}  // namespace kvtier::cli
