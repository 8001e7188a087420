// CUDA linear layers, y [M, N] = x [M, K] W[N, K]^T (+ bias), in three kernels:
//   gemv_int4_mma_kernel  int4 weights repacked for mma fragments, M <= 8 per pass: tensor cores
//                         (m16n8k16, fp16 inputs, fp32 accumulation) so that dequantization, not the
//                         multiply-adds, bounds the instruction count; memory-bound at batch 1.
//   gemv_kernel           every format on its row-major layout, M <= 8 per pass: CUDA cores, 16-byte
//                         weight loads, each warp on 4 rows so every x value loaded serves 4 rows.
//   gemm_tf32_kernel      M > 8 (prefill): 64x64 tiles, W dequantized into shared memory, TF32
//                         tensor cores (wmma m16n16k8), fp32 accumulation.
// A scalar kernel covers shapes whose rows are not 16-byte aligned.
#include <mma.h>

#include <algorithm>

#include "../validate.h"
#include "common.cuh"
#include "gemv_stream.cuh"
#include "infergate/kernels/cuda_layouts.h"
#include "tuning.h"

namespace infergate::kernels::cuda {
namespace {

// ==== CUDA-core GEMV ==============================================================================

constexpr int kGemvWarps = 8;
constexpr int kGemvRowsPerWarp = 4;

__device__ __forceinline__ float u4_minus(uint32_t w, int p, float bias) {
  // (w >> 4p) & 0xF as the float 2^23 + code, minus (2^23 + zero): the code minus the zero, exactly.
  return __uint_as_float(and_or(w >> (4 * p), 0xFu, 0x4B000000u)) - bias;
}

// The weights' 16-byte chunk q (elements [q*E, q*E+E) of a row, E = 8 / 16 / 32 for fp16 / int8 /
// int4) dotted with x rows m < MB, added to acc[m]. int8 codes and int4 (code - zero) are summed
// unscaled; int4's group scale is applied by the caller per chunk (a chunk never spans groups).
// Rows m >= mvalid of x read row mvalid - 1 instead (their sums are never stored).
template <WeightFormat F, int MB>
__device__ __forceinline__ void chunk_dot(uint4 wv, const float* __restrict__ x, int64_t x_stride, int mvalid,
                                          int64_t k0, float zbias, float (&acc)[MB]) {
  const uint32_t words[4] = {wv.x, wv.y, wv.z, wv.w};
  if constexpr (F == WeightFormat::kF16 || F == WeightFormat::kBF16) {
#pragma unroll
    for (int m = 0; m < MB; ++m) {
      const float* xr = x + min(m, mvalid - 1) * x_stride + k0;
      const float4 xa = *reinterpret_cast<const float4*>(xr);
      const float4 xb = *reinterpret_cast<const float4*>(xr + 4);
      const float xs[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float lo, hi;
        if constexpr (F == WeightFormat::kF16) {
          const float2 f = __half22float2(bits_h2(words[i]));
          lo = f.x;
          hi = f.y;
        } else {
          lo = __uint_as_float(words[i] << 16);
          hi = __uint_as_float(words[i] & 0xFFFF0000u);
        }
        acc[m] = fmaf(lo, xs[2 * i], acc[m]);
        acc[m] = fmaf(hi, xs[2 * i + 1], acc[m]);
      }
    }
  } else if constexpr (F == WeightFormat::kInt8) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t u = words[i] ^ 0x80808080u;  // signed -> unsigned + 128
      float wf[4];
#pragma unroll
      for (int b = 0; b < 4; ++b)
        wf[b] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440 + b)) - 8388736.0f;
#pragma unroll
      for (int m = 0; m < MB; ++m) {
        const float4 xv = *reinterpret_cast<const float4*>(x + min(m, mvalid - 1) * x_stride + k0 + 4 * i);
        acc[m] = fmaf(wf[0], xv.x, acc[m]);
        acc[m] = fmaf(wf[1], xv.y, acc[m]);
        acc[m] = fmaf(wf[2], xv.z, acc[m]);
        acc[m] = fmaf(wf[3], xv.w, acc[m]);
      }
    }
  } else {  // int4: word i holds elements 8i .. 8i+7 (element 8i+p at nibble p)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float wf[8];
#pragma unroll
      for (int p = 0; p < 8; ++p) wf[p] = u4_minus(words[i], p, zbias);
#pragma unroll
      for (int m = 0; m < MB; ++m) {
        const float* xr = x + min(m, mvalid - 1) * x_stride + k0 + 8 * i;
        const float4 xa = *reinterpret_cast<const float4*>(xr);
        const float4 xb = *reinterpret_cast<const float4*>(xr + 4);
        acc[m] = fmaf(wf[0], xa.x, acc[m]);
        acc[m] = fmaf(wf[1], xa.y, acc[m]);
        acc[m] = fmaf(wf[2], xa.z, acc[m]);
        acc[m] = fmaf(wf[3], xa.w, acc[m]);
        acc[m] = fmaf(wf[4], xb.x, acc[m]);
        acc[m] = fmaf(wf[5], xb.y, acc[m]);
        acc[m] = fmaf(wf[6], xb.z, acc[m]);
        acc[m] = fmaf(wf[7], xb.w, acc[m]);
      }
    }
  }
}

