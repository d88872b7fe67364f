#include "kvtier/namespace.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

namespace kvtier {
namespace {

NamespaceSpec TestSpec() {
  NamespaceSpec s;
  s.name = "qwen3/bf16/tp0";
  s.model_id = "Qwen/Qwen3-0.6B";
  s.model_revision = "c1899de";
  s.weights_fingerprint = "sha256:0123";
  s.tokenizer = "Qwen/Qwen3-0.6B@c1899de";
  s.adapter = "";
  s.dtype = "bf16";
  s.layout = "vllm-cross-layer";
  s.block_tokens = 16;
  s.block_bytes = 1 << 20;
  s.tp_rank = 0;
  s.tp_size = 2;
  s.hash_scheme = "sha256_cbor";
  s.hash_seed = 42;
  s.tenant_salt = "";
  return s;
}

TEST(NamespaceSpecTest, SameSpecSameId) {
  EXPECT_EQ(TestSpec().Fingerprint(), TestSpec().Fingerprint());
  EXPECT_EQ(TestSpec().Canonical(), TestSpec().Canonical());
  EXPECT_NE(TestSpec().Fingerprint(), 0u);
}

TEST(NamespaceSpecTest, CanonicalIsStable) {
  // The canonical text is part of the on-disk format: ids of stored blocks
  // depend on it. If this test fails, every existing store is orphaned.
  NamespaceSpec s;
  s.model_id = "m";
  s.tenant_salt = "";
  EXPECT_EQ(s.Canonical(),
            "kvtier-ns-v1\n"
            "model_id=m\n"
            "model_revision=\n"
            "weights_fingerprint=\n"
            "tokenizer=\n"
            "adapter=\n"
            "dtype=\n"
            "layout=\n"
            "block_tokens=0\n"
            "block_bytes=0\n"
            "tp_rank=0\n"
            "tp_size=1\n"
            "hash_scheme=\n"
            "hash_seed=0\n"
            "salt_xxh128=\n");
  EXPECT_EQ(NamespaceIdToHex(s.Fingerprint()).size(), 16u);
}

TEST(NamespaceSpecTest, EachIdentityFieldChangesId) {
  const std::vector<std::pair<const char*, std::function<void(NamespaceSpec&)>>> changes = {
      {"model_id", [](NamespaceSpec& s) { s.model_id += "x"; }},
      {"model_revision", [](NamespaceSpec& s) { s.model_revision = "v2"; }},
      {"weights_fingerprint", [](NamespaceSpec& s) { s.weights_fingerprint = "sha256:9"; }},
      {"tokenizer", [](NamespaceSpec& s) { s.tokenizer = "other"; }},
      {"adapter", [](NamespaceSpec& s) { s.adapter = "lora-1"; }},
      {"dtype", [](NamespaceSpec& s) { s.dtype = "fp8_e4m3"; }},
      {"layout", [](NamespaceSpec& s) { s.layout = "sglang-page-first"; }},
      {"block_tokens", [](NamespaceSpec& s) { s.block_tokens = 32; }},
      {"block_bytes", [](NamespaceSpec& s) { s.block_bytes = 0; }},
      {"tp_rank", [](NamespaceSpec& s) { s.tp_rank = 1; }},
      {"tp_size", [](NamespaceSpec& s) { s.tp_size = 4; }},
      {"hash_scheme", [](NamespaceSpec& s) { s.hash_scheme = "xxhash"; }},
      {"hash_seed", [](NamespaceSpec& s) { s.hash_seed = 43; }},
      {"tenant_salt", [](NamespaceSpec& s) { s.tenant_salt = "tenant-a"; }},
  };
  const NamespaceId base = TestSpec().Fingerprint();
  std::set<NamespaceId> ids = {base};
  for (const auto& [field, change] : changes) {
    NamespaceSpec s = TestSpec();
    change(s);
    EXPECT_NE(s.Fingerprint(), base) << field;
    ids.insert(s.Fingerprint());
  }
  EXPECT_EQ(ids.size(), changes.size() + 1) << "two single-field changes collided";
}

TEST(NamespaceSpecTest, NameIsNotIdentity) {
  NamespaceSpec a = TestSpec();
  NamespaceSpec b = TestSpec();
  b.name = "something-else";
  EXPECT_EQ(a.Fingerprint(), b.Fingerprint());
  b.name = "";
  EXPECT_EQ(a.Fingerprint(), b.Fingerprint());
}

TEST(NamespaceSpecTest, SaltChangesIdAndIsNotInCanonical) {
  NamespaceSpec a = TestSpec();
  NamespaceSpec b = TestSpec();
  NamespaceSpec c = TestSpec();
  b.tenant_salt = "tenant-a-secret";
  c.tenant_salt = "tenant-b-secret";
  EXPECT_NE(a.Fingerprint(), b.Fingerprint());
  EXPECT_NE(b.Fingerprint(), c.Fingerprint());
  EXPECT_EQ(b.Canonical().find("tenant-a-secret"), std::string::npos);
  EXPECT_NE(b.Canonical().find("salt_xxh128="), std::string::npos);
}

TEST(NamespaceSpecTest, EscapingPreventsFieldForgery) {
  // A value containing "\nfield=" must not read as another field.
  NamespaceSpec a = TestSpec();
  a.model_id = "m\nmodel_revision=x";
  a.model_revision = "";
  NamespaceSpec b = TestSpec();
  b.model_id = "m";
  b.model_revision = "x\nmodel_revision=";
  EXPECT_NE(a.Canonical(), b.Canonical());
  EXPECT_NE(a.Fingerprint(), b.Fingerprint());
  // Shifting a boundary between two adjacent fields changes the id.
  NamespaceSpec c = TestSpec();
  c.dtype = "bf16=";
  c.layout = "x";
  NamespaceSpec d = TestSpec();
  d.dtype = "bf16";
  d.layout = "=x";
  EXPECT_NE(c.Fingerprint(), d.Fingerprint());
  // Every line of the canonical form is exactly one field.
  NamespaceSpec e = TestSpec();
  e.tokenizer = "a\nb=c\r%0A";
  const std::string canon = e.Canonical();
  size_t lines = 0;
  for (char ch : canon) lines += ch == '\n';
  EXPECT_EQ(lines, 15u);  // header + 14 fields
  // The escape character itself is escaped, so "%0A" and "\n" differ.
  NamespaceSpec f = TestSpec();
  f.tokenizer = "a%0Ab=c\r%0A";
  EXPECT_NE(e.Fingerprint(), f.Fingerprint());
}

TEST(NamespaceSpecTest, DisplayName) {
  NamespaceSpec s = TestSpec();
  EXPECT_EQ(s.DisplayName(), "qwen3/bf16/tp0");
  s.name = "";
  EXPECT_EQ(s.DisplayName(), "qwen3-0.6b/bf16/tp0of2");
  s.dtype = "";
  s.adapter = "my-lora";
  EXPECT_EQ(s.DisplayName(), "qwen3-0.6b/any/tp0of2/my-lora");
  s.model_id = "plain-Model";
  EXPECT_EQ(s.DisplayName(), "plain-model/any/tp0of2/my-lora");
}

TEST(NamespaceSpecTest, ValidateAcceptsGoodSpec) {
  EXPECT_TRUE(TestSpec().Validate().ok()) << TestSpec().Validate().ToString();
  EXPECT_TRUE(NamespaceSpec().Validate().ok());
}

TEST(NamespaceSpecTest, ValidateErrorsNameTheField) {
  struct Case {
    const char* want_in_message;
    std::function<void(NamespaceSpec&)> change;
  };
  const std::vector<Case> cases = {
      {"tp_size", [](NamespaceSpec& s) { s.tp_size = 0; s.tp_rank = 0; }},
      {"tp_rank", [](NamespaceSpec& s) { s.tp_rank = 2; }},
      {"model_id", [](NamespaceSpec& s) { s.model_id.assign(1025, 'm'); }},
      {"tokenizer", [](NamespaceSpec& s) { s.tokenizer.assign(5000, 't'); }},
      {"tenant_salt", [](NamespaceSpec& s) { s.tenant_salt.assign(1025, 's'); }},
      {"name", [](NamespaceSpec& s) { s.name.assign(1025, 'n'); }},
      {"name", [](NamespaceSpec& s) { s.name = "has space"; }},
      {"name", [](NamespaceSpec& s) { s.name = "tab\there"; }},
      {"name", [](NamespaceSpec& s) { s.name = "nl\n"; }},
      {"name", [](NamespaceSpec& s) { s.name = std::string("nul\0", 4); }},
      {"name", [](NamespaceSpec& s) { s.name = "0123456789abcdef"; }},
  };
  for (const Case& c : cases) {
    NamespaceSpec s = TestSpec();
    c.change(s);
    Status st = s.Validate();
    ASSERT_FALSE(st.ok()) << c.want_in_message;
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_NE(st.message().find(c.want_in_message), std::string::npos) << st.message();
  }
  NamespaceSpec ok = TestSpec();
  ok.model_id.assign(1024, 'm');
  EXPECT_TRUE(ok.Validate().ok());
}

void ExpectSameFields(const NamespaceSpec& a, const NamespaceSpec& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.model_id, b.model_id);
  EXPECT_EQ(a.model_revision, b.model_revision);
  EXPECT_EQ(a.weights_fingerprint, b.weights_fingerprint);
  EXPECT_EQ(a.tokenizer, b.tokenizer);
  EXPECT_EQ(a.adapter, b.adapter);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.layout, b.layout);
  EXPECT_EQ(a.block_tokens, b.block_tokens);
  EXPECT_EQ(a.block_bytes, b.block_bytes);
  EXPECT_EQ(a.tp_rank, b.tp_rank);
  EXPECT_EQ(a.tp_size, b.tp_size);
  EXPECT_EQ(a.hash_scheme, b.hash_scheme);
  EXPECT_EQ(a.hash_seed, b.hash_seed);
}

