// The quantization formats: how compressed weights and KV-cache pages are laid out in memory, their
// exact byte sizes, and the per-element maths (x = d * q, x = d * u + m, ...) as __host__ __device__
// functions that the scalar reference, the optimised CPU code and the CUDA kernels all call.
// docs/quant-formats.md describes the same layouts in prose; the static_asserts below pin them.
#pragma once

#include <cstdint>

#include "infergate/kernels/numeric.h"
#include "infergate/kernels/status.h"

namespace infergate::kernels {

// ==== Weights ======================================================================================
// A linear layer's weight is W[N, K] (N output features, K input features, as in a Hugging Face
// nn.Linear), rows contiguous, and y[m, n] = sum_k x[m, k] * W[n, k].

enum class WeightFormat : uint8_t {
  kF16 = 0,   // data fp16 [N, K]
  kBF16,      // data bf16 [N, K]
  kInt8,      // data int8 [N, K]; scales [N]:                 W[n, k] = d[n] * q            q in [-127, 127]
  kInt4Sym,   // data u4 [N, ceil(K/2)] bytes; scales [N, ceil(K/G)]: W = d[n, g] * (u - 8)  u in [0, 15]
  kInt4Asym,  // as kInt4Sym plus zeros u8 [N, ceil(K/G)]:             W = d[n, g] * (u - z)  z in [0, 15]
};

// What the per-row / per-group scales are stored as.
enum class ScaleDtype : uint8_t { kF16 = 0, kBF16 };

// int4 packing: element k of a row is the low nibble of byte k/2 when k is even, the high nibble
// when k is odd; an odd K leaves the last high nibble zero. Group g covers k in [g*G, min(K, (g+1)*G)).
inline constexpr int32_t kInt4GroupSizes[] = {32, 64, 128};

struct WeightLayout {
  WeightFormat format = WeightFormat::kF16;
  int64_t rows = 0;        // N
  int64_t cols = 0;        // K
  int32_t group_size = 0;  // int4: 32, 64 or 128 (elements along K per scale); others: 0
  ScaleDtype scale_dtype = ScaleDtype::kF16;
};

constexpr bool is_int4(WeightFormat f) { return f == WeightFormat::kInt4Sym || f == WeightFormat::kInt4Asym; }

// Bytes of one packed row of data.
constexpr int64_t weight_row_bytes(const WeightLayout& l) {
  switch (l.format) {
    case WeightFormat::kF16:
    case WeightFormat::kBF16: return l.cols * 2;
    case WeightFormat::kInt8: return l.cols;
    case WeightFormat::kInt4Sym:
    case WeightFormat::kInt4Asym: return (l.cols + 1) / 2;
  }
  return 0;
}

// Scales per row: 1 for int8, ceil(K/G) for int4, 0 for fp16/bf16.
constexpr int64_t weight_groups_per_row(const WeightLayout& l) {
  if (l.format == WeightFormat::kInt8) return 1;
  if (is_int4(l.format)) return l.group_size > 0 ? (l.cols + l.group_size - 1) / l.group_size : 0;
  return 0;
}

struct WeightBytes {
  int64_t data = 0;
  int64_t scales = 0;  // 2 bytes per scale
  int64_t zeros = 0;   // 1 byte per group (kInt4Asym only)
  constexpr int64_t total() const { return data + scales + zeros; }
};

constexpr WeightBytes weight_bytes(const WeightLayout& l) {
  WeightBytes b;
  b.data = l.rows * weight_row_bytes(l);
  b.scales = l.rows * weight_groups_per_row(l) * 2;
  b.zeros = l.format == WeightFormat::kInt4Asym ? l.rows * weight_groups_per_row(l) : 0;
  return b;
}

// Checks the layout's own consistency (positive shape, a supported group size, no overflow).
Status validate_weight_layout(const WeightLayout& l);
const char* weight_format_name(WeightFormat f);  // "f16", "bf16", "int8", "int4-sym", "int4-asym"
const char* scale_dtype_name(ScaleDtype d);      // "f16", "bf16"

// A quantized weight in memory the caller owns (host or device, as the op says).
struct WeightView {
  WeightLayout layout;
  const void* data = nullptr;
  const void* scales = nullptr;    // null for fp16/bf16
  const uint8_t* zeros = nullptr;  // kInt4Asym only
};

// Where a quantizer writes (sizes from weight_bytes()).
struct WeightBuffers {
  void* data = nullptr;
  void* scales = nullptr;
  uint8_t* zeros = nullptr;
};

// ---- per-element weight maths ----

INFERGATE_HD float scale_to_float(uint16_t bits, ScaleDtype dt) {
  return dt == ScaleDtype::kF16 ? fp16_to_float(bits) : bf16_to_float(bits);
}

// The stored scale for a wanted scale v >= 0: the smallest representable value >= v, so amax/scale
// never exceeds qmax after rounding. v must be finite and fit the dtype (the quantizer checks).
INFERGATE_HD uint16_t scale_round_up(float v, ScaleDtype dt) {
  return dt == ScaleDtype::kF16 ? fp16_round_up(v) : bf16_round_up(v);
}

// The largest scale a dtype can store.
INFERGATE_HD float scale_max(ScaleDtype dt) { return dt == ScaleDtype::kF16 ? kFp16Max : 3.38953139e38f; }

INFERGATE_HD uint32_t int4_get(const uint8_t* row, int64_t k) {
  const uint32_t b = row[k >> 1];
  return (k & 1) ? (b >> 4) : (b & 0xFu);
}

// int8: q = clamp(round_half_even(x / d), -127, 127); inv_d = 1/d (0 when d == 0).
INFERGATE_HD int8_t quantize_int8(float x, float inv_d) {
  return static_cast<int8_t>(clamp_float(round_half_even(x * inv_d), -127.0f, 127.0f));
}
INFERGATE_HD float dequantize_int8(int8_t q, float d) { return d * static_cast<float>(q); }

// int4 with zero point z (8 for the symmetric format): u = clamp(round_half_even(x / d) + z, 0, 15).
INFERGATE_HD uint32_t quantize_int4(float x, float inv_d, int32_t z) {
  const float q = round_half_even(x * inv_d) + static_cast<float>(z);
  return static_cast<uint32_t>(clamp_float(q, 0.0f, 15.0f));
}
INFERGATE_HD float dequantize_int4(uint32_t u, uint32_t z, float d) {
  return d * static_cast<float>(static_cast<int32_t>(u) - static_cast<int32_t>(z));
}

// ==== KV cache =====================================================================================
// The cache is a pool of pages; a page holds `page_size` consecutive tokens of one sequence for one
// layer: K and V for every KV head, plus whatever scales they need, so a page is self-contained.
// Page p starts at pool + p * kv_page_bytes(layout). Inside a page the data is head-major (HND):
//   K data [num_kv_heads][page_size][row]   V data [same]   K params [...]   V params [...]
// with every region starting at a multiple of 16 bytes and the page size a multiple of 16.

enum class KvDtype : uint8_t {
  kF16 = 0,   // row: fp16 [head_dim]                    no params
  kBF16,      // row: bf16 [head_dim]                    no params
  kFp8E4M3,   // row: e4m3fn [head_dim]; params: fp32 scale per head for K and for V:  x = s[h] * e4m3
  kInt8,      // row: int8 [head_dim]; params: fp16 d per (head, token):                x = d * q
  kInt4,      // row: u4 [ceil(head_dim/2)]; params: (fp16 d, fp16 m) per (head, token, group of 64
              //   along head_dim):                                                     x = d * u + m
  kInt4Kivi,  // V as kInt4; K quantized per channel: params (fp16 d, fp16 m) per (head, channel),
              //   over the page's tokens. Keys of a page still filling live in the sequence's fp16
              //   staging window (kv_staging_bytes) and are quantized when the page fills.
};

// Elements of head_dim per (d, m) pair in kInt4 rows (and kInt4Kivi values): 64 gives 4.5 bits per
// value (3.56x fewer bytes than fp16 at head_dim 128; 32 gave 5 bits, 3.2x). docs/quant-formats.md
// has the trade. Every implementation only assumes that runs of 32 elements starting at a multiple of
// 32 never straddle a group.
inline constexpr int32_t kKvInt4Group = 64;
static_assert(kKvInt4Group % 32 == 0, "vector loops read 32-element runs of one group");
// Latent pages (kInt4 only) may use groups of 128 instead: kv_latent_layout says when.
inline constexpr int32_t kKvInt4LatentGroup = 128;

struct KvPageLayout {
  KvDtype dtype = KvDtype::kF16;
  int32_t page_size = 16;  // tokens per page
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  // kInt4: values per (d, m) pair along a row (the last group may be shorter). kKvInt4Group everywhere
  // but int4 latent pages (kv_latent_layout); grouped-query caches refuse anything else.
  int32_t int4_group = kKvInt4Group;
};

// (d, m) of an int4 group or channel, both fp16 bits: x = d * u + m, u in [0, 15].
struct KvInt4Params {
  uint16_t scale;
  uint16_t min;
};
static_assert(sizeof(KvInt4Params) == 4, "KvInt4Params is two fp16 values");

constexpr int64_t align16(int64_t n) { return (n + 15) / 16 * 16; }

constexpr int64_t kv_row_bytes(KvDtype dt, int64_t head_dim) {
  switch (dt) {
    case KvDtype::kF16:
    case KvDtype::kBF16: return head_dim * 2;
    case KvDtype::kFp8E4M3:
    case KvDtype::kInt8: return head_dim;
    case KvDtype::kInt4:
    case KvDtype::kInt4Kivi: return (head_dim + 1) / 2;
  }
  return 0;
}

constexpr int64_t kv_int4_groups(int64_t head_dim) { return (head_dim + kKvInt4Group - 1) / kKvInt4Group; }
// (d, m) pairs per int4 row of this layout.
constexpr int64_t kv_int4_groups(const KvPageLayout& l) {
  return (l.head_dim + l.int4_group - 1) / l.int4_group;
}

// Byte offsets of a page's four regions and its total size.
struct KvPageRegions {
  int64_t k_data = 0;
  int64_t v_data = 0;
  int64_t k_params = 0;
  int64_t v_params = 0;
  int64_t bytes = 0;
};

constexpr KvPageRegions kv_page_regions(const KvPageLayout& l) {
  const int64_t h = l.num_kv_heads, p = l.page_size, d = l.head_dim;
  const int64_t data = h * p * kv_row_bytes(l.dtype, d);
  int64_t kp = 0, vp = 0;
  switch (l.dtype) {
    case KvDtype::kF16:
    case KvDtype::kBF16: break;
    case KvDtype::kFp8E4M3: kp = vp = h * 4; break;
    case KvDtype::kInt8: kp = vp = h * p * 2; break;
    case KvDtype::kInt4: kp = vp = h * p * kv_int4_groups(l) * 4; break;
    case KvDtype::kInt4Kivi:
      kp = h * d * 4;
      vp = h * p * kv_int4_groups(l) * 4;
      break;
  }
  KvPageRegions r;
  r.k_data = 0;
  r.v_data = align16(data);
  r.k_params = r.v_data + align16(data);
  r.v_params = r.k_params + align16(kp);
  r.bytes = r.v_params + align16(vp);
  return r;
}

// Exact bytes of one page (one layer, page_size tokens, all KV heads, K and V, scales included).
constexpr int64_t kv_page_bytes(const KvPageLayout& l) { return kv_page_regions(l).bytes; }

// Bytes of one sequence's staging window per layer: kInt4Kivi keeps the keys of the page that is
// still filling as fp16 [num_kv_heads][page_size][head_dim]; every other dtype needs none.
constexpr int64_t kv_staging_bytes(const KvPageLayout& l) {
  return l.dtype == KvDtype::kInt4Kivi ? int64_t{l.num_kv_heads} * l.page_size * l.head_dim * 2 : 0;
}

// A latent page (multi-head latent attention: DeepSeek-V3, Kimi K2) holds one row per token and no V
// side: the normalised latent and the roped shared key, one row of head_dim = kv_lora_rank + rope dim
// with num_kv_heads 1, then the K side's parameters:  data [page_size][row]   params [...]
// (fp8: one fp32 scale; int8: fp16 d per token; int4: (d, m) per token and 64-group, so with a
// 512-wide latent the 64 rope values are a group of their own). kInt4Kivi has no latent form.
constexpr KvPageRegions kv_latent_page_regions(const KvPageLayout& l) {
  const KvPageRegions full = kv_page_regions(l);
  KvPageRegions r;
  r.k_data = 0;
  r.k_params = full.v_data - full.k_data;  // the aligned data region
  r.v_data = r.v_params = r.k_params + (full.v_params - full.k_params);
  r.bytes = r.v_data;
  return r;
}
constexpr int64_t kv_latent_page_bytes(const KvPageLayout& l) { return kv_latent_page_regions(l).bytes; }

// The latent page layout of a model: head_dim = latent + rope widths; int4 takes groups of 128 when the
// latent width is a multiple of 128, so the latent's groups end where the rope key starts and the rope
// values keep a (d, m) pair of their own (512 + 64: 4 groups of 128 and one of 64, 4.28 bits per value,
// 3.74x fewer bytes than fp16; groups of 64 gave 4.5 bits, 3.56x). Other widths keep groups of 64.
constexpr KvPageLayout kv_latent_layout(KvDtype dt, int32_t page_size, int32_t latent_width,
                                        int32_t rope_width) {
  KvPageLayout l{dt, page_size, 1, latent_width + rope_width};
  if (dt == KvDtype::kInt4 && latent_width % kKvInt4LatentGroup == 0) l.int4_group = kKvInt4LatentGroup;
  return l;
}

// Kimi K2 / DeepSeek-V3: a 576-value row (512 latent + 64 rope) per token.
static_assert(kv_latent_page_bytes(kv_latent_layout(KvDtype::kF16, 16, 512, 64)) == 18432);
static_assert(kv_latent_page_bytes(kv_latent_layout(KvDtype::kInt8, 16, 512, 64)) == 9216 + 32);
static_assert(kv_latent_page_bytes(kv_latent_layout(KvDtype::kInt4, 16, 512, 64)) == 4608 + 16 * 5 * 4);
static_assert(kv_latent_page_bytes({KvDtype::kInt4, 16, 1, 576}) == 4608 + 576);  // groups of 64

// Pinned sizes for a Llama-3-8B-like layer (8 KV heads, head_dim 128) with 16-token pages.
static_assert(kv_page_bytes({KvDtype::kF16, 16, 8, 128}) == 65536);
static_assert(kv_page_bytes({KvDtype::kBF16, 16, 8, 128}) == 65536);
static_assert(kv_page_bytes({KvDtype::kFp8E4M3, 16, 8, 128}) == 32832);
static_assert(kv_page_bytes({KvDtype::kInt8, 16, 8, 128}) == 33280);
static_assert(kv_page_bytes({KvDtype::kInt4, 16, 8, 128}) == 18432);
static_assert(kv_page_bytes({KvDtype::kInt4Kivi, 16, 8, 128}) == 21504);
static_assert(kv_staging_bytes({KvDtype::kInt4Kivi, 16, 8, 128}) == 32768);
static_assert(kv_page_regions({KvDtype::kInt8, 16, 8, 128}).k_params == 32768);

// Offsets inside a page (bytes from the page start), for head h, token slot t, channel c, group g.
INFERGATE_HD int64_t kv_row_offset(const KvPageLayout& l, int64_t region, int64_t h, int64_t t) {
  return region + (h * l.page_size + t) * kv_row_bytes(l.dtype, l.head_dim);
}
INFERGATE_HD int64_t kv_int8_param_offset(const KvPageLayout& l, int64_t region, int64_t h, int64_t t) {
  return region + (h * l.page_size + t) * 2;
}
INFERGATE_HD int64_t kv_int4_param_offset(const KvPageLayout& l, int64_t region, int64_t h, int64_t t,
                                          int64_t g) {
  return region + ((h * l.page_size + t) * kv_int4_groups(l) + g) * 4;
}
INFERGATE_HD int64_t kv_kivi_param_offset(const KvPageLayout& l, int64_t region, int64_t h, int64_t c) {
  return region + (h * l.head_dim + c) * 4;
}
INFERGATE_HD int64_t kv_fp8_param_offset(int64_t region, int64_t h) { return region + h * 4; }

// Checks page_size (1..4096), heads (1..1024) and head_dim (1..1024).
Status validate_kv_layout(const KvPageLayout& l);
const char* kv_dtype_name(KvDtype dt);  // "f16", "bf16", "fp8-e4m3", "int8", "int4", "int4-kivi"

// ---- per-element KV maths ----
// Non-finite inputs (decided once, for every quantized KV dtype): scales and ranges come from the
// finite values only; NaN is stored as the code of 0.0; +inf/-inf saturate to the largest/smallest
// code. fp16/bf16 pass-through rounds like any conversion (overflow to inf, NaN kept).

// int8 per (head, token): d = amax_finite / 127, rounded up to fp16 (capped at 65504).
INFERGATE_HD uint16_t kv_int8_scale(float amax_finite) {
  return fp16_round_up(amax_finite / 127.0f < kFp16Max ? amax_finite / 127.0f : kFp16Max);
}
INFERGATE_HD int8_t kv_int8_code(float x, float inv_d) {
  const uint32_t b = float_to_bits(x);
  if (is_nan_bits(b)) return 0;
  if (!is_finite_bits(b)) return x > 0 ? 127 : -127;
  return quantize_int8(x, inv_d);
}

// fp8 per head: code = e4m3(x / s[h]); s[h] > 0 comes from calibration (1.0 when none).
INFERGATE_HD uint8_t kv_fp8_code(float x, float inv_s) {
  if (is_nan_bits(float_to_bits(x))) return 0;
  return e4m3_from_float(x * inv_s);
}

// fp8 read back: x = s[h] * e4m3(code). A NaN code (0x7F / 0xFF, never written by kv_append) reads as
// the quiet NaN of its sign, 0x7FC00000 / 0xFFC00000, on every implementation (a GPU multiply would
// return its canonical NaN instead).
INFERGATE_HD float kv_fp8_dequant(uint8_t code, float s) {
  const float v = e4m3_to_float(code);
  return (code & 0x7Fu) == 0x7Fu ? v : s * v;
}

// int4 asymmetric over a group with finite range [lo, hi]: m = lo rounded down to fp16,
// d = (hi - m) / 15 rounded up to fp16; both clamped to the fp16 range first.
INFERGATE_HD KvInt4Params kv_int4_params(float lo, float hi) {
  lo = clamp_float(lo, -kFp16Max, kFp16Max);
  hi = clamp_float(hi, -kFp16Max, kFp16Max);
  KvInt4Params p;
  p.min = fp16_round_down(lo);
  float d = (hi - fp16_to_float(p.min)) / 15.0f;
  d = clamp_float(d, 0.0f, kFp16Max);
  p.scale = fp16_round_up(d);
  return p;
}
INFERGATE_HD uint32_t kv_int4_code(float x, float m, float inv_d) {
  const uint32_t b = float_to_bits(x);
  if (is_nan_bits(b)) {
    x = 0.0f;
  } else if (!is_finite_bits(b)) {
    return x > 0 ? 15u : 0u;
  }
  return static_cast<uint32_t>(clamp_float(round_half_even((x - m) * inv_d), 0.0f, 15.0f));
}

INFERGATE_HD float fma_exact(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// x = d * u + m with a single rounding (fused), identical on every implementation.
INFERGATE_HD float kv_int4_dequant(uint32_t u, float d, float m) {
  return fma_exact(d, static_cast<float>(u), m);
}

// 1/d, or 0 when d is 0 (an all-zero row or group quantizes to code 0 / the minimum).
INFERGATE_HD float safe_inverse(float d) { return d > 0.0f ? 1.0f / d : 0.0f; }

}  // namespace infergate::kernels
