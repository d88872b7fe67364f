// libFuzzer target for the namespace spec codec (src/format/namespace_spec.cc):
// NamespaceSpec::Decode reads specs back from the RocksDB index and from
// export archives, NamespaceIdFromHex parses what users type. record_fuzz.cc
// calls both on raw input; this target keeps its own corpus and adds a
// structure-aware half that builds two specs field by field from the input
// and checks the identity rules:
// - Decode accepts only canonical encodings, and Encode/Decode round-trip
//   every valid spec with the same fingerprint;
// - Canonical() is injective on the identity fields: two specs with equal
//   canonical text have equal fields (a salt may stand for its own hash);
// - the display name never takes part in the identity.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/namespace.h"

namespace kvtier {
namespace {

#define FUZZ_CHECK(cond)           \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

void FuzzDecode(std::string_view in) {
  auto r = NamespaceSpec::Decode(std::string(in));  // exactly sized copy
  if (!r.ok()) return;
  FUZZ_CHECK(r->Validate().ok());
  FUZZ_CHECK(r->Encode() == in);
  auto again = NamespaceSpec::Decode(r->Encode());
  FUZZ_CHECK(again.ok() && again->Fingerprint() == r->Fingerprint());
  FUZZ_CHECK(again->Canonical() == r->Canonical());
}

void FuzzHex(std::string_view in) {
  auto r = NamespaceIdFromHex(std::string(in));
  if (!r.ok()) return;
  FUZZ_CHECK(in.size() == 16);
  auto back = NamespaceIdFromHex(NamespaceIdToHex(*r));
  FUZZ_CHECK(back.ok() && *back == *r);
}

// Splits the input into fields at 0xff bytes; missing fields are empty.
class Fields {
 public:
  explicit Fields(std::string_view in) : in_(in) {}
  std::string Next() {
    if (pos_ > in_.size()) return {};
    const size_t end = std::min(in_.find('\xff', pos_), in_.size());
    std::string s(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }
  uint64_t Number() {
    uint64_t v = 0;
    for (unsigned char c : Next()) v = v * 131 + c;
    return v;
  }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

NamespaceSpec Build(Fields& f) {
  NamespaceSpec s;
  s.name = f.Next();
  s.model_id = f.Next();
  s.model_revision = f.Next();
  s.weights_fingerprint = f.Next();
  s.tokenizer = f.Next();
  s.adapter = f.Next();
  s.dtype = f.Next();
  s.layout = f.Next();
  s.block_tokens = static_cast<uint32_t>(f.Number());
  s.block_bytes = f.Number();
  s.tp_size = static_cast<uint32_t>(f.Number() % 16 + 1);
  s.tp_rank = static_cast<uint32_t>(f.Number() % 17);
  s.hash_scheme = f.Next();
  s.hash_seed = f.Number();
  s.tenant_salt = f.Next();
  return s;
}

bool IsSaltHash(const std::string& s) { return s.size() == 39 && s.rfind("xxh128:", 0) == 0; }

bool SameIdentity(const NamespaceSpec& a, const NamespaceSpec& b) {
  return a.model_id == b.model_id && a.model_revision == b.model_revision &&
         a.weights_fingerprint == b.weights_fingerprint && a.tokenizer == b.tokenizer &&
         a.adapter == b.adapter && a.dtype == b.dtype && a.layout == b.layout &&
         a.block_tokens == b.block_tokens && a.block_bytes == b.block_bytes &&
         a.tp_rank == b.tp_rank && a.tp_size == b.tp_size && a.hash_scheme == b.hash_scheme &&
         a.hash_seed == b.hash_seed &&
         (a.tenant_salt == b.tenant_salt || IsSaltHash(a.tenant_salt) || IsSaltHash(b.tenant_salt));
}

void FuzzStructured(std::string_view in) {
  Fields f(in);
  NamespaceSpec a = Build(f);
  NamespaceSpec b = Build(f);
  for (NamespaceSpec* s : {&a, &b}) {
    if (!s->Validate().ok()) continue;
    auto r = NamespaceSpec::Decode(s->Encode());
    FUZZ_CHECK(r.ok());
    FUZZ_CHECK(r->Fingerprint() == s->Fingerprint() && r->Canonical() == s->Canonical());
    FUZZ_CHECK(r->name == s->name);
    NamespaceSpec renamed = *s;
    renamed.name += "x";
    FUZZ_CHECK(renamed.Fingerprint() == s->Fingerprint());
    if (!s->name.empty()) FUZZ_CHECK(s->DisplayName() == s->name);
  }
  if (a.Canonical() == b.Canonical()) FUZZ_CHECK(SameIdentity(a, b));
  if (SameIdentity(a, b) && a.tenant_salt == b.tenant_salt) {
    FUZZ_CHECK(a.Fingerprint() == b.Fingerprint());
  }
}

}  // namespace
}  // namespace kvtier

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  kvtier::FuzzDecode(in);
  kvtier::FuzzHex(in);
  if (size >= 16) kvtier::FuzzHex(in.substr(0, 16));
  kvtier::FuzzStructured(in);
  return 0;
}
