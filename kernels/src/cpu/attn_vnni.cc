// Decode attention over int8, int4 and int4-kivi KV pages with 8-bit integer dot products (AVX-512
// VNNI, vpdpbusd: 64 u8 x s8 products summed into 16 int32 lanes per instruction). The exact path
// (kernels_impl.inc) converts every K and V element to fp32 and does 2 x head_dim fp32 multiply-adds
// per (query head, token); on a CPU whose FMA rate is below its memory bandwidth that is the bound,
// whatever the KV format. Here the codes stay integers:
//
//   QK: q (scaled by the softmax scale) is quantized per query head to int8, q = sq * qc
//       (sq = amax|q| / 127, rne). K is taken in 16-byte blocks, 4 tokens per vector (one per 128-bit
//       lane) against q's codes for the block broadcast to every lane; each instruction adds 4 channels
//       of 4 tokens into per-token partial sums that two unpack-adds finish (k_int8/int4_blocks):
//         int8 K (k = dk * kc):   s = sq dk (sum_c (kc + 128) qc - 128 sum_c qc)     (kc xor 0x80 is u8)
//         int4 K (k = d u + m):   s = sq sum_g (d_g sum_{c in g} u_c qc + m_g sum_{c in g} qc)
//         kivi K (k = d_c u + m_c per channel of the page): q' = q * d_c is quantized per page,
//                                 s = sq' sum_c u_c q'c + sum_c q_c m_c
//   softmax: fp32, online over chunks of 32 tokens (running max and sum per query head).
//   PV: w_t = p_t * (token's V scale d_t, per group for int4) >= 0 is quantized per (head, chunk,
//       group) to u8, w = sw * wc (sw = max w / 255, rne), and V is interleaved 4 tokens per 32-bit
//       lane (byte unpacks) so that one instruction adds 4 tokens of 16 channels:
//         int8 V: o_c += sw sum_t wc_t vc_tc          int4 V: o_c += sw_g sum_t wc_t u_tc + sum_t p_t m_tg
//       The int32 chunk sums become fp32 once per chunk.
// Loads, more than multiply-adds, bound these loops (on the 2-vCPU Xeon measured, a zmm load costs
// about as much as two vpdpbusd): K loads q once per 16 bytes and keeps its tiles in registers (no
// transpose stored and read back), and the int4 weight operands are permuted out of one register per
// row instead of being stored and loaded.
// Every K and V row is read once for all query heads of its group (the unit's rows). A unit takes
// up to 8 KV heads of its sequence and walks them chunk by chunk: the K side of every head, then the
// V side of every head, so each page's K rows (then V rows) are read front to back, a run the
// hardware prefetcher follows, where one head at a time read a 1 KiB run per region and page
// (int4, head_dim 128: 15-20% of the 4k time, docs/quant-formats.md). The error this adds (q to 8
// bits, w to 8 bits) is bounded in docs/quant-formats.md and checked by the tests.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

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
namespace isa_vnni {
#include "simd_avx512.inc"

using I = __m512i;
constexpr int64_t kHalf = 16;  // tokens per K tile: one int32 / fp32 lane each
constexpr int64_t kTok = 32;   // tokens per chunk (two K tiles): one softmax update and weight scale

alignas(64) const uint8_t kZeroRow[1024] = {};

static inline I vi_zero() { return _mm512_setzero_si512(); }
static inline I vi_load(const void* p) { return _mm512_loadu_si512(p); }
static inline void vi_store(void* p, I v) { _mm512_storeu_si512(p, v); }
static inline I vi_set1(int32_t x) { return _mm512_set1_epi32(x); }
static inline int32_t load_i32(const void* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}
static inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  __builtin_memcpy(&v, p, 2);
  return v;
}
// acc + sum of 4 products of bytes: a as u8, b as s8, per int32 lane.
static inline I dp(I acc, I a, I b) { return _mm512_dpbusd_epi32(acc, a, b); }

// 64 bytes of 4 tokens -> 4 vectors whose 32-bit lane (L, i) (128-bit lane L, dword i) of vector k holds
// byte 16 L + 4 k + i of the 4 tokens, in token order.
static inline void interleave4(I x0, I x1, I x2, I x3, I* e) {
  const I a = _mm512_unpacklo_epi8(x0, x1), b = _mm512_unpackhi_epi8(x0, x1);
  const I c = _mm512_unpacklo_epi8(x2, x3), d = _mm512_unpackhi_epi8(x2, x3);
  e[0] = _mm512_unpacklo_epi16(a, c);
  e[1] = _mm512_unpackhi_epi16(a, c);
  e[2] = _mm512_unpacklo_epi16(b, d);
  e[3] = _mm512_unpackhi_epi16(b, d);
}

// Codes qc = rne(x / s), s = amax|x| / 127, for d (a multiple of 16) values; returns s (0 when all are 0).
static float quantize_s8(const float* x, int64_t d, int8_t* qc) {
  V am = vzero();
  for (int64_t k = 0; k < d; k += kW) am = _mm512_max_ps(am, _mm512_abs_ps(vload(x + k)));
  const float amax = _mm512_reduce_max_ps(am);
  if (!(amax > 0.0f) || !std::isfinite(amax)) {  // all zero (or not finite: give 0, not NaN codes)
    std::memset(qc, 0, static_cast<size_t>(d));
    return 0.0f;
  }
  const V inv = vset1(127.0f / amax);
  for (int64_t k = 0; k < d; k += kW) {
    const I q = _mm512_cvtps_epi32(vmul(vload(x + k), inv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qc + k), _mm512_cvtsepi32_epi8(q));
  }
  return amax / 127.0f;
}

// int4 rows hold element 2b in the low nibble of byte b and 2b + 1 in the high one, so the codes of q
// are split into its even and odd elements (64 at a time -> 32 + 32).
static void split_even_odd(const int8_t* qc, int64_t d, int8_t* even, int8_t* odd) {
  for (int64_t k = 0; k < d; k += 64) {
    const I x = vi_load(qc + k);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(even + k / 2), _mm512_cvtepi16_epi8(x));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(odd + k / 2),
                        _mm512_cvtepi16_epi8(_mm512_srai_epi16(x, 8)));
  }
}

// Sum of n (a multiple of 64) int8 codes.
static int32_t sum_s8(const int8_t* qc, int64_t n) {
  I acc = vi_zero();
  const I ones = _mm512_set1_epi8(1);
  for (int64_t k = 0; k < n; k += 64) acc = dp(acc, ones, vi_load(qc + k));
  return _mm512_reduce_add_epi32(acc);
}

