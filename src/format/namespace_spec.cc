// NamespaceSpec: canonical form, fingerprint, validation and serialisation.
//
// The fingerprint is the namespace id stored in every record and index key,
// so Canonical() is part of the on-disk format: changing the field order,
// names, escaping or number formatting changes every id and orphans every
// stored block. Add fields only under a new "kvtier-ns-vN" header.
#include <xxhash.h>

#include <array>
#include <cstring>
#include <optional>

#include "format/coding.h"
#include "kvtier/namespace.h"

namespace kvtier {

namespace {

constexpr char kCanonicalHeader[] = "kvtier-ns-v1\n";
constexpr uint8_t kEncodingVersion = 1;
constexpr size_t kMaxFieldBytes = 1024;
constexpr size_t kSaltHashBytes = 16;
// Decode() stores a salt it only has the hash of as this prefix + 32 hex digits.
constexpr std::string_view kSaltHashPrefix = "xxh128:";

constexpr char kHexDigits[] = "0123456789abcdef";

std::string ToHex(const uint8_t* p, size_t n) {
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kHexDigits[p[i] >> 4];
    s[2 * i + 1] = kHexDigits[p[i] & 0xf];
  }
  return s;
}

int HexValue(char c, bool allow_upper) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (allow_upper && c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

using SaltHash = std::array<uint8_t, kSaltHashBytes>;

// The 16-byte hash that stands for tenant_salt, or nullopt for "no salt".
// A salt of the exact form Decode() produces ("xxh128:" + 32 lowercase hex
// digits) already is a hash and is taken as is, so that a decoded spec has the
// fingerprint of the original. Any other string is hashed (XXH3-128, bytes in
// XXH128's canonical big-endian order).
std::optional<SaltHash> HashSalt(const std::string& salt) {
  if (salt.empty()) return std::nullopt;
  SaltHash out;
  if (salt.size() == kSaltHashPrefix.size() + 2 * kSaltHashBytes &&
      std::string_view(salt).substr(0, kSaltHashPrefix.size()) == kSaltHashPrefix) {
    const char* hex = salt.data() + kSaltHashPrefix.size();
    bool ok = true;
    for (size_t i = 0; i < kSaltHashBytes && ok; ++i) {
      const int hi = HexValue(hex[2 * i], /*allow_upper=*/false);
      const int lo = HexValue(hex[2 * i + 1], /*allow_upper=*/false);
      ok = hi >= 0 && lo >= 0;
      out[i] = static_cast<uint8_t>((hi << 4) | lo);
    }
    if (ok) return out;
  }
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(salt.data(), salt.size()));
  static_assert(sizeof(c.digest) == kSaltHashBytes);
  std::memcpy(out.data(), c.digest, kSaltHashBytes);
  return out;
}

// Percent-escapes every byte that could end a field ('\n'), split name from
// value ('='), or start an escape ('%'), plus the other control bytes so the
// canonical text stays printable. The mapping is injective, so two different
// values never share a canonical form.
void AppendEscaped(std::string* out, std::string_view v) {
  for (char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f || c == '%' || c == '=') {
      out->push_back('%');
      out->push_back("0123456789ABCDEF"[c >> 4]);
      out->push_back("0123456789ABCDEF"[c & 0xf]);
    } else {
      out->push_back(ch);
    }
  }
}

void AppendField(std::string* out, std::string_view name, std::string_view value) {
  out->append(name);
  out->push_back('=');
  AppendEscaped(out, value);
  out->push_back('\n');
}

void AppendLengthPrefixed(std::string* out, std::string_view v) {
  format::AppendFixed32(out, static_cast<uint32_t>(v.size()));
  out->append(v);
}

// Bounds-checked reader over Decode()'s input: every Get fails instead of
// reading past the end.
class Reader {
 public:
  explicit Reader(std::string_view in) : p_(reinterpret_cast<const uint8_t*>(in.data())),
                                         left_(in.size()) {}
  size_t left() const { return left_; }

  bool GetU8(uint8_t* v) {
    if (left_ < 1) return false;
    *v = *p_;
    Skip(1);
    return true;
  }
  bool GetU32(uint32_t* v) {
    if (left_ < 4) return false;
    *v = format::GetFixed32(p_);
    Skip(4);
    return true;
  }
  bool GetU64(uint64_t* v) {
    if (left_ < 8) return false;
    *v = format::GetFixed64(p_);
    Skip(8);
    return true;
  }
  // A u32 length then that many bytes; the length is checked against
  // `max_len` before anything is copied.
  Status GetString(std::string_view field, size_t max_len, std::string* v) {
    uint32_t n = 0;
    if (!GetU32(&n)) return Status::Corruption("namespace spec truncated in " + std::string(field));
    if (n > max_len) {
      return Status::Corruption("namespace spec field " + std::string(field) + " is " +
                                std::to_string(n) + " bytes (limit " + std::to_string(max_len) +
                                ")");
    }
    if (n > left_) return Status::Corruption("namespace spec truncated in " + std::string(field));
    v->assign(reinterpret_cast<const char*>(p_), n);
    Skip(n);
    return Status::OK();
  }

