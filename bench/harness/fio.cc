#include "harness/fio.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace kvbench {

std::string FindFio() {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    const std::string cand = p.substr(start, end - start) + "/fio";
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    start = end + 1;
  }
  return "";
}

uint64_t HugetlbFreeBytes() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t free_pages = 0, page_kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long long v = 0;
    if (std::sscanf(line, "HugePages_Free: %llu", &v) == 1) free_pages = v;
    if (std::sscanf(line, "Hugepagesize: %llu kB", &v) == 1) page_kib = v;
  }
  std::fclose(f);
  return free_pages * page_kib * 1024;
}

kvtier::Status RunFio(const std::string& fio, const std::string& file, const std::string& rw,
                      uint64_t block_bytes, uint64_t file_bytes, uint32_t queue_depth,
                      Measurement* m, uint32_t fdatasync_every, uint32_t numjobs) {
  m->design = fdatasync_every > 0 ? "fio-durable" : "fio";
  const bool writes = rw == "write" || rw == "randwrite";
  m->op = writes ? "put" : "get";
  const std::string out = file + ".json";
  // The designs' buffers of 2 MiB and more sit on (transparent) huge pages
  // (AlignedBuf); fio can match that only through hugetlbfs pages, used when
  // enough are reserved (vm.nr_hugepages) for every job's buffers. Where
  // page pinning is costly (this VM) the difference is 4x, so the run says
  // which memory fio had.
  std::string iomem;
  if (block_bytes >= (2u << 20) && !HugePageBuffers()) {
    m->note = "fio and the designs on 4 KiB pages (--buffer-pages 4k)";
  } else if (block_bytes >= (2u << 20) &&
             HugetlbFreeBytes() >= uint64_t{block_bytes} * queue_depth * numjobs + (4u << 20)) {
    iomem = " --iomem=mmaphuge";
    m->note = "fio buffers on hugetlbfs pages (--iomem=mmaphuge), like the designs' huge-page buffers";
  } else if (block_bytes >= (2u << 20)) {
    // Enough for the full sweep's largest configuration.
    const FioSweep full = SweepFor("get", "full", 1);
    const uint64_t buffers = uint64_t{block_bytes} * *std::max_element(full.depths.begin(), full.depths.end()) *
                             *std::max_element(full.jobs.begin(), full.jobs.end());
    const uint64_t pages = (buffers + (2u << 20) - 1) / (2u << 20) + 2;
    m->note = "fio buffers on 4 KiB pages (no hugetlbfs pages reserved; the designs' buffers are on huge pages): "
              "a limit below the device's best where pinning 4 KiB pages costs (docs/benchmarks.md); "
              "`sysctl -w vm.nr_hugepages=" + std::to_string(pages) + "` gives fio huge pages";
  }
  if (fdatasync_every > 0) {
    iomem += " --fdatasync=" + std::to_string(fdatasync_every);
    m->note += std::string(m->note.empty() ? "" : "; ") + "fdatasync after every " +
               std::to_string(fdatasync_every) + " writes (kvtier's group commit)";
  }
  // Jobs split the file: each moves its own region, so the total is the same.
  numjobs = std::max<uint32_t>(1, numjobs);
  const uint64_t per_job = std::max<uint64_t>(block_bytes, file_bytes / numjobs / block_bytes * block_bytes);
  std::string jobs = " --numjobs=" + std::to_string(numjobs);
  if (numjobs > 1) jobs += " --offset_increment=" + std::to_string(per_job);
  std::string cmd = fio + " --name=kvtier-bench --filename=" + file + " --rw=" + rw + iomem +
                    " --bs=" + std::to_string(block_bytes) + " --size=" + std::to_string(per_job) +
                    " --ioengine=io_uring --direct=1 --iodepth=" + std::to_string(queue_depth) + jobs +
                    " --group_reporting --output-format=json --output=" + out + " >/dev/null 2>" + file + ".err";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::string err;
    if (FILE* f = std::fopen((file + ".err").c_str(), "r")) {
      char buf[512];
      size_t n = std::fread(buf, 1, sizeof buf - 1, f);
      buf[n] = 0;
      err = buf;
      std::fclose(f);
    }
    return kvtier::Status::IOError("fio failed (exit " + std::to_string(WEXITSTATUS(rc)) +
                                   "): " + cmd + ": " + err);
  }
  std::filesystem::remove(file + ".err");
  FILE* f = std::fopen(out.c_str(), "r");
  if (f == nullptr) return kvtier::Status::IOError("fio wrote no output to " + out);
  nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  std::fclose(f);
  std::filesystem::remove(out);
  if (j.is_discarded() || !j.contains("jobs") || j["jobs"].empty())
    return kvtier::Status::Corruption("fio output is not the expected JSON: " + out);
  const auto& job = j["jobs"][0];
  const auto& side = job[writes ? "write" : "read"];
  const double bw = side.value("bw_bytes", 0.0);
  const double iops = side.value("iops", 0.0);
  const double runtime_s = side.value("runtime", 0.0) / 1000.0;
  if (bw <= 0) return kvtier::Status::Corruption("fio reported no bandwidth for " + rw);
  m->gbps = bw / 1e9;
  m->ops_per_s = iops;
  m->ops = side.value("total_ios", uint64_t{0});
  if (side.contains("clat_ns") && side["clat_ns"].contains("percentile")) {
    const auto& p = side["clat_ns"]["percentile"];
    auto get = [&](const char* k) { return p.contains(k) ? p[k].get<double>() / 1000.0 : 0.0; };
    m->p50_us = get("50.000000");
    m->p99_us = get("99.000000");
    m->p999_us = get("99.900000");
  }
  const double cpu_pct = job.value("usr_cpu", 0.0) + job.value("sys_cpu", 0.0);
  const double bytes = side.value("io_bytes", 0.0);
  if (bytes > 0 && runtime_s > 0) m->cpu_s_per_gb = cpu_pct / 100.0 * runtime_s / (bytes / 1e9);
  return kvtier::Status::OK();
}