// fp16 (d, m) pairs at base + 4 (t * stride + g) for the chunk's tokens t < n, as fp32 vectors (lane t).
static inline void gather_dm(const uint8_t* base, int64_t stride, int64_t g, int64_t n, V* d, V* m) {
  const __mmask16 k = static_cast<__mmask16>((1u << n) - 1u);
  const I idx = _mm512_add_epi32(
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         vi_set1(static_cast<int32_t>(stride))),
      vi_set1(static_cast<int32_t>(g)));
  const I x = _mm512_mask_i32gather_epi32(vi_zero(), k, idx, base, 4);
  *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(x));
  *m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(x, 16)));
}
// The (d, m) pairs of every group g < groups of the chunk's tokens t < n ([t][g] contiguous at base):
// d[g], m[g] with lane t. Two groups (head_dim 128) by two loads and a de-interleave; more by gathers.
static inline void load_dm(const uint8_t* base, int64_t groups, int64_t n, V* d, V* m) {
  if (groups == 2) {
    const uint32_t bits = static_cast<uint32_t>((uint64_t{1} << (2 * n)) - 1u);
    const I a = _mm512_maskz_loadu_epi32(static_cast<__mmask16>(bits & 0xFFFFu), base);
    const I b = _mm512_maskz_loadu_epi32(static_cast<__mmask16>(bits >> 16), base + 64);
    const I x0 = _mm512_permutex2var_epi32(
        a, _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0), b);
    const I x1 = _mm512_permutex2var_epi32(
        a, _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1), b);
    d[0] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(x0));
    m[0] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(x0, 16)));
    d[1] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(x1));
    m[1] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(x1, 16)));
    return;
  }
  for (int64_t g = 0; g < groups; ++g) gather_dm(base, groups, g, n, &d[g], &m[g]);
}
// n fp16 values (contiguous) as an fp32 vector; lanes >= n are 0.
static inline V load_f16_n(const uint8_t* p, int64_t n) {
  const __mmask16 k = static_cast<__mmask16>((1u << n) - 1u);
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p));
}

// u8 codes of w >= 0 (32 tokens: w0 lanes 0-15, w1 16-31) with one scale: wc = rne(w / sw),
// sw = max w / 255; returns sw.
static inline float quantize_u8(V w0, V w1, uint8_t* out) {
  const float wmax = _mm512_reduce_max_ps(_mm512_max_ps(w0, w1));
  if (!(wmax > 0.0f)) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_setzero_si256());
    return 0.0f;
  }
  const V inv = vset1(255.0f / wmax);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                   _mm512_cvtusepi32_epi8(_mm512_cvtps_epu32(vmul(w0, inv))));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16),
                   _mm512_cvtusepi32_epi8(_mm512_cvtps_epu32(vmul(w1, inv))));
  return wmax / 255.0f;
}

// Everything one unit keeps between chunks (in the caller's scratch).
struct State {
  int64_t d = 0, groups = 0, rows = 0;
  float* qf = nullptr;      // [rows][d] q * scale (fp32): kivi re-quantizes it per page
  int8_t* qc = nullptr;     // [rows][d] int8: codes; int4/kivi: even codes [d/2] then odd codes [d/2]
  float* sq = nullptr;      // [rows] q scale (kivi: of the current page's q')
  int32_t* corr = nullptr;  // [rows] int8: 128 * sum of codes
  int32_t* qg = nullptr;    // [rows][groups] int4: sum of codes per group
  float* bias = nullptr;    // [rows] kivi: q . m of the current page
  I* vt = nullptr;          // V of the chunk interleaved (d / 2 vectors: [sub][8 token quads][4])
  uint8_t* wc = nullptr;    // [rows][groups][32] weight codes of the chunk
  float* sw = nullptr;      // [rows][groups] weight scales of the chunk
  float* o = nullptr;       // [rows][d] output in the interleaved channel order
  float* macc = nullptr;    // [rows][groups][16] int4 V: sum_t p_t m_tg per lane
  float* lsum = nullptr;    // [rows][16] sum of p per lane
  float* mx = nullptr;      // [rows] running max
  float* alpha = nullptr;   // [rows] rescale of the chunk
  float* s = nullptr;       // [rows][32] scores of the chunk, then its weights p
};

static uint8_t* align64(uint8_t* p) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + 63) / 64 * 64);
}

// groups: 64-channel groups of an int4 row, 1 for int8. Regions sized for `rows`; *end is the first
// byte after them (the next head's state starts there). The V interleave buffer is used by one head
// at a time: `vt` when given (the first head's), else carved here.
static State carve(uint8_t* base, int64_t d, int64_t rows, int64_t groups, uint8_t** end, I* vt) {
  State st;
  st.d = d;
  st.groups = groups;
  st.rows = rows;
  const int64_t R = rows;
  const int64_t G = st.groups > 0 ? st.groups : 1;
  uint8_t* p = align64(base);
  auto take = [&p](int64_t bytes) {
    uint8_t* r = p;
    p = align64(p + bytes);
    return r;
  };
  st.qf = reinterpret_cast<float*>(take(R * d * 4));
  st.qc = reinterpret_cast<int8_t*>(take(R * d));
  st.sq = reinterpret_cast<float*>(take(R * 4));
  st.corr = reinterpret_cast<int32_t*>(take(R * 4));
  st.qg = reinterpret_cast<int32_t*>(take(R * G * 4));
  st.bias = reinterpret_cast<float*>(take(R * 4));
  st.vt = vt != nullptr ? vt : reinterpret_cast<I*>(take(d / 2 * 64));
  st.wc = take(R * G * 32);
  st.sw = reinterpret_cast<float*>(take(R * G * 4));
  st.o = reinterpret_cast<float*>(take(R * d * 4));
  st.macc = reinterpret_cast<float*>(take(R * G * 16 * 4));
  st.lsum = reinterpret_cast<float*>(take(R * 16 * 4));
  st.mx = reinterpret_cast<float*>(take(R * 4));
  st.alpha = reinterpret_cast<float*>(take(R * 4));
  st.s = reinterpret_cast<float*>(take(R * 32 * 4));
  *end = p;
  return st;
}

// kivi: q' = q * d_c with the page's per-channel key scales, per row, quantized as quantize_s8 does
// (same codes, bit for bit) straight into even and odd channel codes (st.qc), with st.sq and
// st.bias = q . m_c. The scales are unpacked once per page, not once per row, and the codes go from
// registers to their places by packs and one dword permute (no byte stores read back as vectors).
static void kivi_requantize(const State& st, const uint8_t* prm) {
  const int64_t d = st.d;
  alignas(64) float dc[1024], mc[1024], qd[1024];
  for (int64_t ch = 0; ch < d; ch += kW) {
    V a, b;
    vload_param_pairs(prm + ch * 4, &a, &b);
    vstore(dc + ch, a);
    vstore(mc + ch, b);
  }
  const I even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const I odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  // After two packs, 128-bit lane L holds dword L of each of the four sources: put them in order.
  const I order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  for (int64_t r = 0; r < st.rows; ++r) {
    const float* q = st.qf + r * d;
    int8_t* out = st.qc + r * d;
    V bias = vzero(), am = vzero();
    for (int64_t ch = 0; ch < d; ch += kW) {
      const V qv = vload(q + ch), x = vmul(qv, vload(dc + ch));
      vstore(qd + ch, x);
      am = _mm512_max_ps(am, _mm512_abs_ps(x));
      bias = vfma(qv, vload(mc + ch), bias);
    }
    st.bias[r] = vhsum(bias);
    const float amax = _mm512_reduce_max_ps(am);
    if (!(amax > 0.0f) || !std::isfinite(amax)) {
      std::memset(out, 0, static_cast<size_t>(d));
      st.sq[r] = 0.0f;
      continue;
    }
    const V inv = vset1(127.0f / amax);
    st.sq[r] = amax / 127.0f;
    for (int64_t b = 0; b < d / 128; ++b) {
      const float* x = qd + 128 * b;
      I ce[4], co[4];
      for (int m = 0; m < 4; ++m) {
        const V lo = vload(x + 32 * m), hi = vload(x + 32 * m + 16);
        ce[m] = _mm512_cvtps_epi32(vmul(_mm512_permutex2var_ps(lo, even, hi), inv));
        co[m] = _mm512_cvtps_epi32(vmul(_mm512_permutex2var_ps(lo, odd, hi), inv));
      }
      const I pe = _mm512_packs_epi16(_mm512_packs_epi32(ce[0], ce[1]), _mm512_packs_epi32(ce[2], ce[3]));
      const I po = _mm512_packs_epi16(_mm512_packs_epi32(co[0], co[1]), _mm512_packs_epi32(co[2], co[3]));
      vi_store(out + 64 * b, _mm512_permutexvar_epi32(order, pe));
      vi_store(out + d / 2 + 64 * b, _mm512_permutexvar_epi32(order, po));
    }
  }
}

