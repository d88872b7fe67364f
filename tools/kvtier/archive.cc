#include "archive.h"

#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

namespace kvtier::cli {

namespace {

constexpr char kMagic[8] = {'K', 'V', 'T', 'A', 'R', 'C', 'H', '1'};
constexpr char kEndMagic[8] = {'K', 'V', 'T', 'A', 'E', 'N', 'D', '1'};
constexpr size_t kTrailerBytes = 40;
constexpr size_t kMaxSpecBytes = 64 << 10;

void Put16(std::string* s, uint16_t v) {
  for (int i = 0; i < 2; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}
void Put32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}
void Put64(std::string* s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t Get(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

// ---- Writer ----

struct ArchiveWriter::Z {
  ZSTD_CStream* cs = nullptr;
  std::vector<char> out;
  ~Z() { ZSTD_freeCStream(cs); }
};

struct XxhState {
  XXH3_state_t* s = XXH3_createState();
  XxhState() { XXH3_64bits_reset(s); }
  ~XxhState() { XXH3_freeState(s); }
};

ArchiveWriter::~ArchiveWriter() {
  if (f_ != nullptr) std::fclose(f_);
  if (!finished_ && !tmp_.empty()) ::unlink(tmp_.c_str());
  if (hash_ != nullptr) XXH3_freeState(hash_);
}

Result<std::unique_ptr<ArchiveWriter>> ArchiveWriter::Create(const std::string& path, NamespaceId id,
                                                             const NamespaceSpec& spec, int zstd_level) {
  std::unique_ptr<ArchiveWriter> w(new ArchiveWriter());
  w->path_ = path;
  w->tmp_ = path + ".tmp";
  w->f_ = std::fopen(w->tmp_.c_str(), "wbx");
  if (w->f_ == nullptr && errno == EEXIST) {
    // A leftover from an interrupted export of ours.
    ::unlink(w->tmp_.c_str());
    w->f_ = std::fopen(w->tmp_.c_str(), "wbx");
  }
  if (w->f_ == nullptr) {
    const std::string why = ErrnoText();
    w->tmp_.clear();
    return Status::IOError("cannot create " + path + ".tmp: " + why);
  }
  w->hash_ = XXH3_createState();
  XXH3_64bits_reset(w->hash_);
  if (zstd_level > 0) {
    w->z_ = std::make_unique<Z>();
    w->z_->cs = ZSTD_createCStream();
    w->z_->out.resize(ZSTD_CStreamOutSize());
    size_t r = ZSTD_initCStream(w->z_->cs, zstd_level);
    if (ZSTD_isError(r)) return Status::InvalidArgument(std::string("zstd: ") + ZSTD_getErrorName(r));
  }
  const std::string encoded = spec.Encode();
  std::string h(kMagic, sizeof kMagic);
  Put32(&h, kArchiveVersion);
  Put32(&h, zstd_level > 0 ? kArchiveFlagZstd : 0);
  Put64(&h, static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count()));
  Put64(&h, id);
  Put32(&h, static_cast<uint32_t>(encoded.size()));
  h += encoded;
  Put64(&h, XXH3_64bits(h.data(), h.size()));
  KVTIER_RETURN_IF_ERROR(w->WriteRaw(h.data(), h.size()));
  return w;
}

Status ArchiveWriter::WriteRaw(const void* p, size_t n) {
  if (n == 0) return Status::OK();
  if (std::fwrite(p, 1, n, f_) != n) return Status::IOError("writing " + tmp_ + ": " + ErrnoText());
  XXH3_64bits_update(hash_, p, n);
  file_bytes_ += n;
  return Status::OK();
}

Status ArchiveWriter::WriteBody(const void* p, size_t n, bool end) {
  if (!z_) {
    body_bytes_ += n;
    return WriteRaw(p, n);
  }
  ZSTD_inBuffer in{p, n, 0};
  for (;;) {
    ZSTD_outBuffer out{z_->out.data(), z_->out.size(), 0};
    const size_t r = ZSTD_compressStream2(z_->cs, &out, &in, end ? ZSTD_e_end : ZSTD_e_continue);
    if (ZSTD_isError(r)) return Status::IOError(std::string("zstd compression failed: ") + ZSTD_getErrorName(r));
    body_bytes_ += out.pos;
    KVTIER_RETURN_IF_ERROR(WriteRaw(z_->out.data(), out.pos));
    if (end ? r == 0 : in.pos == in.size) return Status::OK();
  }
}

Status ArchiveWriter::Add(std::string_view key, const void* payload, uint64_t size) {
  if (key.empty() || key.size() > 255) return Status::InvalidArgument("archive key must be 1 to 255 bytes");
  std::string e;
  e.push_back('B');
  Put16(&e, static_cast<uint16_t>(key.size()));
  e.append(key);
  Put64(&e, size);
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, e.data(), e.size());
  XXH3_64bits_update(st, payload, size);
  const uint64_t sum = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  std::string tail;
  Put64(&tail, sum);
  KVTIER_RETURN_IF_ERROR(WriteBody(e.data(), e.size()));
  KVTIER_RETURN_IF_ERROR(WriteBody(payload, size));
  KVTIER_RETURN_IF_ERROR(WriteBody(tail.data(), tail.size()));
  ++blocks_;
  payload_bytes_ += size;
  return Status::OK();
}

Status ArchiveWriter::Finish() {
  std::string e;
  e.push_back('E');
  Put64(&e, blocks_);
  Put64(&e, payload_bytes_);
  Put64(&e, XXH3_64bits(e.data(), e.size()));
  KVTIER_RETURN_IF_ERROR(WriteBody(e.data(), e.size(), /*end=*/true));
  std::string t(kEndMagic, sizeof kEndMagic);
  Put64(&t, blocks_);
  Put64(&t, payload_bytes_);
  Put64(&t, body_bytes_);
  KVTIER_RETURN_IF_ERROR(WriteRaw(t.data(), t.size()));
  std::string sum;
  Put64(&sum, XXH3_64bits_digest(hash_));
  KVTIER_RETURN_IF_ERROR(WriteRaw(sum.data(), sum.size()));
  if (std::fflush(f_) != 0 || ::fsync(fileno(f_)) != 0) return Status::IOError("syncing " + tmp_ + ": " + ErrnoText());
  if (std::fclose(f_) != 0) {
    f_ = nullptr;
    return Status::IOError("closing " + tmp_ + ": " + ErrnoText());
  }
  f_ = nullptr;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) return Status::IOError("renaming " + tmp_ + " to " + path_ + ": " + ErrnoText());
  finished_ = true;
  return Status::OK();
}

// ---- Reader ----

namespace {

// Sequential reads of [0, limit) of a file; every byte read is hashed.
class FileIn {
 public:
  FileIn(FILE* f, std::string path, XXH3_state_t* hash) : f_(f), path_(std::move(path)), hash_(hash) {}
  void set_limit(uint64_t limit) { limit_ = limit; }
  uint64_t pos() const { return pos_; }
  // Up to n bytes (fewer only at the limit).
  Result<size_t> ReadSome(void* p, size_t n) {
    n = static_cast<size_t>(std::min<uint64_t>(n, limit_ - pos_));
    if (n == 0) return size_t{0};
    const size_t got = std::fread(p, 1, n, f_);
    if (got != n) {
      if (std::ferror(f_)) return Status::IOError("reading " + path_ + ": " + ErrnoText());
      return Status::Corruption(path_ + ": archive is truncated at byte " + std::to_string(pos_ + got));
    }
    XXH3_64bits_update(hash_, p, n);
    pos_ += n;
    return n;
  }
  Status ReadExact(void* p, size_t n, const char* what) {
    auto r = ReadSome(p, n);
    if (!r.ok()) return r.status();
    if (*r != n) return Status::Corruption(path_ + ": archive ends inside the " + std::string(what));
    return Status::OK();
  }

