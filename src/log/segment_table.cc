#include "log/segment_table.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "util/aligned_buffer.h"
#include "util/clock.h"

namespace kvtier {

std::string SegmentTable::FileName(uint32_t id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "seg-%06" PRIu32 ".kvs", id);
  return buf;
}

static bool ParseFileName(const std::string& name, uint32_t* id) {
  unsigned v = 0;
  char tail[8] = {0};
  if (name.size() != 14 || std::sscanf(name.c_str(), "seg-%6u.%3s", &v, tail) != 2) return false;
  if (std::strcmp(tail, "kvs") != 0 || v > 0xFFFFFF) return false;
  *id = v;
  return true;
}

SegmentTable::Seg* SegmentTable::Find(uint32_t id) {
  return id < segs_.size() ? segs_[id].get() : nullptr;
}
const SegmentTable::Seg* SegmentTable::Find(uint32_t id) const {
  return id < segs_.size() ? segs_[id].get() : nullptr;
}

Status SegmentTable::Load() {
  auto names = c_.fs->ListDir(c_.dir);
  if (!names.ok()) return names.status();
  AlignedBuffer page(format::kPage);
  for (const std::string& name : *names) {
    uint32_t id;
    if (!ParseFileName(name, &id)) continue;
    OpenFlags f;
    f.read_only = c_.read_only;
    f.direct = c_.direct;
    auto file = c_.fs->Open(PathOf(id), f);
    if (!file.ok() && file.status().code() == Code::kInvalidArgument) {
      // A symlink or folder with a segment's name: not ours to open, delete
      // or reuse, and no reason to refuse the store (verify must still run).
      ignored_.emplace_back(id, name);
      continue;
    }
    if (!file.ok()) return file.status();
    auto seg = std::make_unique<Seg>();
    seg->info.id = id;
    seg->file = std::move(file).value();
    if (!c_.read_only) {
      // A crash between creating a segment file and preallocating it leaves
      // it short; restore the full size so scans never read past its end.
      auto size = seg->file->Size();
      if (!size.ok()) return size.status();
      if (*size < c_.segment_size) {
        Status a = seg->file->Allocate(0, c_.segment_size);
        if (a.ok()) a = seg->file->Sync();
        if (!a.ok()) return a.WithContext("preallocating " + PathOf(id));
      }
    }
    Status st = seg->file->ReadAt(0, page.data(), format::kPage);
    Result<format::SegmentHeader> h =
        st.ok() ? format::DecodeSegmentHeader({page.data(), format::kSegmentHeaderEncodedBytes})
                : Result<format::SegmentHeader>(st);
    if (h.ok() && h->segment_id == id && h->store_id == c_.store_id &&
        h->segment_size == c_.segment_size && h->epoch != 0) {
      seg->info.generation = h->generation;
      seg->info.epoch = h->epoch;
      seg->info.state = SegmentState::kSealed;
      seg->info.used_bytes = c_.segment_size;  // refined by recovery for the newest
      seg->next_generation = h->generation + 1;
    } else {
      // Unknown previous generation: pick one no index entry can name. Entries
      // are checked against the record's own header anyway.
      seg->info.state = SegmentState::kFree;
      seg->info.generation = 0;
      seg->next_generation = static_cast<uint32_t>(NowUnixMs() & 0x7FFFFFFF) | 1u;
    }
    if (segs_.size() <= id) segs_.resize(id + 1);
    segs_[id] = std::move(seg);
  }
  return Status::OK();
}

File* SegmentTable::Pin(uint32_t seg, uint32_t gen) {
  std::lock_guard<std::mutex> l(mu_);
  Seg* s = Find(seg);
  if (s == nullptr || s->reclaiming || s->info.state == SegmentState::kFree ||
      s->info.generation != gen)
    return nullptr;
  ++s->readers;
  return s->file.get();
}

void SegmentTable::Unpin(uint32_t seg) {
  std::lock_guard<std::mutex> l(mu_);
  Seg* s = Find(seg);
  if (s != nullptr && --s->readers == 0 && s->reclaiming) readers_gone_.notify_all();
}