// ---- K side: scores of the chunk (st.s[r], lane t) ----

// f(std::integral_constant<int, R>, r0) for the unit's rows in blocks of 4, then the 1-3 left over
// (R is a template argument of the row loops, so that their accumulators stay in registers). Always
// inlined: as a call it cost the int4 unit ~5% (one unit in cache, minimum TSC per chunk).
template <class F>
__attribute__((always_inline)) static inline void for_row_blocks(int64_t rows, F&& f) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) f(std::integral_constant<int, 4>{}, r);
  switch (rows - r) {
    case 3: f(std::integral_constant<int, 3>{}, r); break;
    case 2: f(std::integral_constant<int, 2>{}, r); break;
    case 1: f(std::integral_constant<int, 1>{}, r); break;
    default: break;
  }
}

// Bytes at .. at + 31 (two 16-byte blocks) of the 16 rows of a tile as blk[q][b]: block b of tokens
// 4q .. 4q + 3, one token per 128-bit lane (two 256-bit loads, an insert and a lane shuffle per pair).
static inline void load_blocks(const uint8_t* const* rows, int64_t at, I (*blk)[2]) {
  for (int q = 0; q < 4; ++q) {
    auto half = [&](int t) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[4 * q + t] + at));
    };
    const I t01 = _mm512_inserti64x4(_mm512_castsi256_si512(half(0)), half(1), 1);
    const I t23 = _mm512_inserti64x4(_mm512_castsi256_si512(half(2)), half(3), 1);
    blk[q][0] = _mm512_shuffle_i64x2(t01, t23, 0x88);  // lanes: block 0 of tokens 4q .. 4q + 3
    blk[q][1] = _mm512_shuffle_i64x2(t01, t23, 0xDD);  // block 1
  }
}

// a[q]: lane L holds the 4 partial sums of token 4q + L. Returns the totals, lane t = token t.
static inline I token_sums(const I* a) {
  const I order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  const I s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
  const I s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
  // Token 4i + L is now in dword i of lane L.
  const I w = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
  return _mm512_permutexvar_epi32(order, w);
}

// int4 K, without a transpose: the 16 tokens of a tile as 4 vectors of 4 tokens, each token's 16-byte
// block (32 channels: even ones in the low nibbles, odd in the high) in one 128-bit lane, so that the
// 16 even (odd) codes of q for that block, broadcast to every lane, multiply all four tokens at once.
// Per row the 4 partial sums of each token are then added by two unpack-add steps (token 4i + L lands
// in dword i of lane L; one permute puts the tokens back in order). Against the 16 x 16 dword
// transpose it moves far less through the load and store ports (nothing stored to read back, q loaded
// once per 16 bytes, not per 4) for somewhat more shuffles (the per-row reductions).
// acc[r * groups + g] = the dot product over group g, lane t = token t (rows[t]: its K row). A group is
// U units of 64 channels (32 bytes of a row, 2 blocks): U = 1 for the 64-channel groups of KV pages,
// 2 for the 128-channel groups of latent pages, whose last group (the rope key) may be one unit.
template <int R, int U = 1>
static void k_int4_blocks(const State& st, int64_t r0, const uint8_t* const* rows, I* acc) {
  const int64_t d = st.d, G = st.groups, units = d / 64;
  const I lo4 = _mm512_set1_epi8(0x0F);
  for (int64_t grp = 0; grp < G; ++grp) {
    I a[R][4];
    for (int r = 0; r < R; ++r) {
      for (int q = 0; q < 4; ++q) a[r][q] = vi_zero();
    }
    const int64_t u0 = U * grp, u1 = U == 1 ? u0 + 1 : (u0 + U < units ? u0 + U : units);
    for (int64_t unit = u0; unit < u1; ++unit) {  // bytes 32 unit .. 32 unit + 31 of a row
      I blk[4][2];
      load_blocks(rows, 32 * unit, blk);
      for (int b = 0; b < 2; ++b) {
        const int64_t at = 16 * (2 * unit + b);  // the block's even (odd) codes of q
        for (int q = 0; q < 4; ++q) {
          const I lo = _mm512_and_si512(blk[q][b], lo4);
          const I hi = _mm512_and_si512(_mm512_srli_epi16(blk[q][b], 4), lo4);
          for (int r = 0; r < R; ++r) {
            const int8_t* even = st.qc + (r0 + r) * d;
            const I qe = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(even + at)));
            const I qo =
                _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(even + d / 2 + at)));
            a[r][q] = dp(dp(a[r][q], lo, qe), hi, qo);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) acc[r * G + grp] = token_sums(a[r]);
  }
}

// int8 K, the same way (it replaced the same transpose: a minimum of 1,794 -> 1,683 TSC per chunk in
// the harness of docs/quant-formats.md): 4 tokens' 16-byte blocks (16 channels each) per vector, xor 0x80 (kc
// + 128, unsigned), against q's 16 codes of the block broadcast to every lane; one sum over all channels.
// acc[r] = the dot product, lane t = token t.
template <int R>
static void k_int8_blocks(const State& st, int64_t r0, const uint8_t* const* rows, I* acc) {
  const int64_t d = st.d;
  const I flip = _mm512_set1_epi8(static_cast<char>(0x80));
  I a[R][4];
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < 4; ++q) a[r][q] = vi_zero();
  }
  for (int64_t pair = 0; pair < d / 32; ++pair) {  // bytes 32 pair .. 32 pair + 31 (2 blocks)
    I blk[4][2];
    load_blocks(rows, 32 * pair, blk);
    for (int q = 0; q < 4; ++q) {
      for (int b = 0; b < 2; ++b) blk[q][b] = _mm512_xor_si512(blk[q][b], flip);
    }
    for (int b = 0; b < 2; ++b) {
      for (int r = 0; r < R; ++r) {
        const int8_t* q8 = st.qc + (r0 + r) * d + 16 * (2 * pair + b);
        const I qv = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q8)));
        for (int q = 0; q < 4; ++q) a[r][q] = dp(a[r][q], blk[q][b], qv);
      }
    }
  }
  for (int r = 0; r < R; ++r) acc[r] = token_sums(a[r]);
}

// The int8 dot products of all the unit's rows with one tile (after prefetching pf_bytes at pf).
static void k_int8_all(const State& st, const uint8_t* const* rows, I* acc, const uint8_t* pf,
                       int64_t pf_bytes) {
  for (int64_t off = 0; off < pf_bytes; off += 64) __builtin_prefetch(pf + off, 0, 2);
  for_row_blocks(st.rows,
                 [&](auto R, int64_t r) { k_int8_blocks<decltype(R)::value>(st, r, rows, acc + r); });
}