 private:
  FILE* f_;
  std::string path_;
  XXH3_state_t* hash_;
  uint64_t pos_ = 0, limit_ = 0;
};

// The body: raw bytes of the file, or one zstd frame decompressed.
class BodyIn {
 public:
  BodyIn(FileIn* in, std::string path, bool zstd) : in_(in), path_(std::move(path)) {
    if (zstd) {
      ds_ = ZSTD_createDStream();
      ZSTD_initDStream(ds_);
      inbuf_.resize(ZSTD_DStreamInSize());
    }
  }
  ~BodyIn() { ZSTD_freeDStream(ds_); }

  Status Read(void* p, size_t n, const char* what) {
    if (ds_ == nullptr) return in_->ReadExact(p, n, what);
    ZSTD_outBuffer out{p, n, 0};
    while (out.pos < out.size) {
      if (zin_.pos == zin_.size) {
        auto got = in_->ReadSome(inbuf_.data(), inbuf_.size());
        if (!got.ok()) return got.status();
        if (*got == 0) return Status::Corruption(path_ + ": compressed body ends inside the " + std::string(what));
        zin_ = {inbuf_.data(), *got, 0};
      }
      const size_t r = ZSTD_decompressStream(ds_, &out, &zin_);
      if (ZSTD_isError(r)) return Status::Corruption(path_ + ": zstd: " + ZSTD_getErrorName(r));
      if (r == 0 && out.pos < out.size) {
        return Status::Corruption(path_ + ": compressed body ends inside the " + std::string(what));
      }
      last_ret_ = r;
    }
    return Status::OK();
  }
  // After the end entry: the zstd frame must be complete and nothing left.
  Status CheckEnd(uint64_t body_end) {
    if (ds_ != nullptr && (last_ret_ != 0 || zin_.pos != zin_.size))
      return Status::Corruption(path_ + ": data after the end of the compressed body");
    if (in_->pos() != body_end) return Status::Corruption(path_ + ": data after the end entry");
    return Status::OK();
  }

