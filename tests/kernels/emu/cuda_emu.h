// A small emulator of the CUDA execution model on the host, so that the CUDA kernels (kernels/src/cuda/
// *.cuh) run in the CPU test suite against the scalar references on every machine, GPU or not. Every
// thread of a block is a fiber (its own stack; a six-register switch on x86-64, ucontext elsewhere) on the
// calling host thread; the
// fibers of a block run until each reaches a barrier or exits, in thread order, so a run is
// deterministic; blocks run one after another. Emulated: thread / block ids, __syncthreads and
// __syncwarp (barriers), warp shuffles and mma.sync (warp collectives: every lane must reach them, as on
// the GPU), dynamic shared memory (filled with a garbage pattern before each block, so reads of unwritten
// shared memory show up), cp.async (copies deferred until the wait that covers them, or done at once -
// both orders are legal on the hardware, so the tests run both), packed fp16 arithmetic (IEEE rounding
// of each result). A block whose threads all wait at barriers that cannot complete (a barrier inside
// divergent code) is reported as a deadlock and aborts the test binary. Not emulated: timing,
// memory-model subtleties beyond the barriers, bank conflicts, concurrency between blocks.
#pragma once

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
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
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
// The built-in variables, per host thread; the scheduler sets threadIdx / blockIdx to the fiber's before
// it resumes one.
inline thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {

using Dim3 = ::dim3;

void yield();

// A barrier of fibers: arrive_and_wait yields to the block's scheduler until the phase completes.
class Barrier {
 public:
  explicit Barrier(int expected) : expected_(expected) {}
  void arrive_and_wait() {
    const uint64_t phase = phase_;
    if (++arrived_ == expected_) {
      complete();
      return;
    }
    while (phase_ == phase) yield();
  }
  // An exited thread no longer takes part (as on the GPU); it may complete the phase the others wait in.
  void arrive_and_drop() {
    --expected_;
    if (arrived_ > 0 && arrived_ == expected_) complete();
  }
  int waiting() const { return arrived_; }

 private:
  void complete();
  int expected_;
  int arrived_ = 0;
  uint64_t phase_ = 0;
};

struct WarpCtx {
  explicit WarpCtx(int n) : bar(n) {}
  Barrier bar;
  uint32_t slot[32][10] = {};
};

struct BlockCtx {
  explicit BlockCtx(int n) : bar(n) {}
  Barrier bar;
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

// A saved execution context. On x86-64, the stack pointer of a suspended fiber whose callee-saved
// registers sit on its stack (switching costs a few nanoseconds, where swapcontext makes a system call
// to save the signal mask); elsewhere, ucontext.
#if defined(__x86_64__)
struct Context {
  void* sp = nullptr;
};
extern "C" void infergate_emu_switch(void** save_sp, void* load_sp);
// Saves rbp, rbx, r12-r15 on the current stack, stores rsp in *save_sp, loads load_sp, restores the
// registers saved there and returns into that context. Weak: every translation unit that includes this
// header emits the same definition.
asm(R"(
  .text
  .weak infergate_emu_switch
  .type infergate_emu_switch, @function
infergate_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size infergate_emu_switch, .-infergate_emu_switch
)");
inline void switch_context(Context& from, Context& to) { infergate_emu_switch(&from.sp, to.sp); }
// A context that starts `entry` (which never returns) on [stack, stack + size).
inline void make_context(Context& c, uint8_t* stack, size_t size, void (*entry)()) {
  auto top = reinterpret_cast<uintptr_t>(stack + size) & ~uintptr_t{15};
  auto* sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;                              // entry's return address: never used
  *--sp = reinterpret_cast<void*>(entry);       // where the first switch "returns" to
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp rbx r12 r13 r14 r15
  c.sp = sp;
}
#else
struct Context {
  ucontext_t uc{};
};
inline void switch_context(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
inline void make_context(Context& c, uint8_t* stack, size_t size, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

struct Fiber {
  Context ctx{};
  ThreadState st;
  bool done = false;
};

// The fibers of the block being run on this host thread.
struct Scheduler {
  Context main{};
  std::vector<Fiber> fibers;
  std::vector<std::unique_ptr<uint8_t[]>> stacks;
  size_t cur = 0;
  uint64_t progress = 0;  // barrier phases completed and threads exited
  const std::function<void()>* body = nullptr;
};

inline constexpr size_t kFiberStack = 256 * 1024;
inline thread_local Scheduler* g_sched = nullptr;
inline thread_local ThreadState* g_tl = nullptr;
// cp.async completion order: false = at the covering wait (the latest legal moment), true = at issue.
inline bool g_cp_immediate = false;

inline void yield() {
  Scheduler& s = *g_sched;
  switch_context(s.fibers[s.cur].ctx, s.main);
}
inline void Barrier::complete() {
  arrived_ = 0;
  ++phase_;
  ++g_sched->progress;
}

inline int lane() { return g_tl->lane; }
inline uint8_t* dynamic_smem() { return g_tl->blk->smem.data(); }
inline void sync_warp() { g_tl->warp->bar.arrive_and_wait(); }
inline void sync_block() { g_tl->blk->bar.arrive_and_wait(); }

// Every lane publishes `n` words, then reads what lane `src` published.
inline void publish(const uint32_t* v, int n) {
  std::memcpy(g_tl->warp->slot[g_tl->lane], v, static_cast<size_t>(n) * 4);
  g_tl->warp->bar.arrive_and_wait();
}
inline void done_reading() { g_tl->warp->bar.arrive_and_wait(); }

inline uint32_t shfl_u32(uint32_t v, int src) {
  publish(&v, 1);
  const uint32_t r = g_tl->warp->slot[src & 31][0];
  done_reading();
  return r;
}
inline bool warp_all(bool p) {
  const uint32_t v = p ? 1u : 0u;
  publish(&v, 1);
  bool all = true;
  for (int l = 0; l < 32; ++l) all = all && g_tl->warp->slot[l][0] != 0;
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
    g_tl->open.push_back(c);
  }
}
inline void cp_commit() {
  g_tl->groups.push_back(std::move(g_tl->open));
  g_tl->open.clear();
}
inline void cp_wait(int n) {
  while (static_cast<int>(g_tl->groups.size()) > n) {
    for (const Copy& c : g_tl->groups.front()) do_copy(c);
    g_tl->groups.erase(g_tl->groups.begin());
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
  // This lane's outputs need rows g, g + 8 of A (held by lanes 4g .. 4g + 3) and columns 2c, 2c + 1 of
  // B (held by lanes 8c .. 8c + 3 and 8c + 4 .. 8c + 7).
  const int g = g_tl->lane >> 2, c = g_tl->lane & 3;
  float arow[2][16], bcol[2][16];
  for (int cc = 0; cc < 4; ++cc) {
    const uint32_t* s = g_tl->warp->slot[4 * g + cc];
    for (int e = 0; e < 2; ++e) {
      arow[0][2 * cc + e] = half_bits(s[0], e, bf16);
      arow[1][2 * cc + e] = half_bits(s[1], e, bf16);
      arow[0][2 * cc + 8 + e] = half_bits(s[2], e, bf16);
      arow[1][2 * cc + 8 + e] = half_bits(s[3], e, bf16);
    }
  }
  for (int j = 0; j < 2; ++j) {
    for (int cc = 0; cc < 4; ++cc) {
      const uint32_t* s = g_tl->warp->slot[4 * (2 * c + j) + cc];
      for (int e = 0; e < 2; ++e) {
        bcol[j][2 * cc + e] = half_bits(s[4], e, bf16);
        bcol[j][2 * cc + 8 + e] = half_bits(s[5], e, bf16);
      }
    }
  }
  for (int i = 0; i < 4; ++i) {
    double acc = infergate::kernels::bits_to_float(mine[6 + i]);
    for (int k = 0; k < 16; ++k) acc += static_cast<double>(arow[i >> 1][k]) * bcol[i & 1][k];
    d[i] = static_cast<float>(acc);
  }
  done_reading();
}

// mma.sync.m16n8k8.row.col with tf32 inputs (fp32 bit patterns whose low 13 bits are zero), fp32
// accumulators: lane 4g + c holds A (rows g / g+8, cols c / c+4: a0 (g, c), a1 (g+8, c), a2 (g, c+4),
// a3 (g+8, c+4)), B (rows c / c+4, col g) and D (rows g / g+8, cols 2c, 2c+1).
inline void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  using infergate::kernels::bits_to_float;
  uint32_t mine[10] = {a[0], a[1], a[2], a[3], b0, b1};
  for (int i = 0; i < 4; ++i) mine[6 + i] = infergate::kernels::float_to_bits(d[i]);
  publish(mine, 10);
  float A[16][8], B[8][8];
  for (int l = 0; l < 32; ++l) {
    const uint32_t* s = g_tl->warp->slot[l];
    const int g = l >> 2, c = l & 3;
    A[g][c] = bits_to_float(s[0]);
    A[g + 8][c] = bits_to_float(s[1]);
    A[g][c + 4] = bits_to_float(s[2]);
    A[g + 8][c + 4] = bits_to_float(s[3]);
    B[c][g] = bits_to_float(s[4]);
    B[c + 4][g] = bits_to_float(s[5]);
  }
  const int g = g_tl->lane >> 2, c = g_tl->lane & 3;
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * c, 2 * c + 1, 2 * c, 2 * c + 1};
  for (int i = 0; i < 4; ++i) {
    double s = bits_to_float(mine[6 + i]);
    for (int k = 0; k < 8; ++k) s += static_cast<double>(A[rows[i]][k]) * B[k][cols[i]];
    d[i] = static_cast<float>(s);
  }
  done_reading();
}

inline void fiber_main() {
  Scheduler& s = *g_sched;
  Fiber& f = s.fibers[s.cur];
  (*s.body)();
  cp_wait(0);
  for (const Copy& c : g_tl->open) do_copy(c);
  // An exited thread no longer takes part in barriers (as on the GPU).
  g_tl->warp->bar.arrive_and_drop();
  g_tl->blk->bar.arrive_and_drop();
  f.done = true;
  ++s.progress;
  switch_context(f.ctx, s.main);  // a done fiber is never resumed
  std::abort();
}

// Runs `body` (the kernel call with its arguments bound) for every thread of every block. Blocks run
// one at a time; their threads run as fibers on this host thread, each until it waits or exits.
inline void launch(Dim3 grid, Dim3 block, size_t smem_bytes, const std::function<void()>& body) {
  const Dim3 saved_grid = ::gridDim, saved_block = ::blockDim, saved_thread = ::threadIdx,
             saved_blockidx = ::blockIdx;
  Scheduler* const saved_sched = g_sched;
  ThreadState* const saved_tl = g_tl;
  ::gridDim = grid;
  ::blockDim = block;
  const int n = static_cast<int>(block.x * block.y * block.z);
  const int warps = (n + 31) / 32;
  static thread_local std::unique_ptr<Scheduler> pool;  // stacks are kept between launches
  if (!pool) pool = std::make_unique<Scheduler>();
  Scheduler& s = *pool;
  while (s.stacks.size() < static_cast<size_t>(n)) s.stacks.emplace_back(new uint8_t[kFiberStack]);
  s.body = &body;
  g_sched = &s;
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        BlockCtx ctx(n);
        for (int w = 0; w < warps; ++w)
          ctx.warps.push_back(std::make_unique<WarpCtx>(std::min(32, n - 32 * w)));
        ctx.smem.assign(smem_bytes + 16, 0xA5);  // garbage: unwritten shared memory must not be read
        s.fibers.assign(static_cast<size_t>(n), Fiber{});
        for (int t = 0; t < n; ++t) {
          Fiber& f = s.fibers[static_cast<size_t>(t)];
          f.st.thread = {static_cast<unsigned>(t % block.x), static_cast<unsigned>(t / block.x % block.y),
                         static_cast<unsigned>(t / (block.x * block.y))};
          f.st.block = {bx, by, bz};
          f.st.blk = &ctx;
          f.st.warp = ctx.warps[static_cast<size_t>(t / 32)].get();
          f.st.lane = t % 32;
          make_context(f.ctx, s.stacks[static_cast<size_t>(t)].get(), kFiberStack, fiber_main);
        }
        int alive = n;
        while (alive > 0) {
          const uint64_t before = s.progress;
          for (size_t t = 0; t < static_cast<size_t>(n); ++t) {
            if (s.fibers[t].done) continue;
            s.cur = t;
            g_tl = &s.fibers[t].st;
            ::threadIdx = g_tl->thread;
            ::blockIdx = g_tl->block;
            switch_context(s.main, s.fibers[t].ctx);
            if (s.fibers[t].done) --alive;
          }
          if (alive > 0 && s.progress == before) {
            int at_block = ctx.bar.waiting(), at_warp = 0;
            for (const auto& w : ctx.warps) at_warp += w->bar.waiting();
            std::fprintf(stderr,
                         "emu: deadlock in block (%u, %u, %u) of a %d-thread launch: %d threads alive, %d "
                         "waiting at __syncthreads, %d at warp collectives\n",
                         bx, by, bz, n, alive, at_block, at_warp);
            std::abort();
          }
        }
      }
    }
  }
  g_sched = saved_sched;
  g_tl = saved_tl;
  ::gridDim = saved_grid;
  ::blockDim = saved_block;
  ::threadIdx = saved_thread;
  ::blockIdx = saved_blockidx;
}

}  // namespace emu
