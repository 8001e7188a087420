// Linear layers with int4 weights and 8-bit integer dot products (AVX-512 VNNI, vpdpbusd: 64 u8 x s8
// products summed into 16 int32 lanes per instruction). The exact int4 loops (kernels_impl.inc) turn
// every weight into an fp32 (u - z) and do one fp32 multiply-add per weight and row of x; at a prompt
// of hundreds of tokens that is the bound (the 512-token prefill ran no faster with int4 weights than
// with fp16 ones). Here the codes stay integers, the contract being linear_int4_a8_ref:
//
//   x is quantized once per call, per row and weight group, to int8 (s = max|x| / 127, rne), stored
//   in 32-element chunks as (16 even elements, 16 odd ones), so that the low and high nibbles of a
//   chunk's 16 packed weight bytes meet their x codes directly; each group keeps its scale s and the
//   sum of its codes Q.
//   A tile is 8 weight rows, two "quads" of 4. For each block of 128 columns, the quad's 4 rows of 64
//   packed bytes are transposed by 128-bit lanes, so that one vector holds the same 16-byte chunk of
//   the 4 rows (one per 128-bit lane); its nibbles are split once into two u8 vectors. Against the 16
//   x codes of the chunk broadcast to every lane, one vpdpbusd adds 4 products into each of 16 int32
//   lanes (row r, position p): the lanes are outputs of 4 rows, so no horizontal sum is needed per
//   group. At the end of a group, in int32 and then fp32 (once per group, for 4 rows at a time):
//     acc(r, p) -= z_rg Q_g  (lane p = 0 only)      f(r, p) += d_rg s_g acc(r, p)
//   and at the end of the row y_r = sum_p f(r, p) (+ bias).
//   Each block's unpacked weights stay in registers for every row of x (passes of up to 64 rows of x,
//   their fp32 sums in an L1 buffer), so the unpacking is paid once per 64 rows of x, and the loop is
//   one vpdpbusd per 256 multiply-adds with the broadcasts of x as its only other loads.
// The same arithmetic for every row of x in every tile, pass and thread split: a row's outputs do not
// depend on what it is batched with (decode steps take this path too). The error is bounded in
// docs/quant-formats.md and checked against linear_int4_a8_ref and linear_ref by the tests.
#include <cstdint>

#include "cpu_kernels.h"

#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(                                                               \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
#endif

namespace infergate::kernels::cpu {
namespace isa_vnni_linear {

using I = __m512i;
using F = __m512;
constexpr int64_t kBlock = 128;  // columns per block: 4 chunks of 32, 64 packed bytes per row
constexpr int64_t kTile = 8;     // weight rows per tile (two quads)
constexpr int64_t kPass = 64;    // rows of x per pass over a tile

// A weight scale as fp32 (no inline function of the shared headers is compiled in this target region).
static inline float scale_f32(const void* scales, int64_t i, ScaleDtype dt) {
  uint16_t bits;
  __builtin_memcpy(&bits, static_cast<const uint16_t*>(scales) + i, 2);
  if (dt == ScaleDtype::kF16) return _cvtsh_ss(bits);
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  __builtin_memcpy(&f, &wide, 4);
  return f;
}

static void prepare(const LinearJob& j) {
  const WeightLayout& l = j.w.layout;
  const int64_t g_size = l.group_size, groups = l.cols / g_size;
  const I even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const I odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const I lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int64_t m = 0; m < j.m; ++m) {
    const float* x = j.x + m * j.x_stride;
    int8_t* q = j.xq + m * j.xq_stride;
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = x + g * g_size;
      F amax = _mm512_setzero_ps();
      for (int64_t k = 0; k < g_size; k += 16)
        amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(xg + k)));
      const float a = _mm512_reduce_max_ps(amax);
      const F inv = _mm512_set1_ps(a > 0.0f ? 127.0f / a : 0.0f);
      I sum = _mm512_setzero_si512();
      for (int64_t k = 0; k < g_size; k += 32) {
        // rne(x * inv) under the default rounding mode, clamped: quantize_int8 element by element.
        const I c0 = _mm512_min_epi32(
            hi, _mm512_max_epi32(lo, _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xg + k), inv))));
        const I c1 = _mm512_min_epi32(
            hi, _mm512_max_epi32(lo, _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xg + k + 16), inv))));
        sum = _mm512_add_epi32(sum, _mm512_add_epi32(c0, c1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + g * g_size + k),
                         _mm512_cvtepi32_epi8(_mm512_permutex2var_epi32(c0, even, c1)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + g * g_size + k + 16),
                         _mm512_cvtepi32_epi8(_mm512_permutex2var_epi32(c0, odd, c1)));
      }
      j.xscale[m * groups + g] = a / 127.0f;
      j.xsum[m * groups + g] = _mm512_reduce_add_epi32(sum);
    }
    for (int64_t k = l.cols; k < j.xq_stride; ++k) q[k] = 0;
  }
}