 private:
  FileIn* in_;
  std::string path_;
  ZSTD_DStream* ds_ = nullptr;
  std::vector<char> inbuf_;
  ZSTD_inBuffer zin_{nullptr, 0, 0};
  size_t last_ret_ = 1;
};

}  // namespace

Result<ArchiveSummary> ReadArchive(
    const std::string& path,
    const std::function<Status(const ArchiveHeader&, std::string_view, std::string_view)>& on_block,
    const std::function<void(uint64_t, uint64_t)>& progress) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Status::FromErrno(errno, "cannot open archive " + path);
  std::unique_ptr<FILE, int (*)(FILE*)> closer(f, &std::fclose);
  struct stat stt;
  if (::fstat(fileno(f), &stt) != 0) return Status::FromErrno(errno, "stat " + path);
  if (!S_ISREG(stt.st_mode)) return Status::InvalidArgument(path + " is not a regular file");
  const uint64_t size = static_cast<uint64_t>(stt.st_size);
  XxhState hash;
  FileIn in(f, path, hash.s);
  ArchiveSummary sum;
  sum.file_bytes = size;
  if (size < sizeof kMagic + 28 + 8 + kTrailerBytes) return Status::Corruption(path + ": too short to be a kvtier archive");
  in.set_limit(size - kTrailerBytes);

  // Header.
  uint8_t fixed[36];
  KVTIER_RETURN_IF_ERROR(in.ReadExact(fixed, sizeof fixed, "header"));
  if (std::memcmp(fixed, kMagic, sizeof kMagic) != 0) return Status::Corruption(path + ": not a kvtier archive (bad magic)");
  const auto spec_len = static_cast<uint32_t>(Get(fixed + 32, 4));
  if (spec_len > kMaxSpecBytes) return Status::Corruption(path + ": header claims a " + std::to_string(spec_len) + "-byte namespace spec");
  std::string spec(spec_len, '\0');
  KVTIER_RETURN_IF_ERROR(in.ReadExact(spec.data(), spec.size(), "header"));
  uint8_t hsum[8];
  KVTIER_RETURN_IF_ERROR(in.ReadExact(hsum, 8, "header"));
  {
    XXH3_state_t* hs = XXH3_createState();
    XXH3_64bits_reset(hs);
    XXH3_64bits_update(hs, fixed, sizeof fixed);
    XXH3_64bits_update(hs, spec.data(), spec.size());
    const uint64_t want = XXH3_64bits_digest(hs);
    XXH3_freeState(hs);
    if (want != Get(hsum, 8)) return Status::Corruption(path + ": header checksum mismatch");
  }
  ArchiveHeader& h = sum.header;
  h.version = static_cast<uint32_t>(Get(fixed + 8, 4));
  h.flags = static_cast<uint32_t>(Get(fixed + 12, 4));
  h.created_unix_ms = Get(fixed + 16, 8);
  h.ns_id = Get(fixed + 24, 8);
  if (h.version != kArchiveVersion)
    return Status::NotSupported(path + ": archive version " + std::to_string(h.version) + " (this build reads " +
                                std::to_string(kArchiveVersion) + ")");
  if ((h.flags & ~kArchiveFlagZstd) != 0) return Status::NotSupported(path + ": unknown archive flags");
  auto decoded = NamespaceSpec::Decode(spec);
  if (!decoded.ok()) return decoded.status().WithContext(path + ": namespace spec");
  h.spec = std::move(decoded).value();
  if (h.spec.Fingerprint() != h.ns_id)
    return Status::Corruption(path + ": namespace spec does not match the namespace id " + NamespaceIdToHex(h.ns_id));