// One warp computes kGemvRowsPerWarp consecutive rows for MB rows of x. Lane l reads the 16-byte
// chunks l, l+32, ... of each of its rows (a warp reads 512 contiguous bytes per row per step).
// Preconditions (checked by the launcher): rows are 16-byte aligned, x rows 16-byte aligned.
template <WeightFormat F, int MB>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_kernel(View2<const float> x, WeightView w, const float* __restrict__ bias, View2<float> y) {
  constexpr int E = F == WeightFormat::kInt8 ? 16 : (is_int4(F) ? 32 : 8);  // elements per 16 bytes
  const WeightLayout& l = w.layout;
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (int64_t{blockIdx.x} * kGemvWarps + (threadIdx.x >> 5)) * kGemvRowsPerWarp;
  if (row0 >= l.rows) return;
  const int64_t k_in = l.cols, chunks = k_in / E, row_bytes = weight_row_bytes(l);
  const int64_t groups = weight_groups_per_row(l);
  const auto* scales = static_cast<const uint16_t*>(w.scales);
  const int mvalid = static_cast<int>(x.rows < MB ? x.rows : MB);
  float acc[kGemvRowsPerWarp][MB];
#pragma unroll
  for (int r = 0; r < kGemvRowsPerWarp; ++r) {
#pragma unroll
    for (int m = 0; m < MB; ++m) acc[r][m] = 0.0f;
  }
  // Software pipeline: the weights (and int4 scales / zeros) of the next chunk are loaded while this
  // one is computed, so each lane keeps 2 x 4 x 16 bytes in flight. Weights do not come from the
  // previous kernel: the first loads go out before griddepcontrol.wait; x is read after it.
  const auto* wbytes = static_cast<const uint8_t*>(w.data);
  uint4 wv[kGemvRowsPerWarp], wn[kGemvRowsPerWarp];
  uint32_t sv[kGemvRowsPerWarp] = {}, sn[kGemvRowsPerWarp] = {};  // int4: scale bits | zero << 16
  auto load = [&](int64_t qq, uint4(&dst)[kGemvRowsPerWarp], uint32_t(&sdst)[kGemvRowsPerWarp]) {
#pragma unroll
    for (int r = 0; r < kGemvRowsPerWarp; ++r) {
      const int64_t n = min(row0 + r, l.rows - 1);  // rows past the end repeat the last (never written)
      dst[r] = __ldg(reinterpret_cast<const uint4*>(wbytes + n * row_bytes) + qq);
      if constexpr (is_int4(F)) {
        const int64_t g = qq * E / l.group_size;
        const uint32_t z = F == WeightFormat::kInt4Asym ? w.zeros[n * groups + g] : 8u;
        sdst[r] = static_cast<uint32_t>(scales[n * groups + g]) | (z << 16);
      }
    }
  };
  prim::grid_dep_launch();
  if (lane < chunks) load(lane, wv, sv);
  prim::grid_dep_wait();
  for (int64_t q = lane; q < chunks; q += 32) {
    if (q + 32 < chunks) load(q + 32, wn, sn);
      // int4 with 8 rows of x would hold too many values at once: one weight row at a time there.
#pragma unroll(is_int4(F) && MB > 4 ? 1 : kGemvRowsPerWarp)
    for (int r = 0; r < kGemvRowsPerWarp; ++r) {
      if constexpr (is_int4(F)) {
        const float zero = static_cast<float>(sv[r] >> 16);
        float part[MB];
#pragma unroll
        for (int m = 0; m < MB; ++m) part[m] = 0.0f;
        chunk_dot<F, MB>(wv[r], x.data, x.row_stride, mvalid, q * E, 8388608.0f + zero, part);
        const float d = scale_to_float(static_cast<uint16_t>(sv[r] & 0xFFFFu), l.scale_dtype);
#pragma unroll
        for (int m = 0; m < MB; ++m) acc[r][m] = fmaf(d, part[m], acc[r][m]);
      } else {
        chunk_dot<F, MB>(wv[r], x.data, x.row_stride, mvalid, q * E, 0.0f, acc[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < kGemvRowsPerWarp; ++r) {
      wv[r] = wn[r];
      sv[r] = sn[r];
    }
  }
  // Columns past the last full chunk, element by element (K not a multiple of E).
  for (int64_t k = chunks * E + lane; k < k_in; k += 32) {
#pragma unroll
    for (int r = 0; r < kGemvRowsPerWarp; ++r) {
      const int64_t n = min(row0 + r, l.rows - 1);
      const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * row_bytes;
      float wk;
      if constexpr (F == WeightFormat::kF16) {
        wk = fp16_to_float(reinterpret_cast<const uint16_t*>(row)[k]);
      } else if constexpr (F == WeightFormat::kBF16) {
        wk = bf16_to_float(reinterpret_cast<const uint16_t*>(row)[k]);
      } else if constexpr (F == WeightFormat::kInt8) {
        wk = static_cast<float>(reinterpret_cast<const int8_t*>(row)[k]);
      } else {
        const int64_t g = k / l.group_size;
        const uint32_t z = F == WeightFormat::kInt4Asym ? w.zeros[n * groups + g] : 8u;
        wk = dequantize_int4(int4_get(row, k), z, scale_to_float(scales[n * groups + g], l.scale_dtype));
      }
#pragma unroll
      for (int m = 0; m < MB; ++m)
        acc[r][m] = fmaf(wk, x.data[min(m, mvalid - 1) * x.row_stride + k], acc[r][m]);
    }
  }
#pragma unroll
  for (int r = 0; r < kGemvRowsPerWarp; ++r) {
    const int64_t n = row0 + r;
    const float d =
        F == WeightFormat::kInt8 ? scale_to_float(scales[min(n, l.rows - 1)], l.scale_dtype) : 1.0f;
#pragma unroll
    for (int m = 0; m < MB; ++m) {
      const float s = warp_sum(acc[r][m]);
      if (lane == 0 && n < l.rows && m < mvalid) y.at(m, n) = d * s + (bias != nullptr ? bias[n] : 0.0f);
    }
  }
}

// Any shape: one warp per output row, element by element (the reference's per-element maths).
__global__ void gemv_scalar_kernel(View2<const float> x, WeightView w, const float* __restrict__ bias,
                                   View2<float> y) {
  const WeightLayout& l = w.layout;
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t{blockIdx.x} * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (n >= l.rows) return;
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * weight_row_bytes(l);
  const auto* scales = static_cast<const uint16_t*>(w.scales);
  const int64_t groups = weight_groups_per_row(l);
  for (int64_t m = 0; m < x.rows; ++m) {
    float acc = 0.0f;
    for (int64_t k = lane; k < l.cols; k += 32) {
      float wk = 0.0f;
      switch (l.format) {
        case WeightFormat::kF16: wk = fp16_to_float(reinterpret_cast<const uint16_t*>(row)[k]); break;
        case WeightFormat::kBF16: wk = bf16_to_float(reinterpret_cast<const uint16_t*>(row)[k]); break;
        case WeightFormat::kInt8:
          wk = dequantize_int8(reinterpret_cast<const int8_t*>(row)[k],
                               scale_to_float(scales[n], l.scale_dtype));
          break;
        case WeightFormat::kInt4Sym:
        case WeightFormat::kInt4Asym: {
          const int64_t g = k / l.group_size;
          const uint32_t z = l.format == WeightFormat::kInt4Asym ? w.zeros[n * groups + g] : 8u;
          wk = dequantize_int4(int4_get(row, k), z, scale_to_float(scales[n * groups + g], l.scale_dtype));
          break;
        }
      }
      acc = fmaf(wk, x.at(m, k), acc);
    }
    acc = warp_sum(acc);
    if (lane == 0) y.at(m, n) = acc + (bias != nullptr ? bias[n] : 0.0f);
  }
}

// ==== int4 tensor-core GEMV ========================================================================
// Block: 8 warps over RT row tiles (16 rows each) and up to 8 rows of x. The block stages x as fp16
// in shared memory ([M][K + 8], each row scaled by a power of two so its largest value is <= 2^14:
// no overflow, and the scale is undone exactly at the end). Warp w takes k blocks w, w+8, ...; per
// k16 tile it builds A from its packed word (shift + lop3 per register: 1024 + code, minus
// 1024 + zero: exact small integers), B from shared x, and runs one mma per row tile; a group's sum
// is scaled by the group scale in fp32 when the group ends. The warps' partial sums are added in a
// fixed order in shared memory (deterministic).

constexpr int kMmaWarps = 8;

template <int RT>
__global__ void __launch_bounds__(kMmaWarps * 32)
    gemv_int4_mma_kernel(View2<const float> x, WeightView w, const uint4* __restrict__ packed,
                         const float* __restrict__ bias, View2<float> y) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const WeightLayout& l = w.layout;
  const int mrows = static_cast<int>(x.rows < 8 ? x.rows : 8);
  const int64_t k_in = l.cols, xs_stride = k_in + 8;  // halves; +8 staggers the rows across banks
  __half* xs = reinterpret_cast<__half*>(smem_raw);   // [mrows][xs_stride]
  float* xscale = reinterpret_cast<float*>(smem_raw + mrows * xs_stride * sizeof(__half));  // [8]
  float* red = xscale + 8;  // [warps][32][RT][4]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, c = lane & 3;

  // Stage x: per row amax, then fp16(x * 2^e) with 2^e * amax <= 2^14.
  for (int m = warp; m < mrows; m += kMmaWarps) {
    float amax = 0.0f;
    for (int64_t k = lane; k < k_in; k += 32) amax = fmaxf(amax, fabsf(x.at(m, k)));
    amax = warp_max(amax);
    const float s = amax > 0.0f && isfinite(amax) ? exp2f(14.0f - ceilf(log2f(amax))) : 1.0f;
    if (lane == 0) xscale[m] = s;
    for (int64_t k = lane; k < k_in; k += 32) xs[m * xs_stride + k] = __float2half_rn(x.at(m, k) * s);
  }
  __syncthreads();

  const int64_t k_blocks = k_in / kInt4MmaCols, groups = weight_groups_per_row(l);
  const int64_t rt0 = int64_t{blockIdx.x} * RT;
  const bool asym = l.format == WeightFormat::kInt4Asym;
  const auto* scales = static_cast<const uint16_t*>(w.scales);
  float acc[RT][4];
  float part[RT][4];
#pragma unroll
  for (int t = 0; t < RT; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[t][i] = part[t][i] = 0.0f;
  }
  int64_t cur_group = -1;
  uint32_t zg[RT], zg8[RT];  // half2 (1024 + zero) for rows g and g + 8
  float dg[RT], dg8[RT];
  // Each warp's k blocks; the next block's words are loaded while this one is computed.
  uint4 next[RT];
  if (warp < k_blocks) {
#pragma unroll
    for (int t = 0; t < RT; ++t) next[t] = __ldg(packed + (((rt0 + t) * k_blocks + warp) * 32 + lane));
  }
  for (int64_t kb = warp; kb < k_blocks; kb += kMmaWarps) {
    uint4 a_words[RT];
#pragma unroll
    for (int t = 0; t < RT; ++t) a_words[t] = next[t];
    if (kb + kMmaWarps < k_blocks) {
#pragma unroll
      for (int t = 0; t < RT; ++t)
        next[t] = __ldg(packed + (((rt0 + t) * k_blocks + kb + kMmaWarps) * 32 + lane));
    }
#pragma unroll
    for (int kt = 0; kt < 4; ++kt) {
      const int64_t k0 = kb * 64 + kt * 16;
      const int64_t grp = k0 / l.group_size;
      if (grp != cur_group) {
        // Close the previous group: scale its sums (rows g: d0, d1; rows g + 8: d2, d3).
#pragma unroll
        for (int t = 0; t < RT; ++t) {
          if (cur_group >= 0) {
            acc[t][0] = fmaf(dg[t], part[t][0], acc[t][0]);
            acc[t][1] = fmaf(dg[t], part[t][1], acc[t][1]);
            acc[t][2] = fmaf(dg8[t], part[t][2], acc[t][2]);
            acc[t][3] = fmaf(dg8[t], part[t][3], acc[t][3]);
          }
          part[t][0] = part[t][1] = part[t][2] = part[t][3] = 0.0f;
          const int64_t n = (rt0 + t) * 16 + g;
          dg[t] = scale_to_float(scales[n * groups + grp], l.scale_dtype);
          dg8[t] = scale_to_float(scales[(n + 8) * groups + grp], l.scale_dtype);
          const float z = asym ? static_cast<float>(w.zeros[n * groups + grp]) : 8.0f;
          const float z8 = asym ? static_cast<float>(w.zeros[(n + 8) * groups + grp]) : 8.0f;
          zg[t] = pack_half2(1024.0f + z, 1024.0f + z);
          zg8[t] = pack_half2(1024.0f + z8, 1024.0f + z8);
        }
        cur_group = grp;
      }
      // B: x rows g (one per mma column), k pairs (2c, 2c+1) and (2c+8, 2c+9).
      const bool has_x = g < mrows;  // mma columns beyond the rows of x multiply zeros
      const uint32_t b0 = has_x ? *reinterpret_cast<const uint32_t*>(xs + g * xs_stride + k0 + 2 * c) : 0u;
      const uint32_t b1 =
          has_x ? *reinterpret_cast<const uint32_t*>(xs + g * xs_stride + k0 + 2 * c + 8) : 0u;
#pragma unroll
      for (int t = 0; t < RT; ++t) {
        const uint32_t word =
            kt == 0 ? a_words[t].x : (kt == 1 ? a_words[t].y : (kt == 2 ? a_words[t].z : a_words[t].w));
        uint32_t a[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const __half2 v = __hsub2(bits_h2(u4_pair_1024(word, j)), bits_h2((j & 1) ? zg8[t] : zg[t]));
          a[j] = h2_bits(v);
        }
        mma_f16(part[t], a, b0, b1);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < RT; ++t) {
    if (cur_group >= 0) {
      acc[t][0] = fmaf(dg[t], part[t][0], acc[t][0]);
      acc[t][1] = fmaf(dg[t], part[t][1], acc[t][1]);
      acc[t][2] = fmaf(dg8[t], part[t][2], acc[t][2]);
      acc[t][3] = fmaf(dg8[t], part[t][3], acc[t][3]);
    }
  }
  // Deterministic cross-warp sum: every warp stores, warp 0 adds in warp order.
#pragma unroll
  for (int t = 0; t < RT; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) red[((warp * 32 + lane) * RT + t) * 4 + i] = acc[t][i];
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int t = 0; t < RT; ++t) {
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int wi = 0; wi < kMmaWarps; ++wi) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[i] += red[((wi * 32 + lane) * RT + t) * 4 + i];
    }
    const int64_t n = (rt0 + t) * 16 + g;
    // d0: (row n, x row 2c), d1: (n, 2c+1), d2: (n + 8, 2c), d3: (n + 8, 2c+1)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int m = 2 * c + (i & 1);
      const int64_t row = n + (i >= 2 ? 8 : 0);
      if (m < mrows) y.at(m, row) = s[i] / xscale[m] + (bias != nullptr ? bias[row] : 0.0f);
    }
  }
}