bool SegmentTable::IsLive(uint32_t seg, uint32_t gen) const {
  std::lock_guard<std::mutex> l(mu_);
  const Seg* s = Find(seg);
  return s != nullptr && !s->reclaiming && s->info.state != SegmentState::kFree &&
         s->info.generation == gen;
}

std::vector<std::string> SegmentTable::Ignored() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> names;
  for (const auto& e : ignored_) names.push_back(e.second);
  return names;
}

uint32_t SegmentTable::CountFiles() const {
  std::lock_guard<std::mutex> l(mu_);
  uint32_t n = 0;
  for (const auto& s : segs_) n += s != nullptr;
  return n;
}

Result<uint32_t> SegmentTable::CreateSegmentFile() {
  uint32_t id;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto taken = [this](uint32_t i) {
      return (i < segs_.size() && segs_[i] != nullptr) ||
             std::any_of(ignored_.begin(), ignored_.end(), [i](const auto& e) { return e.first == i; });
    };
    id = 0;
    while (taken(id)) ++id;
  }
  OpenFlags f;
  f.create = true;
  f.direct = c_.direct;
  f.mode = c_.file_mode;
  std::string path = PathOf(id);
  auto file = c_.fs->Open(path, f);
  if (!file.ok()) return file.status();
  Status st = (*file)->Allocate(0, c_.segment_size);
  // The new name must be durable before records in the file are acknowledged:
  // fdatasync of the file does not persist its directory entry.
  if (st.ok()) st = c_.fs->SyncDir(c_.dir);
  if (!st.ok()) {
    file->reset();
    c_.fs->Remove(path).IgnoreError();
    return st.WithContext("preallocating " + path);
  }
  auto seg = std::make_unique<Seg>();
  seg->info.id = id;
  seg->file = std::move(file).value();
  seg->next_generation = 1;
  std::lock_guard<std::mutex> l(mu_);
  if (segs_.size() <= id) segs_.resize(id + 1);
  segs_[id] = std::move(seg);
  return id;
}

uint32_t SegmentTable::AnyFree() const {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& s : segs_)
    if (s != nullptr && s->info.state == SegmentState::kFree) return s->info.id;
  return UINT32_MAX;
}

uint32_t SegmentTable::OldestSealed(std::optional<bool> hot) const {
  std::lock_guard<std::mutex> l(mu_);
  uint32_t best = UINT32_MAX;
  uint64_t best_epoch = UINT64_MAX;
  for (const auto& s : segs_)
    if (s != nullptr && s->info.state == SegmentState::kSealed && (!hot || s->hot == *hot) &&
        s->info.epoch < best_epoch) {
      best_epoch = s->info.epoch;
      best = s->info.id;
    }
  return best;
}

std::vector<std::pair<uint32_t, uint64_t>> SegmentTable::OldestSealedN(size_t n, std::optional<bool> hot) const {
  std::vector<std::pair<uint32_t, uint64_t>> out;  // (id, epoch)
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& s : segs_)
      if (s != nullptr && s->info.state == SegmentState::kSealed && (!hot || s->hot == *hot))
        out.emplace_back(s->info.id, s->info.epoch);
  }
  const size_t keep = std::min(n, out.size());
  std::partial_sort(out.begin(), out.begin() + static_cast<ptrdiff_t>(keep), out.end(),
                    [](const auto& a, const auto& b) { return a.second < b.second; });
  out.resize(keep);
  return out;
}

void SegmentTable::MarkHot(uint32_t seg) {
  std::lock_guard<std::mutex> l(mu_);
  if (Seg* s = Find(seg)) s->hot = true;
}

uint32_t SegmentTable::CountHot() const { return static_cast<uint32_t>(HotSegments().size()); }

std::vector<std::pair<uint32_t, uint32_t>> SegmentTable::HotSegments() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const auto& s : segs_)
    if (s != nullptr && s->hot && s->info.state != SegmentState::kFree) out.emplace_back(s->info.id, s->info.generation);
  return out;
}

