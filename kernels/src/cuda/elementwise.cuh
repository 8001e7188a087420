// The element-wise ops of a decoder layer on the GPU (fp32), written on the shared primitives so that
// the CPU emulator runs them in the test suite against the references (ref.h): RMSNorm (one block per
// row), RoPE (one thread per rotated pair), SiLU-and-multiply, residual and bias adds (one thread per
// element), embedding lookup (one block per token). Launchers: elementwise.cu.
#pragma once

#include "infergate/kernels/numeric.h"
#include "infergate/kernels/ops.h"
#include "infergate/kernels/ref.h"
#include "infergate/kernels/tensor.h"
#include "prims.cuh"

namespace infergate::kernels::cuda::ew {

constexpr int kThreads = 256;
// Dynamic shared memory of rmsnorm_kernel: one partial sum per warp.
constexpr size_t kRmsnormSmem = 32 * sizeof(float);

// The sum of v over the block (every thread gets it); smem: one float per warp.
INFERGATE_DEV float block_sum(float v, float* smem) {
  v = prim::warp_sum(v);
  const int lane = prim::lane_id(), warp = prim::warp_id();
  if (lane == 0) smem[warp] = v;
  prim::sync_block();
  v = threadIdx.x < blockDim.x / 32 ? smem[threadIdx.x] : 0.0f;
  if (warp == 0) v = prim::warp_sum(v);
  if (threadIdx.x == 0) smem[0] = v;
  prim::sync_block();
  const float total = smem[0];
  prim::sync_block();  // smem is reused by the caller's next call
  return total;
}

// y[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w. One block per row; y may alias x.
template <int = 0>
__global__ void rmsnorm_kernel(View2<const float> x, const float* __restrict__ w, float eps, View2<float> y) {
  float* smem = reinterpret_cast<float*>(prim::dynamic_smem());
  const int64_t r = blockIdx.x;
  const float* xr = x.row(r);
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) ss = fmaf(xr[c], xr[c], ss);
  ss = block_sum(ss, smem);
  const float inv = prim::rsqrt(ss / static_cast<float>(x.cols) + eps);
  float* yr = y.row(r);
  for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) yr[c] = xr[c] * inv * w[c];
}

// One thread per (token, head, pair) of q and then k: angle = float(position) * inv_freq in fp32.
template <int = 0>
__global__ void rope_kernel(RopeStyle style, int32_t half, const float* __restrict__ inv_freq,
                            const int32_t* __restrict__ positions, View3<float> q, View3<float> k) {
  const int64_t pairs_q = q.dim0 * q.dim1 * half, pairs_k = k.dim0 * k.dim1 * half;
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= pairs_q + pairs_k) return;
  const bool is_q = i < pairs_q;
  const View3<float>& v = is_q ? q : k;
  const int64_t j = is_q ? i : i - pairs_q;
  const int64_t p = j % half, h = (j / half) % v.dim1, t = j / (half * v.dim1);
  const float angle = static_cast<float>(positions[t]) * inv_freq[p];
  float sn, cs;
  prim::sincos(angle, &sn, &cs);
  float* x = v.at(t, h);
  const int64_t a = style == RopeStyle::kHalfSplit ? p : 2 * p;
  const int64_t b = style == RopeStyle::kHalfSplit ? p + half : 2 * p + 1;
  const float xa = x[a], xb = x[b];
  x[a] = xa * cs - xb * sn;
  x[b] = xb * cs + xa * sn;
}

template <int = 0>
__global__ void silu_mul_kernel(View2<const float> g, View2<const float> u, View2<float> out) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= g.rows * g.cols) return;
  const int64_t r = i / g.cols, c = i % g.cols;
  const float gv = g.at(r, c);
  out.at(r, c) = gv / (1.0f + expf(-gv)) * u.at(r, c);
}

template <int = 0>
__global__ void add_kernel(View2<const float> a, View2<const float> b, View2<float> out) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= a.rows * a.cols) return;
  const int64_t r = i / a.cols, c = i % a.cols;
  out.at(r, c) = a.at(r, c) + b.at(r, c);
}

template <int = 0>
__global__ void bias_add_kernel(View2<float> y, const float* __restrict__ bias) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= y.rows * y.cols) return;
  const int64_t r = i / y.cols, c = i % y.cols;
  y.at(r, c) += bias[c];
}

// One block per token; an id outside the table writes zeros (the kernel never reads outside it).
template <int = 0>
__global__ void embedding_kernel(MatrixSource table, const int32_t* __restrict__ ids, View2<float> out) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  const bool ok = id >= 0 && id < table.rows;
  float* dst = out.row(t);
  for (int64_t c = threadIdx.x; c < table.cols; c += blockDim.x) {
    float v = 0.0f;
    if (ok) {
      const int64_t idx = int64_t{id} * table.row_stride + c;
      switch (table.dtype) {
        case SourceDtype::kF32: v = static_cast<const float*>(table.data)[idx]; break;
        case SourceDtype::kF16: v = fp16_to_float(static_cast<const uint16_t*>(table.data)[idx]); break;
        case SourceDtype::kBF16: v = bf16_to_float(static_cast<const uint16_t*>(table.data)[idx]); break;
      }
    }
    dst[c] = v;
  }
}

}  // namespace infergate::kernels::cuda::ew
