// What the shared tier stores in RADOS besides the segment bytes: the record
// summary of an uploaded segment and the catalog entry that announces it.
// Pure functions (no I/O); little-endian, checksummed like src/format.
//
// Objects of one uploaded segment generation (all in the tier's pool and
// RADOS namespace), named after the uploading store, segment and generation:
//   kvtier.<store id>.<segment 6 digits>.<generation>.p<part>  the segment
//       bytes [part * part_bytes, ...) (the last part is shorter)
//   kvtier.<store id>.<segment 6 digits>.<generation>.sum      SegmentSummary
//   kvtier.catalog   omap: CatalogKey -> EncodeCatalogValue (one per upload)
// A record's remote extent is its local one: offsets in the uploaded segment
// equal offsets in the segment file.
#ifndef KVTIER_SRC_REMOTE_SUMMARY_H_
#define KVTIER_SRC_REMOTE_SUMMARY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/namespace.h"
#include "kvtier/status.h"

namespace kvtier::remote {

inline constexpr char kCatalogObject[] = "kvtier.catalog";

// One live record of an uploaded segment.
struct SummaryEntry {
  NamespaceId ns = 0;
  std::string key;
  uint64_t offset = 0;  // record start in the segment
  uint64_t payload_len = 0;
  uint64_t checksum = 0;  // XXH3-64 of the payload, as in the record header
  uint64_t sequence = 0;
  uint16_t flags = 0;     // the record's flags (format::kRecordDense)
};

struct SegmentSummary {
  std::string store_id;  // uploader's store id, 32 hex digits
  uint32_t segment = 0;
  uint32_t generation = 0;  // every record carries these two; readers check them
  uint64_t epoch = 0;
  uint64_t bytes = 0;       // uploaded bytes: the segment's used bytes
  uint64_t part_bytes = 0;  // object size of every part but the last
  uint64_t uploaded_unix_ms = 0;
  // Every namespace of `entries`: id and NamespaceSpec::Encode(). Importers
  // match namespaces by spec, never by id alone.
  std::vector<std::pair<NamespaceId, std::string>> namespaces;
  std::vector<SummaryEntry> entries;

  std::string ObjectBase() const;  // "kvtier.<store>.<seg>.<gen>"
  uint32_t Parts() const { return part_bytes == 0 ? 0 : static_cast<uint32_t>((bytes + part_bytes - 1) / part_bytes); }
};

std::string ObjectBase(std::string_view store_id, uint32_t segment, uint32_t generation);
std::string PartObject(std::string_view base, uint32_t part);
std::string SummaryObject(std::string_view base);
// The base of a part or summary object name ("kvtier.<...>.p<N>" or
// "kvtier.<...>.sum"); empty for any other name (the catalog included).
std::string BaseOfObject(std::string_view object);

std::string EncodeSummary(const SegmentSummary& s);
// Corruption (naming the cause) on a short buffer, bad magic or checksum,
// an unknown version or inconsistent fields.
Result<SegmentSummary> DecodeSummary(std::string_view in);

// A catalog entry. Keys sort by upload time, so the budget deletes from the
// front; the value says what to read and what to delete.
struct CatalogEntry {
  std::string key;   // CatalogKey()
  std::string base;  // ObjectBase
  uint64_t bytes = 0, part_bytes = 0, summary_bytes = 0;
};
std::string CatalogKey(uint64_t uploaded_unix_ms, std::string_view base);
// Wall-clock milliseconds since the epoch (upload times, object ages).
uint64_t NowUnixMs();
std::string EncodeCatalogValue(const CatalogEntry& e);
Result<CatalogEntry> DecodeCatalogValue(std::string_view key, std::string_view value);

}  // namespace kvtier::remote

#endif  // KVTIER_SRC_REMOTE_SUMMARY_H_