// ==== TF32 GEMM (M > 8) ===========================================================================

constexpr int kTile = 64, kTileK = 32, kTileLd = kTileK + 4;

__device__ __forceinline__ float weight_at(const WeightView& w, int64_t n, int64_t k) {
  const WeightLayout& l = w.layout;
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * weight_row_bytes(l);
  const auto* scales = static_cast<const uint16_t*>(w.scales);
  switch (l.format) {
    case WeightFormat::kF16: return fp16_to_float(reinterpret_cast<const uint16_t*>(row)[k]);
    case WeightFormat::kBF16: return bf16_to_float(reinterpret_cast<const uint16_t*>(row)[k]);
    case WeightFormat::kInt8:
      return dequantize_int8(reinterpret_cast<const int8_t*>(row)[k],
                             scale_to_float(scales[n], l.scale_dtype));
    case WeightFormat::kInt4Sym:
    case WeightFormat::kInt4Asym: {
      const int64_t groups = weight_groups_per_row(l), g = k / l.group_size;
      const uint32_t z = l.format == WeightFormat::kInt4Asym ? w.zeros[n * groups + g] : 8u;
      return dequantize_int4(int4_get(row, k), z, scale_to_float(scales[n * groups + g], l.scale_dtype));
    }
  }
  return 0.0f;
}

