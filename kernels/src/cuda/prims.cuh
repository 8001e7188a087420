// The device primitives the streaming kernels (gemv_stream.cuh, attention_decode.cuh) are written
// against: lane / warp ids, warp collectives, atomics, mma.sync, cp.async, packed fp16 arithmetic on
// 32-bit words, programmatic dependent launch. Under nvcc they are the hardware instructions; with
// INFERGATE_CUDA_EMU (the CPU test build, tests/kernels/emu/cuda_emu.h) they are emulated on host
// threads, so those kernels' logic - indexing, pipelines, masking, softmax, merges - is tested on every
// machine against the scalar references before it ever runs on a GPU.
#pragma once

#include <cstdint>

#if defined(INFERGATE_CUDA_EMU)
#include <atomic>

#include "cuda_emu.h"
#define INFERGATE_DEV inline
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#define INFERGATE_DEV __device__ __forceinline__
#endif

#include "infergate/kernels/formats.h"

namespace infergate::kernels::cuda::prim {

// ---- ids and barriers ----

INFERGATE_DEV int lane_id() { return static_cast<int>(threadIdx.x & 31u); }
INFERGATE_DEV int warp_id() { return static_cast<int>(threadIdx.x >> 5); }

#if defined(INFERGATE_CUDA_EMU)

INFERGATE_DEV void sync_warp() { ::emu::sync_warp(); }
INFERGATE_DEV void sync_block() { ::emu::sync_block(); }
INFERGATE_DEV float shfl_xor(float v, int m) { return ::emu::shfl_f32(v, ::emu::lane() ^ m); }
INFERGATE_DEV float shfl(float v, int src) { return ::emu::shfl_f32(v, src); }
INFERGATE_DEV uint32_t shfl_u32(uint32_t v, int src) { return ::emu::shfl_u32(v, src); }
INFERGATE_DEV bool warp_all(bool p) { return ::emu::warp_all(p); }
INFERGATE_DEV uint8_t* dynamic_smem() { return ::emu::dynamic_smem(); }
// *p += v atomically (shared or global memory); returns the old value.
INFERGATE_DEV int32_t atomic_add(int32_t* p, int32_t v) { return std::atomic_ref<int32_t>(*p).fetch_add(v); }
// *p = min(*p, v) atomically; returns the old value.
INFERGATE_DEV int32_t atomic_min(int32_t* p, int32_t v) {
  std::atomic_ref<int32_t> a(*p);
  int32_t old = a.load();
  while (v < old && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}

// ---- memory ----
// 16 bytes from global to shared, asynchronously; bytes past src_bytes (0..16) are zero-filled.
INFERGATE_DEV void cp_async16(void* smem, const void* gmem, int src_bytes) {
  ::emu::cp_async(smem, gmem, 16, src_bytes);
}
INFERGATE_DEV void cp_async4(void* smem, const void* gmem) { ::emu::cp_async(smem, gmem, 4, 4); }
INFERGATE_DEV void cp_commit() { ::emu::cp_commit(); }
// Waits until at most n (0..7) of this thread's committed groups are still in flight.
INFERGATE_DEV void cp_wait(int n) { ::emu::cp_wait(n); }
// 16 bytes of read-only, streamed data (not kept in L1).
INFERGATE_DEV uint4 ldg_stream16(const void* p) { return *static_cast<const uint4*>(p); }
// 4 bytes from any memory (shared included) as a word.
INFERGATE_DEV uint32_t ld_u32(const void* p) {
  uint32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}
// 16 bytes through the read-only data cache.
INFERGATE_DEV uint4 ldg16(const void* p) { return *static_cast<const uint4*>(p); }
INFERGATE_DEV uint32_t ldg_u32(const void* p) {
  uint32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}

// A hint to pull the line holding p into L2.
INFERGATE_DEV void prefetch_l2(const void*) {}

// ---- programmatic dependent launch ----
INFERGATE_DEV void grid_dep_wait() {}
INFERGATE_DEV void grid_dep_launch() {}

// ---- bits ----
INFERGATE_DEV float u2f(uint32_t u) { return bits_to_float(u); }
INFERGATE_DEV uint32_t f2u(float f) { return float_to_bits(f); }
INFERGATE_DEV uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t s) { return ::emu::byte_perm(a, b, s); }
// (a & b) | c
INFERGATE_DEV uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) { return (a & b) | c; }

