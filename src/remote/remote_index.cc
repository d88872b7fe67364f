#include "remote/remote_index.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <set>

#include "format/coding.h"
#include "index/rocks_fs.h"
#include "index/rocks_util.h"

namespace kvtier::remote {
namespace {

std::string EntryKey(NamespaceId ns, std::string_view key) {
  std::string k = "K";
  AppendBE64(&k, ns);
  k.append(key);
  return k;
}
std::string RowKey(const std::string& base, NamespaceId ns, std::string_view key) {
  std::string k = "O" + base;
  k.push_back('\0');
  AppendBE64(&k, ns);
  k.append(key);
  return k;
}
std::string NsKey(NamespaceId ns) {
  std::string k = "N";
  AppendBE64(&k, ns);
  return k;
}
std::string UploadKey(uint32_t seg, uint32_t gen) {
  std::string k = "U";
  AppendBE32(&k, seg);
  AppendBE32(&k, gen);
  return k;
}

std::string EncodeLocation(const Location& l) {
  std::string v;
  format::AppendFixed64(&v, l.part_bytes);
  format::AppendFixed32(&v, l.segment);
  format::AppendFixed32(&v, l.generation);
  format::AppendFixed64(&v, l.offset);
  format::AppendFixed64(&v, l.payload_len);
  format::AppendFixed64(&v, l.checksum);
  format::AppendFixed64(&v, l.sequence);
  // Keys are at most 255 bytes: the high byte of this u16 holds the record
  // flags (0 in locations written before dense records existed).
  format::AppendFixed16(&v, static_cast<uint16_t>(l.key_len | (l.flags << 8)));
  v.append(l.base);
  return v;
}
constexpr size_t kLocationFixed = 8 + 4 + 4 + 8 + 8 + 8 + 8 + 2;

Result<Location> DecodeLocation(std::string_view v) {
  if (v.size() <= kLocationFixed) return Status::Corruption("remote index: short location");
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  Location l;
  l.part_bytes = format::GetFixed64(p);
  l.segment = format::GetFixed32(p + 8);
  l.generation = format::GetFixed32(p + 12);
  l.offset = format::GetFixed64(p + 16);
  l.payload_len = format::GetFixed64(p + 24);
  l.checksum = format::GetFixed64(p + 32);
  l.sequence = format::GetFixed64(p + 40);
  const uint16_t key_and_flags = format::GetFixed16(p + 48);
  l.key_len = key_and_flags & 0xff;
  l.flags = key_and_flags >> 8;
  l.base.assign(v.substr(kLocationFixed));
  if (l.part_bytes == 0) return Status::Corruption("remote index: bad location");
  return l;
}


}  // namespace

struct RemoteIndex::Rep {
  std::unique_ptr<rocksdb::Env> env;  // declared first: outlives db
  std::unique_ptr<rocksdb::DB> db;
  std::string path;
};

RemoteIndex::RemoteIndex() : rep_(std::make_unique<Rep>()) {}
RemoteIndex::~RemoteIndex() = default;

Result<std::unique_ptr<RemoteIndex>> RemoteIndex::Open(const RemoteIndexFiles& files) {
  const std::string& path = files.path;
  auto env = NewRocksEnv(files.fs ? files.fs : DefaultFileSystem(IoBackend::kPosix), files.file_mode, files.dir_mode);
  rocksdb::Options o;
  o.env = env.get();
  o.create_if_missing = true;
  o.write_buffer_size = 8 << 20;
  o.max_background_jobs = 1;
  o.keep_log_file_num = 2;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, path, &db);
  if (!s.ok()) return FromRocks(s, "opening the remote index " + path);
  std::unique_ptr<RemoteIndex> ri(new RemoteIndex());
  ri->rep_->env = std::move(env);
  ri->rep_->db.reset(db);
  ri->rep_->path = path;
  return ri;
}

Result<std::optional<Location>> RemoteIndex::Get(NamespaceId ns, std::string_view key) {
  std::string v;
  rocksdb::Status s = rep_->db->Get(rocksdb::ReadOptions(), EntryKey(ns, key), &v);
  if (s.IsNotFound()) return std::optional<Location>();
  if (!s.ok()) return FromRocks(s, "remote index get in " + rep_->path);
  auto l = DecodeLocation(v);
  if (!l.ok()) return l.status();
  return std::optional<Location>(std::move(*l));
}

Result<std::optional<std::string>> RemoteIndex::Spec(NamespaceId ns) {
  std::string v;
  rocksdb::Status s = rep_->db->Get(rocksdb::ReadOptions(), NsKey(ns), &v);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return FromRocks(s, "remote index get in " + rep_->path);
  return std::optional<std::string>(std::move(v));
}