// Block: 4 warps, a 64 (x rows) x 64 (outputs) tile; each warp a 32 x 32 quarter as 2 x 2 wmma tiles.
__global__ void __launch_bounds__(128)
    gemm_tf32_kernel(View2<const float> x, WeightView w, const float* __restrict__ bias, View2<float> y) {
  using namespace nvcuda;
  __shared__ __align__(32) float xs[kTile * kTileLd];
  __shared__ __align__(32) float ws[kTile * kTileLd];
  const int64_t m0 = int64_t{blockIdx.y} * kTile, n0 = int64_t{blockIdx.x} * kTile;
  const int warp = threadIdx.x >> 5, wm = warp / 2, wn = warp % 2;
  const int64_t k_in = w.layout.cols;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  }
  for (int64_t k0 = 0; k0 < k_in; k0 += kTileK) {
    for (int i = threadIdx.x; i < kTile * kTileK; i += blockDim.x) {
      const int r = i / kTileK, kk = i % kTileK;
      const int64_t m = m0 + r, n = n0 + r, k = k0 + kk;
      xs[r * kTileLd + kk] = (m < x.rows && k < k_in) ? x.at(m, k) : 0.0f;
      ws[r * kTileLd + kk] = (n < w.layout.rows && k < k_in) ? weight_at(w, n, k) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 8) {
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> b[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        wmma::load_matrix_sync(a[i], xs + (wm * 32 + i * 16) * kTileLd + kk, kTileLd);
#pragma unroll
        for (int e = 0; e < a[i].num_elements; ++e) a[i].x[e] = wmma::__float_to_tf32(a[i].x[e]);
        // W tile is [n][k]: as the K x N matrix B it is column-major with leading dimension kTileLd.
        wmma::load_matrix_sync(b[i], ws + (wn * 32 + i * 16) * kTileLd + kk, kTileLd);
#pragma unroll
        for (int e = 0; e < b[i].num_elements; ++e) b[i].x[e] = wmma::__float_to_tf32(b[i].x[e]);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
      }
    }
    __syncthreads();
  }
  // Through shared memory (xs reused as a 64 x 64 + pad tile) to a bounds-checked store.
  float* cs = xs;  // 64 * 36 floats is too small for 64 x 64: store one warp quarter at a time
  for (int q = 0; q < 4; ++q) {
    if (warp == q) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j)
          wmma::store_matrix_sync(cs + (i * 16) * 32 + j * 16, acc[i][j], 32, wmma::mem_row_major);
      }
    }
    __syncthreads();
    const int qm = q / 2, qn = q % 2;
    for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x) {
      const int r = i / 32, cc = i % 32;
      const int64_t m = m0 + qm * 32 + r, n = n0 + qn * 32 + cc;
      if (m < y.rows && n < y.cols) y.at(m, n) = cs[r * 32 + cc] + (bias != nullptr ? bias[n] : 0.0f);
    }
    __syncthreads();
  }
}

