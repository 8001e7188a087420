// The int4 GEMV / small-batch GEMM (M <= 8) on tensor cores, written to stream the weights at HBM
// speed: y [M, N] = x [M, K] W[N, K]^T (+ bias), W int4 repacked by pack_int4_for_mma
// (cuda_layouts.h: row tile rt of 16 rows is (K/64) contiguous 512-byte k blocks).
//
// Why it is shaped like this (an 8192 x 8192 int4 matrix is 33.6 MB with its scales: 7 us at 4.8 TB/s,
// so the kernel may spend only ~50 warp instructions per 16-byte load across the GPU):
//  - the weights are the only large input, so they are loaded before anything else and several loads
//    ahead of use: each lane keeps P 16-byte loads in flight in a register ring, and nothing the loop
//    waits on is a dependent global load: the block's scales and zeros are copied to shared memory
//    once (cp.async), x is staged once;
//  - few instructions per load: x is staged in mma-fragment order (two 16-byte shared loads give a
//    lane its B fragments for a whole 64-column k block), the codes enter the mma as fp16 1024 + u
//    (one lop3 per pair, no subtraction), and the zero point comes out once per group through the
//    group's sum of x: sum_k (u_k - z) x_k = sum_k (1024 + u_k) x_k - (1024 + z) sum_k x_k, both sums
//    over the same fp16 x; indices are 32-bit; the group test runs once per k block;
//  - the grid is one wave: ceil(row tiles / resident blocks) row tiles per block, every warp of a block
//    on its own contiguous 1/WARPS of K for all of the block's row tiles (so each warp streams
//    contiguous memory), partial sums added across warps in shared memory in a fixed order;
//  - programmatic dependent launch: the weights and scales do not depend on the previous kernel, so
//    their loads start before griddepcontrol.wait; only x (the previous kernel's output) waits.
// Numerics: x rounded to fp16 after scaling each (warp, row) slice by a power of two so its largest
// value is 2^14 (undone exactly in fp32); codes exact; products exact and summed in fp32 by the mma,
// per group; the group scale applied in fp32. The folded zero point costs a cancellation of about
// 1024 / |u - z| in each group's sum, bounded by the fp32 accumulation: relative error ~1e-4 of
// sum |x w| (the tests hold it to 3e-3).
#pragma once

#include "infergate/kernels/cuda_layouts.h"
#include "infergate/kernels/formats.h"
#include "infergate/kernels/tensor.h"
#include "prims.cuh"