// The fp32 sums of the tile's 8 rows for one row of x: two vectors, lanes (row of the quad, position).
struct alignas(64) RowSums {
  F f[2];
};

// Block `b` (columns [kBlock b, kBlock b + 32 NCH)) of the tile for rows [m0, m0 + count) of x: NCH
// chunks, groups of G columns (whole groups: G divides 32 NCH).
template <int G, int NCH>
static void block(const LinearJob& j, const uint8_t* const* rows, const float* dsc, const int32_t* zer,
                  bool prefetch, int64_t b, int64_t m0, int64_t count, RowSums* sums) {
  constexpr int kChunksPerGroup = G / 32, kGroups = NCH / kChunksPerGroup;
  static_assert(kGroups * kChunksPerGroup == NCH, "a block holds whole groups");
  const int64_t groups = j.w.layout.cols / G, g0 = b * (kBlock / G);
  const __mmask64 mask = NCH == 4 ? ~__mmask64{0} : (__mmask64{1} << (16 * NCH)) - 1;
  const I nib = _mm512_set1_epi8(0x0F);
  I wl[2][NCH], wh[2][NCH];
  if (prefetch) {  // the next tile's rows at this offset (each row may start a page of its own)
    const int64_t next = kTile * (j.w.layout.cols / 2);
    for (int r = 0; r < kTile; ++r) __builtin_prefetch(rows[r] + next + b * kBlock / 2, 0, 3);
  }
  for (int q = 0; q < 2; ++q) {
    const auto load = [&](int r) {
      const uint8_t* p = rows[4 * q + r] + b * kBlock / 2;
      return NCH == 4 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(mask, p);
    };
    const I r0 = load(0), r1 = load(1), r2 = load(2), r3 = load(3);
    const I a = _mm512_shuffle_i64x2(r0, r1, 0x44), c = _mm512_shuffle_i64x2(r2, r3, 0x44);
    const I bb = _mm512_shuffle_i64x2(r0, r1, 0xEE), d = _mm512_shuffle_i64x2(r2, r3, 0xEE);
    I t[4];
    t[0] = _mm512_shuffle_i64x2(a, c, 0x88);  // chunk 0 of rows 0..3, one per 128-bit lane
    t[1] = _mm512_shuffle_i64x2(a, c, 0xDD);
    t[2] = _mm512_shuffle_i64x2(bb, d, 0x88);
    t[3] = _mm512_shuffle_i64x2(bb, d, 0xDD);
    for (int c4 = 0; c4 < NCH; ++c4) {
      wl[q][c4] = _mm512_and_si512(t[c4], nib);
      wh[q][c4] = _mm512_and_si512(_mm512_srli_epi16(t[c4], 4), nib);
    }
  }
  // Per group and quad: d of the 4 rows across each row's 4 lanes; z in the row's lane 0.
  const I spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  F dv[2][kGroups];
  I zv[2][kGroups];
  for (int q = 0; q < 2; ++q) {
    for (int gi = 0; gi < kGroups; ++gi) {
      const int64_t at = (g0 + gi) * kTile + 4 * q;  // dsc / zer are [groups][kTile]
      dv[q][gi] = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_loadu_ps(dsc + at)));
      zv[q][gi] = _mm512_maskz_permutexvar_epi32(
          0x1111, spread,
          _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zer + at))));
    }
  }
  for (int64_t m = 0; m < count; ++m) {
    const int8_t* xq = j.xq + (m0 + m) * j.xq_stride + b * kBlock;
    const float* xs = j.xscale + (m0 + m) * groups + g0;
    const int32_t* xsum = j.xsum + (m0 + m) * groups + g0;
    F f0 = sums[m].f[0], f1 = sums[m].f[1];
    for (int gi = 0; gi < kGroups; ++gi) {
      // Low and high nibbles in separate chains (4 independent chains at one row of x).
      I a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512(), h0 = _mm512_setzero_si512(),
        h1 = _mm512_setzero_si512();
      for (int cc = 0; cc < kChunksPerGroup; ++cc) {
        const int c4 = gi * kChunksPerGroup + cc;
        const I xe = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + 32 * c4)));
        const I xo =
            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + 32 * c4 + 16)));
        a0 = _mm512_dpbusd_epi32(a0, wl[0][c4], xe);
        a1 = _mm512_dpbusd_epi32(a1, wl[1][c4], xe);
        h0 = _mm512_dpbusd_epi32(h0, wh[0][c4], xo);
        h1 = _mm512_dpbusd_epi32(h1, wh[1][c4], xo);
      }
      a0 = _mm512_add_epi32(a0, h0);
      a1 = _mm512_add_epi32(a1, h1);
      const I qs = _mm512_set1_epi32(xsum[gi]);
      const F s = _mm512_set1_ps(xs[gi]);
      a0 = _mm512_sub_epi32(a0, _mm512_mullo_epi32(zv[0][gi], qs));
      a1 = _mm512_sub_epi32(a1, _mm512_mullo_epi32(zv[1][gi], qs));
      f0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0), _mm512_mul_ps(dv[0][gi], s), f0);
      f1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1), _mm512_mul_ps(dv[1][gi], s), f1);
    }
    sums[m].f[0] = f0;
    sums[m].f[1] = f1;
  }
}