// ==== launchers ===================================================================================

template <WeightFormat F>
Status launch_gemv_format(View2<const float> x, const WeightView& w, const float* bias, View2<float> y,
                          int mb, Stream stream) {
  const dim3 blocks(grid_for(w.layout.rows, kGemvWarps * kGemvRowsPerWarp)), threads(kGemvWarps * 32);
  const bool pdl = tuning().pdl;
  switch (mb) {
    case 1:
      return launch_kernel(gemv_kernel<F, 1>, blocks, threads, 0, stream, pdl, "linear (gemv)", x, w, bias,
                           y);
    case 2:
      return launch_kernel(gemv_kernel<F, 2>, blocks, threads, 0, stream, pdl, "linear (gemv)", x, w, bias,
                           y);
    case 4:
      return launch_kernel(gemv_kernel<F, 4>, blocks, threads, 0, stream, pdl, "linear (gemv)", x, w, bias,
                           y);
    default: break;
  }
  return launch_kernel(gemv_kernel<F, 8>, blocks, threads, 0, stream, pdl, "linear (gemv)", x, w, bias, y);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

Status launch_gemv(View2<const float> x, const WeightView& w, const float* bias, View2<float> y,
                   Stream stream) {
  const WeightLayout& l = w.layout;
  const int mb = x.rows <= 1 ? 1 : (x.rows <= 2 ? 2 : (x.rows <= 4 ? 4 : 8));
  const bool vector_ok = aligned16(w.data) && weight_row_bytes(l) % 16 == 0 && aligned16(x.data) &&
                         (x.rows == 1 || x.row_stride % 4 == 0);
  if (!vector_ok) {
    gemv_scalar_kernel<<<grid_for(l.rows, 8), 256, 0, stream>>>(x, w, bias, y);
    return check_launch("linear (scalar gemv)");
  }
  switch (l.format) {
    case WeightFormat::kF16: return launch_gemv_format<WeightFormat::kF16>(x, w, bias, y, mb, stream);
    case WeightFormat::kBF16: return launch_gemv_format<WeightFormat::kBF16>(x, w, bias, y, mb, stream);
    case WeightFormat::kInt8: return launch_gemv_format<WeightFormat::kInt8>(x, w, bias, y, mb, stream);
    case WeightFormat::kInt4Sym: return launch_gemv_format<WeightFormat::kInt4Sym>(x, w, bias, y, mb, stream);
    case WeightFormat::kInt4Asym:
      return launch_gemv_format<WeightFormat::kInt4Asym>(x, w, bias, y, mb, stream);
  }
  return invalid_argument("linear: unknown weight format");
}

template <int RT>
Status launch_mma(View2<const float> x, const WeightView& w, const void* packed, const float* bias,
                  View2<float> y, size_t smem, Stream stream) {
  const auto kernel = gemv_int4_mma_kernel<RT>;
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return cuda_error(e, "linear (int4 mma): raising the shared-memory limit");
  }
  const unsigned blocks = static_cast<unsigned>(w.layout.rows / 16 / RT);
  kernel<<<blocks, kMmaWarps * 32, smem, stream>>>(x, w, static_cast<const uint4*>(packed), bias, y);
  return check_launch("linear (int4 mma)");
}