  // Body.
  BodyIn body(&in, path, (h.flags & kArchiveFlagZstd) != 0);
  std::string key;
  std::vector<char> payload;
  for (;;) {
    uint8_t tag;
    KVTIER_RETURN_IF_ERROR(body.Read(&tag, 1, "entry tag"));
    if (tag == 'E') {
      uint8_t e[24];
      KVTIER_RETURN_IF_ERROR(body.Read(e, sizeof e, "end entry"));
      std::string all(1, 'E');
      all.append(reinterpret_cast<const char*>(e), 16);
      if (XXH3_64bits(all.data(), all.size()) != Get(e + 16, 8)) return Status::Corruption(path + ": end entry checksum mismatch");
      if (Get(e, 8) != sum.blocks || Get(e + 8, 8) != sum.payload_bytes)
        return Status::Corruption(path + ": end entry counts " + std::to_string(Get(e, 8)) + " blocks, but the body holds " +
                                  std::to_string(sum.blocks));
      break;
    }
    if (tag != 'B') return Status::Corruption(path + ": unknown entry tag " + std::to_string(tag) + " after block " + std::to_string(sum.blocks));
    uint8_t kl[2];
    KVTIER_RETURN_IF_ERROR(body.Read(kl, 2, "block entry"));
    const auto key_len = static_cast<uint16_t>(Get(kl, 2));
    if (key_len == 0 || key_len > 255) return Status::Corruption(path + ": block " + std::to_string(sum.blocks) + " has a " + std::to_string(key_len) + "-byte key");
    key.resize(key_len);
    KVTIER_RETURN_IF_ERROR(body.Read(key.data(), key_len, "block key"));
    uint8_t pl[8];
    KVTIER_RETURN_IF_ERROR(body.Read(pl, 8, "block entry"));
    const uint64_t plen = Get(pl, 8);
    if (plen > kArchiveMaxPayload) return Status::Corruption(path + ": block " + std::to_string(sum.blocks) + " claims a payload of " + std::to_string(plen) + " bytes");
    payload.resize(plen);
    KVTIER_RETURN_IF_ERROR(body.Read(payload.data(), plen, "block payload"));
    uint8_t cs[8];
    KVTIER_RETURN_IF_ERROR(body.Read(cs, 8, "block checksum"));
    XXH3_state_t* es = XXH3_createState();
    XXH3_64bits_reset(es);
    const uint8_t t = 'B';
    XXH3_64bits_update(es, &t, 1);
    XXH3_64bits_update(es, kl, 2);
    XXH3_64bits_update(es, key.data(), key.size());
    XXH3_64bits_update(es, pl, 8);
    XXH3_64bits_update(es, payload.data(), payload.size());
    const uint64_t want = XXH3_64bits_digest(es);
    XXH3_freeState(es);
    if (want != Get(cs, 8)) return Status::Corruption(path + ": checksum mismatch in block " + std::to_string(sum.blocks) + " (key " + std::to_string(key_len) + " bytes)");
    ++sum.blocks;
    sum.payload_bytes += plen;
    if (on_block) KVTIER_RETURN_IF_ERROR(on_block(h, key, std::string_view(payload.data(), payload.size())));
    if (progress) progress(in.pos(), size);
  }
  const uint64_t body_start = sizeof fixed + spec_len + 8;
  KVTIER_RETURN_IF_ERROR(body.CheckEnd(size - kTrailerBytes));

  // Trailer.
  in.set_limit(size);
  uint8_t tr[kTrailerBytes];
  KVTIER_RETURN_IF_ERROR(in.ReadExact(tr, 32, "trailer"));
  const uint64_t digest = XXH3_64bits_digest(hash.s);
  if (std::fread(tr + 32, 1, 8, f) != 8) return Status::Corruption(path + ": archive ends inside the trailer");
  if (std::memcmp(tr, kEndMagic, sizeof kEndMagic) != 0) return Status::Corruption(path + ": bad trailer magic");
  if (Get(tr + 32, 8) != digest) return Status::Corruption(path + ": whole-file checksum mismatch");
  if (Get(tr + 8, 8) != sum.blocks || Get(tr + 16, 8) != sum.payload_bytes || Get(tr + 24, 8) != size - kTrailerBytes - body_start)
    return Status::Corruption(path + ": trailer counts do not match the body");
  if (progress) progress(size, size);
  return sum;
}

}  // namespace kvtier::cli
