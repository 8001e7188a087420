// CUDA element-wise ops of a decoder layer (fp32): RMSNorm (one block per row), RoPE (one thread
// per rotated pair), SiLU-and-multiply, residual and bias adds, embedding lookup.
#include "../validate.h"
#include "common.cuh"

namespace infergate::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float block_sum(float v, float* smem) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? smem[threadIdx.x] : 0.0f;
  if (warp == 0) v = warp_sum(v);
  if (threadIdx.x == 0) smem[0] = v;
  __syncthreads();
  const float total = smem[0];
  __syncthreads();
  return total;
}

// y[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * w. One block per row; y may alias x.
__global__ void rmsnorm_kernel(View2<const float> x, const float* __restrict__ w, float eps, View2<float> y) {
  __shared__ float smem[32];
  const int64_t r = blockIdx.x;
  const float* xr = x.row(r);
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) ss = fmaf(xr[c], xr[c], ss);
  ss = block_sum(ss, smem);
  const float inv = rsqrtf(ss / static_cast<float>(x.cols) + eps);
  float* yr = y.row(r);
  for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) yr[c] = xr[c] * inv * w[c];
}

// One thread per (token, head, pair) of q and then k.
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
  sincosf(angle, &sn, &cs);
  float* x = v.at(t, h);
  const int64_t a = style == RopeStyle::kHalfSplit ? p : 2 * p;
  const int64_t b = style == RopeStyle::kHalfSplit ? p + half : 2 * p + 1;
  const float xa = x[a], xb = x[b];
  x[a] = xa * cs - xb * sn;
  x[b] = xb * cs + xa * sn;
}

__global__ void silu_mul_kernel(View2<const float> g, View2<const float> u, View2<float> out) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= g.rows * g.cols) return;
  const int64_t r = i / g.cols, c = i % g.cols;
  const float gv = g.at(r, c);
  out.at(r, c) = gv / (1.0f + expf(-gv)) * u.at(r, c);
}

__global__ void add_kernel(View2<const float> a, View2<const float> b, View2<float> out) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= a.rows * a.cols) return;
  const int64_t r = i / a.cols, c = i % a.cols;
  out.at(r, c) = a.at(r, c) + b.at(r, c);
}

__global__ void bias_add_kernel(View2<float> y, const float* __restrict__ bias) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= y.rows * y.cols) return;
  const int64_t r = i / y.cols, c = i % y.cols;
  y.at(r, c) += bias[c];
}

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

}  // namespace

Status rmsnorm(View2<const float> x, const float* w, float eps, View2<float> y, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(x, x.rows, x.cols, "rmsnorm", "x"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(y, x.rows, x.cols, "rmsnorm", "y"));
  if (w == nullptr && x.cols > 0) return invalid_argument("rmsnorm: weight is null");
  if (!(eps >= 0.0f)) return invalid_argument("rmsnorm: eps must be >= 0");
  if (x.rows == 0 || x.cols == 0) return ok_status();
  rmsnorm_kernel<<<static_cast<unsigned>(x.rows), kThreads, 0, stream>>>(x, w, eps, y);
  return check_launch("rmsnorm");
}

Status rope(const RopeConfig& c, const float* inv_freq, const int32_t* positions, View3<float> q,
            View3<float> k, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_rope(c, q, k, "rope"));
  if (q.dim0 > 0 && (inv_freq == nullptr || positions == nullptr)) {
    return invalid_argument("rope: inv_freq or positions is null");
  }
  const int32_t half = c.rotary_dim / 2;
  const int64_t n = (q.dim0 * q.dim1 + k.dim0 * k.dim1) * half;
  if (n == 0) return ok_status();
  rope_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(c.style, half, inv_freq, positions, q, k);
  return check_launch("rope");
}

Status silu_mul(View2<const float> gate, View2<const float> up, View2<float> out, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(gate, gate.rows, gate.cols, "silu_mul", "gate"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(up, gate.rows, gate.cols, "silu_mul", "up"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(out, gate.rows, gate.cols, "silu_mul", "out"));
  const int64_t n = gate.rows * gate.cols;
  if (n == 0) return ok_status();
  silu_mul_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(gate, up, out);
  return check_launch("silu_mul");
}

Status add(View2<const float> a, View2<const float> b, View2<float> out, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(a, a.rows, a.cols, "add", "a"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(b, a.rows, a.cols, "add", "b"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(out, a.rows, a.cols, "add", "out"));
  const int64_t n = a.rows * a.cols;
  if (n == 0) return ok_status();
  add_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(a, b, out);
  return check_launch("add");
}

Status bias_add(View2<float> y, const float* bias, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(y, y.rows, y.cols, "bias_add", "y"));
  if (bias == nullptr && y.cols > 0) return invalid_argument("bias_add: bias is null");
  const int64_t n = y.rows * y.cols;
  if (n == 0) return ok_status();
  bias_add_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(y, bias);
  return check_launch("bias_add");
}

Status embedding(const MatrixSource& table, const int32_t* ids, int64_t tokens, View2<float> out,
                 Stream stream) {
  if (table.data == nullptr || table.rows < 1 || table.cols < 1 || table.row_stride < table.cols) {
    return invalid_argument("embedding: the table is empty or its row stride is below its width");
  }
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(out, tokens, table.cols, "embedding", "out"));
  if (tokens == 0) return ok_status();
  if (ids == nullptr) return invalid_argument("embedding: ids is null");
  embedding_kernel<<<static_cast<unsigned>(tokens), kThreads, 0, stream>>>(table, ids, out);
  return check_launch("embedding");
}

}  // namespace infergate::kernels::cuda
