// Names of weight formats and KV-cache dtypes.
#include "infergate/engine/types.h"

#include <string>

namespace infergate::runtime::engine {

std::string_view weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return "fp32";
    case WeightFormat::kF16: return "fp16";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kInt8: return "int8";
    case WeightFormat::kInt4: return "int4";
  }
  return "?";
}

Result<WeightFormat> parse_weight_format(std::string_view n) {
  if (n == "fp32" || n == "f32" || n == "float32") return WeightFormat::kF32;
  if (n == "fp16" || n == "f16" || n == "float16") return WeightFormat::kF16;
  if (n == "bf16" || n == "bfloat16") return WeightFormat::kBF16;
  if (n == "int8") return WeightFormat::kInt8;
  if (n == "int4") return WeightFormat::kInt4;
  return invalid_argument("unknown weight format \"" + std::string(n) +
                          "\" (expected fp16, bf16, int8, int4 or fp32)")
      .with_reason("UnknownWeightFormat")
      .with_detail("weight_format", std::string(n));
}

std::string_view kv_cache_dtype_name(KvCacheDtype d) {
  switch (d) {
    case KvCacheDtype::kF32: return "fp32";
    case KvCacheDtype::kF16: return "fp16";
    case KvCacheDtype::kBF16: return "bf16";
    case KvCacheDtype::kFp8: return "fp8";
    case KvCacheDtype::kInt8: return "int8";
    case KvCacheDtype::kInt4: return "int4";
    case KvCacheDtype::kInt4Kivi: return "int4-kivi";
  }
  return "?";
}

Result<KvCacheDtype> parse_kv_cache_dtype(std::string_view n) {
  if (n == "fp32" || n == "f32" || n == "float32") return KvCacheDtype::kF32;
  if (n == "fp16" || n == "f16" || n == "float16") return KvCacheDtype::kF16;
  if (n == "bf16" || n == "bfloat16") return KvCacheDtype::kBF16;
  if (n == "fp8" || n == "fp8-e4m3" || n == "fp8_e4m3") return KvCacheDtype::kFp8;
  if (n == "int8") return KvCacheDtype::kInt8;
  if (n == "int4") return KvCacheDtype::kInt4;
  if (n == "int4-kivi" || n == "int4_kivi") return KvCacheDtype::kInt4Kivi;
  return invalid_argument("unknown KV cache dtype \"" + std::string(n) +
                          "\" (expected fp16, bf16, fp8, int8, int4, int4-kivi or fp32)")
      .with_reason("UnknownKvCacheDtype")
      .with_detail("kv_cache_dtype", std::string(n));
}

std::optional<kernels::KvDtype> kernel_kv_dtype(KvCacheDtype d) {
  switch (d) {
    case KvCacheDtype::kF32: return std::nullopt;
    case KvCacheDtype::kF16: return kernels::KvDtype::kF16;
    case KvCacheDtype::kBF16: return kernels::KvDtype::kBF16;
    case KvCacheDtype::kFp8: return kernels::KvDtype::kFp8E4M3;
    case KvCacheDtype::kInt8: return kernels::KvDtype::kInt8;
    case KvCacheDtype::kInt4: return kernels::KvDtype::kInt4;
    case KvCacheDtype::kInt4Kivi: return kernels::KvDtype::kInt4Kivi;
  }
  return std::nullopt;
}

}  // namespace infergate::runtime::engine