TEST(NamespaceSpecTest, EncodeDecodeRoundTrip) {
  NamespaceSpec s = TestSpec();
  s.adapter = "lora\nwith=odd%chars";
  auto r = NamespaceSpec::Decode(s.Encode());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectSameFields(s, *r);
  EXPECT_EQ(r->tenant_salt, "");
  EXPECT_EQ(r->Fingerprint(), s.Fingerprint());
  EXPECT_EQ(r->Encode(), s.Encode());
}

TEST(NamespaceSpecTest, SaltStoredOnlyAsHashAndFingerprintStable) {
  NamespaceSpec s = TestSpec();
  s.tenant_salt = "tenant-secret-value";
  const std::string enc = s.Encode();
  EXPECT_EQ(enc.find("tenant-secret-value"), std::string::npos);
  auto r = NamespaceSpec::Decode(enc);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectSameFields(s, *r);
  EXPECT_EQ(r->tenant_salt.rfind("xxh128:", 0), 0u) << r->tenant_salt;
  EXPECT_EQ(r->tenant_salt.size(), 7u + 32u);
  EXPECT_EQ(r->Fingerprint(), s.Fingerprint());
  EXPECT_EQ(r->Canonical(), s.Canonical());
  // And again: decode(encode(decode(...))) is a fixed point.
  auto r2 = NamespaceSpec::Decode(r->Encode());
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->tenant_salt, r->tenant_salt);
  EXPECT_EQ(r2->Fingerprint(), s.Fingerprint());
  EXPECT_EQ(r->Encode(), enc);
}

