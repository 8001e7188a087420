// A small emulator of the CUDA execution model on host threads, so that the streaming kernels
// (kernels/src/cuda/gemv_stream.cuh, attention_decode.cuh) run in the CPU test suite against the
// scalar references on every machine, GPU or not. Every thread of a block is a std::thread; blocks run
// one after another. Emulated: thread / block ids, __syncthreads and __syncwarp (barriers), warp
// shuffles and mma.sync m16n8k16 (warp collectives: every lane must reach them, as on the GPU),
// dynamic shared memory (filled with a garbage pattern before each block, so reads of unwritten shared
// memory show up), cp.async (copies deferred until the wait that covers them, or done at once - both
// orders are legal on the hardware, so the tests run both), packed fp16 arithmetic (IEEE rounding of
// each result). Not emulated: timing, memory-model subtleties beyond the barriers, bank conflicts.
#pragma once

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "infergate/kernels/numeric.h"

// ---- CUDA vocabulary on the host ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};
struct alignas(8) uint2 {
  uint32_t x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};

namespace emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct WarpCtx {
  explicit WarpCtx(int n) : bar(n) {}
  std::barrier<> bar;
  uint32_t slot[32][10] = {};
};

struct BlockCtx {
  explicit BlockCtx(int n) : bar(n) {}
  std::barrier<> bar;
  std::vector<std::unique_ptr<WarpCtx>> warps;
  std::vector<uint8_t> smem;
};

struct Copy {
  void* dst;
  const void* src;
  int bytes;
  int src_bytes;
};

struct ThreadState {
  Dim3 thread, block;
  BlockCtx* blk = nullptr;
  WarpCtx* warp = nullptr;
  int lane = 0;
  std::vector<std::vector<Copy>> groups;  // committed, oldest first
  std::vector<Copy> open;                 // issued since the last commit
};

inline thread_local ThreadState tl;
inline Dim3 g_block_dim, g_grid_dim;
// cp.async completion order: false = at the covering wait (the latest legal moment), true = at issue.
inline bool g_cp_immediate = false;

inline int lane() { return tl.lane; }
inline uint8_t* dynamic_smem() { return tl.blk->smem.data(); }
inline void sync_warp() { tl.warp->bar.arrive_and_wait(); }
inline void sync_block() { tl.blk->bar.arrive_and_wait(); }

// Every lane publishes `n` words, then reads what lane `src` published.
inline void publish(const uint32_t* v, int n) {
  std::memcpy(tl.warp->slot[tl.lane], v, static_cast<size_t>(n) * 4);
  tl.warp->bar.arrive_and_wait();
}
inline void done_reading() { tl.warp->bar.arrive_and_wait(); }

inline uint32_t shfl_u32(uint32_t v, int src) {
  publish(&v, 1);
  const uint32_t r = tl.warp->slot[src & 31][0];
  done_reading();
  return r;
}
inline bool warp_all(bool p) {
  const uint32_t v = p ? 1u : 0u;
  publish(&v, 1);
  bool all = true;
  for (int l = 0; l < 32; ++l) all = all && tl.warp->slot[l][0] != 0;
  done_reading();
  return all;
}
inline float shfl_f32(float v, int src) {
  return infergate::kernels::bits_to_float(shfl_u32(infergate::kernels::float_to_bits(v), src));
}

inline void do_copy(const Copy& c) {
  auto* d = static_cast<uint8_t*>(c.dst);
  std::memcpy(d, c.src, static_cast<size_t>(c.src_bytes));
  std::memset(d + c.src_bytes, 0, static_cast<size_t>(c.bytes - c.src_bytes));
}
inline void cp_async(void* dst, const void* src, int bytes, int src_bytes) {
  const Copy c{dst, src, bytes, src_bytes < 0 ? 0 : (src_bytes > bytes ? bytes : src_bytes)};
  if (g_cp_immediate) {
    do_copy(c);
  } else {
    tl.open.push_back(c);
  }
}
inline void cp_commit() {
  tl.groups.push_back(std::move(tl.open));
  tl.open.clear();
}
inline void cp_wait(int n) {
  while (static_cast<int>(tl.groups.size()) > n) {
    for (const Copy& c : tl.groups.front()) do_copy(c);
    tl.groups.erase(tl.groups.begin());
  }
}

inline uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t s) {
  const uint64_t x = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t sel = (s >> (4 * i)) & 7u;
    r |= static_cast<uint32_t>((x >> (8 * sel)) & 0xFFu) << (8 * i);
  }
  return r;
}

