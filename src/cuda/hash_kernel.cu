// XXH3-64 (inputs > 240 bytes, default secret) on the GPU. The long-input
// algorithm keeps 8 accumulator lanes; within one 1 KiB block (16 stripes of
// 64 bytes) a lane's update is a sum over the block's bytes, and only the
// scramble between blocks is sequential. So: one thread per (block, lane)
// sums its block's contribution (all blocks at once), then 8 threads per
// payload run the short sequential chain of scrambles, the last partial
// block, the last stripe and the merge. Names follow xxhash.h's.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cuda/hash_kernel.h"

namespace kvtier::gpu {
namespace {

constexpr int kLanes = 8;
constexpr uint64_t kStripe = 64, kBlock = 1024, kSecretSize = 192;
constexpr uint64_t kStripesPerBlock = (kSecretSize - kStripe) / 8;  // 16
constexpr uint64_t kPrime32_1 = XXH_PRIME32_1;  // a constant the compiler multiplies by in two steps
// Rows of BlockSums loaded ahead of the closing chain, in two alternating
// sets: with one load per step the chain waited on memory at every step.
constexpr int kChainAhead = 16;

__constant__ uint8_t c_secret[kSecretSize];
__constant__ uint64_t c_secret_words[kSecretSize / 8];  // the same bytes as words (the device is little-endian)
__constant__ uint64_t c_init_acc[kLanes];
__constant__ uint64_t c_prime64_1;

__device__ uint64_t SecretWord(uint64_t at) {  // little-endian, any alignment
  uint64_t v = 0;
  for (int b = 7; b >= 0; --b) v = (v << 8) | c_secret[at + b];
  return v;
}

// The fragment holding payload offset `off` (binary search; most payloads
// have one fragment or a few dozen).
__device__ const HashFrag& FragAt(const HashFrag* f, uint32_t count, uint64_t off) {
  uint32_t lo = 0, hi = count - 1;
  while (lo < hi) {
    const uint32_t mid = (lo + hi) / 2;
    if (f[mid].end <= off) lo = mid + 1; else hi = mid;
  }
  return f[lo];
}

// An aligned 8-byte word at payload offset `off` (a multiple of 8; GpuHashable
// guarantees it lies in one fragment).
__device__ uint64_t Word(const HashFrag* f, uint32_t count, uint64_t off) {
  const HashFrag& fr = FragAt(f, count, off);
  const uint64_t frag_start = (&fr == f) ? 0 : (&fr)[-1].end;
  return *reinterpret_cast<const uint64_t*>(fr.ptr + (off - frag_start));
}

// 8 bytes at any payload offset, byte by byte (the last stripe).
__device__ uint64_t AnyWord(const HashFrag* f, uint32_t count, uint64_t off) {
  uint64_t v = 0;
  for (int b = 7; b >= 0; --b) {
    const HashFrag& fr = FragAt(f, count, off + b);
    const uint64_t frag_start = (&fr == f) ? 0 : (&fr)[-1].end;
    v = (v << 8) | fr.ptr[off + b - frag_start];
  }
  return v;
}

__device__ uint64_t Mul32To64(uint64_t k) { return (k & 0xFFFFFFFFull) * (k >> 32); }

// One lane's part of accumulating the stripe at payload offset `at` with
// the secret at `s`: acc[lane] gets the product of its own word, and the
// word of the neighbouring lane (lanes swap pairwise).
template <typename Read>
__device__ uint64_t StripeTerm(Read read, uint64_t at, uint64_t s, int lane) {
  const uint64_t mine = read(at + 8 * lane);
  const uint64_t other = read(at + 8 * (lane ^ 1));
  return other + Mul32To64(mine ^ SecretWord(s + 8 * lane));
}

// One thread per (1 KiB block, lane). A stripe's neighbouring word comes
// from the neighbouring lane by a shuffle, and the secret's words from
// shared memory: the byte-wise constant reads and the second load of every
// word held this kernel to ~0.44 TB/s on an H200, slower per group than
// the PCIe copy a get's check runs beside.
__global__ void BlockSums(const HashPayload* payloads, size_t n, const HashFrag* frags, uint64_t total_blocks,
                          uint64_t* scratch) {
  __shared__ uint64_t secret[kSecretSize / 8];
  if (threadIdx.x < kSecretSize / 8) secret[threadIdx.x] = c_secret_words[threadIdx.x];
  __syncthreads();
  const uint64_t t = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  const uint64_t gb = t / kLanes;
  const int lane = static_cast<int>(t % kLanes);
  const bool live = gb < total_blocks;  // the others still take part in the shuffles
  const HashFrag* f = frags;
  uint32_t frag_count = 1;
  uint64_t base = 0;
  if (live) {
    // The payload owning global block gb.
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
      const size_t mid = (lo + hi + 1) / 2;
      if (payloads[mid].block_begin <= gb) lo = mid; else hi = mid - 1;
    }
    const HashPayload& p = payloads[lo];
    f = frags + p.frag_begin;
    frag_count = p.frag_count;
    base = (gb - p.block_begin) * kBlock;
  }
  uint64_t sum = 0;
  for (uint64_t s = 0; s < kStripesPerBlock; ++s) {
    const uint64_t mine = live ? Word(f, frag_count, base + s * kStripe + 8 * lane) : 0;
    const uint64_t other = __shfl_xor_sync(0xffffffffu, mine, 1);  // lanes swap pairwise
    sum += other + Mul32To64(mine ^ secret[s + lane]);
  }
  if (live) scratch[gb * kLanes + lane] = sum;
}

__global__ void Finish(const HashPayload* payloads, size_t n, const HashFrag* frags, const uint64_t* scratch,
                       uint64_t* out) {
  const size_t pi = blockIdx.x * (blockDim.x / kLanes) + threadIdx.x / kLanes;
  const int lane = threadIdx.x % kLanes;
  __shared__ uint64_t accs[32];  // blockDim.x <= 32
  if (pi < n) {
    const HashPayload& p = payloads[pi];
    const HashFrag* f = frags + p.frag_begin;
    const uint64_t nb = (p.len - 1) / kBlock;
    const uint64_t* rows = scratch + p.block_begin * kLanes + lane;
    const uint64_t scramble_key = SecretWord(kSecretSize - kStripe + 8 * lane);
    uint64_t acc = c_init_acc[lane];
    auto step = [&](uint64_t row) {
      acc += row;
      acc ^= acc >> 47;
      acc ^= scramble_key;
      acc *= kPrime32_1;
    };
    // The next set's loads are issued before this set's steps run, so the
    // chain's own latency, not memory's, sets its pace.
    const uint64_t whole = nb / kChainAhead * kChainAhead;
    uint64_t cur[kChainAhead], next[kChainAhead];
    if (whole > 0) {
#pragma unroll
      for (int j = 0; j < kChainAhead; ++j) cur[j] = __ldg(rows + j * kLanes);
    }
    for (uint64_t b = 0; b < whole; b += kChainAhead) {
      const bool more = b + kChainAhead < whole;
      if (more) {
#pragma unroll
        for (int j = 0; j < kChainAhead; ++j) next[j] = __ldg(rows + (b + kChainAhead + j) * kLanes);
      }
#pragma unroll
      for (int j = 0; j < kChainAhead; ++j) step(cur[j]);
      if (more) {
#pragma unroll
        for (int j = 0; j < kChainAhead; ++j) cur[j] = next[j];
      }
    }
    for (uint64_t b = whole; b < nb; ++b) step(rows[b * kLanes]);
    // The last partial block, then the input's last 64 bytes.
    auto read = [&](uint64_t off) { return Word(f, p.frag_count, off); };
    const uint64_t stripes = ((p.len - 1) - kBlock * nb) / kStripe;
    for (uint64_t s = 0; s < stripes; ++s) acc += StripeTerm(read, nb * kBlock + s * kStripe, s * 8, lane);
    auto any = [&](uint64_t off) { return AnyWord(f, p.frag_count, off); };
    acc += StripeTerm(any, p.len - kStripe, kSecretSize - kStripe - 7, lane);
    accs[threadIdx.x] = acc;
  }
  __syncwarp();
  if (pi < n && lane == 0) {
    const uint64_t* a = accs + threadIdx.x;
    uint64_t r = payloads[pi].len * c_prime64_1;
    for (int i = 0; i < 4; ++i) {
      const uint64_t x = a[2 * i] ^ SecretWord(11 + 16 * i), y = a[2 * i + 1] ^ SecretWord(11 + 16 * i + 8);
      r += (x * y) ^ __umul64hi(x, y);  // the 128-bit product folded to 64 bits
    }
    r ^= r >> 37;  // XXH3_avalanche
    r *= 0x165667919E3779F9ull;
    r ^= r >> 32;
    out[pi] = r;
  }
}

}  // namespace