// ---- packed fp16 / bf16 pairs in a 32-bit word (low half = first element) ----
INFERGATE_DEV uint32_t h2_sub(uint32_t a, uint32_t b) { return ::emu::h2_op(a, b, 0, ::emu::H2Op::kSub); }
INFERGATE_DEV uint32_t h2_mul(uint32_t a, uint32_t b) { return ::emu::h2_op(a, b, 0, ::emu::H2Op::kMul); }
INFERGATE_DEV uint32_t h2_fma(uint32_t a, uint32_t b, uint32_t c) {
  return ::emu::h2_op(a, b, c, ::emu::H2Op::kFma);
}
INFERGATE_DEV uint32_t pack_half2(float lo, float hi) {
  return static_cast<uint32_t>(fp16_from_float(lo)) | (static_cast<uint32_t>(fp16_from_float(hi)) << 16);
}
INFERGATE_DEV uint32_t pack_bf162(float lo, float hi) {
  return static_cast<uint32_t>(bf16_from_float(lo)) | (static_cast<uint32_t>(bf16_from_float(hi)) << 16);
}
INFERGATE_DEV float half_to_float(uint16_t h) { return fp16_to_float(h); }
// Two e4m3fn codes (bytes 0 and 1) -> two fp16 values (exact).
INFERGATE_DEV uint32_t e4m3x2_to_h2(uint32_t bytes2) {
  return static_cast<uint32_t>(fp16_from_float(e4m3_to_float(static_cast<uint8_t>(bytes2 & 0xFFu)))) |
         (static_cast<uint32_t>(fp16_from_float(e4m3_to_float(static_cast<uint8_t>((bytes2 >> 8) & 0xFFu))))
          << 16);
}

// ---- tensor cores: D = A (16x16) * B (16x8) + D, fp32 accumulators (layout in cuda_layouts.h) ----
INFERGATE_DEV void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  ::emu::mma_m16n8k16(d, a, b0, b1, false);
}
INFERGATE_DEV void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  ::emu::mma_m16n8k16(d, a, b0, b1, true);
}

// fp32 -> tf32 (cvt.rna: to nearest, ties away from zero, 10 mantissa bits kept) as an fp32 bit pattern.
INFERGATE_DEV uint32_t to_tf32(float x) {
  uint32_t u = float_to_bits(x);
  if ((u & 0x7F800000u) != 0x7F800000u) u = (u + 0x1000u) & 0xFFFFE000u;
  return u;
}
// D = A (16x8) * B (8x8) + D, tf32 inputs, fp32 accumulators (fragment layout in cuda_emu.h).
INFERGATE_DEV void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  ::emu::mma_m16n8k8_tf32(d, a, b0, b1);
}

INFERGATE_DEV float fast_exp(float x) { return std::exp(x); }
INFERGATE_DEV float rsqrt(float x) { return 1.0f / std::sqrt(x); }
INFERGATE_DEV bool is_finite(float x) { return std::isfinite(x); }
INFERGATE_DEV void sincos(float x, float* s, float* c) { ::sincosf(x, s, c); }

#else  // nvcc

INFERGATE_DEV void sync_warp() { __syncwarp(); }
INFERGATE_DEV void sync_block() { __syncthreads(); }
INFERGATE_DEV float shfl_xor(float v, int m) { return __shfl_xor_sync(0xFFFFFFFFu, v, m); }
INFERGATE_DEV float shfl(float v, int src) { return __shfl_sync(0xFFFFFFFFu, v, src); }
INFERGATE_DEV uint32_t shfl_u32(uint32_t v, int src) { return __shfl_sync(0xFFFFFFFFu, v, src); }
INFERGATE_DEV bool warp_all(bool p) { return __all_sync(0xFFFFFFFFu, p) != 0; }
INFERGATE_DEV uint8_t* dynamic_smem() {
  extern __shared__ __align__(16) uint8_t infergate_dynamic_smem[];
  return infergate_dynamic_smem;
}

INFERGATE_DEV int32_t atomic_add(int32_t* p, int32_t v) { return atomicAdd(p, v); }
INFERGATE_DEV int32_t atomic_min(int32_t* p, int32_t v) { return atomicMin(p, v); }

