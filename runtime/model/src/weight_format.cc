// The weight quantization formats' scalar reference (round to nearest, ties away from zero).
#include "infergate/runtime/model/weight_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace infergate::runtime::model {
namespace {

std::string with_suffix(std::string_view weight_name, std::string_view suffix) {
  constexpr std::string_view kWeight = ".weight";
  if (weight_name.size() < kWeight.size() ||
      weight_name.substr(weight_name.size() - kWeight.size()) != kWeight) {
    return {};
  }
  return std::string(weight_name.substr(0, weight_name.size() - kWeight.size())) + std::string(suffix);
}

uint16_t encode_scale(float s, DType t) { return t == DType::kBF16 ? f32_to_bf16(s) : f32_to_f16(s); }
float decode_scale(uint16_t s, DType t) { return t == DType::kBF16 ? bf16_to_f32(s) : f16_to_f32(s); }

// The scale actually stored, re-read, so that quantizing divides by exactly what dequantizing multiplies.
float stored_scale(float s, DType t) { return decode_scale(encode_scale(s, t), t); }

void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
uint16_t get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

int clamp_round(float v, int lo, int hi) {
  if (std::isnan(v)) return 0;
  float r = std::round(v);
  if (r < static_cast<float>(lo)) return lo;
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

}  // namespace

std::string_view weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kDense: return "dense";
    case WeightFormat::kInt8: return "int8";
    case WeightFormat::kInt4: return "int4";
  }
  return "dense";
}

int64_t QuantScheme::groups_per_row(int64_t cols) const {
  if (format != WeightFormat::kInt4 || group_size <= 0) return 1;
  return (cols + group_size - 1) / group_size;
}

Status validate_scheme(const QuantScheme& s) {
  if (s.scale_dtype != DType::kF16 && s.scale_dtype != DType::kBF16) {
    return invalid_argument("scale dtype must be F16 or BF16");
  }
  if (s.format == WeightFormat::kInt8) {
    if (!s.symmetric) return invalid_argument("int8 weights are symmetric per output channel");
    return ok_status();
  }
  if (s.format == WeightFormat::kInt4) {
    if (s.group_size <= 0 || s.group_size % 2 != 0 || s.group_size > 65536) {
      return invalid_argument("int4 group size must be a positive even number (32, 64 or 128), got " +
                              std::to_string(s.group_size));
    }
    return ok_status();
  }
  return invalid_argument("not a quantized format");
}

std::string qweight_name(std::string_view n) { return with_suffix(n, ".qweight"); }
std::string scales_name(std::string_view n) { return with_suffix(n, ".scales"); }
std::string zeros_name(std::string_view n) { return with_suffix(n, ".zeros"); }

std::vector<TensorSpec> quantized_parts(std::string_view name, uint64_t rows, uint64_t cols,
                                        const QuantScheme& s) {
  std::vector<TensorSpec> parts;
  if (s.format == WeightFormat::kInt8) {
    parts.push_back({qweight_name(name), DType::kI8, {rows, cols}});
    parts.push_back({scales_name(name), s.scale_dtype, {rows}});
  } else {
    uint64_t groups = static_cast<uint64_t>(s.groups_per_row(static_cast<int64_t>(cols)));
    parts.push_back({qweight_name(name), DType::kU8, {rows, (cols + 1) / 2}});
    parts.push_back({scales_name(name), s.scale_dtype, {rows, groups}});
    if (!s.symmetric) parts.push_back({zeros_name(name), DType::kU8, {rows, groups}});
  }
  return parts;
}

RowBytes row_bytes(uint64_t nrows, uint64_t cols, const QuantScheme& s) {
  RowBytes b;
  if (s.format == WeightFormat::kInt8) {
    b.qweight = nrows * cols;
    b.scales = nrows * 2;
  } else {
    uint64_t groups = static_cast<uint64_t>(s.groups_per_row(static_cast<int64_t>(cols)));
    b.qweight = nrows * ((cols + 1) / 2);
    b.scales = nrows * groups * 2;
    b.zeros = s.symmetric ? 0 : nrows * groups;
  }
  return b;
}

