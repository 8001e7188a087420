// Scalar reference of weight quantization and dequantization: the specification of the formats.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "infergate/kernels/ref.h"
#include "rows.h"
#include "validate.h"

namespace infergate::kernels {

float source_at(const MatrixSource& src, int64_t r, int64_t c) {
  const int64_t i = r * src.row_stride + c;
  switch (src.dtype) {
    case SourceDtype::kF32: return static_cast<const float*>(src.data)[i];
    case SourceDtype::kF16: return fp16_to_float(static_cast<const uint16_t*>(src.data)[i]);
    case SourceDtype::kBF16: return bf16_to_float(static_cast<const uint16_t*>(src.data)[i]);
  }
  return 0.0f;
}

namespace {

std::string where(int64_t r, int64_t c) {
  return "row " + std::to_string(r) + ", column " + std::to_string(c);
}

// The stored scale for a wanted scale, or an error when the scale dtype cannot hold it.
Status stored_scale(float wanted, ScaleDtype dt, int64_t r, int64_t g, uint16_t* bits) {
  if (!(wanted <= scale_max(dt))) {
    return invalid_argument("scale " + std::to_string(wanted) + " for row " + std::to_string(r) + " group " +
                            std::to_string(g) + " exceeds the " + scale_dtype_name(dt) + " range");
  }
  *bits = scale_round_up(wanted, dt);
  return ok_status();
}

void put_scale(void* scales, int64_t i, uint16_t bits) { static_cast<uint16_t*>(scales)[i] = bits; }

}  // namespace

Status quantize_weight_row(const MatrixSource& src, const WeightLayout& layout, const WeightBuffers& out,
                           int64_t r, float* x) {
  const int64_t k_cols = layout.cols;
  const int64_t row_bytes = weight_row_bytes(layout);
  const int64_t groups = weight_groups_per_row(layout);
  for (int64_t c = 0; c < k_cols; ++c) {
    x[c] = source_at(src, r, c);
    if (!std::isfinite(x[c])) return invalid_argument("weight is not finite at " + where(r, c));
  }
  uint8_t* row = static_cast<uint8_t*>(out.data) + r * row_bytes;
  switch (layout.format) {
    case WeightFormat::kF16:
    case WeightFormat::kBF16: {
      auto* dst = reinterpret_cast<uint16_t*>(row);
      for (int64_t c = 0; c < k_cols; ++c) {
        if (layout.format == WeightFormat::kF16) {
          if (std::fabs(x[c]) > kFp16Max)
            return invalid_argument("weight exceeds the fp16 range at " + where(r, c));
          dst[c] = fp16_from_float(x[c]);
        } else {
          dst[c] = bf16_from_float(x[c]);
        }
      }
      break;
    }
    case WeightFormat::kInt8: {
      float amax = 0.0f;
      for (int64_t c = 0; c < k_cols; ++c) amax = std::max(amax, std::fabs(x[c]));
      uint16_t bits = 0;
      INFERGATE_K_RETURN_IF_ERROR(stored_scale(amax / 127.0f, layout.scale_dtype, r, 0, &bits));
      put_scale(out.scales, r, bits);
      const float inv = safe_inverse(scale_to_float(bits, layout.scale_dtype));
      auto* dst = reinterpret_cast<int8_t*>(row);
      for (int64_t c = 0; c < k_cols; ++c) dst[c] = quantize_int8(x[c], inv);
      break;
    }
    case WeightFormat::kInt4Sym:
    case WeightFormat::kInt4Asym: {
      std::memset(row, 0, static_cast<size_t>(row_bytes));
      const bool asym = layout.format == WeightFormat::kInt4Asym;
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t c0 = g * layout.group_size, c1 = std::min(k_cols, c0 + layout.group_size);
        float wanted;
        float lo = 0.0f, hi = 0.0f;
        if (asym) {
          for (int64_t c = c0; c < c1; ++c) {
            lo = std::min(lo, x[c]);
            hi = std::max(hi, x[c]);
          }
          wanted = (hi - lo) / 15.0f;
        } else {
          float amax = 0.0f;
          for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[c]));
          wanted = amax / 7.0f;
        }
        uint16_t bits = 0;
        INFERGATE_K_RETURN_IF_ERROR(stored_scale(wanted, layout.scale_dtype, r, g, &bits));
        put_scale(out.scales, r * groups + g, bits);
        const float inv = safe_inverse(scale_to_float(bits, layout.scale_dtype));
        int32_t z = 8;
        if (asym) {
          z = static_cast<int32_t>(clamp_float(round_half_even(-lo * inv), 0.0f, 15.0f));
          out.zeros[r * groups + g] = static_cast<uint8_t>(z);
        }
        for (int64_t c = c0; c < c1; ++c) {
          const uint32_t u = quantize_int4(x[c], inv, z);
          row[c >> 1] = static_cast<uint8_t>(row[c >> 1] | (u << ((c & 1) * 4)));
        }
      }
      break;
    }
  }
  return ok_status();
}

Status quantize_weight_ref(const MatrixSource& src, const WeightLayout& layout, const WeightBuffers& out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_quantize_args(src, layout, out));
  std::vector<float> x(static_cast<size_t>(layout.cols));
  for (int64_t r = 0; r < layout.rows; ++r) {
    INFERGATE_K_RETURN_IF_ERROR(quantize_weight_row(src, layout, out, r, x.data()));
  }
  return ok_status();
}

Status dequantize_weight_ref(const WeightView& w, View2<float> out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_weight_view(w, "dequantize_weight"));
  const WeightLayout& l = w.layout;
  if (out.data == nullptr || out.rows != l.rows || out.cols != l.cols || out.row_stride < l.cols) {
    return invalid_argument("dequantize_weight: output view is not [" + std::to_string(l.rows) + ", " +
                            std::to_string(l.cols) + "]");
  }
  const int64_t row_bytes = weight_row_bytes(l);
  const int64_t groups = weight_groups_per_row(l);
  const auto* scales = static_cast<const uint16_t*>(w.scales);
  for (int64_t r = 0; r < l.rows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * row_bytes;
    float* y = out.row(r);
    for (int64_t c = 0; c < l.cols; ++c) {
      switch (l.format) {
        case WeightFormat::kF16: y[c] = fp16_to_float(reinterpret_cast<const uint16_t*>(row)[c]); break;
        case WeightFormat::kBF16: y[c] = bf16_to_float(reinterpret_cast<const uint16_t*>(row)[c]); break;
        case WeightFormat::kInt8:
          y[c] = dequantize_int8(reinterpret_cast<const int8_t*>(row)[c],
                                 scale_to_float(scales[r], l.scale_dtype));
          break;
        case WeightFormat::kInt4Sym:
        case WeightFormat::kInt4Asym: {
          const int64_t g = c / l.group_size;
          const uint32_t z = l.format == WeightFormat::kInt4Asym ? w.zeros[r * groups + g] : 8u;
          y[c] = dequantize_int4(int4_get(row, c), z, scale_to_float(scales[r * groups + g], l.scale_dtype));
          break;
        }
      }
    }
  }
  return ok_status();
}

}  // namespace infergate::kernels