INFERGATE_DEV uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
INFERGATE_DEV void cp_async16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
INFERGATE_DEV void cp_async4(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}
INFERGATE_DEV void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
INFERGATE_DEV void cp_wait_n() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
INFERGATE_DEV void cp_wait(int n) {
  switch (n) {
    case 0: cp_wait_n<0>(); break;
    case 1: cp_wait_n<1>(); break;
    case 2: cp_wait_n<2>(); break;
    case 3: cp_wait_n<3>(); break;
    case 4: cp_wait_n<4>(); break;
    case 5: cp_wait_n<5>(); break;
    case 6: cp_wait_n<6>(); break;
    default: cp_wait_n<7>(); break;
  }
}
INFERGATE_DEV uint4 ldg_stream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
INFERGATE_DEV uint32_t ld_u32(const void* p) { return *static_cast<const uint32_t*>(p); }
INFERGATE_DEV uint4 ldg16(const void* p) { return __ldg(static_cast<const uint4*>(p)); }
INFERGATE_DEV uint32_t ldg_u32(const void* p) { return __ldg(static_cast<const unsigned int*>(p)); }

INFERGATE_DEV void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// Programmatic dependent launch (sm_90): launch_dependents lets the next kernel in the stream, when
// launched with cudaLaunchAttributeProgrammaticStreamSerialization, start its blocks early; wait
// returns once every kernel this one depends on has completed and its writes are visible. A kernel
// launched without the attribute passes both at once.
INFERGATE_DEV void grid_dep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
INFERGATE_DEV void grid_dep_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

INFERGATE_DEV float u2f(uint32_t u) { return __uint_as_float(u); }
INFERGATE_DEV uint32_t f2u(float f) { return __float_as_uint(f); }
INFERGATE_DEV uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t s) { return __byte_perm(a, b, s); }
INFERGATE_DEV uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

INFERGATE_DEV __half2 as_h2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }
INFERGATE_DEV uint32_t h2_u32(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
INFERGATE_DEV uint32_t h2_sub(uint32_t a, uint32_t b) { return h2_u32(__hsub2(as_h2(a), as_h2(b))); }
INFERGATE_DEV uint32_t h2_mul(uint32_t a, uint32_t b) { return h2_u32(__hmul2(as_h2(a), as_h2(b))); }
INFERGATE_DEV uint32_t h2_fma(uint32_t a, uint32_t b, uint32_t c) {
  return h2_u32(__hfma2(as_h2(a), as_h2(b), as_h2(c)));
}
INFERGATE_DEV uint32_t pack_half2(float lo, float hi) { return h2_u32(__floats2half2_rn(lo, hi)); }
INFERGATE_DEV uint32_t pack_bf162(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
INFERGATE_DEV float half_to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }
INFERGATE_DEV uint32_t e4m3x2_to_h2(uint32_t bytes2) {
  const __half2_raw raw =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bytes2 & 0xFFFFu), __NV_E4M3);
  return static_cast<uint32_t>(raw.x) | (static_cast<uint32_t>(raw.y) << 16);
}

INFERGATE_DEV void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
INFERGATE_DEV void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

INFERGATE_DEV uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
INFERGATE_DEV void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

INFERGATE_DEV float fast_exp(float x) { return __expf(x); }
INFERGATE_DEV float rsqrt(float x) { return rsqrtf(x); }
INFERGATE_DEV bool is_finite(float x) { return isfinite(x); }
INFERGATE_DEV void sincos(float x, float* s, float* c) { sincosf(x, s, c); }

#endif

// ---- shared by both ----

INFERGATE_DEV bool warp_any(bool p) { return !warp_all(!p); }
INFERGATE_DEV float warp_min(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fminf(v, shfl_xor(v, o));
  return v;
}
INFERGATE_DEV float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, shfl_xor(v, o));
  return v;
}
INFERGATE_DEV float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += shfl_xor(v, o);
  return v;
}
INFERGATE_DEV uint32_t h2_dup(uint16_t h) {
  return static_cast<uint32_t>(h) | (static_cast<uint32_t>(h) << 16);
}
INFERGATE_HD int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
INFERGATE_HD int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// The two nibbles at bit positions (4j, 4j + 16) of w as fp16 values 1024 + code (exact): the caller
// subtracts 1024 + zero, which is exact too.
INFERGATE_DEV uint32_t u4_pair_1024(uint32_t w, int j) {
  return and_or(w >> (4 * j), 0x000F000Fu, 0x64006400u);
}

// A power of two s with s * amax <= 2^14, so x * s fits fp16 with room to spare (1 for 0 or non-finite
// amax). Scaling by it and back is exact.
INFERGATE_DEV float fp16_safe_scale(float amax) {
  if (!(amax > 0.0f) || !(amax <= 3.0e38f)) return 1.0f;
  const float e = fminf(14.0f - ceilf(log2f(amax)), 100.0f);
  return exp2f(e);
}

}  // namespace infergate::kernels::cuda::prim