 private:
  void Skip(size_t n) {
    p_ += n;
    left_ -= n;
  }
  const uint8_t* p_;
  size_t left_;
};

}  // namespace

std::string NamespaceSpec::Canonical() const {
  std::string s = kCanonicalHeader;
  AppendField(&s, "model_id", model_id);
  AppendField(&s, "model_revision", model_revision);
  AppendField(&s, "weights_fingerprint", weights_fingerprint);
  AppendField(&s, "tokenizer", tokenizer);
  AppendField(&s, "adapter", adapter);
  AppendField(&s, "dtype", dtype);
  AppendField(&s, "layout", layout);
  AppendField(&s, "block_tokens", std::to_string(block_tokens));
  AppendField(&s, "block_bytes", std::to_string(block_bytes));
  AppendField(&s, "tp_rank", std::to_string(tp_rank));
  AppendField(&s, "tp_size", std::to_string(tp_size));
  AppendField(&s, "hash_scheme", hash_scheme);
  AppendField(&s, "hash_seed", std::to_string(hash_seed));
  const std::optional<SaltHash> salt = HashSalt(tenant_salt);
  AppendField(&s, "salt_xxh128", salt ? ToHex(salt->data(), salt->size()) : std::string());
  return s;
}

NamespaceId NamespaceSpec::Fingerprint() const {
  const std::string c = Canonical();
  const NamespaceId id = XXH3_64bits(c.data(), c.size());
  // 0 is reserved ("all namespaces" in ListBlocks, "unset" elsewhere).
  return id == 0 ? 1 : id;
}

std::string NamespaceSpec::DisplayName() const {
  if (!name.empty()) return name;
  std::string_view model = model_id;
  const size_t slash = model.rfind('/');
  if (slash != std::string_view::npos) model = model.substr(slash + 1);
  std::string out;
  for (char c : model) out.push_back((c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c);
  if (out.empty()) out = "model";
  out += '/';
  out += dtype.empty() ? std::string("any") : dtype;
  out += "/tp" + std::to_string(tp_rank) + "of" + std::to_string(tp_size);
  if (!adapter.empty()) {
    out += '/';
    out += adapter;
  }
  return out;
}

Status NamespaceSpec::Validate() const {
  if (tp_size < 1) return Status::InvalidArgument("namespace tp_size must be at least 1");
  if (tp_rank >= tp_size) {
    return Status::InvalidArgument("namespace tp_rank " + std::to_string(tp_rank) +
                                   " must be less than tp_size " + std::to_string(tp_size));
  }
  const std::pair<const char*, const std::string*> strings[] = {
      {"name", &name},
      {"model_id", &model_id},
      {"model_revision", &model_revision},
      {"weights_fingerprint", &weights_fingerprint},
      {"tokenizer", &tokenizer},
      {"adapter", &adapter},
      {"dtype", &dtype},
      {"layout", &layout},
      {"hash_scheme", &hash_scheme},
      {"tenant_salt", &tenant_salt},
  };
  for (const auto& [field, value] : strings) {
    if (value->size() > kMaxFieldBytes) {
      return Status::InvalidArgument("namespace " + std::string(field) + " is " +
                                     std::to_string(value->size()) + " bytes (limit " +
                                     std::to_string(kMaxFieldBytes) + ")");
    }
  }
  // Names are typed on command lines and printed in tables.
  for (char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7f) {
      return Status::InvalidArgument("namespace name must not contain whitespace or control "
                                     "characters");
    }
  }
  // FindNamespace() accepts a name or a 16-hex-digit id; a name of that form
  // would be ambiguous.
  if (NamespaceIdFromHex(name).ok()) {
    return Status::InvalidArgument("namespace name '" + name +
                                   "' looks like a namespace id (16 hex digits)");
  }
  return Status::OK();
}

