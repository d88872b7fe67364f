// kvtier demo [--dir D] [--total-bytes N]: the main job of the README. Writes
// KV blocks shaped like real models (one namespace each), closes and reopens
// the store, reads everything back, checks it byte for byte and reports
// throughput and reopen time. Exit 1 on any mismatch.
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <future>
#include <iostream>

#include "commands.h"

namespace kvtier::cli {

namespace {

// The engine's side of the demo: tensors in 2 MiB-aligned memory advised for
// transparent huge pages, as an engine's pinned staging memory would be.
class HugeBuffer {
 public:
  HugeBuffer() = default;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  ~HugeBuffer() { std::free(data_); }
  bool ResetHuge(size_t size) {
    constexpr size_t kHuge = size_t{2} << 20;
    std::free(data_);
    data_ = nullptr;
    size_ = 0;
    const size_t rounded = (size + kHuge - 1) / kHuge * kHuge;
    void* p = nullptr;
    if (rounded == 0 || posix_memalign(&p, kHuge, rounded) != 0) return rounded == 0;
    data_ = static_cast<uint8_t*>(p);
    size_ = rounded;
    madvise(data_, size_, MADV_HUGEPAGE);
    return true;
  }
  uint8_t* data() { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// A model's KV block as an engine hands it over (see
// /work/shared/reference/limits.md: bf16, 16 tokens per block).
struct Shape {
  const char* name;
  const char* model;
  const char* layout;
  uint64_t block_bytes;
  uint32_t fragments;  // 1 = one contiguous block; else per-layer pieces
};

constexpr Shape kShapes[] = {
    {"qwen3-0.6b/bf16/tp0", "Qwen/Qwen3-0.6B", "vllm-cross-layer", 1835008, 1},       // 1.75 MiB
    {"llama-3.1-8b/bf16/tp0", "meta-llama/Llama-3.1-8B", "vllm-cross-layer", 2097152, 1},  // 2 MiB
    {"llama-3.1-70b/bf16/tp0", "meta-llama/Llama-3.1-70B", "vllm-cross-layer", 5242880, 1},  // 5 MiB
    // 32 layers x (K, V) x 32 KiB, each piece in its own layer tensor.
    {"llama-3.1-8b/bf16/tp0/per-layer", "meta-llama/Llama-3.1-8B", "vllm-per-layer", 2097152, 64},
    {"deepseek-v3/bf16/mla", "deepseek-ai/DeepSeek-V3", "mla-latent", 1124352, 1},  // 576 x 61 x 16 x 2
};
constexpr size_t kNumShapes = sizeof kShapes / sizeof kShapes[0];

struct Demo {
  StoreArgs a;
  std::string total = "1536M";
  std::string batch = "64M";
};

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// 32-byte engine-style key (a hash) for block i of shape s.
std::string KeyOf(size_t s, uint64_t i) {
  uint64_t words[4];
  for (uint64_t w = 0; w < 4; ++w) words[w] = Mix((s << 56) ^ (i << 2) ^ w ^ 0x6b76746965720000ull);
  return std::string(reinterpret_cast<const char*>(words), sizeof words);
}

// Deterministic payload bytes: piece `piece` of block i of shape s.
void Fill(size_t s, uint64_t i, uint32_t piece, uint8_t* dst, size_t n) {
  uint64_t x = Mix((static_cast<uint64_t>(s) << 48) ^ (i << 8) ^ piece);
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
    z ^= z >> 29;
    std::memcpy(dst + j, &z, 8);
  }
  for (; j < n; ++j) dst[j] = static_cast<uint8_t>(Mix(x + j));
}

// A batch of blocks of one shape laid out like an engine's KV cache: one
// buffer for whole blocks, or one buffer per layer piece ("layer tensors")
// with block b's piece at offset b * piece_bytes. Like an engine's staging
// memory the tensors are page-aligned, on huge pages where the kernel has
// them, and reused from batch to batch (the demo keeps two batches).
struct Batch {
  size_t shape = 0;
  uint64_t first = 0, count = 0;
  uint32_t tensors = 0;
  uint64_t tensor_stride = 0;  // bytes from one tensor to the next
  std::vector<std::string> keys;