enum class H2Op { kSub, kMul, kFma };
// One fp16 operation per half, rounded to nearest even (through fp32, which holds every fp16 product
// exactly).
inline uint32_t h2_op(uint32_t a, uint32_t b, uint32_t c, H2Op op) {
  using infergate::kernels::fp16_from_float;
  using infergate::kernels::fp16_to_float;
  uint32_t r = 0;
  for (int i = 0; i < 2; ++i) {
    const float x = fp16_to_float(static_cast<uint16_t>(a >> (16 * i)));
    const float y = fp16_to_float(static_cast<uint16_t>(b >> (16 * i)));
    const float z = fp16_to_float(static_cast<uint16_t>(c >> (16 * i)));
    const float v = op == H2Op::kSub ? x - y : (op == H2Op::kMul ? x * y : std::fma(x, y, z));
    r |= static_cast<uint32_t>(fp16_from_float(v)) << (16 * i);
  }
  return r;
}

inline float half_bits(uint32_t w, int hi, bool bf16) {
  const auto h = static_cast<uint16_t>(w >> (16 * hi));
  return bf16 ? infergate::kernels::bf16_to_float(h) : infergate::kernels::fp16_to_float(h);
}

// mma.sync.m16n8k16.row.col, fp32 accumulators: lane 4g + c holds A (row g / g+8, cols 2c, 2c+1 /
// 2c+8, 2c+9), B (rows 2c, 2c+1 / 2c+8, 2c+9; col g) and D (rows g / g+8, cols 2c, 2c+1).
inline void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16) {
  uint32_t mine[10] = {a[0], a[1], a[2], a[3], b0, b1};
  for (int i = 0; i < 4; ++i) mine[6 + i] = infergate::kernels::float_to_bits(d[i]);
  publish(mine, 10);
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const uint32_t* s = tl.warp->slot[l];
    const int g = l >> 2, c = l & 3;
    for (int e = 0; e < 2; ++e) {
      A[g][2 * c + e] = half_bits(s[0], e, bf16);
      A[g + 8][2 * c + e] = half_bits(s[1], e, bf16);
      A[g][2 * c + 8 + e] = half_bits(s[2], e, bf16);
      A[g + 8][2 * c + 8 + e] = half_bits(s[3], e, bf16);
      B[2 * c + e][g] = half_bits(s[4], e, bf16);
      B[2 * c + 8 + e][g] = half_bits(s[5], e, bf16);
    }
  }
  const int g = tl.lane >> 2, c = tl.lane & 3;
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * c, 2 * c + 1, 2 * c, 2 * c + 1};
  for (int i = 0; i < 4; ++i) {
    double s = infergate::kernels::bits_to_float(mine[6 + i]);
    for (int k = 0; k < 16; ++k) s += static_cast<double>(A[rows[i]][k]) * B[k][cols[i]];
    d[i] = static_cast<float>(s);
  }
  done_reading();
}

// Runs `body` (the kernel call with its arguments bound) for every thread of every block. Blocks run
// one at a time; their threads run concurrently.
inline void launch(Dim3 grid, Dim3 block, size_t smem_bytes, const std::function<void()>& body) {
  g_grid_dim = grid;
  g_block_dim = block;
  const int n = static_cast<int>(block.x * block.y * block.z);
  const int warps = (n + 31) / 32;
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        BlockCtx ctx(n);
        for (int w = 0; w < warps; ++w)
          ctx.warps.push_back(std::make_unique<WarpCtx>(std::min(32, n - 32 * w)));
        ctx.smem.assign(smem_bytes + 16, 0xA5);  // garbage: unwritten shared memory must not be read
        std::vector<std::thread> threads;
        threads.reserve(static_cast<size_t>(n));
        for (int t = 0; t < n; ++t) {
          threads.emplace_back([&, t] {
            tl = ThreadState{};
            tl.thread = {static_cast<unsigned>(t), 0, 0};
            tl.block = {bx, by, bz};
            tl.blk = &ctx;
            tl.warp = ctx.warps[static_cast<size_t>(t / 32)].get();
            tl.lane = t % 32;
            body();
            cp_wait(0);
            for (const Copy& c : tl.open) do_copy(c);
            // An exited thread no longer takes part in barriers (as on the GPU).
            tl.warp->bar.arrive_and_drop();
            tl.blk->bar.arrive_and_drop();
          });
        }
        for (auto& th : threads) th.join();
      }
    }
  }
}

}  // namespace emu

#define threadIdx (::emu::tl.thread)
#define blockIdx (::emu::tl.block)
#define blockDim (::emu::g_block_dim)
#define gridDim (::emu::g_grid_dim)