// The int4 dot products of all the unit's rows with one tile (after prefetching pf_bytes at pf).
static void k_int4_all(const State& st, const uint8_t* const* rows, I* acc, const uint8_t* pf,
                       int64_t pf_bytes) {
  for (int64_t off = 0; off < pf_bytes; off += 64) __builtin_prefetch(pf + off, 0, 2);
  for_row_blocks(st.rows, [&](auto R, int64_t r) {
    k_int4_blocks<decltype(R)::value>(st, r, rows, acc + r * st.groups);
  });
}

// ---- the unit ----

struct Chunk {
  const uint8_t* krow[kTok];
  const uint8_t* vrow[kTok];
};

static void softmax_rows(const State& st, int64_t n) {
  const uint32_t live = static_cast<uint32_t>((uint64_t{1} << n) - 1u);
  for (int64_t r = 0; r < st.rows; ++r) {
    float* sr = st.s + r * kTok;
    const V s0 = _mm512_mask_blend_ps(static_cast<__mmask16>(live & 0xFFFFu), vset1(-INFINITY), vload(sr));
    const V s1 = _mm512_mask_blend_ps(static_cast<__mmask16>(live >> 16), vset1(-INFINITY), vload(sr + 16));
    const float cmax = _mm512_reduce_max_ps(_mm512_max_ps(s0, s1));
    const float mold = st.mx[r];
    const float mnew = cmax > mold ? cmax : mold;
    st.alpha[r] = mold == -INFINITY ? 0.0f : (mnew == mold ? 1.0f : std::exp(mold - mnew));
    st.mx[r] = mnew;
    const V mv = vset1(mnew);
    const V p0 = vexp(vsub(s0, mv)), p1 = vexp(vsub(s1, mv));
    vstore(sr, p0);  // the scores become the weights p
    vstore(sr + 16, p1);
    vstore(st.lsum + r * 16, vfma(vload(st.lsum + r * 16), vset1(st.alpha[r]), vadd(p0, p1)));
  }
}

// How V codes and their weights pair up: int8 (one scale per token), int4 in groups of 64 channels
// (a 128-channel slice holds two groups), int4 in groups of 128 (a slice is one group; latent pages).
enum class VKind { kInt8, kInt4G64, kInt4G128 };

// o (R rows, sub-slice `sub` of 4 vectors) = o * alpha + sw * (int32 sums over the chunk's weight
// codes and the interleaved V).
template <int R, VKind KIND>
static void v_accumulate(const State& st, int64_t r0, int64_t sub) {
  constexpr bool INT4 = KIND == VKind::kInt4G64;  // two groups per slice
  I acc[R][4];
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < 4; ++k) acc[r][k] = vi_zero();
  }
  // int4: lanes of 128-bit lanes 0-1 take group g0, of 2-3 group g0 + 1 (sub-slice = 128 channels'
  // even or odd half); groups of 128: the slice's one group.
  const int64_t g0 = INT4 ? 2 * (sub / 2) : KIND == VKind::kInt4G128 ? sub / 2 : 0;
  // int4: row r's codes of groups g0 and g0 + 1 (32 bytes each), in a register for the whole chunk; the
  // operand of tokens 4 tb .. 4 tb + 3 is dword tb of each half, spread over its 8 lanes.
  I both[R];
  if constexpr (INT4) {
    for (int r = 0; r < R; ++r) both[r] = vi_load(st.wc + ((r0 + r) * st.groups + g0) * 32);
  }
  const I idx_base = _mm512_set_epi32(8, 8, 8, 8, 8, 8, 8, 8, 0, 0, 0, 0, 0, 0, 0, 0);
  for (int64_t tb = 0; tb < kTok / 4; ++tb) {
    const I* v = st.vt + (sub * 8 + tb) * 4;
    const I v0 = vi_load(v), v1 = vi_load(v + 1), v2 = vi_load(v + 2), v3 = vi_load(v + 3);
    const I idx = _mm512_add_epi32(idx_base, vi_set1(static_cast<int32_t>(tb)));
    for (int r = 0; r < R; ++r) {
      I w;
      if constexpr (INT4) {
        w = _mm512_permutexvar_epi32(idx, both[r]);
      } else {
        w = vi_set1(
            load_i32(st.wc + (KIND == VKind::kInt8 ? (r0 + r) : (r0 + r) * st.groups + g0) * 32 + 4 * tb));
      }
      acc[r][0] = dp(acc[r][0], w, v0);
      acc[r][1] = dp(acc[r][1], w, v1);
      acc[r][2] = dp(acc[r][2], w, v2);
      acc[r][3] = dp(acc[r][3], w, v3);
    }
  }
  for (int r = 0; r < R; ++r) {
    const float* sw = st.sw + (r0 + r) * st.groups + g0;
    const V swv = INT4 ? _mm512_mask_blend_ps(0xFF00, vset1(sw[0]), vset1(sw[1])) : vset1(sw[0]);
    const float alpha = st.alpha[r0 + r];
    float* o = st.o + (r0 + r) * st.d + sub * 64;
    for (int k = 0; k < 4; ++k) {
      V ov = vload(o + 16 * k);
      if (alpha != 1.0f) ov = vmul(ov, vset1(alpha));
      vstore(o + 16 * k, vfma(_mm512_cvtepi32_ps(acc[r][k]), swv, ov));
    }
  }
}

// The first dv channels of V (st.d for KV pages; the latent's width for latent pages).
template <VKind KIND>
static void v_all(const State& st, int64_t dv) {
  const int64_t subs = dv / 64;
  for (int64_t sub = 0; sub < subs; ++sub) {
    for_row_blocks(st.rows, [&](auto R, int64_t r) { v_accumulate<decltype(R)::value, KIND>(st, r, sub); });
  }
}

// The V side of one head for a chunk of n tokens (vrow: their V rows, kZeroRow past n; the first dv
// channels): the rows interleaved 4 tokens per 32-bit lane into st.vt (int4: low and high nibbles as
// separate sub-slices), prefetching the next chunk's rows (tile h: pf_bytes[h] at pfv[h]; none when
// pfv is null) 4 lines per quad and slice, then accumulated into st.o.
template <VKind KIND>
static void v_side(const State& st, int64_t dv, const uint8_t* const* vrow, int64_t n,
                   const uint8_t* const* pfv, const int64_t* pf_bytes) {
  constexpr bool INT4 = KIND != VKind::kInt8;
  const int64_t quads = (n + 3) / 4;
  const I lo4 = _mm512_set1_epi8(0x0F);
  for (int64_t sl = 0; sl < dv / (INT4 ? 128 : 64); ++sl) {
    for (int64_t tb = 0; tb < kTok / 4; ++tb) {
      const int64_t pq = (sl * 4 + tb % 4) * 256;
      if (pfv != nullptr) {
        for (int64_t off = pq; off < pq + 256 && off < pf_bytes[tb / 4]; off += 64)
          __builtin_prefetch(pfv[tb / 4] + off, 0, 2);
      }
      I e[4];
      if (tb >= quads) {
        e[0] = e[1] = e[2] = e[3] = vi_zero();
      } else {
        const uint8_t* const* vr = vrow + 4 * tb;
        interleave4(vi_load(vr[0] + 64 * sl), vi_load(vr[1] + 64 * sl), vi_load(vr[2] + 64 * sl),
                    vi_load(vr[3] + 64 * sl), e);
      }
      for (int k = 0; k < 4; ++k) {
        if constexpr (INT4) {
          vi_store(st.vt + ((2 * sl) * 8 + tb) * 4 + k, _mm512_and_si512(e[k], lo4));
          vi_store(st.vt + ((2 * sl + 1) * 8 + tb) * 4 + k,
                   _mm512_and_si512(_mm512_srli_epi16(e[k], 4), lo4));
        } else {
          vi_store(st.vt + (sl * 8 + tb) * 4 + k, e[k]);
        }
      }
    }
  }
  v_all<KIND>(st, dv);
}