TEST(NamespaceSpecTest, MalformedHashPrefixIsAnOrdinarySalt) {
  // Only "xxh128:" + 32 lowercase hex digits is taken as a hash.
  NamespaceSpec a = TestSpec();
  a.tenant_salt = "xxh128:not-hex";
  NamespaceSpec b = TestSpec();
  b.tenant_salt = "xxh128:NOT-HEX";
  EXPECT_NE(a.Fingerprint(), b.Fingerprint());
  EXPECT_NE(a.Fingerprint(), TestSpec().Fingerprint());
  auto r = NamespaceSpec::Decode(a.Encode());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->Fingerprint(), a.Fingerprint());
}

TEST(NamespaceSpecTest, DecodeRejectsTruncatedInput) {
  NamespaceSpec s = TestSpec();
  s.tenant_salt = "salt";
  const std::string enc = s.Encode();
  for (size_t n = 0; n < enc.size(); ++n) {
    auto r = NamespaceSpec::Decode(std::string_view(enc).substr(0, n));
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), Code::kCorruption) << n;
  }
}

TEST(NamespaceSpecTest, DecodeRejectsTrailingAndOversized) {
  const std::string enc = TestSpec().Encode();
  EXPECT_EQ(NamespaceSpec::Decode(enc + "x").status().code(), Code::kCorruption);

  NamespaceSpec big = TestSpec();
  big.model_id.assign(1025, 'm');  // Encode does not validate; Decode must refuse.
  EXPECT_EQ(NamespaceSpec::Decode(big.Encode()).status().code(), Code::kCorruption);

  // A length prefix of 4 GiB - 1 must fail without allocating it.
  std::string huge = enc.substr(0, 1);
  huge += std::string("\xff\xff\xff\xff", 4);
  EXPECT_EQ(NamespaceSpec::Decode(huge).status().code(), Code::kCorruption);

  NamespaceSpec bad_tp = TestSpec();
  bad_tp.tp_rank = 5;
  EXPECT_EQ(NamespaceSpec::Decode(bad_tp.Encode()).status().code(), Code::kCorruption);
}

TEST(NamespaceSpecTest, DecodeVersionByte) {
  std::string enc = TestSpec().Encode();
  ASSERT_EQ(enc[0], 1);
  enc[0] = 2;
  EXPECT_EQ(NamespaceSpec::Decode(enc).status().code(), Code::kNotSupported);
  enc[0] = 0;
  EXPECT_EQ(NamespaceSpec::Decode(enc).status().code(), Code::kCorruption);
  EXPECT_EQ(NamespaceSpec::Decode("").status().code(), Code::kCorruption);
}

TEST(NamespaceIdHexTest, RoundTrip) {
  for (NamespaceId id : {NamespaceId{1}, NamespaceId{0xdeadbeef}, ~NamespaceId{0},
                         TestSpec().Fingerprint()}) {
    const std::string hex = NamespaceIdToHex(id);
    ASSERT_EQ(hex.size(), 16u);
    auto r = NamespaceIdFromHex(hex);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, id);
  }
  EXPECT_EQ(NamespaceIdToHex(0xabc), "0000000000000abc");
  EXPECT_EQ(NamespaceIdFromHex("00000000DEADBEEF").value_or(0), 0xdeadbeefu);
}

TEST(NamespaceIdHexTest, BadHexRejected) {
  for (std::string_view bad : {"", "0", "123456789abcdef", "0123456789abcdef0",
                               "0123456789abcdeg", "0x23456789abcdef", " 123456789abcdef",
                               "0123456789abcde\n"}) {
    auto r = NamespaceIdFromHex(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
}

}  // namespace
}  // namespace kvtier