// The streaming int4 GEMV (gemv_stream.cuh) with its row tiles per block chosen so that the grid is
// one wave of resident blocks. *rt gets that count; *launched = false (nothing launched) when x is too
// wide for shared memory or `only_if_rt` is set and the count differs from it.
template <int WARPS, int P, int MINB, int TPS, bool ASYNC>
Status launch_stream(View2<const float> x, const WeightView& w, const void* packed, const float* bias,
                     View2<float> y, Stream stream, int32_t only_if_rt_at_least, bool* launched) {
  const WeightLayout& l = w.layout;
  const int32_t kb_total = static_cast<int32_t>(l.cols / kInt4MmaCols),
                tiles = static_cast<int32_t>(l.rows / kInt4MmaRows);
  const int32_t groups = static_cast<int32_t>(weight_groups_per_row(l));
  const int32_t m = static_cast<int32_t>(std::min<int64_t>(x.rows, gemv::kMaxM));
  const int32_t nkb = gemv::max_warp_kb(kb_total, WARPS),
                ngroups = gemv::max_warp_groups(kb_total, WARPS, l.group_size);
  const bool asym = l.format == WeightFormat::kInt4Asym;
  const auto kernel = gemv::gemv_int4_stream_kernel<WARPS, P, MINB, TPS, ASYNC>;
  const int32_t ring = ASYNC ? P * TPS * 512 : 0;
  const int64_t max_smem = device_info().max_smem_per_block, sms = device_info().sm_count;
  int32_t rt = 1;
  int64_t smem = gemv::stream_smem(WARPS, m, nkb, ngroups, rt, groups, asym, ring).total;
  for (int iter = 0; iter < 4 && smem <= max_smem; ++iter) {
    const int64_t slots =
        int64_t{blocks_per_sm(reinterpret_cast<const void*>(kernel), WARPS * 32, static_cast<size_t>(smem))} *
        sms;
    const int32_t want = static_cast<int32_t>((tiles + slots - 1) / slots);
    if (want == rt) break;
    rt = want;
    smem = gemv::stream_smem(WARPS, m, nkb, ngroups, rt, groups, asym, ring).total;
  }
  *launched = smem <= max_smem && rt >= only_if_rt_at_least;
  if (!*launched) return ok_status();
  const int flags = aligned16(w.scales) && (!asym || aligned16(w.zeros)) ? gemv::kParamsAligned : 0;
  const dim3 grid(static_cast<unsigned>((tiles + rt - 1) / rt));
  return launch_kernel(kernel, grid, dim3(WARPS * 32), static_cast<size_t>(smem), stream, tuning().pdl,
                       "linear (int4 stream)", x, w, static_cast<const uint4*>(packed), bias, y, rt, flags);
}