// Channel of position pos in the interleaved order of the output (see v_accumulate / interleave4).
static inline int64_t channel_of(bool int4, int64_t pos) {
  const int64_t sub = pos / 64, k = pos % 64 / 16, lane = pos % 16, L = lane / 4, i = lane % 4;
  const int64_t b = 16 * L + 4 * k + i;  // byte of the 64-byte slice
  return int4 ? 128 * (sub / 2) + 2 * b + sub % 2 : 64 * sub + b;
}

// Row r of a unit's state at the start: q * scale in st.qf; when `quantize` (all but kivi, which
// quantizes per page) its int8 codes, with their sums per group of gs channels (int4: even / odd
// codes) or the int8 correction; output, minima, sums and running max reset.
static void start_row(const State& st, int64_t r, const float* q, float scale, bool int4, bool quantize,
                      int64_t gs) {
  const int64_t d = st.d, G = st.groups;
  float* qf = st.qf + r * d;
  const V sc = vset1(scale);
  for (int64_t c = 0; c < d; c += kW) vstore(qf + c, vmul(vload(q + c), sc));
  if (quantize) {
    alignas(64) int8_t codes[1024];
    st.sq[r] = quantize_s8(qf, d, int4 ? codes : st.qc + r * d);
    if (int4) {
      split_even_odd(codes, d, st.qc + r * d, st.qc + r * d + d / 2);
      for (int64_t g = 0; g < G; ++g)
        st.qg[r * G + g] = sum_s8(codes + gs * g, (g + 1) * gs < d ? gs : d - g * gs);
    } else {
      st.corr[r] = 128 * sum_s8(st.qc + r * d, d);
    }
  }
  for (int64_t c = 0; c < d; c += kW) vstore(st.o + r * d + c, vzero());
  for (int64_t g = 0; g < G; ++g) vstore(st.macc + (r * G + g) * 16, vzero());
  vstore(st.lsum + r * 16, vzero());
  st.mx[r] = -INFINITY;
}

// One KV head of a unit: its state and where its rows and scales sit in every page.
struct Head {
  State st;
  int64_t kv_head = 0;
  int64_t k_row0 = 0, v_row0 = 0;    // K / V row of slot 0 (bytes from the page start)
  int64_t k_prm0 = 0, v_prm0 = 0;    // K / V scales of slot 0
  const uint16_t* window = nullptr;  // kivi: the head's staged fp16 keys of the filling page
  int64_t kivi_page = -1;            // kivi: the page whose channel scales st.qc holds
};

