#include "harness/report.h"

#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>

namespace kvbench {
namespace {

std::string FsTypeName(long t) {
  switch (static_cast<unsigned long>(t)) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794c7630: return "overlayfs";
    case 0x6969: return "nfs";
    case 0x2FC12FC1: return "zfs";
    case 0xF2F52010: return "f2fs";
    default: {
      char b[32];
      std::snprintf(b, sizeof b, "0x%lx", static_cast<unsigned long>(t));
      return b;
    }
  }
}

std::string Fmt(const std::optional<double>& v, const char* f) {
  if (!v) return "-";
  char b[32];
  std::snprintf(b, sizeof b, f, *v);
  return b;
}

}  // namespace

nlohmann::json DescribeMachine(const std::string& dir, const std::string& fio) {
  nlohmann::json m;
  std::ifstream cpu("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpu, line)) {
    if (line.rfind("model name", 0) == 0) {
      m["cpu"] = line.substr(line.find(':') + 2);
      break;
    }
  }
  m["cores"] = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  m["memory_bytes"] = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  utsname u{};
  if (uname(&u) == 0) m["kernel"] = std::string(u.sysname) + " " + u.release;
  struct statfs sf{};
  if (statfs(dir.c_str(), &sf) == 0) {
    m["fs_type"] = FsTypeName(sf.f_type);
    m["free_bytes"] = static_cast<uint64_t>(sf.f_bavail) * sf.f_bsize;
  }
  m["dir"] = dir;
  char date[64];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  m["date"] = date;
  m["fio"] = fio.empty() ? "missing" : fio;
  return m;
}

void PrintMachine(const nlohmann::json& m) {
  std::printf("kvtier-bench  %s\n", m.value("date", "").c_str());
  std::printf("  cpu: %s, %d cores, %s RAM\n", m.value("cpu", "?").c_str(), m.value("cores", 0),
              HumanBytes(m.value("memory_bytes", uint64_t{0})).c_str());
  std::printf("  kernel: %s\n", m.value("kernel", "?").c_str());
  std::printf("  dir: %s (%s, %s free)\n", m.value("dir", "").c_str(),
              m.value("fs_type", "?").c_str(), HumanBytes(m.value("free_bytes", uint64_t{0})).c_str());
  std::printf("  fio: %s\n\n", m.value("fio", "").c_str());
}

std::optional<double> RatioTo(const WorkloadResult& w, const Measurement& m,
                              const std::string& design) {
  for (const Measurement& r : w.results) {
    if (r.design != design || r.op != m.op) continue;
    if (r.gbps && m.gbps && *r.gbps > 0) return *m.gbps / *r.gbps;
    if (r.ops_per_s && m.ops_per_s && *r.ops_per_s > 0) return *m.ops_per_s / *r.ops_per_s;
    // Reopen: a shorter time is better, so invert.
    if (r.p50_us && m.p50_us && m.op == "reopen" && *m.p50_us > 0) return *r.p50_us / *m.p50_us;
  }
  return std::nullopt;
}

void PrintTable(const WorkloadResult& w) {
  std::printf("== %s", w.name.c_str());
  if (w.block_bytes) std::printf(" (%s blocks)", HumanBytes(w.block_bytes).c_str());
  std::printf("\n");
  if (!w.params.empty()) std::printf("   %s\n", w.params.c_str());
  std::printf("%-21s %-6s %8s %8s %11s %10s %10s %10s %7s %7s %7s %7s\n", "design", "op", "ops",
              "GB/s", "blocks/s", "p50 us", "p99 us", "p99.9 us", "w-amp", "cpu/GB", "x fio",
              "x kvt");
  for (const Measurement& m : w.results) {
    std::printf("%-21s %-6s %8llu %8s %11s %10s %10s %10s %7s %7s %7s %7s\n", m.design.c_str(),
                m.op.c_str(), static_cast<unsigned long long>(m.ops), Fmt(m.gbps, "%.3f").c_str(),
                Fmt(m.ops_per_s, "%.0f").c_str(), Fmt(m.p50_us, "%.0f").c_str(),
                Fmt(m.p99_us, "%.0f").c_str(), Fmt(m.p999_us, "%.0f").c_str(),
                Fmt(m.write_amp, "%.3f").c_str(), Fmt(m.cpu_s_per_gb, "%.2f").c_str(),
                Fmt(RatioTo(w, m, "fio"), "%.2f").c_str(),
                Fmt(RatioTo(w, m, "kvtier"), "%.2f").c_str());
  }
  for (const Measurement& m : w.results)
    if (m.bad > 0 || !m.note.empty())
      std::printf("   %s %s: %s%s\n", m.design.c_str(), m.op.c_str(),
                  m.bad ? (std::to_string(m.bad) + " failed/unverified; ").c_str() : "",
                  m.note.c_str());
  for (const std::string& n : w.notes) std::printf("   note: %s\n", n.c_str());
  std::printf("\n");
  std::fflush(stdout);
}

nlohmann::json ToJson(const nlohmann::json& machine, const std::vector<WorkloadResult>& ws) {
  nlohmann::json out;
  out["machine"] = machine;
  out["workloads"] = nlohmann::json::array();
  for (const WorkloadResult& w : ws) {
    nlohmann::json jw;
    jw["name"] = w.name;
    jw["block_bytes"] = w.block_bytes;
    if (!w.params.empty()) jw["params"] = w.params;
    if (!w.notes.empty()) jw["notes"] = w.notes;
    jw["results"] = nlohmann::json::array();
    for (const Measurement& m : w.results) {
      nlohmann::json r;
      r["design"] = m.design;
      r["op"] = m.op;
      auto put = [&](const char* k, const std::optional<double>& v) {
        if (v) r[k] = *v;
      };
      put("gbps", m.gbps);
      put("ops_per_s", m.ops_per_s);
      put("p50_us", m.p50_us);
      put("p99_us", m.p99_us);
      put("p999_us", m.p999_us);
      put("write_amp", m.write_amp);
      put("cpu_s_per_gb", m.cpu_s_per_gb);
      jw["results"].push_back(std::move(r));
    }
    out["workloads"].push_back(std::move(jw));
  }
  return out;
}

}  // namespace kvbench
