// kvtier put DIR --ns N KEY FILE: store a file as a block (takes the lock).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <vector>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct Put {
  StoreArgs a;
  std::string ns, key, file;
};

// Reads FILE: a regular file, or a pipe or device up to `limit` bytes. A
// folder, or anything longer than the limit (/dev/zero), is refused without
// reading more than limit + 1 bytes.
Status ReadPayload(const std::string& path, uint64_t limit, std::vector<char>* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "cannot read " + path);
  struct stat st;
  Status result;
  if (::fstat(fd, &st) != 0) {
    result = Status::FromErrno(errno, "stat " + path);
  } else if (S_ISDIR(st.st_mode)) {
    result = Status::InvalidArgument(path + " is a folder, not a file");
  } else if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > limit) {
    result = Status::InvalidArgument(path + " has " + std::to_string(st.st_size) +
                                     " bytes, more than the payload limit of " + std::to_string(limit));
  } else {
    out->clear();
    std::vector<char> buf(1 << 20);
    for (;;) {
      const ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        result = Status::FromErrno(errno, "reading " + path);
        break;
      }
      if (n == 0) break;
      out->insert(out->end(), buf.data(), buf.data() + n);
      if (out->size() > limit) {
        result = Status::InvalidArgument(path + " holds more than the payload limit of " + std::to_string(limit) +
                                         " bytes");
        break;
      }
    }
  }
  ::close(fd);
  return result;
}

int Run(const Put& in) {
  std::string key;
  Status k = ParseHexKey(in.key, &key);
  if (!k.ok()) return Fail("put", kExitUsage, k.message());
  std::vector<char> data;
  Status r = ReadPayload(in.file, Options().max_payload_bytes, &data);
  if (!r.ok()) return Fail("put", r.code() == Code::kInvalidArgument ? kExitUsage : kExitProblems, r.message());
  if (data.empty()) return Fail("put", kExitUsage, in.file + " is empty: a block has at least one byte");
  int rc = kExitOk;
  auto store = OpenStore("put", in.a, OpenMode::kCreate, &rc);
  if (!store) return rc;
  NamespaceId ns;
  if (!ResolveNamespace("put", store.get(), in.ns, &ns)) return kExitProblems;
  Status st = store->Put(ns, key, data.data(), data.size());
  if (!st.ok()) return Fail("put", kExitProblems, in.a.dir + ": putting " + in.file + ": " + st.ToString());
  auto info = store->Stat(ns, key);
  Status cs = store->Close();
  if (!cs.ok()) return Fail("put", kExitProblems, in.a.dir + ": closing: " + cs.ToString());
  if (in.a.json) {
    nlohmann::json j{{"key", ToHex(key)}, {"ns_id", NamespaceIdToHex(ns)}, {"payload_bytes", data.size()}};
    if (info.ok()) j.update({{"segment", info->segment}, {"offset", info->offset}, {"sequence", info->sequence}});
    PrintJson(j);
  } else {
    std::cout << "stored " << ToHex(key) << " (" << FormatBytes(data.size()) << ")";
    if (info.ok()) std::cout << " at segment " << info->segment << " offset " << info->offset;
    std::cout << "\n";
  }
  return kExitOk;
}

}  // namespace

Command AddPut(CLI::App& root) {
  auto in = std::make_shared<Put>();
  CLI::App* sub = root.add_subcommand("put", "Store a file as a block, durable on return (takes the lock)");
  AddDirArg(sub, &in->a);
  sub->add_option("KEY", in->key, "Key as hex")->required();
  sub->add_option("FILE", in->file, "File whose bytes become the payload")->required();
  sub->add_option("--ns", in->ns, "Namespace (display name or 16-hex id)")->required();
  AddJsonFlag(sub, &in->a.json);
  AddCreateOptions(sub, &in->a);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