void decode_unit(const AttnJob& j, const AttnUnit& u, float* scratch) {
  const KvCache& cache = *j.cache;
  const AttentionBatch& b = *j.batch;
  const KvPageLayout& l = cache.layout;
  const KvDtype dt = l.dtype;
  const bool int4 = dt != KvDtype::kInt8, kivi = dt == KvDtype::kInt4Kivi;
  const int64_t d = l.head_dim, psize = l.page_size, group = b.num_q_heads / l.num_kv_heads;
  const int64_t q0 = b.q_start[u.seq], q_len = b.q_start[u.seq + 1] - q0, kv_len = b.kv_len[u.seq];
  const int64_t token = u.row0 / group;
  const int64_t G = int4 ? kv_int4_groups(d) : 1;
  const KvPageRegions reg = kv_page_regions(l);
  const int64_t rb = kv_row_bytes(dt, d);
  const int64_t prm_bytes = int4 ? G * 4 : 2;  // one token's scales (int4: G (d, m) pairs)
  const int64_t nh = u.num_heads;

  Head hs[kAttnMaxHeads];
  uint8_t* free_at = reinterpret_cast<uint8_t*>(scratch);
  for (int64_t h = 0; h < nh; ++h) {
    Head& hd = hs[h];
    hd.kv_head = u.kv_head + h;
    hd.st = carve(free_at, d, u.nrows, G, &free_at, h == 0 ? nullptr : hs[0].st.vt);
    hd.k_row0 = kv_row_offset(l, reg.k_data, hd.kv_head, 0);
    hd.v_row0 = kv_row_offset(l, reg.v_data, hd.kv_head, 0);
    hd.k_prm0 = reg.k_params + hd.kv_head * psize * prm_bytes;
    hd.v_prm0 = reg.v_params + hd.kv_head * psize * prm_bytes;
    hd.window = kivi && kv_len % psize != 0
                    ? reinterpret_cast<const uint16_t*>(cache.staging_window(b.staging_ids[u.seq])) +
                          hd.kv_head * psize * d
                    : nullptr;
    const State& st = hd.st;
    for (int64_t r = 0; r < st.rows; ++r) {
      const int64_t hq = hd.kv_head * group + (u.row0 + r) % group;
      start_row(st, r, j.q.at(q0 + token, hq), b.scale, int4, !kivi, kKvInt4Group);
    }
  }

  int64_t kv_end = kv_len - q_len + token + 1;
  if (kv_end > u.kv1) kv_end = u.kv1;
  const int64_t sealed = kv_len / psize * psize;  // kivi keys before this are in pages
  const int32_t* table = b.block_table + int64_t{u.seq} * b.max_pages_per_seq;
  // The layout's offsets per head, once: per token only adds remain (the layout functions switch on
  // the dtype, and a division by the page size per token cost more than the dot products).
  const int64_t page_bytes = kv_page_bytes(l);
  auto page_at = [&](int64_t i) { return cache.pages + int64_t{table[i]} * page_bytes; };
  I acc[kAttnMaxRows * 16];   // K dot products of one tile: [rows][groups] (int4) or [rows]
  const uint8_t* slot[kTok];  // the chunk's tokens: page + slot * rb (a head adds its row offset)
  Chunk c;
  for (int64_t kv = u.kv0; kv < kv_end;) {
    // A chunk: up to 32 tokens, across pages.
    int64_t n = kv_end - kv < kTok ? kv_end - kv : kTok;
    // kivi: every 16-token tile within one page (its keys use that page's channel scales).
    if (kivi && psize % kHalf != 0 && psize - kv % psize < n) n = psize - kv % psize;
    {
      int64_t pi = kv / psize, sl = kv % psize;
      const uint8_t* pg = page_at(pi);
      for (int64_t t = 0; t < n; ++t) {
        if (sl == psize) {
          sl = 0;
          pg = page_at(++pi);
        }
        slot[t] = pg + sl * rb;
        ++sl;
      }
    }
    // The tiles of 16 tokens: where their scales are (a tile may straddle two pages only when pages
    // are shorter than 16 tokens; then its scales are read token by token).
    const int64_t halves = (n + kHalf - 1) / kHalf;
    // The next chunk, per 16-token tile (the part of it in the tile's first page): each head
    // prefetches its scales when it starts on this chunk, its K rows before each K tile and its V rows
    // one line per row interleaved. A chunk of all the unit's heads is long enough to hide the
    // latency; into L2 (prefetcht1), since between prefetch and use the unit streams a whole chunk of
    // every head through L1 (measured: int4 and int8 4-10% faster than into L1 and two chunks ahead).
    const uint8_t* pf_page[2] = {nullptr, nullptr};
    int64_t pf_slot[2] = {0, 0}, pf_n[2] = {0, 0};
    for (int64_t h = 0; h < 2; ++h) {
      const int64_t ahead = kv + n + kHalf * h;
      if (ahead >= kv_end) break;
      pf_page[h] = page_at(ahead / psize);
      pf_slot[h] = ahead % psize;
      int64_t pn = psize - pf_slot[h] < kHalf ? psize - pf_slot[h] : kHalf;
      if (kv_end - ahead < pn) pn = kv_end - ahead;
      pf_n[h] = pn;
    }
    int64_t pf_bytes[2] = {pf_n[0] * rb, pf_n[1] * rb};
    auto tile_n = [&](int64_t h) { return n - kHalf * h < kHalf ? n - kHalf * h : kHalf; };
    auto tile_one_page = [&](int64_t h) {
      return (kv + kHalf * h) / psize == (kv + kHalf * h + tile_n(h) - 1) / psize;
    };
    // Scale loads of tile h: contiguous when its tokens share a page, else gathered token by token.
    // prm0: a head's k_prm0 or v_prm0.
    auto int8_scales = [&](int64_t prm0, int64_t h) __attribute__((always_inline))->V {
      const int64_t t = kv + kHalf * h, tn = tile_n(h);
      if (tile_one_page(h)) return load_f16_n(page_at(t / psize) + prm0 + t % psize * 2, tn);
      alignas(64) float x[16] = {};
      for (int64_t i = 0; i < tn; ++i) {
        x[i] = fp16_to_float(load_u16(page_at((t + i) / psize) + prm0 + (t + i) % psize * 2));
      }
      return vload(x);
    };
    auto int4_scales = [&](int64_t prm0, int64_t h, V * dg, V * mg) __attribute__((always_inline)) {
      const int64_t t = kv + kHalf * h, tn = tile_n(h);
      if (tile_one_page(h)) {
        load_dm(page_at(t / psize) + prm0 + t % psize * prm_bytes, G, tn, dg, mg);
        return;
      }
      alignas(64) float dx[16][16] = {}, mx[16][16] = {};
      for (int64_t i = 0; i < tn; ++i) {
        const uint8_t* pp = page_at((t + i) / psize) + prm0 + (t + i) % psize * prm_bytes;
        for (int64_t g = 0; g < G; ++g) {
          dx[g][i] = fp16_to_float(load_u16(pp + 4 * g));
          mx[g][i] = fp16_to_float(load_u16(pp + 4 * g + 2));
        }
      }
      for (int64_t g = 0; g < G; ++g) {
        dg[g] = vload(dx[g]);
        mg[g] = vload(mx[g]);
      }
    };

    // ---- K side, head after head (the page's K rows front to back): scores, softmax, weights ----
    for (int64_t hh = 0; hh < nh; ++hh) {
      Head& hd = hs[hh];
      const State& st = hd.st;
      for (int64_t t = 0; t < n; ++t) c.krow[t] = slot[t] + hd.k_row0;
      for (int64_t t = n; t < kTok; ++t) c.krow[t] = kZeroRow;
      for (int64_t h = 0; h < 2 && pf_page[h] != nullptr; ++h) {
        const int64_t pb = pf_n[h] * prm_bytes;
        const uint8_t* kp = pf_page[h] + hd.k_prm0 + pf_slot[h] * prm_bytes;
        const uint8_t* vp = pf_page[h] + hd.v_prm0 + pf_slot[h] * prm_bytes;
        for (int64_t off = 0; off < pb; off += 64) {
          if (!kivi) __builtin_prefetch(kp + off, 0, 2);
          __builtin_prefetch(vp + off, 0, 2);
        }
      }
      for (int64_t h = 0; h < halves; ++h) {
        const uint8_t* pfk_h = pf_page[h] != nullptr ? pf_page[h] + hd.k_row0 + pf_slot[h] * rb : nullptr;
        const int64_t pfb_h = pf_bytes[h];
        const int64_t tn = tile_n(h);
        if (dt == KvDtype::kInt8) {
          k_int8_all(st, c.krow + kHalf * h, acc, pfk_h, pfb_h);
          const V dk = int8_scales(hd.k_prm0, h);
          for (int64_t r = 0; r < st.rows; ++r) {
            const V dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r], vi_set1(st.corr[r])));
            vstore(st.s + r * kTok + kHalf * h, vmul(dot, vmul(dk, vset1(st.sq[r]))));
          }
        } else if (!kivi) {
          k_int4_all(st, c.krow + kHalf * h, acc, pfk_h, pfb_h);
          V dg[16], mg[16];
          int4_scales(hd.k_prm0, h, dg, mg);
          for (int64_t r = 0; r < st.rows; ++r) {
            V sv = vzero();
            for (int64_t g = 0; g < G; ++g) {
              sv = vfma(_mm512_cvtepi32_ps(acc[r * G + g]), dg[g], sv);
              sv = vfma(mg[g], vset1(static_cast<float>(st.qg[r * G + g])), sv);
            }
            vstore(st.s + r * kTok + kHalf * h, vmul(sv, vset1(st.sq[r])));
          }
        } else if (kv + kHalf * h >= sealed) {  // kivi keys of the filling page: fp16 window, fp32 products
          const int64_t t0 = (kv + kHalf * h) % psize;
          for (int64_t r = 0; r < st.rows; ++r) {
            alignas(64) float sc[16] = {};
            for (int64_t t = 0; t < tn; ++t) {
              const uint16_t* kr = hd.window + (t0 + t) * d;
              V a = vzero();
              for (int64_t ch = 0; ch < d; ch += kW)
                a = vfma(vload(st.qf + r * d + ch), vload_f16(kr + ch), a);
              sc[t] = vhsum(a);
            }
            vstore(st.s + r * kTok + kHalf * h, vload(sc));
          }
        } else {
          const int64_t tile_page = (kv + kHalf * h) / psize;
          if (hd.kivi_page != tile_page) {  // q' = q * d_c per page, quantized; bias = q . m
            kivi_requantize(st, page_at(tile_page) + kv_kivi_param_offset(l, reg.k_params, hd.kv_head, 0));
            hd.kivi_page = tile_page;
          }
          k_int4_all(st, c.krow + kHalf * h, acc, pfk_h, pfb_h);
          for (int64_t r = 0; r < st.rows; ++r) {
            I a = vi_zero();
            for (int64_t g = 0; g < G; ++g) a = _mm512_add_epi32(a, acc[r * G + g]);
            vstore(st.s + r * kTok + kHalf * h,
                   vfma(_mm512_cvtepi32_ps(a), vset1(st.sq[r]), vset1(st.bias[r])));
          }
        }
      }
      softmax_rows(st, n);

      // weights: w = p * (V scale), u8 per (row, group) over the chunk
      if (dt == KvDtype::kInt8) {
        const V dv0 = int8_scales(hd.v_prm0, 0), dv1 = halves > 1 ? int8_scales(hd.v_prm0, 1) : vzero();
        for (int64_t r = 0; r < st.rows; ++r) {
          const float* p = st.s + r * kTok;
          st.sw[r] = quantize_u8(vmul(vload(p), dv0), vmul(vload(p + 16), dv1), st.wc + r * 32);
        }
      } else {
        V dg0[16], mg0[16], dg1[16], mg1[16];
        int4_scales(hd.v_prm0, 0, dg0, mg0);
        if (halves > 1) {
          int4_scales(hd.v_prm0, 1, dg1, mg1);
        } else {
          for (int64_t g = 0; g < G; ++g) dg1[g] = mg1[g] = vzero();
        }
        for (int64_t r = 0; r < st.rows; ++r) {
          const V p0 = vload(st.s + r * kTok), p1 = vload(st.s + r * kTok + 16);
          for (int64_t g = 0; g < G; ++g) {
            st.sw[r * G + g] = quantize_u8(vmul(p0, dg0[g]), vmul(p1, dg1[g]), st.wc + (r * G + g) * 32);
            float* ma = st.macc + (r * G + g) * 16;
            vstore(ma, vfma(vload(ma), vset1(st.alpha[r]), vfma(p0, mg0[g], vmul(p1, mg1[g]))));
          }
        }
      }
    }

    // ---- V side, head after head ----
    for (int64_t hh = 0; hh < nh; ++hh) {
      const Head& hd = hs[hh];
      for (int64_t t = 0; t < n; ++t) c.vrow[t] = slot[t] + hd.v_row0;
      for (int64_t t = n; t < kTok; ++t) c.vrow[t] = kZeroRow;
      const uint8_t* pfv[2] = {nullptr, nullptr};
      for (int64_t h = 0; h < 2; ++h) {
        if (pf_page[h] != nullptr) pfv[h] = pf_page[h] + hd.v_row0 + pf_slot[h] * rb;
      }
      if (dt == KvDtype::kInt8) {
        v_side<VKind::kInt8>(hd.st, d, c.vrow, n, pfv, pf_bytes);
      } else {
        v_side<VKind::kInt4G64>(hd.st, d, c.vrow, n, pfv, pf_bytes);
      }
    }
    kv += n;
  }

  // ---- out: o (+ the int4 V minima) / sum, back in channel order ----
  for (int64_t hh = 0; hh < nh; ++hh) {
    const Head& hd = hs[hh];
    const State& st = hd.st;
    for (int64_t r = 0; r < st.rows; ++r) {
      const int64_t row = u.row0 + r, hq = hd.kv_head * group + row % group;
      const float total = vhsum(vload(st.lsum + r * 16));
      float mterm[64];
      for (int64_t g = 0; g < G; ++g) mterm[g] = int4 ? vhsum(vload(st.macc + (r * G + g) * 16)) : 0.0f;
      const float* o = st.o + r * d;
      float* dst = u.partial != nullptr ? u.partial + (hh * st.rows + r) * (d + 2) : j.out.at(q0 + token, hq);
      const float inv = u.partial != nullptr ? 1.0f : 1.0f / total;
      for (int64_t pos = 0; pos < d; ++pos) {
        const int64_t ch = channel_of(int4, pos);
        dst[ch] = (o[pos] + (int4 ? mterm[ch / kKvInt4Group] : 0.0f)) * inv;
      }
      if (u.partial != nullptr) {
        dst[d] = st.mx[r];
        dst[d + 1] = total;
      }
    }
  }
}

