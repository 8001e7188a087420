// Element types of checkpoint tensors, named as safetensors names them ("F16", "BF16", ...), and the
// scalar conversions between fp32, fp16 and bf16 that the test-model generator and quantizer use.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace infergate::runtime::model {

enum class DType : uint8_t {
  kBool,
  kU8,
  kI8,
  kU16,
  kI16,
  kF16,
  kBF16,
  kU32,
  kI32,
  kF32,
  kU64,
  kI64,
  kF64,
  kF8E4M3,  // float8 e4m3fn (DeepSeek-V3's weights)
  kF8E5M2,
};

// "F16", "BF16", ... exactly as in a safetensors header.
std::string_view dtype_name(DType t);
// Parses a safetensors dtype name; nullopt for unknown or unsupported (sub-byte) types.
std::optional<DType> parse_dtype(std::string_view name);
// Bytes per element (every supported type is a whole number of bytes).
size_t dtype_size(DType t);
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
