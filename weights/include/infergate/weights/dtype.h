// Element types of safetensors tensors, named as the format names them ("F16", "BF16", "F8_E4M3", ...).
// The project's one enum of them: the runtime's model::DType is this type, so the release description
// and the checkpoint reader name a tensor's type alike.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace infergate::weights {

enum class Dtype : uint8_t {
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
  kF8E4M3,  // float8 e4m3fn
  kF8E5M2,
};

// "F16", "BF16", ... exactly as in a safetensors header.
std::string_view dtype_name(Dtype t);
// Parses a safetensors dtype name; nullopt for an unknown one (sub-byte types such as F4 included).
std::optional<Dtype> parse_dtype(std::string_view name);
// Bytes per element.
uint64_t dtype_bytes(Dtype t);
// F16, BF16, F32, F64 (the floats a dense weight or a scale may be stored as; fp8 is not one of them).
bool is_wide_float(Dtype t);

}  // namespace infergate::weights