// ==== multi-head latent attention over int8 / int4 latent pages ====================================
// The absorbed form is attention with one KV head whose K is the whole latent row (latent + rope key,
// dk values) and whose V is its first dv values, shared by every query head: the unit is one query
// token and its heads as the rows of one State, and every chunk of 32 latent rows is read, and its V
// side interleaved, once for all of them. K and V are the same bytes, so the V weights use the K
// side's scales (int8: the token's d; int4: the (d, m) of the latent's groups). Groups of 128 (the
// latent layout's, kv_latent_layout) add up two 64-channel units per group on the K side and take one
// weight per 128-channel slice on the V side. Same error terms as decode_unit: q and the weights at 8
// bits; the exact path (kernels_impl.inc, mla_unit) stays the reference.
void mla_unit(const MlaJob& j, int32_t seq, int64_t row, int64_t a0, int64_t a1, float* scratch) {
  const LatentCache& cache = *j.cache;
  const AttentionBatch& b = *j.batch;
  const KvPageLayout& l = cache.layout;
  const bool int4 = l.dtype == KvDtype::kInt4;
  const int64_t dk = l.head_dim, dv = j.value_dim, psize = l.page_size, rows = a1 - a0;
  const int64_t gs = int4 ? l.int4_group : dk, G = int4 ? kv_int4_groups(l) : 1;
  const int64_t rb = kv_row_bytes(l.dtype, dk), prm_bytes = int4 ? G * 4 : 2;
  const int64_t q0 = b.q_start[seq], q_len = b.q_start[seq + 1] - q0, kv_len = b.kv_len[seq];
  const int64_t visible = kv_len - q_len + row + 1;
  const KvPageRegions reg = kv_latent_page_regions(l);
  uint8_t* end = nullptr;
  const State st = carve(reinterpret_cast<uint8_t*>(scratch), dk, rows, G, &end, nullptr);
  for (int64_t r = 0; r < rows; ++r) start_row(st, r, j.q.at(q0 + row, a0 + r), b.scale, int4, true, gs);

  const int32_t* table = b.block_table + int64_t{seq} * b.max_pages_per_seq;
  const int64_t page_bytes = kv_latent_page_bytes(l);
  auto page_at = [&](int64_t i) { return cache.pages + int64_t{table[i]} * page_bytes; };
  const uint8_t* krow[kTok];  // the chunk's rows, kZeroRow past its end
  const uint8_t* prm[kTok];   // their scales
  for (int64_t kv = 0; kv < visible; kv += kTok) {
    const int64_t n = visible - kv < kTok ? visible - kv : kTok;
    const int64_t tiles = (n + kHalf - 1) / kHalf;
    for (int64_t t = 0; t < kTok; ++t) {
      if (t < n) {
        const uint8_t* pg = page_at((kv + t) / psize);
        krow[t] = pg + reg.k_data + (kv + t) % psize * rb;
        prm[t] = pg + reg.k_params + (kv + t) % psize * prm_bytes;
      } else {
        krow[t] = kZeroRow;
        prm[t] = nullptr;
      }
    }
    // Scales of tile h as fp32 vectors, lane t = token (0 past the chunk): int8 dk[h]; int4 dg[h][g],
    // mg[h][g]. Contiguous in one page, gathered otherwise.
    V d8[2] = {vzero(), vzero()}, dg[2][16], mg[2][16];
    for (int64_t h = 0; h < 2; ++h) {
      const int64_t t0 = kHalf * h, tn = n - t0 < 0 ? 0 : (n - t0 < kHalf ? n - t0 : kHalf);
      const bool one_page = tn > 0 && (kv + t0) / psize == (kv + t0 + tn - 1) / psize;
      if (!int4) {
        if (one_page) {
          d8[h] = load_f16_n(prm[t0], tn);
        } else {
          alignas(64) float x[16] = {};
          for (int64_t i = 0; i < tn; ++i) x[i] = fp16_to_float(load_u16(prm[t0 + i]));
          d8[h] = vload(x);
        }
        continue;
      }
      if (one_page) {
        load_dm(prm[t0], G, tn, dg[h], mg[h]);
        continue;
      }
      alignas(64) float dx[16][16] = {}, mx[16][16] = {};
      for (int64_t i = 0; i < tn; ++i) {
        for (int64_t g = 0; g < G; ++g) {
          dx[g][i] = fp16_to_float(load_u16(prm[t0 + i] + 4 * g));
          mx[g][i] = fp16_to_float(load_u16(prm[t0 + i] + 4 * g + 2));
        }
      }
      for (int64_t g = 0; g < G; ++g) {
        dg[h][g] = vload(dx[g]);
        mg[h][g] = vload(mx[g]);
      }
    }

    // ---- K side: scores of both tiles, four heads at a time ----
    for (int64_t h = 0; h < tiles; ++h) {
      for_row_blocks(rows, [&](auto R, int64_t r0) {
        constexpr int kR = decltype(R)::value;
        I acc[kR * 16];
        if (!int4) {
          k_int8_blocks<kR>(st, r0, krow + kHalf * h, acc);
          for (int r = 0; r < kR; ++r) {
            const V dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r], vi_set1(st.corr[r0 + r])));
            vstore(st.s + (r0 + r) * kTok + kHalf * h, vmul(dot, vmul(d8[h], vset1(st.sq[r0 + r]))));
          }
          return;
        }
        if (gs == 128) {
          k_int4_blocks<kR, 2>(st, r0, krow + kHalf * h, acc);
        } else {
          k_int4_blocks<kR, 1>(st, r0, krow + kHalf * h, acc);
        }
        for (int r = 0; r < kR; ++r) {
          V sv = vzero();
          for (int64_t g = 0; g < G; ++g) {
            sv = vfma(_mm512_cvtepi32_ps(acc[r * G + g]), dg[h][g], sv);
            sv = vfma(mg[h][g], vset1(static_cast<float>(st.qg[(r0 + r) * G + g])), sv);
          }
          vstore(st.s + (r0 + r) * kTok + kHalf * h, vmul(sv, vset1(st.sq[r0 + r])));
        }
      });
    }
    if (tiles == 1) {
      for (int64_t r = 0; r < rows; ++r) vstore(st.s + r * kTok + kHalf, vzero());
    }
    softmax_rows(st, n);

    // ---- weights: w = p * (the V scale), u8 per (head, group) over the chunk ----
    for (int64_t r = 0; r < rows; ++r) {
      const V p0 = vload(st.s + r * kTok), p1 = vload(st.s + r * kTok + 16);
      if (!int4) {
        st.sw[r] = quantize_u8(vmul(p0, d8[0]), vmul(p1, d8[1]), st.wc + r * 32);
        continue;
      }
      for (int64_t g = 0; g < dv / gs; ++g) {
        const V d1 = tiles > 1 ? dg[1][g] : vzero(), m1 = tiles > 1 ? mg[1][g] : vzero();
        st.sw[r * G + g] = quantize_u8(vmul(p0, dg[0][g]), vmul(p1, d1), st.wc + (r * G + g) * 32);
        float* ma = st.macc + (r * G + g) * 16;
        vstore(ma, vfma(vload(ma), vset1(st.alpha[r]), vfma(p0, mg[0][g], vmul(p1, m1))));
      }
    }

    // ---- V side: the chunk's rows interleaved once, accumulated for every head ----
    if (!int4) {
      v_side<VKind::kInt8>(st, dv, krow, n, nullptr, nullptr);
    } else if (gs == 128) {
      v_side<VKind::kInt4G128>(st, dv, krow, n, nullptr, nullptr);
    } else {
      v_side<VKind::kInt4G64>(st, dv, krow, n, nullptr, nullptr);
    }
  }

  // ---- out: o (+ the int4 minima) / sum, back in channel order ----
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = 1.0f / vhsum(vload(st.lsum + r * 16));
    float mterm[16] = {};
    for (int64_t g = 0; int4 && g < dv / gs; ++g) mterm[g] = vhsum(vload(st.macc + (r * G + g) * 16));
    const float* o = st.o + r * dk;
    float* dst = j.out.at(q0 + row, a0 + r);
    for (int64_t pos = 0; pos < dv; ++pos) {
      const int64_t ch = channel_of(int4, pos);
      dst[ch] = (o[pos] + mterm[ch / gs]) * inv;
    }
  }
}

}  // namespace isa_vnni
}  // namespace infergate::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace infergate::kernels::cpu {