Status launch_stream_variant(View2<const float> x, const WeightView& w, const void* packed, const float* bias,
                             View2<float> y, Stream stream, bool* launched) {
  switch (tuning().gemv_variant) {
    case 2: return launch_stream<8, 8, 2, 2, true>(x, w, packed, bias, y, stream, 0, launched);
    case 3: return launch_stream<16, 4, 2, 2, true>(x, w, packed, bias, y, stream, 0, launched);
    case 4: return launch_stream<8, 6, 2, 2, true>(x, w, packed, bias, y, stream, 0, launched);
    default: break;
  }
  // Two row tiles per step from a register ring where every block has at least two (measured fastest on
  // an H200 at 8192 x 8192: 18.5 us against 19.5 for the shared-memory ring); else one tile per step
  // from a shared-memory ring (9.4 us at 4096 x 4096).
  INFERGATE_K_RETURN_IF_ERROR((launch_stream<8, 4, 2, 2, false>(x, w, packed, bias, y, stream, 2, launched)));
  if (*launched) return ok_status();
  return launch_stream<8, 8, 2, 1, true>(x, w, packed, bias, y, stream, 0, launched);
}

}  // namespace

Status linear(View2<const float> x, const WeightView& w, const void* int4_packed, const float* bias,
              View2<float> y, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_linear(x, w, y, "linear"));
  if (x.rows == 0) return ok_status();
  const WeightLayout& l = w.layout;
  if (x.rows > 8) {
    const dim3 grid(grid_for(l.rows, kTile), grid_for(x.rows, kTile));
    gemm_tf32_kernel<<<grid, 128, 0, stream>>>(x, w, bias, y);
    return check_launch("linear (tf32 gemm)");
  }
  if (int4_packed != nullptr) {
    if (!int4_mma_eligible(l)) {
      return invalid_argument("linear: a packed int4 weight needs rows % 16 == 0 and cols % 64 == 0");
    }
    if (!tuning().gemv_legacy_mma && aligned16(int4_packed)) {
      bool launched = false;
      INFERGATE_K_RETURN_IF_ERROR(launch_stream_variant(x, w, int4_packed, bias, y, stream, &launched));
      if (launched) return ok_status();
      return launch_gemv(x, w, bias, y, stream);  // x too wide to stage: the CUDA-core path
    }
    const int64_t tiles = l.rows / 16, sms = device_info().sm_count;
    // Enough blocks to cover the GPU a few times over; more row tiles per block when there are
    // plenty (x is staged once per block).
    const int rt = (tiles % 4 == 0 && tiles >= 8 * sms) ? 4 : ((tiles % 2 == 0 && tiles >= 4 * sms) ? 2 : 1);
    const size_t smem = static_cast<size_t>(x.rows) * static_cast<size_t>(l.cols + 8) * sizeof(__half) +
                        8 * sizeof(float) + static_cast<size_t>(kMmaWarps) * 32 * rt * 4 * sizeof(float);
    if (smem <= static_cast<size_t>(device_info().max_smem_per_block)) {
      if (rt == 4) return launch_mma<4>(x, w, int4_packed, bias, y, smem, stream);
      if (rt == 2) return launch_mma<2>(x, w, int4_packed, bias, y, smem, stream);
      return launch_mma<1>(x, w, int4_packed, bias, y, smem, stream);
    }
    // x too wide to stage: the CUDA-core path below.
  }
  return launch_gemv(x, w, bias, y, stream);
}

}  // namespace infergate::kernels::cuda