namespace infergate::kernels::cuda::gemv {

constexpr int kMaxM = 8;

// Shared memory of one block (bytes, 16-aligned pieces); `nkb` = the most k blocks of any warp slice,
// `ngroups` = the most groups any warp slice touches.
struct StreamSmem {
  int32_t x_row_words = 0;  // one x row of a warp in fragment order: nkb * 32 words + 4 (bank padding)
  int32_t x = 0, xsum = 0, red = 0, scales = 0, zeros = 0, ring = 0, total = 0;
};
// `ring_bytes_per_warp`: the weights' shared-memory ring (the cp.async kernels), 0 for the register ring.
INFERGATE_HD StreamSmem stream_smem(int warps, int32_t m, int32_t nkb, int32_t ngroups, int32_t rt_per_cta,
                                    int32_t groups, bool asym, int32_t ring_bytes_per_warp = 0) {
  StreamSmem s;
  s.x_row_words = nkb * 32 + 4;
  s.x = 0;
  s.xsum = static_cast<int32_t>(align16(int64_t{warps} * m * s.x_row_words * 4));
  s.red = s.xsum + static_cast<int32_t>(align16(int64_t{warps} * kMaxM * ngroups * 4));
  s.scales = s.red + rt_per_cta * warps * 128 * 4;
  s.zeros = s.scales + static_cast<int32_t>(align16(int64_t{rt_per_cta} * 16 * groups * 2));
  s.ring = s.zeros + (asym ? static_cast<int32_t>(align16(int64_t{rt_per_cta} * 16 * groups)) : 0);
  s.total = s.ring + warps * ring_bytes_per_warp;
  return s;
}

// K split over the warps of a block: warp w takes k blocks [w * KB / W, (w + 1) * KB / W).
INFERGATE_HD int32_t warp_kb_begin(int32_t kb_total, int warps, int w) {
  return static_cast<int32_t>(int64_t{kb_total} * w / warps);
}
INFERGATE_HD int32_t max_warp_kb(int32_t kb_total, int warps) {
  int32_t m = 0;
  for (int w = 0; w < warps; ++w) {
    const int32_t n = warp_kb_begin(kb_total, warps, w + 1) - warp_kb_begin(kb_total, warps, w);
    m = n > m ? n : m;
  }
  return m;
}
INFERGATE_HD int32_t max_warp_groups(int32_t kb_total, int warps, int32_t group_size) {
  int32_t m = 0;
  for (int w = 0; w < warps; ++w) {
    const int32_t a = warp_kb_begin(kb_total, warps, w), b = warp_kb_begin(kb_total, warps, w + 1);
    const int32_t n = b > a ? (b * 64 - 1) / group_size - (a * 64) / group_size + 1 : 0;
    m = n > m ? n : m;
  }
  return m;
}

enum StreamFlags : int {
  kParamsAligned = 1,  // scales (and zeros) 16-byte aligned: cp.async copies; else element copies
};

// WARPS warps per block, P steps of loads in flight per lane, MINB blocks per SM asked of the compiler
// (which caps registers at 64K / (MINB * WARPS * 32)), TPS row tiles per step: with 2, each k block of
// x (its fragments, the group test, the loop bookkeeping) serves two row tiles, loaded side by side.
//
// ASYNC: the weights stream through a per-warp shared-memory ring of P steps with cp.async (each lane
// copies and later reads its own 16 bytes per tile, so no barrier is needed) instead of a register
// ring: the registers no longer bound how many bytes are in flight.
template <int WARPS, int P, int MINB, int TPS, bool ASYNC>
__global__ void __launch_bounds__(WARPS * 32, MINB)
    gemv_int4_stream_kernel(View2<const float> x, WeightView w, const uint4* __restrict__ packed,
                            const float* __restrict__ bias, View2<float> y, int32_t rt_per_cta, int flags) {
  prim::grid_dep_launch();
  uint8_t* smem = prim::dynamic_smem();
  const WeightLayout& l = w.layout;
  const int lane = prim::lane_id(), warp = prim::warp_id();
  const int g = lane >> 2, c = lane & 3;
  const int m_rows = static_cast<int>(x.rows < kMaxM ? x.rows : kMaxM);
  const int32_t kb_total = static_cast<int32_t>(l.cols / kInt4MmaCols),
                tiles = static_cast<int32_t>(l.rows / kInt4MmaRows);
  const int32_t rt0 = static_cast<int32_t>(blockIdx.x) * rt_per_cta;
  const int32_t rt_n = rt_per_cta < tiles - rt0 ? rt_per_cta : tiles - rt0;
  const int32_t kb_lo = warp_kb_begin(kb_total, WARPS, warp),
                kb_hi = warp_kb_begin(kb_total, WARPS, warp + 1);
  const int32_t nkb = kb_hi - kb_lo;
  const int32_t tsets = (rt_n + TPS - 1) / TPS;  // sets of TPS row tiles (the last may be short)
  const int32_t steps = tsets * nkb;             // (tile set, k block) pairs of this warp, set-major
  const int32_t groups = static_cast<int32_t>(weight_groups_per_row(l)), gsize = l.group_size;
  const int gshift = gsize == 32 ? 5 : (gsize == 64 ? 6 : 7);
  const bool asym = l.format == WeightFormat::kInt4Asym;
  const int32_t ngroups = max_warp_groups(kb_total, WARPS, gsize);
  const StreamSmem sm = stream_smem(WARPS, m_rows, max_warp_kb(kb_total, WARPS), ngroups, rt_per_cta, groups,
                                    asym, ASYNC ? P * TPS * 512 : 0);
  const int64_t tile_stride = int64_t{kb_total} * 32;  // uint4s from one row tile to the next
  uint4* ring = reinterpret_cast<uint4*>(smem + sm.ring) + warp * P * TPS * 32 + lane;  // [P][TPS][32 lanes]

  // 1. The first P steps' weight loads of this warp (weights never come from the previous kernel).
  uint4 buf[P][TPS];
  const uint4* pf = packed + (int64_t{rt0} * kb_total + kb_lo) * 32 + lane;  // next step's first tile
  int32_t pf_kb = kb_lo, pf_set = 0;
  auto load_step = [&](uint4(&dst)[TPS], int slot) {
#pragma unroll
    for (int tt = 0; tt < TPS; ++tt) {
      if (tt == 0 || pf_set * TPS + tt < rt_n) {
        if constexpr (ASYNC) {
          prim::cp_async16(ring + (slot * TPS + tt) * 32, pf + tt * tile_stride, 16);
        } else {
          dst[tt] = prim::ldg_stream16(pf + tt * tile_stride);
        }
      }
    }
    if constexpr (ASYNC) prim::cp_commit();
    pf += 32;
    if (++pf_kb == kb_hi) {
      pf_kb = kb_lo;
      ++pf_set;
      pf += (TPS * kb_total - nkb) * 32;
    }
  };
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (i < steps) {
      load_step(buf[i], i);
    } else if constexpr (ASYNC) {
      prim::cp_commit();  // every step owns one group, so the waits below count right
    }
  }

