// Scalar reference of the published weight formats (published.h): the specification of how each
// format's arrays decode, and of the quantizer that writes them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "infergate/kernels/published.h"
#include "infergate/kernels/ref.h"
#include "validate.h"

namespace infergate::kernels {
namespace {

bool is_int4_format(PublishedFormat f) {
  return f == PublishedFormat::kCtInt4 || f == PublishedFormat::kAwqInt4 || f == PublishedFormat::kGptqInt4;
}

std::string at(int64_t n, int64_t k) { return "row " + std::to_string(n) + ", column " + std::to_string(k); }

// The number of columns group g holds in column order: G, or what is left of K for a ragged last group.
int64_t column_order_count(const PublishedLayout& l, int64_t g) {
  if (l.group_size <= 0) return l.cols;
  return std::min<int64_t>(l.group_size, l.cols - g * l.group_size);
}

// An act-order g_idx must name a group for every column and give each group exactly the columns it
// would hold in column order; then compressed-tensors' sort-by-group and vLLM's per-column lookup read
// it the same way.
Status check_g_idx(const PublishedLayout& l, const int32_t* g_idx, const char* op) {
  const int64_t groups = published_groups(l);
  std::vector<int64_t> count(static_cast<size_t>(groups), 0);
  for (int64_t k = 0; k < l.cols; ++k) {
    if (g_idx[k] < 0 || g_idx[k] >= groups) {
      return invalid_argument(std::string(op) + ": g_idx[" + std::to_string(k) + "] = " +
                              std::to_string(g_idx[k]) + " is outside [0, " + std::to_string(groups) + ")");
    }
    ++count[static_cast<size_t>(g_idx[k])];
  }
  for (int64_t g = 0; g < groups; ++g) {
    if (count[static_cast<size_t>(g)] != column_order_count(l, g)) {
      return invalid_argument(std::string(op) + ": g_idx assigns group " + std::to_string(g) + " " +
                              std::to_string(count[static_cast<size_t>(g)]) + " columns, not " +
                              std::to_string(column_order_count(l, g)));
    }
  }
  return ok_status();
}

int64_t group_of(const PublishedLayout& l, const int32_t* g_idx, int64_t k) {
  if (g_idx != nullptr) return g_idx[k];
  return l.group_size > 0 ? k / l.group_size : 0;
}

// Index of the scale of (n, k) in the scales array.
int64_t scale_index(const PublishedLayout& l, const PublishedShapes& s, int64_t n, int64_t g_or_k) {
  switch (l.format) {
    case PublishedFormat::kFp8Block: return (n / l.block_rows) * s.scales[1] + g_or_k / l.block_cols;
    case PublishedFormat::kFp8Channel: return n;
    case PublishedFormat::kCtInt4: return n * s.scales[1] + g_or_k;
    case PublishedFormat::kAwqInt4:
    case PublishedFormat::kGptqInt4: return g_or_k * l.rows + n;
  }
  return 0;
}

// ---- dequantize ----

Status check_scales(const PublishedView& w, const PublishedShapes& s, const char* op) {
  const int64_t count = s.scales[0] * s.scales[1];
  for (int64_t i = 0; i < count; ++i) {
    const float v = published_scale_at(w.scales, i, w.layout.scale);
    if (!std::isfinite(v) || v < 0.0f) {
      return invalid_argument(std::string(op) + ": scale [" + std::to_string(i / s.scales[1]) + ", " +
                              std::to_string(i % s.scales[1]) + "] is " + std::to_string(v) +
                              " (a scale must be finite and not negative)");
    }
  }
  return ok_status();
}

Status validate_published_view(const PublishedView& w, const char* op) {
  INFERGATE_K_RETURN_IF_ERROR(validate_published_layout(w.layout).context(op));
  const PublishedShapes s = published_shapes(w.layout);
  if (w.data == nullptr) return invalid_argument(std::string(op) + ": weight data is null");
  if (w.scales == nullptr) return invalid_argument(std::string(op) + ": weight scales are null");
  if (s.zeros[0] > 0 && w.zeros == nullptr)
    return invalid_argument(std::string(op) + ": weight zeros are null");
  if (w.layout.act_order && w.g_idx == nullptr)
    return invalid_argument(std::string(op) + ": act-order weight without g_idx");
  return ok_status();
}

}  // namespace

Status dequantize_published_ref(const PublishedView& w, View2<float> out) {
  constexpr const char* kOp = "dequantize_published";
  INFERGATE_K_RETURN_IF_ERROR(validate_published_view(w, kOp));
  const PublishedLayout& l = w.layout;
  if (out.data == nullptr || out.rows != l.rows || out.cols != l.cols || out.row_stride < l.cols) {
    return invalid_argument(std::string(kOp) + ": output view is not " + shape_str(l.rows, l.cols));
  }
  const PublishedShapes s = published_shapes(l);
  INFERGATE_K_RETURN_IF_ERROR(check_scales(w, s, kOp));
  // GPTQ stores g_idx even without activation order; when given it is the authority, and checked.
  const int32_t* g_idx = is_int4_format(l.format) ? w.g_idx : nullptr;
  if (g_idx != nullptr) INFERGATE_K_RETURN_IF_ERROR(check_g_idx(l, g_idx, kOp));
  const auto* words = static_cast<const int32_t*>(w.data);
  const auto* codes = static_cast<const uint8_t*>(w.data);
  for (int64_t n = 0; n < l.rows; ++n) {
    float* y = out.row(n);
    for (int64_t k = 0; k < l.cols; ++k) {
      switch (l.format) {
        case PublishedFormat::kFp8Block:
        case PublishedFormat::kFp8Channel: {
          const uint8_t q = codes[n * l.cols + k];
          if ((q & 0x7Fu) == 0x7Fu)
            return invalid_argument(std::string(kOp) + ": fp8 NaN code at " + at(n, k));
          y[k] = dequantize_fp8(q, published_scale_at(w.scales, scale_index(l, s, n, k), l.scale));
          break;
        }
        case PublishedFormat::kCtInt4: {
          const int64_t g = group_of(l, g_idx, k);
          y[k] = dequantize_int4_code(ct_int4_code(words, s.data[1], n, k),
                                      ct_int4_zero(w.zeros, s.scales[1], n, g),
                                      published_scale_at(w.scales, scale_index(l, s, n, g), l.scale));
          break;
        }
        case PublishedFormat::kAwqInt4: {
          const int64_t g = group_of(l, nullptr, k);
          y[k] = dequantize_int4_code(awq_code(words, s.data[1], n, k), awq_zero(w.zeros, s.zeros[1], n, g),
                                      published_scale_at(w.scales, scale_index(l, s, n, g), l.scale));
          break;
        }
        case PublishedFormat::kGptqInt4: {
          const int64_t g = group_of(l, g_idx, k);
          y[k] = dequantize_int4_code(gptq_code(words, l.rows, n, k),
                                      gptq_zero(w.zeros, s.zeros[1], n, g, l.gptq_v2),
                                      published_scale_at(w.scales, scale_index(l, s, n, g), l.scale));
          break;
        }
      }
    }
  }
  return ok_status();
}

// ---- quantize ----

namespace {

// Stores a wanted scale in the layout's storage, rounded up (kF32 keeps it).
Status store_scale(const PublishedLayout& l, void* scales, int64_t i, float wanted, float* stored) {
  switch (l.scale) {
    case PublishedScale::kF32:
      static_cast<float*>(scales)[i] = wanted;
      *stored = wanted;
      return ok_status();
    case PublishedScale::kF16: {
      if (!(wanted <= kFp16Max)) {
        return invalid_argument("quantize_published: scale " + std::to_string(wanted) +
                                " exceeds the fp16 range");
      }
      const uint16_t b = fp16_round_up(wanted);
      static_cast<uint16_t*>(scales)[i] = b;
      *stored = fp16_to_float(b);
      return ok_status();
    }
    case PublishedScale::kBF16: {
      const uint16_t b = bf16_round_up(wanted);
      if (!std::isfinite(bf16_to_float(b))) {
        return invalid_argument("quantize_published: scale " + std::to_string(wanted) +
                                " exceeds the bf16 range");
      }
      static_cast<uint16_t*>(scales)[i] = b;
      *stored = bf16_to_float(b);
      return ok_status();
    }
  }
  return invalid_argument("quantize_published: unknown scale storage");
}

void put_int4(int32_t* words, int64_t word, int32_t slot, uint32_t u) {
  uint32_t w = static_cast<uint32_t>(words[word]);
  w |= (u & 0xFu) << (4 * slot);
  words[word] = static_cast<int32_t>(w);
}

// Where the code of (n, k) and the zero of (n, g) go: word index and slot.
void code_slot(const PublishedLayout& l, const PublishedShapes& s, int64_t n, int64_t k, int64_t* word,
               int32_t* slot) {
  switch (l.format) {
    case PublishedFormat::kCtInt4: *word = n * s.data[1] + k / 8, *slot = static_cast<int32_t>(k % 8); return;
    case PublishedFormat::kAwqInt4: *word = k * s.data[1] + n / 8, *slot = awq_slot(n); return;
    default:  // GPTQ
      *word = (k / 8) * l.rows + n, *slot = static_cast<int32_t>(k % 8);
      return;
  }
}
void zero_slot(const PublishedLayout& l, const PublishedShapes& s, int64_t n, int64_t g, int64_t* word,
               int32_t* slot) {
  switch (l.format) {
    case PublishedFormat::kCtInt4:
      *word = (n / 8) * s.zeros[1] + g, *slot = static_cast<int32_t>(n % 8);
      return;
    case PublishedFormat::kAwqInt4: *word = g * s.zeros[1] + n / 8, *slot = awq_slot(n); return;
    default:  // GPTQ
      *word = g * s.zeros[1] + n / 8, *slot = static_cast<int32_t>(n % 8);
      return;
  }
}

Status quantize_fp8(const MatrixSource& src, const PublishedLayout& l, const PublishedShapes& s,
                    const PublishedBuffers& out) {
  const int64_t br = l.format == PublishedFormat::kFp8Block ? l.block_rows : 1;
  const int64_t bc = l.format == PublishedFormat::kFp8Block ? l.block_cols : l.cols;
  auto* codes = static_cast<uint8_t*>(out.data);
  for (int64_t n0 = 0; n0 < l.rows; n0 += br) {
    const int64_t n1 = std::min(l.rows, n0 + br);
    for (int64_t k0 = 0; k0 < l.cols; k0 += bc) {
      const int64_t k1 = std::min(l.cols, k0 + bc);
      float amax = 0.0f;
      for (int64_t n = n0; n < n1; ++n) {
        for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(source_at(src, n, k)));
      }
      float wanted = amax > 0.0f ? amax / kE4m3Max : 1.0f;
      if (l.scale_ue8m0) {
        int e = 0;
        const float m = std::frexp(wanted, &e);            // wanted = m * 2^e, m in [0.5, 1)
        wanted = std::ldexp(1.0f, m == 0.5f ? e - 1 : e);  // the smallest power of two >= wanted
      }
      float stored = 0.0f;
      INFERGATE_K_RETURN_IF_ERROR(store_scale(l, out.scales, scale_index(l, s, n0, k0), wanted, &stored));
      const float inv = safe_inverse(stored);
      for (int64_t n = n0; n < n1; ++n) {
        for (int64_t k = k0; k < k1; ++k) codes[n * l.cols + k] = e4m3_from_float(source_at(src, n, k) * inv);
      }
    }
  }
  return ok_status();
}

Status quantize_int4(const MatrixSource& src, const PublishedLayout& l, const PublishedShapes& s,
                     const PublishedBuffers& out) {
  const int64_t groups = published_groups(l);
  // The columns of each group, in column order or as g_idx assigns them.
  std::vector<std::vector<int64_t>> members(static_cast<size_t>(groups));
  for (int64_t k = 0; k < l.cols; ++k) members[static_cast<size_t>(group_of(l, out.g_idx, k))].push_back(k);
  auto* words = static_cast<int32_t*>(out.data);
  const bool symmetric = l.format != PublishedFormat::kAwqInt4 && l.symmetric;
  const bool gptq_v1 = l.format == PublishedFormat::kGptqInt4 && !l.gptq_v2;
  for (int64_t n = 0; n < l.rows; ++n) {
    for (int64_t g = 0; g < groups; ++g) {
      float lo = 0.0f, hi = 0.0f;
      for (int64_t k : members[static_cast<size_t>(g)]) {
        lo = std::min(lo, source_at(src, n, k));
        hi = std::max(hi, source_at(src, n, k));
      }
      float stored = 0.0f, inv = 0.0f;
      int32_t z = 8;
      if (symmetric) {
        INFERGATE_K_RETURN_IF_ERROR(
            store_scale(l, out.scales, scale_index(l, s, n, g), std::max(-lo, hi) / 7.5f, &stored));
        inv = safe_inverse(stored);
      } else {
        // gptq v1 stores z - 1, which cannot hold z = 0: widen the range below zero so that z >= 1.
        if (gptq_v1 && lo > -hi / 14.0f) lo = -hi / 14.0f;
        INFERGATE_K_RETURN_IF_ERROR(
            store_scale(l, out.scales, scale_index(l, s, n, g), (hi - lo) / 15.0f, &stored));
        inv = safe_inverse(stored);
        z = static_cast<int32_t>(clamp_float(round_half_even(-lo * inv), gptq_v1 ? 1.0f : 0.0f, 15.0f));
      }
      for (int64_t k : members[static_cast<size_t>(g)]) {
        const float q =
            clamp_float(round_half_even(source_at(src, n, k) * inv) + static_cast<float>(z), 0.0f, 15.0f);
        int64_t word = 0;
        int32_t slot = 0;
        code_slot(l, s, n, k, &word, &slot);
        put_int4(words, word, slot, static_cast<uint32_t>(q));
      }
      if (s.zeros[0] > 0) {
        int64_t word = 0;
        int32_t slot = 0;
        zero_slot(l, s, n, g, &word, &slot);
        put_int4(out.zeros, word, slot, static_cast<uint32_t>(gptq_v1 ? z - 1 : z));
      }
    }
  }
  return ok_status();
}

}  // namespace