bool vnni_decode_available() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
  }();
  return has;
}

void vnni_decode_unit(const AttnJob& j, const AttnUnit& u, float* scratch) {
  isa_vnni::decode_unit(j, u, scratch);
}

void vnni_mla_unit(const MlaJob& j, int32_t seq, int64_t row, int64_t a0, int64_t a1, float* scratch) {
  isa_vnni::mla_unit(j, seq, row, a0, a1, scratch);
}

}  // namespace infergate::kernels::cpu

#else  // not x86-64: never available

namespace infergate::kernels::cpu {
bool vnni_decode_available() { return false; }
void vnni_decode_unit(const AttnJob&, const AttnUnit&, float*) {}
void vnni_mla_unit(const MlaJob&, int32_t, int64_t, int64_t, int64_t, float*) {}
}  // namespace infergate::kernels::cpu

#endif

namespace infergate::kernels::cpu {

bool vnni_decode_applies(const KvPageLayout& l, int64_t group, const AttnUnit& u) {
  const bool shape = (l.dtype == KvDtype::kInt8 && l.head_dim % 64 == 0) ||
                     ((l.dtype == KvDtype::kInt4 || l.dtype == KvDtype::kInt4Kivi) && l.head_dim % 128 == 0);
  return shape && l.head_dim <= 1024 && u.num_heads <= kAttnMaxHeads &&
         u.row0 / group == (u.row0 + u.nrows - 1) / group;
}

int64_t vnni_decode_scratch_floats(int64_t d, int64_t heads) {
  const int64_t R = kAttnMaxRows, G = (d + kKvInt4Group - 1) / kKvInt4Group + 1;
  const int64_t bytes = R * d * 4 + R * d + 3 * R * 4 + R * G * 4 + d / 2 * 64 + R * G * 32 + R * G * 4 +
                        R * d * 4 + R * G * 64 + R * 64 + 2 * R * 4 + R * 128;
  return heads * (bytes / 4 + 64 * 16) + 16;  // + alignment of every region, per head
}

}  // namespace infergate::kernels::cpu

namespace infergate::kernels::cpu {

bool vnni_mla_applies(const KvPageLayout& l, int64_t value_dim) {
  const int64_t dk = l.head_dim;
  if (dk % 64 != 0 || dk > 1024 || value_dim > dk) return false;
  if (l.dtype == KvDtype::kInt8) return value_dim % 64 == 0;
  return l.dtype == KvDtype::kInt4 && (l.int4_group == 64 || l.int4_group == 128) && value_dim % 128 == 0 &&
         value_dim % l.int4_group == 0;
}

int64_t vnni_mla_scratch_floats(int64_t d, int64_t heads) {
  // carve(d, heads, groups): its 15 regions, each aligned to 64 bytes.
  const int64_t R = heads, G = (d + 63) / 64;
  const int64_t bytes = R * d * 4 + R * d + 3 * R * 4 + R * G * 4 + d / 2 * 64 + R * G * 32 + R * G * 4 +
                        R * d * 4 + R * G * 64 + R * 64 + 2 * R * 4 + R * 128;
  return bytes / 4 + 16 * 64 + 16;
}

}  // namespace infergate::kernels::cpu