  // 2. The block's scales (and zeros) to shared memory: rows rt0*16 .. (rt0+rt_n)*16 are contiguous.
  {
    const int32_t n_sc = rt_n * 16 * groups;
    const uint8_t* src_s = static_cast<const uint8_t*>(w.scales) + int64_t{rt0} * 16 * groups * 2;
    const uint8_t* src_z = asym ? w.zeros + int64_t{rt0} * 16 * groups : nullptr;
    if (flags & kParamsAligned) {
      for (int32_t u = static_cast<int32_t>(threadIdx.x); u < n_sc / 8; u += WARPS * 32)
        prim::cp_async16(smem + sm.scales + u * 16, src_s + u * 16, 16);
      if (asym) {
        for (int32_t u = static_cast<int32_t>(threadIdx.x); u < n_sc / 16; u += WARPS * 32)
          prim::cp_async16(smem + sm.zeros + u * 16, src_z + u * 16, 16);
      }
      prim::cp_commit();
    } else {
      auto* dst_s = reinterpret_cast<uint16_t*>(smem + sm.scales);
      for (int32_t i = static_cast<int32_t>(threadIdx.x); i < n_sc; i += WARPS * 32) {
        dst_s[i] = reinterpret_cast<const uint16_t*>(src_s)[i];
        if (asym) smem[sm.zeros + i] = src_z[i];
      }
    }
  }

  // 3. x is the previous kernel's output.
  prim::grid_dep_wait();

  // 4. This warp's slice of every row of x, as fp16 scaled by a power of two per (warp, row), in
  // fragment order: for k block b and lane column c, words [(b * 4 + c) * 8, + 8) hold the pairs
  // (16 kt + 2c, +1) and (16 kt + 2c + 8, +9) for kt = 0..3. Lane l converts the pair at 2l of each
  // k block, and each group's sum of the fp16 values is kept for the zero point.
  auto* xf = reinterpret_cast<uint32_t*>(smem + sm.x) + warp * m_rows * sm.x_row_words;
  float* xsum = reinterpret_cast<float*>(smem + sm.xsum) + warp * kMaxM * ngroups;  // [kMaxM][ngroups]
  const int32_t g0 = kb_lo * 64 >> gshift;                                          // the slice's first group
  {
    const int word = 2 * (lane >> 3) + ((lane & 7) >> 2), col = lane & 3;  // where lane's pair goes
    for (int m = 0; m < kMaxM; ++m) {
      const float* xr = x.data + (m < m_rows ? m : 0) * x.row_stride + kb_lo * 64 + 2 * lane;
      float amax = 0.0f;
      if (m < m_rows) {
#pragma unroll 8
        for (int32_t b = 0; b < nkb; ++b) amax = fmaxf(amax, fmaxf(fabsf(xr[64 * b]), fabsf(xr[64 * b + 1])));
      }
      const float sc = prim::fp16_safe_scale(prim::warp_max(amax));
      float run = 0.0f;  // this lane's part of the current group's sum (groups of 64 and 128)
      for (int32_t b = 0; b < nkb && m < m_rows; ++b) {
        const uint32_t h = prim::pack_half2(xr[64 * b] * sc, xr[64 * b + 1] * sc);
        xf[m * sm.x_row_words + (b * 4 + col) * 8 + word] = h;
        const float v = prim::half_to_float(static_cast<uint16_t>(h & 0xFFFFu)) +
                        prim::half_to_float(static_cast<uint16_t>(h >> 16));
        if (gsize == 32) {  // two groups per k block: lanes 0-15 and 16-31
          float t = v;
          for (int o = 8; o > 0; o >>= 1) t += prim::shfl_xor(t, o);
          if ((lane & 15) == 0) xsum[m * ngroups + ((kb_lo + b) * 2 + (lane >> 4)) - g0] = t;
        } else {
          run += v;
          const int32_t kend = (kb_lo + b + 1) * 64;
          if (b == nkb - 1 || (kend & (gsize - 1)) == 0) {
            const float t = prim::warp_sum(run);
            if (lane == 0) xsum[m * ngroups + ((kend - 1) >> gshift) - g0] = t;
            run = 0.0f;
          }
        }
      }
      if (m >= m_rows) {  // columns without a row of x: their sums are zero
        for (int32_t i = lane; i < ngroups; i += 32) xsum[m * ngroups + i] = 0.0f;
      } else if (lane == 0) {  // the inverse scale rides in the row's padding (read after the sync)
        xf[m * sm.x_row_words + nkb * 32 + 1] = prim::f2u(1.0f / sc);
      }
    }
  }
  // The scales' copies are the newest group: with the ring's P groups before them, waiting for all
  // but none also waits for the first P steps' weights (they were needed first anyway).
  prim::cp_wait(0);
  prim::sync_block();

