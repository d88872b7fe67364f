// kvtier show DIR --ns N KEY: a block's index entry and its record header as
// decoded from the segment file (read-only).
#include <iostream>

#include "commands.h"
#include "format/record.h"

namespace kvtier::cli {

namespace {

struct Show {
  StoreArgs a;
  std::string ns, key;
};

std::string SegmentPath(const std::string& dir, uint32_t seg) {
  char name[32];
  std::snprintf(name, sizeof name, "seg-%06u.kvs", seg);
  return dir + "/segments/" + name;
}

int Run(const Show& in) {
  std::string key;
  Status k = ParseHexKey(in.key, &key);
  if (!k.ok()) return Fail("show", kExitUsage, k.message());
  int rc = kExitOk;
  auto store = OpenStore("show", in.a, OpenMode::kReadOnly, &rc);
  if (!store) return rc;
  NamespaceId ns;
  if (!ResolveNamespace("show", store.get(), in.ns, &ns)) return kExitProblems;
  auto info = store->Stat(ns, key);
  if (!info.ok())
    return Fail("show", kExitProblems, in.a.dir + ": no block " + in.key + " in namespace " + in.ns + ": " + info.status().message());
  const uint64_t seg_size = store->Description().segment_size_bytes;
  Status cs = store->Close();
  if (!cs.ok()) return Fail("show", kExitProblems, in.a.dir + ": closing: " + cs.ToString());

  // Read the header page(s) straight from the segment file.
  const std::string path = SegmentPath(in.a.dir, info->segment);
  auto fs = DefaultFileSystem(IoBackend::kPosix);
  OpenFlags of;
  of.read_only = true;
  auto file = fs->Open(path, of);
  if (!file.ok()) return Fail("show", kExitProblems, file.status().ToString());
  std::vector<uint8_t> buf(format::AlignUp(format::kRecordHeaderBytes + key.size()));
  Status rs = (*file)->ReadAt(info->offset, buf.data(), buf.size());
  if (!rs.ok()) return Fail("show", kExitProblems, path + ": " + rs.ToString());
  std::string_view rec_key;
  auto h = format::DecodeRecordHeader(buf, seg_size, &rec_key);
  std::vector<std::string> problems;
  if (!h.ok()) {
    problems.push_back("record header does not decode: " + h.status().ToString());
  } else {
    if (rec_key != key) problems.push_back("record key differs from the index key");
    if (h->ns_id != ns) problems.push_back("record namespace " + NamespaceIdToHex(h->ns_id) + " differs");
    if (h->generation != info->generation) problems.push_back("record generation differs from the index entry (stale)");
    if (h->payload_checksum != info->payload_checksum) problems.push_back("payload checksum differs from the index entry");
    if (h->sequence != info->sequence) problems.push_back("sequence differs from the index entry");
  }
  if (in.a.json) {
    nlohmann::json j{{"key", ToHex(key)}, {"ns_id", NamespaceIdToHex(ns)}, {"segment_file", path},
                     {"index", {{"segment", info->segment}, {"generation", info->generation}, {"offset", info->offset},
                                {"payload_bytes", info->payload_bytes}, {"record_bytes", info->record_bytes},
                                {"payload_offset", info->payload_offset}, {"dense", info->dense},
                                {"payload_checksum", info->payload_checksum}, {"sequence", info->sequence},
                                {"written_unix_ms", info->written_unix_ms}}},
                     {"problems", problems}};
    if (h.ok())
      j["record"] = {{"magic", format::kRecordMagic}, {"format_version", format::kFormatVersion}, {"flags", h->flags},
                     {"key_len", h->key_len}, {"segment", h->segment_id}, {"generation", h->generation},
                     {"ns_id", NamespaceIdToHex(h->ns_id)}, {"sequence", h->sequence},
                     {"payload_len", h->payload_len}, {"payload_checksum", h->payload_checksum},
                     {"written_unix_ms", h->written_unix_ms}, {"header_checksum_ok", true}};
    PrintJson(j);
  } else {
    char cks[24];
    std::cout << "key              " << ToHex(key) << "\n"
              << "namespace        " << in.ns << " (" << NamespaceIdToHex(ns) << ")\n"
              << "segment file     " << path << " @ " << info->offset << "\n";
    if (h.ok()) {
      std::snprintf(cks, sizeof cks, "%016llx", static_cast<unsigned long long>(h->payload_checksum));
      std::cout << "record header (decoded, header checksum ok)\n"
                << "  magic          KVTR, format v" << format::kFormatVersion << "\n"
                << "  flags          " << h->flags << (format::IsDense(h->flags) ? " (dense)" : "") << "\n"
                << "  key_len        " << h->key_len << "\n"
                << "  segment        " << h->segment_id << " generation " << h->generation << "\n"
                << "  ns_id          " << NamespaceIdToHex(h->ns_id) << "\n"
                << "  sequence       " << h->sequence << "\n"
                << "  payload_len    " << h->payload_len << " (" << FormatBytes(h->payload_len) << ")\n"
                << "  payload xxh3   " << cks << "\n"
                << "  written        " << FormatTime(h->written_unix_ms) << " (" << FormatAge(h->written_unix_ms) << " ago)\n"
                << "  record bytes   " << info->record_bytes
                << (info->dense ? " (header + key + payload, 8-byte aligned: dense)\n"
                                : " (header + key + payload, 4 KiB aligned)\n");
    }
    std::cout << "matches index    " << (problems.empty() ? "yes" : "NO") << "\n";
    for (const std::string& p : problems) std::cout << "  problem: " << p << "\n";
  }
  return problems.empty() ? kExitOk : kExitProblems;
}

}  // namespace

Command AddShow(CLI::App& root) {
  auto in = std::make_shared<Show>();
  CLI::App* sub = root.add_subcommand("show", "Decode a block's record header and check it against the index (read-only)");
  AddDirArg(sub, &in->a);
  sub->add_option("KEY", in->key, "Key as hex")->required();
  sub->add_option("--ns", in->ns, "Namespace (display name or 16-hex id)")->required();
  AddJsonFlag(sub, &in->a.json);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
