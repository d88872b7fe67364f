#include "cli.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <sstream>

namespace kvtier::cli {

void AddDirArg(CLI::App* app, StoreArgs* a) {
  app->add_option("DIR", a->dir, "Store folder")->required();
}

void AddJsonFlag(CLI::App* app, bool* json) {
  app->add_flag("--json", *json, "Print machine-readable JSON instead of a table");
}

void AddCreateOptions(CLI::App* app, StoreArgs* a) {
  app->add_option("--segment-size", a->segment_size,
                  "Segment file size when the store is created (e.g. 256M; multiple of 1M)")
      ->capture_default_str();
  app->add_option("--capacity", a->capacity,
                  "Byte budget for segments while open (e.g. 8G; default 8G)");
}

int Fail(const std::string& cmd, int code, const std::string& msg) {
  std::cerr << "kvtier " << cmd << ": " << msg << "\n";
  return code;
}

std::unique_ptr<Store> OpenStore(const std::string& cmd, const StoreArgs& a, OpenMode mode,
                                 int* exit_code) {
  Options o;
  o.read_only = mode == OpenMode::kReadOnly;
  o.create_if_missing = mode == OpenMode::kCreate;
  if (mode == OpenMode::kCreate) {
    auto seg = ParseSize(a.segment_size);
    if (!seg.ok()) {
      *exit_code = Fail(cmd, kExitUsage, "--segment-size: " + seg.status().message());
      return nullptr;
    }
    o.segment_size_bytes = *seg;
  }
  if (!a.capacity.empty()) {
    auto cap = ParseSize(a.capacity);
    if (!cap.ok()) {
      *exit_code = Fail(cmd, kExitUsage, "--capacity: " + cap.status().message());
      return nullptr;
    }
    o.capacity_bytes = *cap;
  }
  o.remote = a.remote;
  auto s = Store::Open(a.dir, o);
  if (!s.ok()) {
    const Status& st = s.status();
    std::string msg = "cannot open store " + a.dir + ": " + st.ToString();
    if (st.code() == Code::kBusy) {
      msg += " (this command writes and needs the store to itself; read-only commands such as "
             "info, ls, verify and stats still work)";
    }
    *exit_code = Fail(cmd, kExitCannotOpen, msg);
    return nullptr;
  }
  return std::move(s).value();
}

bool ResolveNamespace(const std::string& cmd, Store* store, const std::string& name, NamespaceId* id) {
  auto r = store->FindNamespace(name);
  if (!r.ok()) {
    Fail(cmd, kExitProblems,
         store->dir() + ": " + r.status().message() + " (list them with `kvtier ns " + store->dir() + "`)");
    return false;
  }
  *id = *r;
  return true;
}

std::string ToHex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    s.push_back(kDigits[c >> 4]);
    s.push_back(kDigits[c & 0xf]);
  }
  return s;
}

Status ParseHexKey(std::string_view hex, std::string* out) {
  if (hex.size() >= 2 && hex[0] == '0' && (hex[1] == 'x' || hex[1] == 'X')) hex.remove_prefix(2);
  if (hex.empty() || hex.size() % 2 != 0) {
    return Status::InvalidArgument("key '" + std::string(hex) +
                                   "' must be an even number of hex digits (1 to 255 bytes)");
  }
  if (hex.size() / 2 > 255) {
    return Status::InvalidArgument("key is " + std::to_string(hex.size() / 2) + " bytes (limit 255)");
  }
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    int v = 0;
    for (size_t j = 0; j < 2; ++j) {
      const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(hex[i + j])));
      int d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else return Status::InvalidArgument("key '" + std::string(hex) + "' is not hex");
      v = v * 16 + d;
    }
    out->push_back(static_cast<char>(v));
  }
  return Status::OK();
}

Result<uint64_t> ParseSize(std::string_view text) {
  std::string t(text);
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  if (i == 0) return Status::InvalidArgument("'" + t + "' is not a size (examples: 4096, 512M, 1G)");
  double num;
  try {
    num = std::stod(t.substr(0, i));
  } catch (...) {
    return Status::InvalidArgument("'" + t + "' is not a size (examples: 4096, 512M, 1G)");
  }
  std::string unit = t.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  int shift;
  if (unit.empty() || unit == "B") shift = 0;
  else if (unit == "K") shift = 10;
  else if (unit == "M") shift = 20;
  else if (unit == "G") shift = 30;
  else if (unit == "T") shift = 40;
  else return Status::InvalidArgument("'" + t + "' has an unknown unit (use K, M, G or T)");
  const double bytes = num * std::ldexp(1.0, shift);
  if (bytes > 1.8e19) return Status::InvalidArgument("'" + t + "' is too large");
  return static_cast<uint64_t>(bytes);
}

std::string FormatBytes(uint64_t n) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (n < 1024) return std::to_string(n) + " B";
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return buf;
}