  // Lays out `c` blocks of shape `s` starting at block `f`; false when out of
  // memory. With `clear` the tensors are zeroed (for reads).
  bool Allocate(size_t s, uint64_t f, uint64_t c, bool clear) {
    shape = s;
    first = f;
    count = c;
    const Shape& sh = kShapes[s];
    tensors = sh.fragments;
    tensor_stride = (piece_bytes() * c + 4095) / 4096 * 4096;
    const uint64_t need = tensor_stride * tensors;
    if (need > mem_.size() && !mem_.ResetHuge(need)) return false;
    if (clear) std::memset(mem_.data(), 0, need);
    keys.resize(c);
    for (uint64_t b = 0; b < c; ++b) keys[b] = KeyOf(s, f + b);
    return true;
  }
  uint64_t piece_bytes() const { return kShapes[shape].block_bytes / kShapes[shape].fragments; }
  uint8_t* piece(uint64_t b, uint32_t p) { return mem_.data() + p * tensor_stride + b * piece_bytes(); }
  void Generate() {
    for (uint64_t b = 0; b < count; ++b)
      for (uint32_t p = 0; p < tensors; ++p) Fill(shape, first + b, p, piece(b, p), piece_bytes());
  }
  // Blocks whose bytes differ from what Generate() writes.
  std::vector<uint64_t> Mismatches() {
    std::vector<uint64_t> bad;
    std::vector<uint8_t> want(piece_bytes());
    for (uint64_t b = 0; b < count; ++b) {
      for (uint32_t p = 0; p < tensors; ++p) {
        Fill(shape, first + b, p, want.data(), want.size());
        if (std::memcmp(want.data(), piece(b, p), want.size()) != 0) {
          bad.push_back(first + b);
          break;
        }
      }
    }
    return bad;
  }