  // 5. Stream the weights.
  const auto* scales = reinterpret_cast<const uint16_t*>(smem + sm.scales);
  const uint8_t* zeros = smem + sm.zeros;
  float* red = reinterpret_cast<float*>(smem + sm.red);
  const uint32_t* xg = xf + (g < m_rows ? g : 0) * sm.x_row_words;
  const float xinv0 = 2 * c < m_rows ? prim::u2f(xf[2 * c * sm.x_row_words + nkb * 32 + 1]) : 0.0f;
  const float xinv1 = 2 * c + 1 < m_rows ? prim::u2f(xf[(2 * c + 1) * sm.x_row_words + nkb * 32 + 1]) : 0.0f;
  const float* xs0 = xsum + (2 * c) * ngroups;
  const float* xs1 = xsum + (2 * c + 1) * ngroups;
  float acc[TPS][4], part[TPS][4];
  float dg[TPS], dg8[TPS], zf[TPS], zf8[TPS];
#pragma unroll
  for (int tt = 0; tt < TPS; ++tt) {
    dg[tt] = dg8[tt] = zf[tt] = zf8[tt] = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[tt][i] = part[tt][i] = 0.0f;
  }
  int32_t cur_grp = -1;
  int32_t set = 0, kb = kb_lo;  // (tile set, k block) of the step being computed
  // The group's sums into the tile's accumulators: sum (u - z) x = sum (1024 + u) x - (1024 + z) sum x.
  auto close_group = [&](int tt) {
    const float a0 = xs0[cur_grp - g0], a1 = xs1[cur_grp - g0];
    acc[tt][0] = fmaf(dg[tt], fmaf(-zf[tt], a0, part[tt][0]), acc[tt][0]);
    acc[tt][1] = fmaf(dg[tt], fmaf(-zf[tt], a1, part[tt][1]), acc[tt][1]);
    acc[tt][2] = fmaf(dg8[tt], fmaf(-zf8[tt], a0, part[tt][2]), acc[tt][2]);
    acc[tt][3] = fmaf(dg8[tt], fmaf(-zf8[tt], a1, part[tt][3]), acc[tt][3]);
    part[tt][0] = part[tt][1] = part[tt][2] = part[tt][3] = 0.0f;
  };
  // Rows g + 8 enter the mma as 1024 + 16 u (one lop3 without a shift), so their sums carry 16x the
  // codes: the zero term is 1024 + 16 z and the scale is d / 16 (exact).
  auto open_group = [&](int tt, int32_t grp) {
    const int32_t n = (set * TPS + tt) * 16 + g;  // row within the block's rows
    const uint16_t s0 = scales[n * groups + grp], s8 = scales[(n + 8) * groups + grp];
    const bool f16 = l.scale_dtype == ScaleDtype::kF16;  // scales are finite: the hardware conversion
    dg[tt] = f16 ? prim::half_to_float(s0) : bf16_to_float(s0);
    dg8[tt] = (f16 ? prim::half_to_float(s8) : bf16_to_float(s8)) * 0.0625f;
    zf[tt] = 1024.0f + (asym ? static_cast<float>(zeros[n * groups + grp]) : 8.0f);
    zf8[tt] = 1024.0f + 16.0f * (asym ? static_cast<float>(zeros[(n + 8) * groups + grp]) : 8.0f);
  };
  // One step: k block kb of the tiles of set `set`, from the loads in `slot`; refills `slot` with the
  // loads P steps ahead when `prefetch`.
  auto step = [&](uint4(&slot)[TPS], int si, bool prefetch) {
    uint4 wv[TPS] = {};
    if constexpr (ASYNC) {
      // This step's group is complete once at most P - 1 newer ones are pending; each lane reads only
      // what it copied itself.
      prim::cp_wait(P - 1);
#pragma unroll
      for (int tt = 0; tt < TPS; ++tt) {
        if (tt == 0 || set * TPS + tt < rt_n) wv[tt] = ring[(si * TPS + tt) * 32];
      }
    } else {
#pragma unroll
      for (int tt = 0; tt < TPS; ++tt) wv[tt] = slot[tt];
      if (prefetch) load_step(slot, si);
    }
    const bool full = TPS == 1 || set * TPS + TPS <= rt_n;  // every tile of the set exists
    // B fragments for the whole k block (lanes past the rows of x read row 0: their columns are
    // never stored, and their sums of x are zero).
    const uint4 lo = *reinterpret_cast<const uint4*>(xg + ((kb - kb_lo) * 4 + c) * 8);
    const uint4 hi = *reinterpret_cast<const uint4*>(xg + ((kb - kb_lo) * 4 + c) * 8 + 4);
    const uint32_t bf[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int kt = 0; kt < 4; ++kt) {
      if (kt == 0 || (kt == 2 && gsize == 32)) {
        const int32_t grp = (kb * 64 + kt * 16) >> gshift;
        if (grp != cur_grp) {
#pragma unroll
          for (int tt = 0; tt < TPS; ++tt) {
            if (tt == 0 || full) {
              if (cur_grp >= 0) close_group(tt);
              open_group(tt, grp);
            }
          }
          cur_grp = grp;
        }
      }
#pragma unroll
      for (int tt = 0; tt < TPS; ++tt) {
        if (tt == 0 || full) {
          const uint32_t wd = kt == 0 ? wv[tt].x : (kt == 1 ? wv[tt].y : (kt == 2 ? wv[tt].z : wv[tt].w));
          const uint32_t w8 = wd >> 8;
          const uint32_t a[4] = {prim::and_or(wd, 0x000F000Fu, 0x64006400u),  // row g:     1024 + u
                                 prim::and_or(wd, 0x00F000F0u, 0x64006400u),  // row g + 8: 1024 + 16 u
                                 prim::and_or(w8, 0x000F000Fu, 0x64006400u),
                                 prim::and_or(w8, 0x00F000F0u, 0x64006400u)};
          prim::mma_f16(part[tt], a, bf[2 * kt], bf[2 * kt + 1]);
        }
      }
    }
    if constexpr (ASYNC) {  // refill the slot only after its words were used
      if (prefetch) {
        load_step(slot, si);
      } else {
        prim::cp_commit();
      }
    }
    if (++kb == kb_hi) {  // the end of this warp's slice of the set's tiles
#pragma unroll
      for (int tt = 0; tt < TPS; ++tt) {
        if (tt == 0 || full) {
          close_group(tt);
          float* r = red + ((set * TPS + tt) * WARPS + warp) * 128 + lane * 4;
          // d0, d2: x row 2c; d1, d3: x row 2c + 1 (undo this warp's power-of-two x scales).
          r[0] = acc[tt][0] * xinv0;
          r[1] = acc[tt][1] * xinv1;
          r[2] = acc[tt][2] * xinv0;
          r[3] = acc[tt][3] * xinv1;
          acc[tt][0] = acc[tt][1] = acc[tt][2] = acc[tt][3] = 0.0f;
        }
      }
      cur_grp = -1;
      kb = kb_lo;
      ++set;
    }
  };
  for (int32_t s0 = 0; s0 < steps; s0 += P) {
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (s0 + i < steps) step(buf[i], i, s0 + i + P < steps);
    }
  }

  // 6. Sum the warps' partials in warp order and write y (+ bias).
  prim::sync_block();
  for (int32_t idx = static_cast<int32_t>(threadIdx.x); idx < rt_n * 128; idx += WARPS * 32) {
    const int32_t tt = idx / 128;
    const int ln = (idx % 128) / 4, i = idx % 4;
    float sum = 0.0f;
    for (int wi = 0; wi < WARPS; ++wi) {
      if (warp_kb_begin(kb_total, WARPS, wi + 1) > warp_kb_begin(kb_total, WARPS, wi))
        sum += red[(tt * WARPS + wi) * 128 + ln * 4 + i];
    }
    const int m = 2 * (ln & 3) + (i & 1);
    const int64_t n = int64_t{rt0 + tt} * 16 + (ln >> 2) + (i >= 2 ? 8 : 0);
    if (m < m_rows) y.at(m, n) = sum + (bias != nullptr ? bias[n] : 0.0f);
  }
}

}  // namespace infergate::kernels::cuda::gemv
