// The weight formats other tools publish (DeepSeek-V3's FP8 block scaling, compressed-tensors'
// float-quantized FP8 and pack-quantized INT4, AutoAWQ GEMM, GPTQ), as their checkpoints store them:
// the arrays of one linear layer, their exact shapes, and the per-element maths, as __host__ __device__
// functions that the scalar reference (dequantize_published_ref in ref.h, the specification), the optimised
// CPU paths and the CUDA kernels all call. docs/quant-formats.md ("Published weight formats") says the same
// in prose, with the sources each rule was read from and where those sources disagree.
//
// A linear layer's logical weight is W[N, K] (N output features, K input features), as in formats.h.
// Packed int4 words are 32-bit little-endian integers; "slot s" of a word is bits 4s..4s+3.
#pragma once

#include <cstdint>

#include "infergate/kernels/numeric.h"
#include "infergate/kernels/status.h"
#include "infergate/kernels/tensor.h"

namespace infergate::kernels {

enum class PublishedFormat : uint8_t {
  // data e4m3fn [N, K]; scales [ceil(N/BR), ceil(K/BC)]:  W[n,k] = s[n/BR, k/BC] * e4m3(q[n,k])
  // (DeepSeek-V3 / Kimi-K2-Instruct `weight_scale_inv`, multiplied despite its name; compressed-tensors'
  // block strategy `weight_scale`). A partial last block row or column has a scale of its own.
  kFp8Block = 0,
  // data e4m3fn [N, K]; scales [N] (stored [N, 1]):       W[n,k] = s[n] * e4m3(q[n,k])
  // (compressed-tensors float-quantized, channel strategy: GLM-4.5/4.6-FP8)
  kFp8Channel,
  // compressed-tensors pack-quantized int4: data i32 [N, ceil(K/8)], element k in slot k%8 of word k/8,
  // stored u = q + 8 (q in [-8, 7]); scales [N, S]; zeros i32 [ceil(N/8), S] (asymmetric only), zero
  // point of row n in slot n%8 of word n/8, stored uz = z + 8; g_idx i32 [K] (activation order only):
  //   W[n,k] = s[n, g(k)] * (u - uz)        uz = 8 when symmetric
  // S = K/G (G divides K), or 1 per channel (group_size 0).
  kCtInt4,
  // AutoAWQ GEMM: data i32 [K, N/8], column n of row k in slot awq_slot(n) of word n/8 (packing order
  // [0, 2, 4, 6, 1, 3, 5, 7]); zeros i32 [K/G, N/8] packed the same way; scales [K/G, N]:
  //   W[n,k] = s[k/G, n] * (q - z)          q, z unsigned in [0, 15]
  kAwqInt4,
  // GPTQ (AutoGPTQ qlinear_cuda): data i32 [K/8, N], row k of column n in slot k%8 of word (k/8, n);
  // zeros i32 [ceil(K/G), N/8], column n in slot n%8 of word n/8, stored z - 1 (gptq) or z (gptq_v2);
  // scales [ceil(K/G), N]; g_idx i32 [K] (k/G without activation order):
  //   W[n,k] = s[g(k), n] * (q - z)         z = ((stored & 15) + 1) for gptq: a stored 15 reads as 16
  kGptqInt4,
};

// What a published format stores its scales as.
enum class PublishedScale : uint8_t { kF32 = 0, kF16, kBF16 };

// The slot of column n in its AWQ word: AutoAWQ packs columns in the order [0, 2, 4, 6, 1, 3, 5, 7], so
// column m = n % 8 sits in slot m / 2 + 4 (m % 2), i.e. [0, 4, 1, 5, 2, 6, 3, 7]. (Arithmetic, not a
// table: a host array is not readable in device code.)
INFERGATE_HD int32_t awq_slot(int64_t n) {
  const int32_t m = static_cast<int32_t>(n % 8);
  return m / 2 + 4 * (m % 2);
}

struct PublishedLayout {
  PublishedFormat format = PublishedFormat::kFp8Block;
  int64_t rows = 0;  // N
  int64_t cols = 0;  // K
  // int4 formats: elements along K per scale; 0 means one scale per output channel (G = K).
  int32_t group_size = 0;
  // kFp8Block: the block [BR, BC] one scale covers (DeepSeek-V3: [128, 128]).
  int32_t block_rows = 0;
  int32_t block_cols = 0;
  bool symmetric = true;   // kCtInt4: no zeros array (AWQ and GPTQ always store zeros)
  bool act_order = false;  // kCtInt4 / kGptqInt4: g(k) = g_idx[k] instead of k / G
  bool gptq_v2 = false;    // kGptqInt4: zeros stored as z, not z - 1
  PublishedScale scale = PublishedScale::kF32;
  bool scale_ue8m0 = false;  // kFp8Block: every scale a power of two (DeepSeek's scale_fmt "ue8m0")
};

// Shapes of the stored arrays, in elements of their own dtype (data: bytes for fp8, int32 words for the
// int4 formats; scales: PublishedScale; zeros and g_idx: int32). A [0, 0] shape is an array the layout
// does not have.
struct PublishedShapes {
  int64_t data[2] = {0, 0};
  int64_t scales[2] = {0, 0};
  int64_t zeros[2] = {0, 0};
  int64_t g_idx = 0;
};

constexpr int64_t published_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Scales (groups) along K of an int4 layout: K / G, or 1 per channel (a ragged K rounds up for GPTQ).
constexpr int64_t published_groups(const PublishedLayout& l) {
  return l.group_size > 0 ? published_ceil_div(l.cols, l.group_size) : 1;
}

constexpr int64_t published_scale_bytes(PublishedScale s) { return s == PublishedScale::kF32 ? 4 : 2; }

constexpr PublishedShapes published_shapes(const PublishedLayout& l) {
  PublishedShapes s;
  const int64_t n = l.rows, k = l.cols, groups = published_groups(l);
  switch (l.format) {
    case PublishedFormat::kFp8Block:
      s.data[0] = n, s.data[1] = k;
      if (l.block_rows > 0 && l.block_cols > 0)
        s.scales[0] = published_ceil_div(n, l.block_rows), s.scales[1] = published_ceil_div(k, l.block_cols);
      break;
    case PublishedFormat::kFp8Channel:
      s.data[0] = n, s.data[1] = k;
      s.scales[0] = n, s.scales[1] = 1;
      break;
    case PublishedFormat::kCtInt4:
      s.data[0] = n, s.data[1] = published_ceil_div(k, 8);
      s.scales[0] = n, s.scales[1] = groups;
      if (!l.symmetric) s.zeros[0] = published_ceil_div(n, 8), s.zeros[1] = groups;
      if (l.act_order) s.g_idx = k;
      break;
    case PublishedFormat::kAwqInt4:
      s.data[0] = k, s.data[1] = n / 8;
      s.scales[0] = groups, s.scales[1] = n;
      s.zeros[0] = groups, s.zeros[1] = n / 8;
      break;
    case PublishedFormat::kGptqInt4:
      s.data[0] = k / 8, s.data[1] = n;
      s.scales[0] = groups, s.scales[1] = n;
      s.zeros[0] = groups, s.zeros[1] = n / 8;
      s.g_idx = k;
      break;
  }
  return s;
}

// Bytes of each stored array and their sum.
struct PublishedBytes {
  int64_t data = 0, scales = 0, zeros = 0, g_idx = 0;
  constexpr int64_t total() const { return data + scales + zeros + g_idx; }
};
constexpr PublishedBytes published_bytes(const PublishedLayout& l) {
  const PublishedShapes s = published_shapes(l);
  const int64_t data_elem =
      (l.format == PublishedFormat::kFp8Block || l.format == PublishedFormat::kFp8Channel) ? 1 : 4;
  return {s.data[0] * s.data[1] * data_elem, s.scales[0] * s.scales[1] * published_scale_bytes(l.scale),
          s.zeros[0] * s.zeros[1] * 4, s.g_idx * 4};
}

// Kimi-K2-Thinking's routed expert (K 7168, N 2048, G 32, symmetric): 4.5 bits per weight.
static_assert(published_bytes({PublishedFormat::kCtInt4, 2048, 7168, 32, 0, 0, true, false, false,
                               PublishedScale::kBF16})
                  .total() == 2048 * 7168 / 2 + 2048 * 224 * 2);
// DeepSeek-V3's q_b_proj (N 24576, K 1536) with 128x128 blocks: one fp32 scale per 16384 weights.
static_assert(published_shapes({PublishedFormat::kFp8Block, 24576, 1536, 0, 128, 128}).scales[1] == 12);

// Checks the layout's own consistency: a positive shape within bounds, a group size that the format
// allows (compressed-tensors and AWQ: G divides K; GPTQ: any positive G, the last group may be short;
// 0 per channel), the packing constraints (AWQ: N % 8 == 0; GPTQ: K % 8 == 0 and N % 8 == 0),
// block sizes for fp8 block, no zeros/act-order flags a format cannot have.
Status validate_published_layout(const PublishedLayout& l);
const char* published_format_name(PublishedFormat f);  // "fp8-block", "fp8-channel", "ct-int4", "awq", "gptq"

// A published weight in memory the caller owns (host or device, as the op says).
struct PublishedView {
  PublishedLayout layout;
  const void* data = nullptr;
  const void* scales = nullptr;
  const int32_t* zeros = nullptr;  // kCtInt4 asymmetric, kAwqInt4, kGptqInt4
  const int32_t* g_idx = nullptr;  // act_order (kGptqInt4: optional without it; k / G is assumed)
};

// Where a quantizer writes (sizes from published_bytes()). g_idx is an INPUT when act_order: the
// caller's group of each column (each group holding exactly as many columns as in column order).
struct PublishedBuffers {
  void* data = nullptr;
  void* scales = nullptr;
  int32_t* zeros = nullptr;
  const int32_t* g_idx = nullptr;
};

// ---- per-element maths ----

INFERGATE_HD uint32_t int4_slot(uint32_t word, int32_t slot) { return (word >> (4 * slot)) & 0xFu; }

INFERGATE_HD float published_scale_at(const void* scales, int64_t i, PublishedScale s) {
  switch (s) {
    case PublishedScale::kF32: return static_cast<const float*>(scales)[i];
    case PublishedScale::kF16: return fp16_to_float(static_cast<const uint16_t*>(scales)[i]);
    case PublishedScale::kBF16: return bf16_to_float(static_cast<const uint16_t*>(scales)[i]);
  }
  return 0.0f;
}

// fp8: s * e4m3(code), one fp32 multiply (one rounding; exact when s is a bf16 or fp16 value).
INFERGATE_HD float dequantize_fp8(uint8_t code, float s) { return s * e4m3_to_float(code); }
// int4 with an unsigned code and zero: s * (q - z), exact in fp32 for every 16-bit scale.
INFERGATE_HD float dequantize_int4_code(uint32_t q, int32_t z, float s) {
  return s * static_cast<float>(static_cast<int32_t>(q) - z);
}

// The code of W[n, k] and its zero point, per format (g is the group of column k).
INFERGATE_HD uint32_t ct_int4_code(const int32_t* data, int64_t k_words, int64_t n, int64_t k) {
  return int4_slot(static_cast<uint32_t>(data[n * k_words + k / 8]), static_cast<int32_t>(k % 8));
}
INFERGATE_HD int32_t ct_int4_zero(const int32_t* zeros, int64_t groups, int64_t n, int64_t g) {
  if (zeros == nullptr) return 8;
  return static_cast<int32_t>(
      int4_slot(static_cast<uint32_t>(zeros[(n / 8) * groups + g]), static_cast<int32_t>(n % 8)));
}
INFERGATE_HD uint32_t awq_code(const int32_t* data, int64_t n_words, int64_t n, int64_t k) {
  return int4_slot(static_cast<uint32_t>(data[k * n_words + n / 8]), awq_slot(n));
}
INFERGATE_HD int32_t awq_zero(const int32_t* zeros, int64_t n_words, int64_t n, int64_t g) {
  return static_cast<int32_t>(int4_slot(static_cast<uint32_t>(zeros[g * n_words + n / 8]), awq_slot(n)));
}
INFERGATE_HD uint32_t gptq_code(const int32_t* data, int64_t n_cols, int64_t n, int64_t k) {
  return int4_slot(static_cast<uint32_t>(data[(k / 8) * n_cols + n]), static_cast<int32_t>(k % 8));
}
INFERGATE_HD int32_t gptq_zero(const int32_t* zeros, int64_t n_words, int64_t n, int64_t g, bool v2) {
  const int32_t stored = static_cast<int32_t>(
      int4_slot(static_cast<uint32_t>(zeros[g * n_words + n / 8]), static_cast<int32_t>(n % 8)));
  return v2 ? stored : stored + 1;
}

}  // namespace infergate::kernels