Result<uint64_t> RemoteIndex::Import(const SegmentSummary& sum, const std::string& catalog_key) {
  const std::string base = sum.ObjectBase();
  std::set<NamespaceId> good;
  rocksdb::WriteBatch b;
  for (const auto& [id, encoded] : sum.namespaces) {
    auto spec = NamespaceSpec::Decode(encoded);
    // A spec that does not hash to its id cannot be matched by identity:
    // its blocks are not imported.
    if (!spec.ok() || spec->Fingerprint() != id) continue;
    good.insert(id);
    b.Put(NsKey(id), encoded);
  }
  uint64_t added = 0;
  for (const SummaryEntry& e : sum.entries) {
    if (!good.count(e.ns)) continue;
    Location l;
    l.base = base;
    l.part_bytes = sum.part_bytes;
    l.segment = sum.segment;
    l.generation = sum.generation;
    l.offset = e.offset;
    l.payload_len = e.payload_len;
    l.checksum = e.checksum;
    l.sequence = e.sequence;
    l.key_len = static_cast<uint16_t>(e.key.size());
    l.flags = e.flags;
    b.Put(EntryKey(e.ns, e.key), EncodeLocation(l));
    b.Put(RowKey(base, e.ns, e.key), "");
    ++added;
  }
  b.Put("C" + catalog_key, base);
  rocksdb::Status s = rep_->db->Write(rocksdb::WriteOptions(), &b);
  if (!s.ok()) return FromRocks(s, "remote index import into " + rep_->path);
  return added;
}

Status RemoteIndex::Drop(const std::string& catalog_key, const std::string& base) {
  rocksdb::WriteBatch b;
  std::string prefix = "O" + base;
  prefix.push_back('\0');
  std::unique_ptr<rocksdb::Iterator> it(rep_->db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    std::string_view rest(it->key().data() + prefix.size(), it->key().size() - prefix.size());
    if (rest.size() < 8) continue;
    const NamespaceId ns = LoadBE64(rest.data());
    std::string_view key = rest.substr(8);
    std::string v;
    if (rep_->db->Get(rocksdb::ReadOptions(), EntryKey(ns, key), &v).ok()) {
      auto l = DecodeLocation(v);
      if (!l.ok() || l->base == base) b.Delete(EntryKey(ns, key));
    }
    b.Delete(it->key());
  }
  if (!it->status().ok()) return FromRocks(it->status(), "remote index scan of " + rep_->path);
  b.Delete("C" + catalog_key);
  return FromRocks(rep_->db->Write(rocksdb::WriteOptions(), &b), "remote index drop in " + rep_->path);
}

Status RemoteIndex::DropEntry(NamespaceId ns, std::string_view key, const std::string& base) {
  std::string v;
  rocksdb::Status s = rep_->db->Get(rocksdb::ReadOptions(), EntryKey(ns, key), &v);
  if (s.IsNotFound()) return Status::OK();
  if (!s.ok()) return FromRocks(s, "remote index get in " + rep_->path);
  auto l = DecodeLocation(v);
  if (l.ok() && l->base != base) return Status::OK();
  rocksdb::WriteBatch b;
  b.Delete(EntryKey(ns, key));
  b.Delete(RowKey(base, ns, key));
  return FromRocks(rep_->db->Write(rocksdb::WriteOptions(), &b), "remote index drop in " + rep_->path);
}

Result<std::vector<std::pair<std::string, std::string>>> RemoteIndex::Imported() {
  std::vector<std::pair<std::string, std::string>> out;
  std::unique_ptr<rocksdb::Iterator> it(rep_->db->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("C"); it->Valid() && it->key().starts_with("C"); it->Next())
    out.emplace_back(it->key().ToString().substr(1), it->value().ToString());
  if (!it->status().ok()) return FromRocks(it->status(), "remote index scan of " + rep_->path);
  return out;
}

bool RemoteIndex::IsImported(const std::string& catalog_key) {
  std::string v;
  return rep_->db->Get(rocksdb::ReadOptions(), "C" + catalog_key, &v).ok();
}

Status RemoteIndex::MarkUploaded(uint32_t segment, uint32_t generation, const std::string& base) {
  return FromRocks(rep_->db->Put(rocksdb::WriteOptions(), UploadKey(segment, generation), base),
                   "remote index put in " + rep_->path);
}

bool RemoteIndex::IsUploaded(uint32_t segment, uint32_t generation) {
  std::string v;
  return rep_->db->Get(rocksdb::ReadOptions(), UploadKey(segment, generation), &v).ok();
}

}  // namespace kvtier::remote
