// Inspection without side effects: a folder's state before opening it, and a
// block's record header beside its index entry.
#include "format/record.h"
#include "index/index.h"
#include "store/layout.h"
#include "store/store_impl.h"

namespace kvtier {

Result<FolderState> Store::Inspect(const std::string& dir) {
  auto fs = DefaultFileSystem(IoBackend::kPosix);
  FolderState st;
  auto holder = fs->LockHolder(layout::LockPath(dir));
  if (!holder.ok()) return holder.status();
  st.in_use = holder->has_value();
  st.holder_pid = holder->value_or(0);
  IndexOpenOptions io;
  io.read_only = true;
  io.create_if_missing = false;
  auto index = Index::Open(layout::IndexDir(dir), io);
  if (index.ok()) {
    auto cp = (*index)->ReadCheckpoint();
    if (cp.ok()) {
      st.last_shutdown = !cp->has_value()  ? FolderState::Shutdown::kNeverCheckpointed
                         : (*cp)->clean    ? FolderState::Shutdown::kClean
                                           : FolderState::Shutdown::kNotClean;
    }
  }
  return st;
}

Result<RecordInspection> StoreImpl::InspectRecord(NamespaceId ns, std::string_view key) {
  auto e = index_->Get(ns, key);
  if (!e.ok()) return e.status();
  if (!e->has_value()) return Status::NotFound("no disk copy of the block");
  const format::IndexValue& v = **e;
  RecordInspection out;
  out.entry = ToBlockInfo(ns, key, v);
  out.segment_file = layout::SegmentPath(dir_, v.segment);
  OpenFlags of;
  of.read_only = true;
  auto file = fs_->Open(out.segment_file, of);
  if (!file.ok()) return file.status();
  // Enough for either header: a compact one is shorter.
  std::vector<uint8_t> buf(format::AlignUp(format::kRecordHeaderBytes + key.size()));
  KVTIER_RETURN_IF_ERROR((*file)->ReadAt(v.offset, buf.data(), buf.size()));
  std::string_view rec_key;
  auto h = format::DecodeRecordHeader(buf, StoredPayloadLimit(), &rec_key);
  if (!h.ok()) {
    out.problems.push_back("record header does not decode: " + h.status().ToString());
    return out;
  }
  RecordHeaderInfo hi;
  hi.magic = format::IsCompact(h->flags) ? format::kCompactRecordMagic : format::kRecordMagic;
  hi.format_version = format::kFormatVersion;
  hi.flags = h->flags;
  hi.dense = format::IsDense(h->flags);
  hi.key_len = h->key_len;
  hi.segment = h->segment_id;
  hi.generation = h->generation;
  hi.ns = h->ns_id;
  hi.sequence = h->sequence;
  hi.payload_len = h->payload_len;
  hi.payload_checksum = h->payload_checksum;
  hi.written_unix_ms = h->written_unix_ms;
  out.header = hi;
  out.problems = format::DescribeMismatches(format::RecordAgainstEntry(*h, rec_key, ns, key, v));
  return out;
}

}  // namespace kvtier