std::string FormatRate(double bytes_per_second) {
  char buf[32];
  if (bytes_per_second >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB/s", bytes_per_second / 1e9);
  else std::snprintf(buf, sizeof buf, "%.1f MB/s", bytes_per_second / 1e6);
  return buf;
}

uint64_t NowUnixMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

std::string FormatAge(uint64_t unix_ms) {
  const uint64_t now = NowUnixMs();
  uint64_t s = now > unix_ms ? (now - unix_ms) / 1000 : 0;
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%llus", static_cast<unsigned long long>(s));
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%llum%02llus", static_cast<unsigned long long>(s / 60), static_cast<unsigned long long>(s % 60));
  else if (s < 86400) std::snprintf(buf, sizeof buf, "%lluh%02llum", static_cast<unsigned long long>(s / 3600), static_cast<unsigned long long>(s / 60 % 60));
  else std::snprintf(buf, sizeof buf, "%llud%02lluh", static_cast<unsigned long long>(s / 86400), static_cast<unsigned long long>(s / 3600 % 24));
  return buf;
}

std::string FormatTime(uint64_t unix_ms) {
  const time_t t = static_cast<time_t>(unix_ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Table::Table(std::vector<std::string> headers, std::vector<size_t> right)
    : headers_(std::move(headers)), right_(std::move(right)) {}

void Table::Add(std::vector<std::string> row) {
  row.resize(headers_.size());
  rows_.push_back(std::move(row));
}

std::string Table::Render() const {
  std::vector<size_t> w(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) {
    w[c] = headers_[c].size();
    for (const auto& r : rows_) w[c] = std::max(w[c], r[c].size());
  }
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (size_t c = 0; c < r.size(); ++c) {
      const bool right = std::find(right_.begin(), right_.end(), c) != right_.end();
      const std::string pad(w[c] - r[c].size(), ' ');
      s += right ? pad + r[c] : r[c] + (c + 1 < r.size() ? pad : "");
      if (c + 1 < r.size()) s += "  ";
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out << s << "\n";
  };
  line(headers_);
  for (const auto& r : rows_) line(r);
  return out.str();
}

Progress::Progress(std::string label, Unit unit) : label_(std::move(label)), unit_(unit) {
  const char* env = std::getenv("KVTIER_PROGRESS");
  if (env != nullptr && std::string_view(env) == "always") enabled_ = true;
  else if (env != nullptr && std::string_view(env) == "never") enabled_ = false;
  else enabled_ = ::isatty(STDERR_FILENO) == 1;
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { Finish(); }

Result<std::vector<NamespaceInfo>> ListNamespacesCounted(Store& store) {
  Progress p("counting blocks", Progress::Unit::kItems);
  return store.ListNamespaces(NamespaceListing::kWithCounts,
                              [&p](uint64_t done, uint64_t total) { p.Update(done, total); });
}

void Progress::Update(uint64_t done, uint64_t total) {
  done_ = done;
  total_ = total;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  Draw(false);
}

void Progress::Finish() {
  if (finished_) return;
  finished_ = true;
  if (!enabled_) return;
  Draw(true);
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

void Progress::Draw(bool final) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double frac = total_ == 0 ? (final ? 1.0 : 0.0)
                                  : std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  const double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0;
  std::string eta = "--:--";
  if (final) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1fs", elapsed);
    eta = std::string("in ") + b;
  } else if (rate > 0 && total_ > done_) {
    const auto secs = static_cast<uint64_t>(static_cast<double>(total_ - done_) / rate);
    char b[32];
    std::snprintf(b, sizeof b, "ETA %llu:%02llu", static_cast<unsigned long long>(secs / 60),
                  static_cast<unsigned long long>(secs % 60));
    eta = b;
  }
  std::string done, total, per_second;
  if (unit_ == Unit::kBytes) {
    done = FormatBytes(done_);
    total = " / " + FormatBytes(total_);
    per_second = FormatRate(rate);
  } else {
    done = std::to_string(done_);
    total = "/" + std::to_string(total_);
    per_second = std::to_string(static_cast<uint64_t>(rate)) + "/s";
  }
  std::fprintf(stderr, "\r%s [%s] %3d%%  %s%s  %s  %s\033[K", label_.c_str(), bar.c_str(),
               static_cast<int>(frac * 100), done.c_str(), total.c_str(), per_second.c_str(), eta.c_str());
  std::fflush(stderr);
}

void PrintJson(const nlohmann::json& j) { std::cout << j.dump(2) << "\n"; }

nlohmann::json SpecToJson(const NamespaceSpec& s) {
  return nlohmann::json{{"name", s.DisplayName()},
                        {"model_id", s.model_id},
                        {"model_revision", s.model_revision},
                        {"weights_fingerprint", s.weights_fingerprint},
                        {"tokenizer", s.tokenizer},
                        {"adapter", s.adapter},
                        {"dtype", s.dtype},
                        {"layout", s.layout},
                        {"block_tokens", s.block_tokens},
                        {"block_bytes", s.block_bytes},
                        {"tp_rank", s.tp_rank},
                        {"tp_size", s.tp_size},
                        {"hash_scheme", s.hash_scheme},
                        {"hash_seed", s.hash_seed},
                        {"tenant_salt_set", !s.tenant_salt.empty()}};
}

}  // namespace kvtier::cli