Status quantize_published_ref(const MatrixSource& src, const PublishedLayout& l,
                              const PublishedBuffers& out) {
  constexpr const char* kOp = "quantize_published";
  INFERGATE_K_RETURN_IF_ERROR(validate_published_layout(l).context(kOp));
  if (src.data == nullptr) return invalid_argument(std::string(kOp) + ": source data is null");
  if (static_cast<int>(src.dtype) > static_cast<int>(SourceDtype::kBF16))
    return invalid_argument(std::string(kOp) + ": source dtype is not f32, f16 or bf16");
  if (src.rows != l.rows || src.cols != l.cols || src.row_stride < src.cols) {
    return invalid_argument(std::string(kOp) + ": source is " + shape_str(src.rows, src.cols) +
                            " but the layout " + shape_str(l.rows, l.cols));
  }
  const PublishedShapes s = published_shapes(l);
  const PublishedBytes b = published_bytes(l);
  if (out.data == nullptr || out.scales == nullptr || (b.zeros > 0 && out.zeros == nullptr))
    return invalid_argument(std::string(kOp) + ": an output buffer is null");
  if (l.act_order) {
    if (out.g_idx == nullptr) return invalid_argument(std::string(kOp) + ": act-order layout without g_idx");
    INFERGATE_K_RETURN_IF_ERROR(check_g_idx(l, out.g_idx, kOp));
  }
  for (int64_t n = 0; n < l.rows; ++n) {
    for (int64_t k = 0; k < l.cols; ++k) {
      if (!std::isfinite(source_at(src, n, k)))
        return invalid_argument(std::string(kOp) + ": weight is not finite at " + at(n, k));
    }
  }
  if (is_int4_format(l.format)) {
    std::memset(out.data, 0, static_cast<size_t>(b.data));
    if (b.zeros > 0) std::memset(out.zeros, 0, static_cast<size_t>(b.zeros));
    return quantize_int4(
        src, l, s, PublishedBuffers{out.data, out.scales, out.zeros, l.act_order ? out.g_idx : nullptr});
  }
  return quantize_fp8(src, l, s, out);
}

}  // namespace infergate::kernels