void quantize_rows(const float* x, uint64_t nrows, uint64_t cols, const QuantScheme& s, uint8_t* qweight,
                   uint8_t* scales, uint8_t* zeros) {
  if (s.format == WeightFormat::kInt8) {
    for (uint64_t r = 0; r < nrows; ++r) {
      const float* row = x + r * cols;
      float amax = 0;
      for (uint64_t c = 0; c < cols; ++c) {
        if (std::isfinite(row[c])) amax = std::max(amax, std::fabs(row[c]));
      }
      float d = stored_scale(amax / 127.0f, s.scale_dtype);
      float inv = d > 0 ? 1.0f / d : 0.0f;
      int8_t* q = reinterpret_cast<int8_t*>(qweight + r * cols);
      for (uint64_t c = 0; c < cols; ++c) {
        float v = row[c];
        q[c] = static_cast<int8_t>(std::isinf(v) ? (v > 0 ? 127 : -127) : clamp_round(v * inv, -127, 127));
      }
      put16(scales + r * 2, encode_scale(d, s.scale_dtype));
    }
    return;
  }
  const uint64_t g = static_cast<uint64_t>(s.group_size);
  const uint64_t groups = static_cast<uint64_t>(s.groups_per_row(static_cast<int64_t>(cols)));
  const uint64_t packed = (cols + 1) / 2;
  std::vector<uint8_t> codes(cols);
  for (uint64_t r = 0; r < nrows; ++r) {
    const float* row = x + r * cols;
    for (uint64_t gi = 0; gi < groups; ++gi) {
      uint64_t c0 = gi * g, c1 = std::min(cols, c0 + g);
      float lo = 0, hi = 0, amax = 0;
      for (uint64_t c = c0; c < c1; ++c) {
        float v = row[c];
        if (!std::isfinite(v)) continue;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        amax = std::max(amax, std::fabs(v));
      }
      if (s.symmetric) {
        float d = stored_scale(amax / 7.0f, s.scale_dtype);
        float inv = d > 0 ? 1.0f / d : 0.0f;
        for (uint64_t c = c0; c < c1; ++c) {
          float v = row[c];
          int q = std::isinf(v) ? (v > 0 ? 7 : -8) : clamp_round(v * inv, -8, 7);
          codes[c] = static_cast<uint8_t>(q + 8);
        }
        put16(scales + (r * groups + gi) * 2, encode_scale(d, s.scale_dtype));
      } else {
        // The range always includes 0 so that zero is exactly representable.
        float d = stored_scale((hi - lo) / 15.0f, s.scale_dtype);
        float inv = d > 0 ? 1.0f / d : 0.0f;
        int z = d > 0 ? clamp_round(-lo * inv, 0, 15) : 0;
        for (uint64_t c = c0; c < c1; ++c) {
          float v = row[c];
          int q = std::isinf(v) ? (v > 0 ? 15 : 0) : clamp_round(v * inv + static_cast<float>(z), 0, 15);
          if (std::isnan(v)) q = z;
          codes[c] = static_cast<uint8_t>(q);
        }
        put16(scales + (r * groups + gi) * 2, encode_scale(d, s.scale_dtype));
        zeros[r * groups + gi] = static_cast<uint8_t>(z);
      }
    }
    uint8_t* out = qweight + r * packed;
    for (uint64_t j = 0; j < packed; ++j) {
      uint8_t lo_nib = codes[2 * j];
      uint8_t hi_nib = 2 * j + 1 < cols ? codes[2 * j + 1] : (s.symmetric ? 8 : 0);
      out[j] = static_cast<uint8_t>(lo_nib | (hi_nib << 4));
    }
  }
}

void dequantize_rows(const uint8_t* qweight, const uint8_t* scales, const uint8_t* zeros, uint64_t nrows,
                     uint64_t cols, const QuantScheme& s, float* out) {
  if (s.format == WeightFormat::kInt8) {
    for (uint64_t r = 0; r < nrows; ++r) {
      float d = decode_scale(get16(scales + r * 2), s.scale_dtype);
      const int8_t* q = reinterpret_cast<const int8_t*>(qweight + r * cols);
      for (uint64_t c = 0; c < cols; ++c) out[r * cols + c] = d * static_cast<float>(q[c]);
    }
    return;
  }
  const uint64_t g = static_cast<uint64_t>(s.group_size);
  const uint64_t groups = static_cast<uint64_t>(s.groups_per_row(static_cast<int64_t>(cols)));
  const uint64_t packed = (cols + 1) / 2;
  for (uint64_t r = 0; r < nrows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) {
      uint8_t byte = qweight[r * packed + c / 2];
      int q = (c % 2 == 0) ? (byte & 0xf) : (byte >> 4);
      uint64_t gi = c / g;
      float d = decode_scale(get16(scales + (r * groups + gi) * 2), s.scale_dtype);
      int z = s.symmetric ? 8 : zeros[r * groups + gi];
      out[r * cols + c] = d * static_cast<float>(q - z);
    }
  }
}

}  // namespace infergate::runtime::model
