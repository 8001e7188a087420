// Element types of checkpoint tensors, named as safetensors names them ("F16", "BF16", ...), and the
// scalar conversions between fp32, fp16 and bf16 that the test-model generator and quantizer use.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "infergate/weights/dtype.h"

namespace infergate::runtime::model {

// The element types are the weights library's: one enum for the project, so the release description
// and the checkpoint reader cannot disagree on what a tensor holds. "F16", "BF16", ... exactly as in a
// safetensors header; parse_dtype is nullopt for unknown or unsupported (sub-byte) types.
using DType = weights::Dtype;
using weights::dtype_name;
using weights::parse_dtype;
// Bytes per element (every supported type is a whole number of bytes).
inline size_t dtype_size(DType t) { return static_cast<size_t>(weights::dtype_bytes(t)); }
// Any floating-point type, fp8 included.
bool is_float(DType t);

// IEEE binary16 and bfloat16 <-> binary32. Narrowing rounds to nearest, ties to even; NaN stays NaN
// (quiet), infinities and overflow become infinities, as a hardware conversion does.
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
inline float bf16_to_f32(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace infergate::runtime::model
