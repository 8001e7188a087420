// The kernels of the CUDA linear layer, y [M, N] = x [M, K] W[N, K]^T (+ bias), written on prims.cuh so
// that the CPU emulator runs them too (launchers in linear.cu):
//   gemv_kernel           every format on its row-major layout, M <= 8 per pass: CUDA cores, 16-byte
//                         weight loads, each warp on 4 rows so every x value loaded serves 4 rows.
//   gemv_int4_mma_kernel  the older int4 tensor-core GEMV (one block per row tiles, x staged as fp16);
//                         the streaming kernel of gemv_stream.cuh replaced it by default.
//   gemm_tf32_kernel      M > 8 (prefill): 64x64 tiles, W dequantized into shared memory, TF32 tensor
//                         cores (mma m16n8k8), fp32 accumulation.
//   gemv_scalar_kernel    any shape, for rows that are not 16-byte aligned.
#pragma once

#include "infergate/kernels/cuda_layouts.h"
#include "infergate/kernels/formats.h"
#include "infergate/kernels/numeric.h"
#include "infergate/kernels/ops.h"
#include "infergate/kernels/tensor.h"
#include "prims.cuh"
#include "weight_element.cuh"

namespace infergate::kernels::cuda::lin {

// ==== CUDA-core GEMV ==============================================================================

constexpr int kGemvWarps = 8;
constexpr int kGemvRowsPerWarp = 4;

INFERGATE_DEV float u4_minus(uint32_t w, int p, float bias) {
  // (w >> 4p) & 0xF as the float 2^23 + code, minus (2^23 + zero): the code minus the zero, exactly.
  return prim::u2f(prim::and_or(w >> (4 * p), 0xFu, 0x4B000000u)) - bias;
}

// The weights' 16-byte chunk q (elements [q*E, q*E+E) of a row, E = 8 / 16 / 32 for fp16 / int8 /
// int4) dotted with x rows m < MB, added to acc[m]. int8 codes and int4 (code - zero) are summed
// unscaled; int4's group scale is applied by the caller per chunk (a chunk never spans groups).
// Rows m >= mvalid of x read row mvalid - 1 instead (their sums are never stored).
template <WeightFormat F, int MB>
INFERGATE_DEV void chunk_dot(uint4 wv, const float* __restrict__ x, int64_t x_stride, int mvalid, int64_t k0,
                             float zbias, float (&acc)[MB]) {
  const uint32_t words[4] = {wv.x, wv.y, wv.z, wv.w};
  if constexpr (F == WeightFormat::kF16 || F == WeightFormat::kBF16) {
#pragma unroll
    for (int m = 0; m < MB; ++m) {
      const float* xr = x + (m < mvalid ? m : mvalid - 1) * x_stride + k0;
      const float4 xa = *reinterpret_cast<const float4*>(xr);
      const float4 xb = *reinterpret_cast<const float4*>(xr + 4);
      const float xs[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float lo, hi;
        if constexpr (F == WeightFormat::kF16) {
          lo = prim::half_to_float(static_cast<uint16_t>(words[i] & 0xFFFFu));
          hi = prim::half_to_float(static_cast<uint16_t>(words[i] >> 16));
        } else {
          lo = prim::u2f(words[i] << 16);
          hi = prim::u2f(words[i] & 0xFFFF0000u);
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
      for (int b = 0; b < 4; ++b) wf[b] = prim::u2f(prim::byte_perm(u, 0x4B000000u, 0x7440 + b)) - 8388736.0f;
#pragma unroll
      for (int m = 0; m < MB; ++m) {
        const float4 xv =
            *reinterpret_cast<const float4*>(x + (m < mvalid ? m : mvalid - 1) * x_stride + k0 + 4 * i);
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
        const float* xr = x + (m < mvalid ? m : mvalid - 1) * x_stride + k0 + 8 * i;
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
  const int lane = prim::lane_id();
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
      const int64_t n =
          prim::min64(row0 + r, l.rows - 1);  // rows past the end repeat the last (never written)
      dst[r] = prim::ldg16(reinterpret_cast<const uint4*>(wbytes + n * row_bytes) + qq);
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
      const int64_t n = prim::min64(row0 + r, l.rows - 1);
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
        acc[r][m] = fmaf(wk, x.data[(m < mvalid ? m : mvalid - 1) * x.row_stride + k], acc[r][m]);
    }
  }
#pragma unroll
  for (int r = 0; r < kGemvRowsPerWarp; ++r) {
    const int64_t n = row0 + r;
    const float d =
        F == WeightFormat::kInt8 ? scale_to_float(scales[prim::min64(n, l.rows - 1)], l.scale_dtype) : 1.0f;
#pragma unroll
    for (int m = 0; m < MB; ++m) {
      const float s = prim::warp_sum(acc[r][m]);
      if (lane == 0 && n < l.rows && m < mvalid) y.at(m, n) = d * s + (bias != nullptr ? bias[n] : 0.0f);
    }
  }
}

// Any shape: one warp per output row, element by element (the reference's per-element maths).
template <int = 0>
__global__ void gemv_scalar_kernel(View2<const float> x, WeightView w, const float* __restrict__ bias,
                                   View2<float> y) {
  const WeightLayout& l = w.layout;
  const int lane = prim::lane_id();
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
    acc = prim::warp_sum(acc);
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
  uint8_t* smem_raw = prim::dynamic_smem();
  const WeightLayout& l = w.layout;
  const int mrows = static_cast<int>(x.rows < 8 ? x.rows : 8);
  const int64_t k_in = l.cols, xs_stride = k_in + 8;     // halves; +8 staggers the rows across banks
  uint16_t* xs = reinterpret_cast<uint16_t*>(smem_raw);  // fp16 [mrows][xs_stride]
  float* xscale = reinterpret_cast<float*>(smem_raw + mrows * xs_stride * sizeof(uint16_t));  // [8]
  float* red = xscale + 8;  // [warps][32][RT][4]
  const int lane = prim::lane_id(), warp = prim::warp_id();
  const int g = lane >> 2, c = lane & 3;

  // Stage x: per row amax, then fp16(x * 2^e) with 2^e * amax <= 2^14.
  for (int m = warp; m < mrows; m += kMmaWarps) {
    float amax = 0.0f;
    for (int64_t k = lane; k < k_in; k += 32) amax = fmaxf(amax, fabsf(x.at(m, k)));
    amax = prim::warp_max(amax);
    const float s = prim::fp16_safe_scale(amax);
    if (lane == 0) xscale[m] = s;
    for (int64_t k = lane; k < k_in; k += 32)
      xs[m * xs_stride + k] = static_cast<uint16_t>(prim::pack_half2(x.at(m, k) * s, 0.0f) & 0xFFFFu);
  }
  prim::sync_block();

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
  uint32_t zg[RT] = {}, zg8[RT] = {};  // half2 (1024 + zero) for rows g and g + 8
  float dg[RT] = {}, dg8[RT] = {};
  // A finished group's sums, scaled by its scales (rows g: d0, d1; rows g + 8: d2, d3), into acc.
  auto close_group = [&](int t) {
    acc[t][0] = fmaf(dg[t], part[t][0], acc[t][0]);
    acc[t][1] = fmaf(dg[t], part[t][1], acc[t][1]);
    acc[t][2] = fmaf(dg8[t], part[t][2], acc[t][2]);
    acc[t][3] = fmaf(dg8[t], part[t][3], acc[t][3]);
  };
  // Each warp's k blocks; the next block's words are loaded while this one is computed.
  uint4 next[RT];
  if (warp < k_blocks) {
#pragma unroll
    for (int t = 0; t < RT; ++t) next[t] = prim::ldg16(packed + (((rt0 + t) * k_blocks + warp) * 32 + lane));
  }
  for (int64_t kb = warp; kb < k_blocks; kb += kMmaWarps) {
    uint4 a_words[RT];
#pragma unroll
    for (int t = 0; t < RT; ++t) a_words[t] = next[t];
    if (kb + kMmaWarps < k_blocks) {
#pragma unroll
      for (int t = 0; t < RT; ++t)
        next[t] = prim::ldg16(packed + (((rt0 + t) * k_blocks + kb + kMmaWarps) * 32 + lane));
    }
#pragma unroll
    for (int kt = 0; kt < 4; ++kt) {
      const int64_t k0 = kb * 64 + kt * 16;
      const int64_t grp = k0 / l.group_size;
      if (grp != cur_group) {
        // Close the previous group: scale its sums (rows g: d0, d1; rows g + 8: d2, d3).
#pragma unroll
        for (int t = 0; t < RT; ++t) {
          if (cur_group >= 0) close_group(t);
          part[t][0] = part[t][1] = part[t][2] = part[t][3] = 0.0f;
          const int64_t n = (rt0 + t) * 16 + g;
          dg[t] = scale_to_float(scales[n * groups + grp], l.scale_dtype);
          dg8[t] = scale_to_float(scales[(n + 8) * groups + grp], l.scale_dtype);
          const float z = asym ? static_cast<float>(w.zeros[n * groups + grp]) : 8.0f;
          const float z8 = asym ? static_cast<float>(w.zeros[(n + 8) * groups + grp]) : 8.0f;
          zg[t] = prim::pack_half2(1024.0f + z, 1024.0f + z);
          zg8[t] = prim::pack_half2(1024.0f + z8, 1024.0f + z8);
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
          a[j] = prim::h2_sub(prim::u4_pair_1024(word, j), (j & 1) ? zg8[t] : zg[t]);
        }
        prim::mma_f16(part[t], a, b0, b1);
      }
    }
  }
  if (cur_group >= 0) {
#pragma unroll
    for (int t = 0; t < RT; ++t) close_group(t);
  }
  // Deterministic cross-warp sum: every warp stores, warp 0 adds in warp order.
#pragma unroll
  for (int t = 0; t < RT; ++t) {
#pragma unroll
    for (int i = 0; i < 4; ++i) red[((warp * 32 + lane) * RT + t) * 4 + i] = acc[t][i];
  }
  prim::sync_block();
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

// Block: 4 warps, a 64 (x rows) x 64 (outputs) tile; each warp a 32 x 32 quarter as 2 x 4 mma tiles of
// 16 x 8 (m16n8k8, tf32 inputs rounded once when staged, fp32 accumulators). x and the dequantized W
// tile sit in shared memory as [row][k] with a row stride of 36 floats, so a warp's fragment loads
// (rows g, g + 8, columns c, c + 4) touch 32 different banks.
template <int = 0>
__global__ void __launch_bounds__(128)
    gemm_tf32_kernel(View2<const float> x, WeightView w, const float* __restrict__ bias, View2<float> y) {
  float* xs = reinterpret_cast<float*>(prim::dynamic_smem());  // tf32 bits [kTile][kTileLd]
  float* ws = xs + kTile * kTileLd;
  const int64_t m0 = int64_t{blockIdx.y} * kTile, n0 = int64_t{blockIdx.x} * kTile;
  const int lane = prim::lane_id(), warp = prim::warp_id(), wm = warp / 2, wn = warp % 2;
  const int g = lane >> 2, c = lane & 3;
  const int64_t k_in = w.layout.cols;
  float acc[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
  }
  for (int64_t k0 = 0; k0 < k_in; k0 += kTileK) {
    for (int i = static_cast<int>(threadIdx.x); i < kTile * kTileK; i += static_cast<int>(blockDim.x)) {
      const int r = i / kTileK, kk = i % kTileK;
      const int64_t m = m0 + r, n = n0 + r, k = k0 + kk;
      xs[r * kTileLd + kk] = prim::u2f(prim::to_tf32((m < x.rows && k < k_in) ? x.at(m, k) : 0.0f));
      ws[r * kTileLd + kk] =
          prim::u2f(prim::to_tf32((n < w.layout.rows && k < k_in) ? weight_element(w, n, k) : 0.0f));
    }
    prim::sync_block();
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 8) {
      uint32_t a[2][4], b[4][2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float* xr = xs + (wm * 32 + i * 16 + g) * kTileLd + kk + c;
        a[i][0] = prim::f2u(xr[0]);
        a[i][1] = prim::f2u(xr[8 * kTileLd]);
        a[i][2] = prim::f2u(xr[4]);
        a[i][3] = prim::f2u(xr[8 * kTileLd + 4]);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // B (k x n) = W tile^T: B[k][n] = ws[n][k]
        const float* wr = ws + (wn * 32 + j * 8 + g) * kTileLd + kk + c;
        b[j][0] = prim::f2u(wr[0]);
        b[j][1] = prim::f2u(wr[4]);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) prim::mma_tf32(acc[i][j], a[i], b[j][0], b[j][1]);
      }
    }
    prim::sync_block();
  }
  // d0: (row g, col 2c), d1: (g, 2c + 1), d2: (g + 8, 2c), d3: (g + 8, 2c + 1) of each 16 x 8 tile.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t m = m0 + wm * 32 + i * 16 + g + (e >= 2 ? 8 : 0);
        const int64_t n = n0 + wn * 32 + j * 8 + 2 * c + (e & 1);
        if (m < y.rows && n < y.cols) y.at(m, n) = acc[i][j][e] + (bias != nullptr ? bias[n] : 0.0f);
      }
    }
  }
}

// Dynamic shared memory of gemm_tf32_kernel: the x and W tiles.
constexpr size_t kGemmSmem = 2 * kTile * kTileLd * sizeof(float);

}  // namespace infergate::kernels::cuda::lin
