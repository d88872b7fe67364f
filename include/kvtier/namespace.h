// Namespaces: what a KV block's bytes mean.
//
// Engines key blocks by a hash of token ids; the hash does not cover the model
// weights, dtype, layout or tensor-parallel shape, so kvtier scopes every key
// by a namespace that pins them. Two specs that differ in any identity field
// get different ids, so a key in one namespace is never served to another.
// The id is a 64-bit fingerprint of the canonical spec: the same spec yields
// the same id across restarts and across machines (export/import, sharing).
#ifndef KVTIER_NAMESPACE_H_
#define KVTIER_NAMESPACE_H_

#include <cstdint>
#include <string>

#include "kvtier/status.h"

namespace kvtier {

using NamespaceId = uint64_t;

struct NamespaceSpec {
  // Human name shown by tools (e.g. "qwen3-0.6b/bf16/tp0"). Not part of the
  // identity; empty means one is derived from model, dtype and TP rank.
  std::string name;

  // --- Identity: every field below is part of the fingerprint ---------------
  std::string model_id;             // e.g. "Qwen/Qwen3-0.6B"
  std::string model_revision;       // commit or tag of the weights
  std::string weights_fingerprint;  // hash of the weights, when known
  std::string tokenizer;            // tokenizer id/revision
  std::string adapter;              // LoRA adapter id, empty for none
  std::string dtype;                // "bf16", "fp8_e4m3", ...
  std::string layout;               // e.g. "vllm-cross-layer", "sglang-page-first"
  uint32_t block_tokens = 0;        // tokens per block (0 = unspecified)
  uint64_t block_bytes = 0;         // exact payload size, 0 = variable
  uint32_t tp_rank = 0;
  uint32_t tp_size = 1;
  std::string hash_scheme;          // e.g. "sha256_cbor", "xxhash"
  uint64_t hash_seed = 0;
  // Tenant salt. Only its hash is kept (in the fingerprint and in the store),
  // so tenants with different salts never share keys.
  std::string tenant_salt;

  // Stable text form of the identity fields (salt replaced by its hash).
  std::string Canonical() const;
  // XXH3-64 of Canonical(); never 0.
  NamespaceId Fingerprint() const;
  // name, or one derived from the identity fields.
  std::string DisplayName() const;
  // Checks field ranges (tp_rank < tp_size, lengths <= 1 KiB, ...).
  Status Validate() const;
  // Lossless serialisation used by the index and export archives.
  std::string Encode() const;
  static Result<NamespaceSpec> Decode(std::string_view bytes);
};

// Renders an id as 16 lowercase hex digits, and parses that form back.
std::string NamespaceIdToHex(NamespaceId id);
Result<NamespaceId> NamespaceIdFromHex(std::string_view hex);

}  // namespace kvtier

#endif  // KVTIER_NAMESPACE_H_