template <int G>
static void tail_block(const LinearJob& j, const uint8_t* const* rows, const float* dsc, const int32_t* zer,
                       int64_t b, int64_t chunks, int64_t m0, int64_t count, RowSums* sums) {
  constexpr bool kNoPrefetch = false;
  // Only the chunk counts a whole number of groups can leave (G divides K).
  if constexpr (G == 32) {
    if (chunks == 1) block<32, 1>(j, rows, dsc, zer, kNoPrefetch, b, m0, count, sums);
    if (chunks == 2) block<32, 2>(j, rows, dsc, zer, kNoPrefetch, b, m0, count, sums);
    if (chunks == 3) block<32, 3>(j, rows, dsc, zer, kNoPrefetch, b, m0, count, sums);
  } else if constexpr (G == 64) {
    if (chunks == 2) block<64, 2>(j, rows, dsc, zer, kNoPrefetch, b, m0, count, sums);
  }
}

// The tile's scales as fp32 and zero points as int32, transposed to [groups][kTile] (a quad's 4 rows of
// a group side by side); slots past nrows repeat the last row. The rows' scales and zeros are
// contiguous, so they are converted 16 at a time first (into the tail of the same buffers).
static void tile_scales(const LinearJob& j, int64_t n, int64_t nrows, float* dsc, int32_t* zer) {
  const WeightLayout& l = j.w.layout;
  const int64_t groups = l.cols / l.group_size, count = nrows * groups;
  float* dflat = dsc + kTile * groups;
  int32_t* zflat = zer + kTile * groups;
  const uint16_t* sc = static_cast<const uint16_t*>(j.w.scales) + n * groups;
  const uint8_t* zp = l.format == WeightFormat::kInt4Asym ? j.w.zeros + n * groups : nullptr;
  if (n + 2 * kTile <= l.rows) {  // the next tile's scales and zeros: a stream the loads would wait on
    const int64_t next = kTile * groups;
    for (int64_t b = 0; b < next * 2; b += 64)
      __builtin_prefetch(reinterpret_cast<const uint8_t*>(sc + next) + b, 0, 3);
    if (zp != nullptr) {
      for (int64_t b = 0; b < next; b += 64) __builtin_prefetch(zp + next + b, 0, 3);
    }
  }
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + i));
    _mm512_storeu_ps(dflat + i, l.scale_dtype == ScaleDtype::kF16
                                    ? _mm512_cvtph_ps(h)
                                    : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    _mm512_storeu_si512(zflat + i,
                        zp != nullptr
                            ? _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zp + i)))
                            : _mm512_set1_epi32(8));
  }
  for (; i < count; ++i) {
    dflat[i] = scale_f32(sc, i, l.scale_dtype);
    zflat[i] = zp != nullptr ? zp[i] : 8;
  }
  for (int64_t r = 0; r < kTile; ++r) {
    const int64_t src = (r < nrows ? r : nrows - 1) * groups;
    for (int64_t g = 0; g < groups; ++g) {
      dsc[g * kTile + r] = dflat[src + g];
      zer[g * kTile + r] = zflat[src + g];
    }
  }
}

