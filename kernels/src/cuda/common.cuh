// Device helpers shared by the CUDA kernels: error conversion at the launch boundary, the device's
// properties, vector loads, warp reductions, and the inline PTX the tensor-core kernels use
// (mma.sync m16n8k16, byte permutes, three-input logic).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

#include "infergate/kernels/cuda.h"
#include "infergate/kernels/formats.h"
#include "infergate/kernels/status.h"

namespace infergate::kernels::cuda {

// A CUDA error as a Status naming the op.
inline Status cuda_error(cudaError_t e, const char* what) {
  return Status(StatusCode::kCudaError,
                std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
// After a launch: the launch's own error (bad configuration, no device), if any.
inline Status check_launch(const char* op) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? ok_status() : cuda_error(e, op);
}

struct DeviceInfo {
  int sm_count = 0;
  int max_smem_per_block = 0;  // opt-in limit
};
// Properties of the current device (queried once per device).
const DeviceInfo& device_info();

// Blocks of `kernel` resident per SM with `threads` threads and `smem` bytes of dynamic shared memory
// (cached per kernel and size; at least 1). Also raises the kernel's dynamic shared-memory limit to the
// device's opt-in maximum, once, so launches above 48 KB are allowed.
int blocks_per_sm(const void* kernel, int threads, size_t smem);

// kernel<<<grid, block, smem, stream>>>(args...), checked. With `pdl` the launch carries
// cudaLaunchAttributeProgrammaticStreamSerialization: the kernel may start while its predecessor in
// the stream is still running, so it must pass griddepcontrol.wait (prim::grid_dep_wait) before it
// reads anything an earlier kernel writes, and write nothing before it.
template <class... Params, class... Args>
Status launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Stream stream, bool pdl,
                     const char* op, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = pdl ? attr : nullptr;
  cfg.numAttrs = pdl ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return cuda_error(e, op);
  }
  return check_launch(op);
}

inline unsigned grid_for(int64_t n, int block) { return static_cast<unsigned>((n + block - 1) / block); }

// ---- warp reductions ----
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

// ---- inline PTX ----

// D = A (16x16, row) * B (16x8, col) + D, fp16 inputs, fp32 accumulators (sm_80+).
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// The same with bf16 inputs.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// (a & b) | c in one instruction.
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }
__device__ __forceinline__ uint32_t bf2_bits(__nv_bfloat162 h) { return *reinterpret_cast<uint32_t*>(&h); }

// Two fp32 -> packed half2 / bf16x2 (x in the low half), round to nearest.
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  return h2_bits(__floats2half2_rn(lo, hi));
}
__device__ __forceinline__ uint32_t pack_bf162(float lo, float hi) {
  return bf2_bits(__floats2bfloat162_rn(lo, hi));
}

// The two nibbles at bit positions (4j, 4j + 16) of w as half2 values (1024 + code): one shift and
// one lop3. The caller subtracts 1024 (exact).
__device__ __forceinline__ uint32_t u4_pair_1024(uint32_t w, int j) {
  return and_or(w >> (4 * j), 0x000F000Fu, 0x64006400u);
}

}  // namespace infergate::kernels::cuda