 private:
  HugeBuffer mem_;
};

struct ShapeResult {
  NamespaceId ns = 0;
  uint64_t blocks = 0;
};

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int Run(Demo& in) {
  const std::string cmd = "demo";
  auto total = ParseSize(in.total);
  if (!total.ok()) return Fail(cmd, kExitUsage, "--total-bytes: " + total.status().message());
  auto batch_bytes = ParseSize(in.batch);
  if (!batch_bytes.ok() || *batch_bytes < (8ull << 20)) return Fail(cmd, kExitUsage, "--batch-bytes must be a size of at least 8M");
  auto seg = ParseSize(in.a.segment_size);
  if (!seg.ok()) return Fail(cmd, kExitUsage, "--segment-size: " + seg.status().message());
  if (*seg < (8ull << 20)) return Fail(cmd, kExitUsage, "--segment-size must be at least 8M (the largest demo block is 5 MiB)");
  // Everything written must still be there to read back: leave room for the
  // open segment and the one being filled when the budget is reached.
  const uint64_t need = *total + 4 * *seg;
  if (in.a.capacity.empty()) {
    in.a.capacity = std::to_string(std::max<uint64_t>(need, 8ull << 30));
  } else {
    auto cap = ParseSize(in.a.capacity);
    if (!cap.ok()) return Fail(cmd, kExitUsage, "--capacity: " + cap.status().message());
    if (*cap < need) return Fail(cmd, kExitUsage, "--capacity must be at least --total-bytes + 4 segments (" + FormatBytes(need) + ") so that nothing is evicted");
  }
  std::vector<uint64_t> counts(kNumShapes);
  for (size_t s = 0; s < kNumShapes; ++s) counts[s] = std::max<uint64_t>(1, *total / kNumShapes / kShapes[s].block_bytes);

  int rc = kExitOk;
  auto store = OpenStore(cmd, in.a, OpenMode::kCreate, &rc);
  if (!store) return rc;
  std::vector<ShapeResult> res(kNumShapes);
  for (size_t s = 0; s < kNumShapes; ++s) {
    NamespaceSpec spec;
    spec.name = kShapes[s].name;
    spec.model_id = kShapes[s].model;
    spec.dtype = "bf16";
    spec.layout = kShapes[s].layout;
    spec.block_tokens = 16;
    spec.block_bytes = kShapes[s].block_bytes;
    spec.hash_scheme = "kvtier-demo";
    auto id = store->RegisterNamespace(spec);
    if (!id.ok()) return Fail(cmd, kExitProblems, in.a.dir + ": " + id.status().ToString());
    res[s].ns = *id;
  }
  // The work list: (shape, first block, count) in batches.
  struct Piece {
    size_t shape;
    uint64_t first, count;
  };
  std::vector<Piece> plan;
  uint64_t total_blocks = 0, total_payload = 0;
  for (size_t s = 0; s < kNumShapes; ++s) {
    const uint64_t per = std::max<uint64_t>(1, *batch_bytes / kShapes[s].block_bytes);
    for (uint64_t f = 0; f < counts[s]; f += per) plan.push_back({s, f, std::min(per, counts[s] - f)});
    total_blocks += counts[s];
    total_payload += counts[s] * kShapes[s].block_bytes;
  }

  // ---- Write: PutBatch per batch while the next batch is generated ----
  Progress wp("write");
  double write_secs = 0;
  uint64_t written = 0;
  const auto wall0 = std::chrono::steady_clock::now();
  // Two batches: the next is generated while this one is put.
  std::array<Batch, 2> wbatch;
  auto make = [&](size_t i) {
    Batch* b = &wbatch[i % 2];
    if (!b->Allocate(plan[i].shape, plan[i].first, plan[i].count, /*clear=*/false)) return false;
    b->Generate();
    return true;
  };
  std::future<bool> next = std::async(std::launch::async, make, 0);
  for (size_t i = 0; i < plan.size(); ++i) {
    if (!next.get()) return Fail(cmd, kExitProblems, "out of memory for a batch of blocks");
    Batch* b = &wbatch[i % 2];
    if (i + 1 < plan.size()) next = std::async(std::launch::async, make, i + 1);
    std::vector<std::vector<Fragment>> frags(b->count);
    std::vector<PutItem> items(b->count);
    for (uint64_t k = 0; k < b->count; ++k) {
      for (uint32_t p = 0; p < b->tensors; ++p) frags[k].push_back({b->piece(k, p), b->piece_bytes()});
      items[k] = {b->keys[k], frags[k]};
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Status> st = store->PutBatch(res[b->shape].ns, items);
    write_secs += Since(t0);
    for (uint64_t k = 0; k < b->count; ++k)
      if (!st[k].ok()) return Fail(cmd, kExitProblems, in.a.dir + ": put of " + kShapes[b->shape].name + " block " + std::to_string(b->first + k) + " failed: " + st[k].ToString());
    written += b->count * kShapes[b->shape].block_bytes;
    wp.Update(written, total_payload);
  }
  {
    const auto t0 = std::chrono::steady_clock::now();
    Status fl = store->Flush();
    write_secs += Since(t0);
    if (!fl.ok()) return Fail(cmd, kExitProblems, in.a.dir + ": flush: " + fl.ToString());
  }
  wp.Finish();
  const double write_wall = Since(wall0);
  const Stats wstats = store->GetStats();

  // ---- Close and reopen ----
  auto t_close = std::chrono::steady_clock::now();
  Status cs = store->Close();
  if (!cs.ok()) return Fail(cmd, kExitProblems, in.a.dir + ": close: " + cs.ToString());
  const double close_secs = Since(t_close);
  store.reset();
  const auto t_open = std::chrono::steady_clock::now();
  store = OpenStore(cmd, in.a, OpenMode::kWrite, &rc);
  if (!store) return rc;
  const double reopen_secs = Since(t_open);
  const Stats ostats = store->GetStats();

  // ---- Read back with GetBatch, check while the next batch is read ----
  Progress rp("read+verify");
  double read_secs = 0;
  uint64_t read = 0, present = 0;
  std::vector<std::string> problems;  // the first few
  uint64_t failures = 0;
  auto problem = [&](std::string p) {
    ++failures;
    if (problems.size() < 10) problems.push_back(std::move(p));
  };
  for (size_t s = 0; s < kNumShapes; ++s) {
    std::vector<std::string> keys;
    for (uint64_t i = 0; i < counts[s]; ++i) keys.push_back(KeyOf(s, i));
    std::vector<std::string_view> views(keys.begin(), keys.end());
    auto n = store->LookupPrefix(res[s].ns, views);
    if (n.ok()) present += *n;
  }
  // Two batches: one is read while the other is checked.
  std::array<Batch, 2> rbatch;
  std::future<std::vector<uint64_t>> checking;
  Batch* checking_batch = nullptr;
  auto collect = [&]() {
    if (!checking.valid()) return;
    for (uint64_t bad : checking.get()) {
      ++failures;
      if (problems.size() < 10) problems.push_back(std::string(kShapes[checking_batch->shape].name) + " block " + std::to_string(bad) + ": bytes differ");
    }
  };
  for (size_t i = 0; i < plan.size(); ++i) {
    Batch* b = &rbatch[i % 2];  // the other one may still be checked
    if (!b->Allocate(plan[i].shape, plan[i].first, plan[i].count, /*clear=*/true))
      return Fail(cmd, kExitProblems, "out of memory for a batch of blocks");
    std::vector<std::vector<MutableFragment>> frags(b->count);
    std::vector<GetItem> items(b->count);
    for (uint64_t k = 0; k < b->count; ++k) {
      for (uint32_t p = 0; p < b->tensors; ++p) frags[k].push_back({b->piece(k, p), b->piece_bytes()});
      items[k] = {b->keys[k], frags[k]};
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Result<size_t>> got = store->GetBatch(res[b->shape].ns, items);
    read_secs += Since(t0);
    for (uint64_t k = 0; k < b->count; ++k) {
      if (!got[k].ok()) problem(std::string(kShapes[b->shape].name) + " block " + std::to_string(b->first + k) + ": " + got[k].status().ToString());
      else if (*got[k] != kShapes[b->shape].block_bytes) problem(std::string(kShapes[b->shape].name) + " block " + std::to_string(b->first + k) + ": size " + std::to_string(*got[k]));
      else read += *got[k];
    }
    collect();
    checking_batch = b;
    checking = std::async(std::launch::async, [b] { return b->Mismatches(); });
    rp.Update(read, total_payload);
  }
  collect();
  rp.Finish();
  const Stats rstats = store->GetStats();
  cs = store->Close();
  if (!cs.ok()) return Fail(cmd, kExitProblems, in.a.dir + ": close: " + cs.ToString());
  const bool ok = failures == 0 && present == total_blocks;

  const double wgbs = write_secs > 0 ? static_cast<double>(total_payload) / write_secs / 1e9 : 0;
  const double rgbs = read_secs > 0 ? static_cast<double>(read) / read_secs / 1e9 : 0;
  if (in.a.json) {
    nlohmann::json shapes = nlohmann::json::array();
    for (size_t s = 0; s < kNumShapes; ++s)
      shapes.push_back({{"namespace", kShapes[s].name}, {"ns_id", NamespaceIdToHex(res[s].ns)}, {"layout", kShapes[s].layout},
                        {"block_bytes", kShapes[s].block_bytes}, {"fragments", kShapes[s].fragments}, {"blocks", counts[s]}});
    PrintJson({{"dir", in.a.dir}, {"ok", ok}, {"io_backend", ostats.io_backend}, {"shapes", shapes},
               {"blocks", total_blocks}, {"payload_bytes", total_payload},
               {"write_seconds", write_secs}, {"write_wall_seconds", write_wall}, {"write_gb_per_s", wgbs},
               {"write_amplification", wstats.write_amplification}, {"close_seconds", close_secs},
               {"reopen_seconds", reopen_secs}, {"recovered_from_crash", ostats.recovered_from_crash},
               {"read_seconds", read_secs}, {"read_gb_per_s", rgbs}, {"blocks_present", present},
               {"bytes_verified", read}, {"hits_disk", rstats.hits_disk}, {"hits_ram", rstats.hits_ram},
               {"failures", failures}, {"problems", problems}});
  } else {
    char line[256];
    std::cout << "kvtier demo in " << in.a.dir << " (" << ostats.io_backend << ", segments of " << FormatBytes(*seg) << ")\n";
    Table t({"NAMESPACE", "LAYOUT", "BLOCK", "PIECES", "BLOCKS", "BYTES"}, {2, 3, 4, 5});
    for (size_t s = 0; s < kNumShapes; ++s)
      t.Add({kShapes[s].name, kShapes[s].layout, FormatBytes(kShapes[s].block_bytes), std::to_string(kShapes[s].fragments),
             std::to_string(counts[s]), FormatBytes(counts[s] * kShapes[s].block_bytes)});
    std::cout << t.Render();
    std::snprintf(line, sizeof line, "write   %llu blocks, %s in %.2f s: %.2f GB/s durable (PutBatch + Flush; write amplification %.3f)\n",
                  static_cast<unsigned long long>(total_blocks), FormatBytes(total_payload).c_str(), write_secs, wgbs, wstats.write_amplification);
    std::cout << line;
    std::snprintf(line, sizeof line, "reopen  %.3f s (close %.3f s; %s)\n", reopen_secs, close_secs,
                  ostats.recovered_from_crash ? "RECOVERED FROM CRASH" : "clean, no scan");
    std::cout << line;
    std::snprintf(line, sizeof line, "read    %s in %.2f s: %.2f GB/s (GetBatch, %llu from disk, %llu from RAM)\n",
                  FormatBytes(read).c_str(), read_secs, rgbs, static_cast<unsigned long long>(rstats.hits_disk),
                  static_cast<unsigned long long>(rstats.hits_ram));
    std::cout << line;
    if (ok) {
      std::cout << "verify  all " << total_blocks << " blocks present and byte-exact\n";
    } else {
      std::cout << "verify  FAILED: " << present << " of " << total_blocks << " blocks present, " << failures << " blocks missing or wrong\n";
      for (const std::string& p : problems) std::cout << "  " << p << "\n";
    }
  }
  return ok ? kExitOk : kExitProblems;
}

}  // namespace

Command AddDemo(CLI::App& root) {
  auto in = std::make_shared<Demo>();
  in->a.dir = "./kvtier-data";
  CLI::App* sub = root.add_subcommand("demo", "Write model-shaped KV blocks, reopen, read back, verify byte for byte, report GB/s");
  sub->add_option("--dir", in->a.dir, "Store folder (created if missing)")->capture_default_str();
  sub->add_option("--total-bytes", in->total, "Payload bytes to write, split across the model shapes")->capture_default_str();
  sub->add_option("--batch-bytes", in->batch, "Bytes per PutBatch/GetBatch")->capture_default_str();
  AddCreateOptions(sub, &in->a);
  AddJsonFlag(sub, &in->a.json);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
