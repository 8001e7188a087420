// safetensors dtype names and sizes.
#include "infergate/weights/dtype.h"

#include <array>
#include <utility>

namespace infergate::weights {
namespace {

constexpr std::array<std::pair<Dtype, std::string_view>, 15> kNames = {{
    {Dtype::kBool, "BOOL"},
    {Dtype::kU8, "U8"},
    {Dtype::kI8, "I8"},
    {Dtype::kU16, "U16"},
    {Dtype::kI16, "I16"},
    {Dtype::kF16, "F16"},
    {Dtype::kBF16, "BF16"},
    {Dtype::kU32, "U32"},
    {Dtype::kI32, "I32"},
    {Dtype::kF32, "F32"},
    {Dtype::kU64, "U64"},
    {Dtype::kI64, "I64"},
    {Dtype::kF64, "F64"},
    {Dtype::kF8E4M3, "F8_E4M3"},
    {Dtype::kF8E5M2, "F8_E5M2"},
}};

}  // namespace

std::string_view dtype_name(Dtype t) {
  for (const auto& [d, n] : kNames) {
    if (d == t) return n;
  }
  return "?";
}

std::optional<Dtype> parse_dtype(std::string_view name) {
  for (const auto& [d, n] : kNames) {
    if (n == name) return d;
  }
  return std::nullopt;
}

uint64_t dtype_bytes(Dtype t) {
  switch (t) {
    case Dtype::kBool:
    case Dtype::kU8:
    case Dtype::kI8:
    case Dtype::kF8E4M3:
    case Dtype::kF8E5M2: return 1;
    case Dtype::kU16:
    case Dtype::kI16:
    case Dtype::kF16:
    case Dtype::kBF16: return 2;
    case Dtype::kU32:
    case Dtype::kI32:
    case Dtype::kF32: return 4;
    case Dtype::kU64:
    case Dtype::kI64:
    case Dtype::kF64: return 8;
  }
  return 1;
}

bool is_wide_float(Dtype t) {
  return t == Dtype::kF16 || t == Dtype::kBF16 || t == Dtype::kF32 || t == Dtype::kF64;
}

}  // namespace infergate::weights