bool GpuHashable(const HashFrag* frags, uint32_t count, uint64_t len) {
  if (len <= 240 || count == 0) return false;
  uint64_t start = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t size = frags[i].end - start;
    if (reinterpret_cast<uintptr_t>(frags[i].ptr) % 8 != 0) return false;
    if (i + 1 < count && size % 8 != 0) return false;
    start = frags[i].end;
  }
  return start == len;
}

cudaError_t InitGpuHash() {
  static_assert(sizeof(XXH3_kSecret) == kSecretSize, "XXH3's default secret is 192 bytes");
  const uint64_t init[kLanes] = XXH3_INIT_ACC;
  const uint64_t p64 = XXH_PRIME64_1;
  cudaError_t e = cudaMemcpyToSymbol(c_secret, XXH3_kSecret, kSecretSize);
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(c_secret_words, XXH3_kSecret, kSecretSize);
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(c_init_acc, init, sizeof(init));
  if (e == cudaSuccess) e = cudaMemcpyToSymbol(c_prime64_1, &p64, sizeof(p64));
  return e;
}

cudaError_t LaunchGpuHash(const HashPayload* payloads, size_t n, const HashFrag* frags, uint64_t total_blocks,
                          uint64_t* scratch, uint64_t* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (total_blocks > 0) {
    const uint64_t threads = total_blocks * kLanes;
    BlockSums<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(payloads, n, frags, total_blocks,
                                                                                  scratch);
  }
  constexpr unsigned kPerCta = 32 / kLanes;  // payloads per 32-thread block
  Finish<<<static_cast<unsigned>((n + kPerCta - 1) / kPerCta), 32, 0, stream>>>(payloads, n, frags, scratch, out);
  return cudaGetLastError();
}

}  // namespace kvtier::gpu