FioSweep SweepFor(const std::string& op, const std::string& mode, uint32_t queue_depth) {
  FioSweep s;
  if (mode == "single") {
    s.patterns = {op == "put" ? "write" : "randread"};
    s.depths = {queue_depth};
    s.jobs = {1};
    return s;
  }
  s.patterns = op == "put" ? std::vector<std::string>{"write", "randwrite"}
                           : std::vector<std::string>{"randread", "read"};
  s.depths = mode == "quick" ? std::vector<uint32_t>{1, 16, 64} : std::vector<uint32_t>{1, 4, 16, 32, 64};
  s.jobs = mode == "quick" ? std::vector<uint32_t>{1, 4} : std::vector<uint32_t>{1, 2, 4};
  return s;
}

namespace {

uint64_t HostMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

// Leaves `file` as `op`'s runs need it: written whole for reads, absent for
// writes (which then allocate it as they go).
kvtier::Status PrepareFioFile(const std::string& fio, const std::string& file, const std::string& op,
                              uint64_t block_bytes, uint64_t file_bytes) {
  if (op != "get") {
    std::filesystem::remove(file);
    return kvtier::Status::OK();
  }
  Measurement fill;
  return RunFio(fio, file, "write", block_bytes, file_bytes, 16, &fill);
}

}  // namespace

kvtier::Status SweepFio(const std::string& fio, const std::string& file, const std::string& op,
                        uint64_t block_bytes, uint64_t file_bytes, const FioSweep& sweep, Measurement* best,
                        const std::function<void(const std::string&)>& progress, FioConfig* winner_config) {
  if (op == "get") KVTIER_RETURN_IF_ERROR(PrepareFioFile(fio, file, op, block_bytes, file_bytes));
  std::string winner, first_error;
  size_t tried = 0;
  *best = Measurement{};
  for (const std::string& rw : sweep.patterns)
    for (uint32_t depth : sweep.depths)
      for (uint32_t jobs : sweep.jobs) {
        const std::string config =
            "--rw=" + rw + " --iodepth=" + std::to_string(depth) + " --numjobs=" + std::to_string(jobs);
        if (progress) progress(config);
        if (op == "put") std::filesystem::remove(file);
        Measurement m;
        kvtier::Status st = RunFio(fio, file, rw, block_bytes, file_bytes, depth, &m, 0, jobs);
        if (!st.ok()) {
          if (first_error.empty()) first_error = st.ToString();
          continue;
        }
        ++tried;
        if (m.gbps && (!best->gbps || *m.gbps > *best->gbps)) {
          *best = m;
          winner = config;
          if (winner_config) *winner_config = FioConfig{rw, depth, jobs};
        }
      }
  if (tried == 0) return kvtier::Status::IOError("every fio configuration failed: " + first_error);
  const uint64_t ram = HostMemoryBytes();
  std::string note = "best of " + std::to_string(tried) + " fio configurations: " + winner + "; file " +
                     HumanBytes(file_bytes) + (ram ? " against " + HumanBytes(ram) + " of host memory" : "");
  if (ram && file_bytes < 2 * ram)
    note += " (a cache on a VM's host can hide a file this size even from O_DIRECT: a file of " +
            HumanBytes(2 * ram) + " would rule that out)";
  best->note = best->note.empty() ? note : note + "; " + best->note;
  return kvtier::Status::OK();
}

void RecheckFio(const std::string& fio, const std::string& file, const std::string& op, uint64_t block_bytes,
                uint64_t file_bytes, const FioConfig& winner, Measurement* best) {
  if (winner.rw.empty() || !best->gbps) return;
  Measurement again;
  kvtier::Status st = PrepareFioFile(fio, file, op, block_bytes, file_bytes);
  if (st.ok()) st = RunFio(fio, file, winner.rw, block_bytes, file_bytes, winner.depth, &again, 0, winner.jobs);
  std::filesystem::remove(file);
  if (!st.ok() || !again.gbps) {
    best->note += "; the winner run again after the designs failed: " + st.ToString();
    return;
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "; the winner run again after the designs: %.3f then %.3f GB/s, the better kept",
                *best->gbps, *again.gbps);
  std::string note = best->note + buf;
  if (*again.gbps > *best->gbps) {
    again.design = best->design;
    again.op = best->op;
    *best = again;
  }
  best->note = note;
}

}  // namespace kvbench