// y for the tile's `nrows` rows starting at n (the tile's other slots repeat its last row and are not
// stored), every row of x.
template <int G>
static void tile(const LinearJob& j, int64_t n, int64_t nrows, float* dsc, int32_t* zer) {
  const WeightLayout& l = j.w.layout;
  const int64_t row_bytes = l.cols / 2;  // K is even here
  const int64_t full = l.cols / kBlock, tail_chunks = (l.cols % kBlock) / 32;
  const uint8_t* rows[kTile];
  for (int64_t r = 0; r < kTile; ++r)
    rows[r] = static_cast<const uint8_t*>(j.w.data) + (n + (r < nrows ? r : nrows - 1)) * row_bytes;
  tile_scales(j, n, nrows, dsc, zer);
  const bool prefetch = n + 2 * kTile <= l.rows;
  alignas(64) RowSums sums[kPass];
  for (int64_t m0 = 0; m0 < j.m; m0 += kPass) {
    const int64_t count = j.m - m0 < kPass ? j.m - m0 : kPass;
    for (int64_t m = 0; m < count; ++m) sums[m].f[0] = sums[m].f[1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < full; ++b)
      block<G, 4>(j, rows, dsc, zer, prefetch && m0 == 0, b, m0, count, sums);
    if (tail_chunks > 0) tail_block<G>(j, rows, dsc, zer, full, tail_chunks, m0, count, sums);
    const I firsts = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int64_t m = 0; m < count; ++m) {
      float* y = j.y + (m0 + m) * j.y_stride + n;
      for (int q = 0; q < 2; ++q) {
        // The 4 lanes of each row summed (the same tree for every row), then the rows' lane 0s.
        F v = sums[m].f[q];
        v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
        v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4E));
        alignas(16) float out[4];
        _mm_store_ps(out, _mm512_castps512_ps128(_mm512_permutexvar_ps(firsts, v)));
        for (int64_t r = 0; r < 4 && 4 * q + r < nrows; ++r)
          y[4 * q + r] = j.bias != nullptr ? out[r] + j.bias[n + 4 * q + r] : out[r];
      }
    }
  }
}

static void rows(const LinearJob& j, int64_t n0, int64_t n1) {
  float dsc[2 * kTile * kVnniLinearMaxGroups];  // transposed, then the flat conversion behind it
  int32_t zer[2 * kTile * kVnniLinearMaxGroups];
  for (int64_t n = n0; n < n1; n += kTile) {
    const int64_t nrows = n1 - n < kTile ? n1 - n : kTile;
    switch (j.w.layout.group_size) {
      case 32: tile<32>(j, n, nrows, dsc, zer); break;
      case 64: tile<64>(j, n, nrows, dsc, zer); break;
      default: tile<128>(j, n, nrows, dsc, zer); break;
    }
  }
}

}  // namespace isa_vnni_linear
}  // namespace infergate::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace infergate::kernels::cpu {
void vnni_linear_prepare(const LinearJob& j) { isa_vnni_linear::prepare(j); }
void vnni_linear_rows(const LinearJob& j, int64_t n0, int64_t n1) { isa_vnni_linear::rows(j, n0, n1); }
}  // namespace infergate::kernels::cpu

#else  // not x86-64: vnni_linear_applies is always false there

namespace infergate::kernels::cpu {
void vnni_linear_prepare(const LinearJob&) {}
void vnni_linear_rows(const LinearJob&, int64_t, int64_t) {}
}  // namespace infergate::kernels::cpu

#endif

namespace infergate::kernels::cpu {

bool vnni_linear_applies(const WeightLayout& l) {
  return is_int4(l.format) && (l.group_size == 32 || l.group_size == 64 || l.group_size == 128) &&
         l.cols % l.group_size == 0 && l.cols / l.group_size <= kVnniLinearMaxGroups;
}

int64_t vnni_linear_xq_stride(const WeightLayout& l) { return (l.cols + 127) / 128 * 128; }

}  // namespace infergate::kernels::cpu