// Layout (version 1), all integers little-endian, strings as u32 length + bytes:
//   u8 version=1
//   str name, model_id, model_revision, weights_fingerprint, tokenizer,
//       adapter, dtype, layout
//   u32 block_tokens, u64 block_bytes, u32 tp_rank, u32 tp_size
//   str hash_scheme
//   u64 hash_seed
//   str salt_hash  (0 bytes: no salt; 16 bytes: XXH3-128 of the salt)
std::string NamespaceSpec::Encode() const {
  std::string s;
  s.push_back(static_cast<char>(kEncodingVersion));
  AppendLengthPrefixed(&s, name);
  AppendLengthPrefixed(&s, model_id);
  AppendLengthPrefixed(&s, model_revision);
  AppendLengthPrefixed(&s, weights_fingerprint);
  AppendLengthPrefixed(&s, tokenizer);
  AppendLengthPrefixed(&s, adapter);
  AppendLengthPrefixed(&s, dtype);
  AppendLengthPrefixed(&s, layout);
  format::AppendFixed32(&s, block_tokens);
  format::AppendFixed64(&s, block_bytes);
  format::AppendFixed32(&s, tp_rank);
  format::AppendFixed32(&s, tp_size);
  AppendLengthPrefixed(&s, hash_scheme);
  format::AppendFixed64(&s, hash_seed);
  // The salt itself is never stored: only what the fingerprint needs.
  const std::optional<SaltHash> salt = HashSalt(tenant_salt);
  AppendLengthPrefixed(&s, salt ? std::string_view(reinterpret_cast<const char*>(salt->data()),
                                                   salt->size())
                                : std::string_view());
  return s;
}

Result<NamespaceSpec> NamespaceSpec::Decode(std::string_view bytes) {
  Reader r(bytes);
  uint8_t version = 0;
  if (!r.GetU8(&version)) return Status::Corruption("namespace spec is empty");
  if (version > kEncodingVersion) {
    return Status::NotSupported("namespace spec encoding version " + std::to_string(version) +
                                " is newer than this build supports (" +
                                std::to_string(kEncodingVersion) + ")");
  }
  if (version == 0) return Status::Corruption("namespace spec encoding version 0");

  NamespaceSpec s;
  KVTIER_RETURN_IF_ERROR(r.GetString("name", kMaxFieldBytes, &s.name));
  KVTIER_RETURN_IF_ERROR(r.GetString("model_id", kMaxFieldBytes, &s.model_id));
  KVTIER_RETURN_IF_ERROR(r.GetString("model_revision", kMaxFieldBytes, &s.model_revision));
  KVTIER_RETURN_IF_ERROR(
      r.GetString("weights_fingerprint", kMaxFieldBytes, &s.weights_fingerprint));
  KVTIER_RETURN_IF_ERROR(r.GetString("tokenizer", kMaxFieldBytes, &s.tokenizer));
  KVTIER_RETURN_IF_ERROR(r.GetString("adapter", kMaxFieldBytes, &s.adapter));
  KVTIER_RETURN_IF_ERROR(r.GetString("dtype", kMaxFieldBytes, &s.dtype));
  KVTIER_RETURN_IF_ERROR(r.GetString("layout", kMaxFieldBytes, &s.layout));
  if (!r.GetU32(&s.block_tokens) || !r.GetU64(&s.block_bytes) || !r.GetU32(&s.tp_rank) ||
      !r.GetU32(&s.tp_size)) {
    return Status::Corruption("namespace spec truncated in block/tp fields");
  }
  KVTIER_RETURN_IF_ERROR(r.GetString("hash_scheme", kMaxFieldBytes, &s.hash_scheme));
  if (!r.GetU64(&s.hash_seed)) return Status::Corruption("namespace spec truncated in hash_seed");
  std::string salt_hash;
  KVTIER_RETURN_IF_ERROR(r.GetString("salt_hash", kSaltHashBytes, &salt_hash));
  if (!salt_hash.empty()) {
    if (salt_hash.size() != kSaltHashBytes) {
      return Status::Corruption("namespace spec salt hash is " +
                                std::to_string(salt_hash.size()) + " bytes, expected 16");
    }
    s.tenant_salt = std::string(kSaltHashPrefix) +
                    ToHex(reinterpret_cast<const uint8_t*>(salt_hash.data()), salt_hash.size());
  }
  if (r.left() != 0) {
    return Status::Corruption("namespace spec has " + std::to_string(r.left()) +
                              " trailing bytes");
  }
  if (Status st = s.Validate(); !st.ok()) {
    return Status::Corruption("decoded namespace spec is invalid: " + st.message());
  }
  return s;
}

std::string NamespaceIdToHex(NamespaceId id) {
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i) {
    s[i] = kHexDigits[id & 0xf];
    id >>= 4;
  }
  return s;
}

Result<NamespaceId> NamespaceIdFromHex(std::string_view hex) {
  if (hex.size() != 16) {
    return Status::InvalidArgument("namespace id must be 16 hex digits, got '" +
                                   std::string(hex.substr(0, 64)) + "'");
  }
  NamespaceId id = 0;
  for (char c : hex) {
    const int v = HexValue(c, /*allow_upper=*/true);
    if (v < 0) {
      return Status::InvalidArgument("namespace id must be 16 hex digits, got '" +
                                     std::string(hex) + "'");
    }
    id = (id << 4) | static_cast<NamespaceId>(v);
  }
  return id;
}

}  // namespace kvtier