void SegmentTable::MarkHot(const std::vector<std::pair<uint32_t, uint32_t>>& hot) {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [id, gen] : hot) {
    Seg* s = Find(id);
    if (s != nullptr && s->info.state == SegmentState::kSealed && s->info.generation == gen) s->hot = true;
  }
}

void SegmentTable::BeginReclaim(uint32_t seg) {
  std::unique_lock<std::mutex> l(mu_);
  Seg* s = Find(seg);
  if (s == nullptr) return;
  s->reclaiming = true;
  readers_gone_.wait(l, [s] { return s->readers == 0; });
}

Result<uint32_t> SegmentTable::Activate(uint32_t seg, uint64_t epoch) {
  File* file;
  uint32_t gen;
  {
    std::lock_guard<std::mutex> l(mu_);
    Seg* s = Find(seg);
    if (s == nullptr) return Status::InvalidArgument("no segment " + std::to_string(seg));
    file = s->file.get();
    gen = s->next_generation;
    if (gen == 0) gen = 1;
  }
  format::SegmentHeader h;
  h.segment_id = seg;
  h.generation = gen;
  h.epoch = epoch;
  h.store_id = c_.store_id;
  h.segment_size = c_.segment_size;
  h.opened_unix_ms = NowUnixMs();
  AlignedBuffer page(format::kPage);
  std::memset(page.data(), 0, page.size());
  format::EncodeSegmentHeader(h, std::span<uint8_t, format::kSegmentHeaderEncodedBytes>(
                                     page.data(), format::kSegmentHeaderEncodedBytes));
  // The new generation must be durable before any record of it is written,
  // so entries of the old life can never match the new contents.
  Status st = file->WriteAt(0, page.data(), page.size());
  if (st.ok()) st = file->Sync();
  std::lock_guard<std::mutex> l(mu_);
  Seg* s = Find(seg);
  if (!st.ok()) {
    s->info.state = SegmentState::kFree;
    s->reclaiming = false;
    return st.WithContext("activating " + PathOf(seg));
  }
  s->info.generation = gen;
  s->next_generation = gen + 1;
  s->info.epoch = epoch;
  s->info.state = SegmentState::kOpen;
  s->info.used_bytes = format::kSegmentDataStart;
  s->reclaiming = false;
  s->hot = false;
  return gen;
}

void SegmentTable::Seal(uint32_t seg, uint64_t used) {
  std::lock_guard<std::mutex> l(mu_);
  if (Seg* s = Find(seg)) {
    s->info.state = SegmentState::kSealed;
    s->info.used_bytes = used;
  }
}

void SegmentTable::SetUsed(uint32_t seg, uint64_t used) {
  std::lock_guard<std::mutex> l(mu_);
  if (Seg* s = Find(seg)) s->info.used_bytes = used;
}

void SegmentTable::MarkFree(uint32_t seg) {
  std::lock_guard<std::mutex> l(mu_);
  if (Seg* s = Find(seg)) {
    s->info.state = SegmentState::kFree;
    s->info.epoch = 0;
    s->info.used_bytes = 0;
    s->reclaiming = false;
    s->hot = false;
  }
}

File* SegmentTable::file(uint32_t seg) const {
  std::lock_guard<std::mutex> l(mu_);
  const Seg* s = Find(seg);
  return s != nullptr ? s->file.get() : nullptr;
}

SegmentInfo SegmentTable::Info(uint32_t seg) const {
  std::lock_guard<std::mutex> l(mu_);
  const Seg* s = Find(seg);
  return s != nullptr ? s->info : SegmentInfo{};
}

std::vector<SegmentInfo> SegmentTable::Snapshot() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<SegmentInfo> out;
  for (const auto& s : segs_)
    if (s != nullptr) out.push_back(s->info);
  return out;
}

uint64_t SegmentTable::MaxEpoch() const {
  std::lock_guard<std::mutex> l(mu_);
  uint64_t m = 0;
  for (const auto& s : segs_)
    if (s != nullptr && s->info.epoch > m) m = s->info.epoch;
  return m;
}

}  // namespace kvtier
