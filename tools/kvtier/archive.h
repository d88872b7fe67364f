// Export archives: one namespace's blocks in a self-describing, checksummed
// file that can be shipped to another machine and imported there.
//
// Layout (integers little-endian; docs/tools.md draws it):
//   header   "KVTARCH1" | version u32 | flags u32 | created_unix_ms u64 |
//            ns_id u64 | spec_len u32 | spec (NamespaceSpec::Encode) |
//            header_checksum u64 (XXH3-64 of the header bytes before it)
//   body     zero or more block entries, then one end entry; zstd-compressed
//            as one frame when flags bit 0 is set:
//              'B' u8 | key_len u16 | key | payload_len u64 | payload |
//              entry_checksum u64 (XXH3-64 of the entry bytes before it)
//              'E' u8 | blocks u64 | payload_bytes u64 | entry_checksum u64
//   trailer  "KVTAEND1" | blocks u64 | payload_bytes u64 | body_bytes u64 |
//            file_checksum u64 (XXH3-64 of every file byte before it)
//
// Thread safety: none; one writer or reader per archive.
#ifndef KVTIER_TOOLS_KVTIER_ARCHIVE_H_
#define KVTIER_TOOLS_KVTIER_ARCHIVE_H_

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "kvtier/namespace.h"
#include "kvtier/status.h"

struct XXH3_state_s;  // xxhash.h

namespace kvtier::cli {

inline constexpr uint32_t kArchiveVersion = 1;
inline constexpr uint32_t kArchiveFlagZstd = 1;
// Largest payload an archive entry may claim (checked before allocating).
inline constexpr uint64_t kArchiveMaxPayload = 1ull << 30;

struct ArchiveHeader {
  uint32_t version = kArchiveVersion;
  uint32_t flags = 0;
  uint64_t created_unix_ms = 0;
  NamespaceId ns_id = 0;
  NamespaceSpec spec;
};

// Writes an archive to `path` + ".tmp" and renames it into place on Finish,
// so a failed export never leaves a file that looks complete.
class ArchiveWriter {
 public:
  ~ArchiveWriter();
  // zstd_level 0 = no compression.
  static Result<std::unique_ptr<ArchiveWriter>> Create(const std::string& path, NamespaceId id,
                                                       const NamespaceSpec& spec, int zstd_level);
  Status Add(std::string_view key, const void* payload, uint64_t size);
  Status Finish();
  uint64_t file_bytes() const { return file_bytes_; }

 private:
  ArchiveWriter() = default;
  Status WriteRaw(const void* p, size_t n);  // to the file, hashed
  Status WriteBody(const void* p, size_t n, bool end = false);  // through zstd when on
  struct Z;
  std::string path_, tmp_;
  FILE* f_ = nullptr;
  std::unique_ptr<Z> z_;
  XXH3_state_s* hash_ = nullptr;  // of every byte written to the file
  uint64_t blocks_ = 0, payload_bytes_ = 0, body_bytes_ = 0, file_bytes_ = 0;
  bool finished_ = false;
};

struct ArchiveSummary {
  ArchiveHeader header;
  uint64_t blocks = 0, payload_bytes = 0, file_bytes = 0;
};

// Reads and checks an archive from start to end. Every check failure is
// Corruption naming the path and what failed; nothing is trusted before its
// checksum passed, and lengths are bounded before allocation. `on_block` sees
// each block after its entry checksum passed (the whole-file checksum is
// only known at the end: callers that must not act on a bad archive read it
// twice, first with on_block = nullptr). Returning a non-OK status from
// on_block stops the read with that status.
Result<ArchiveSummary> ReadArchive(
    const std::string& path,
    const std::function<Status(const ArchiveHeader&, std::string_view key, std::string_view payload)>& on_block,
    const std::function<void(uint64_t done, uint64_t total)>& progress);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_ARCHIVE_H_
