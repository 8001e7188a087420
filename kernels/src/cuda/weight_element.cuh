// Dequantized weight elements on the device, as dequantize_weight_ref computes them (formats.h's
// per-element maths): one element, or 8 consecutive ones of a row with one scale lookup (int4 groups
// are multiples of 8) and one vector load where the row is aligned. Written on the shared primitives,
// so the CPU emulator runs it too.
#pragma once

#include <cstdint>

#include "infergate/kernels/formats.h"
#include "infergate/kernels/numeric.h"
#include "prims.cuh"

namespace infergate::kernels::cuda {

INFERGATE_DEV const uint8_t* weight_row(const WeightView& w, int64_t r) {
  return static_cast<const uint8_t*>(w.data) + r * weight_row_bytes(w.layout);
}

INFERGATE_DEV float weight_element(const WeightView& w, int64_t r, int64_t c) {
  const WeightLayout& l = w.layout;
  const uint8_t* row = weight_row(w, r);
  const auto* scales = static_cast<const uint16_t*>(w.scales);
  switch (l.format) {
    case WeightFormat::kF16: return fp16_to_float(reinterpret_cast<const uint16_t*>(row)[c]);
    case WeightFormat::kBF16: return bf16_to_float(reinterpret_cast<const uint16_t*>(row)[c]);
    case WeightFormat::kInt8:
      return dequantize_int8(reinterpret_cast<const int8_t*>(row)[c],
                             scale_to_float(scales[r], l.scale_dtype));
    case WeightFormat::kInt4Sym:
    case WeightFormat::kInt4Asym: {
      const int64_t groups = weight_groups_per_row(l), g = c / l.group_size;
      const uint32_t z = l.format == WeightFormat::kInt4Asym ? w.zeros[r * groups + g] : 8u;
      return dequantize_int4(int4_get(row, c), z, scale_to_float(scales[r * groups + g], l.scale_dtype));
    }
  }
  return 0.0f;
}

// Elements k0 .. k0 + 7 of row r (k0 % 8 == 0, k0 + 8 <= cols), equal to weight_element's.
INFERGATE_DEV void weight_load8(const WeightView& w, int64_t r, int64_t k0, float (&out)[8]) {
  const WeightLayout& l = w.layout;
  const uint8_t* row = weight_row(w, r);
  const auto* scales = static_cast<const uint16_t*>(w.scales);
  switch (l.format) {
    case WeightFormat::kF16:
    case WeightFormat::kBF16: {
      const uint8_t* p = row + 2 * k0;
      uint16_t h[8];
      if ((reinterpret_cast<uintptr_t>(p) & 15u) == 0) {
        const uint4 v = *reinterpret_cast<const uint4*>(p);
        const uint32_t words[4] = {v.x, v.y, v.z, v.w};
        for (int j = 0; j < 4; ++j) {
          h[2 * j] = static_cast<uint16_t>(words[j] & 0xFFFFu);
          h[2 * j + 1] = static_cast<uint16_t>(words[j] >> 16);
        }
      } else {
        for (int j = 0; j < 8; ++j) h[j] = reinterpret_cast<const uint16_t*>(p)[j];
      }
      for (int j = 0; j < 8; ++j)
        out[j] = l.format == WeightFormat::kF16 ? fp16_to_float(h[j]) : bf16_to_float(h[j]);
      return;
    }
    case WeightFormat::kInt8: {
      const float d = scale_to_float(scales[r], l.scale_dtype);
      const auto* q = reinterpret_cast<const int8_t*>(row + k0);
      for (int j = 0; j < 8; ++j) out[j] = dequantize_int8(q[j], d);
      return;
    }
    case WeightFormat::kInt4Sym:
    case WeightFormat::kInt4Asym: {
      const int64_t groups = weight_groups_per_row(l), g = k0 / l.group_size;
      const uint32_t z = l.format == WeightFormat::kInt4Asym ? w.zeros[r * groups + g] : 8u;
      const float d = scale_to_float(scales[r * groups + g], l.scale_dtype);
      const uint8_t* p = row + k0 / 2;
      uint32_t word;
      if ((reinterpret_cast<uintptr_t>(p) & 3u) == 0) {
        word = *reinterpret_cast<const uint32_t*>(p);
      } else {
        word = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
               (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
      }
      for (int j = 0; j < 8; ++j) out[j] = dequantize_int4((word >> (4 * j)) & 0xFu, z, d);
      return;
    }
  }
  for (int j = 0; j < 8; ++j) out[j] = 0.0f;  // no such format (validated on the host)
}

}  // namespace infergate::kernels::cuda
