// The segment table: every segment file's id, generation, epoch and state,
// plus the reader pins that make reclaim safe.
//
// Reclaim protocol (why a reader never reads reused space unchecked):
//   reader:  Pin(seg, gen) succeeds only if the segment's current generation
//            equals the index entry's and no reclaim has begun; it then reads
//            and Unpin()s.
//   writer:  BeginReclaim(seg) marks the segment reclaiming (new pins fail)
//            and waits until its pin count is zero; only then is the new
//            generation written and the space reused.
// Independently, every record carries its segment id and generation and the
// reader checks them (and the key and checksum), so even a bug in this
// protocol yields a miss, never wrong bytes.
//
// Thread-safe: one mutex; waits use a condition variable.
#ifndef KVTIER_SRC_LOG_SEGMENT_TABLE_H_
#define KVTIER_SRC_LOG_SEGMENT_TABLE_H_

#include <array>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "format/record.h"
#include "kvtier/io.h"
#include "kvtier/store.h"

namespace kvtier {

class SegmentTable {
 public:
  struct Config {
    FileSystem* fs = nullptr;
    std::string dir;  // the segments/ folder
    uint64_t segment_size = 0;
    std::array<uint8_t, 16> store_id{};
    bool direct = true;
    bool read_only = false;
    unsigned file_mode = 0600;
  };

  explicit SegmentTable(Config c) : c_(std::move(c)) {}

  static std::string FileName(uint32_t id);  // "seg-000042.kvs"
  std::string PathOf(uint32_t id) const { return c_.dir + "/" + FileName(id); }

  // Opens every segment file in the folder and reads its header. A file whose
  // header does not verify is kept as a free segment whose next generation is
  // chosen so that it cannot equal any earlier one. Files named otherwise are
  // ignored.
  Status Load();

  // --- Readers ---
  // The file of (seg, gen) pinned against reclaim, or nullptr when the
  // segment is missing, reclaiming, or at another generation.
  File* Pin(uint32_t seg, uint32_t gen);
  void Unpin(uint32_t seg);
  // True when (seg, gen) names the segment's current contents.
  bool IsLive(uint32_t seg, uint32_t gen) const;

  // --- Writer (one thread) ---
  // Number of segments with a file.
  uint32_t CountFiles() const;
  // The smallest id without a file, and a new file for it of segment_size
  // bytes (allocated). The segment stays free until Activate.
  Result<uint32_t> CreateSegmentFile();
  // A free segment that has a file, or UINT32_MAX.
  uint32_t AnyFree() const;
  // The sealed segment with the smallest epoch, or UINT32_MAX; with `hot`,
  // the oldest among the hot region's segments (true) or the rest (false).
  uint32_t OldestSealed(std::optional<bool> hot = std::nullopt) const;
  // Up to `n` sealed segments, oldest first (ids and epochs), with `hot` as
  // for OldestSealed.
  std::vector<std::pair<uint32_t, uint64_t>> OldestSealedN(size_t n, std::optional<bool> hot = std::nullopt) const;
  // Marks seg (just activated) as the hot region's: it holds reinserted
  // blocks only. The index keeps the list as a hint for the next open.
  void MarkHot(uint32_t seg);
  // Segments of the hot region, open or sealed.
  uint32_t CountHot() const;
  // Them as (segment, generation), for Index::WriteHotSegments.
  std::vector<std::pair<uint32_t, uint32_t>> HotSegments() const;
  // Marks those of `hot` still at that generation and sealed (a reopen).
  void MarkHot(const std::vector<std::pair<uint32_t, uint32_t>>& hot);
  // Marks seg reclaiming and waits for its readers to leave.
  void BeginReclaim(uint32_t seg);
  // Writes and syncs a header with generation+1 (or the chosen next
  // generation) and `epoch`, and makes seg the open segment with used =
  // kSegmentDataStart. Returns the new generation.
  Result<uint32_t> Activate(uint32_t seg, uint64_t epoch);
  void Seal(uint32_t seg, uint64_t used);
  void SetUsed(uint32_t seg, uint64_t used);
  // Marks a reclaimed segment free (after a failed activation).
  void MarkFree(uint32_t seg);

  // --- Anyone ---
  File* file(uint32_t seg) const;
  SegmentInfo Info(uint32_t seg) const;
  std::vector<SegmentInfo> Snapshot() const;
  uint64_t MaxEpoch() const;
  uint64_t segment_size() const { return c_.segment_size; }
  // Entries of segments/ named like a segment that are not regular files (a
  // stray symlink or folder): left alone, their ids never used (Load).
  std::vector<std::string> Ignored() const;

 private:
  struct Seg {
    SegmentInfo info;
    std::unique_ptr<File> file;
    uint32_t next_generation = 1;  // generation Activate will write
    bool reclaiming = false;
    bool hot = false;  // MarkHot; cleared by Activate and MarkFree
    uint32_t readers = 0;
  };
  Seg* Find(uint32_t id);
  const Seg* Find(uint32_t id) const;

  Config c_;
  mutable std::mutex mu_;
  std::condition_variable readers_gone_;
  std::vector<std::unique_ptr<Seg>> segs_;  // indexed by id; null where no file
  std::vector<std::pair<uint32_t, std::string>> ignored_;  // (id, name): not regular files
};

}  // namespace kvtier

#endif  // KVTIER_SRC_LOG_SEGMENT_TABLE_H_
