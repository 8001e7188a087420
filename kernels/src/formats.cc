// Validation and names for the weight and KV formats of formats.h.
#include "infergate/kernels/formats.h"

#include <string>

namespace infergate::kernels {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF16: return "f16";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kInt8: return "int8";
    case WeightFormat::kInt4Sym: return "int4-sym";
    case WeightFormat::kInt4Asym: return "int4-asym";
  }
  return "unknown";
}

const char* scale_dtype_name(ScaleDtype d) { return d == ScaleDtype::kF16 ? "f16" : "bf16"; }

const char* kv_dtype_name(KvDtype dt) {
  switch (dt) {
    case KvDtype::kF16: return "f16";
    case KvDtype::kBF16: return "bf16";
    case KvDtype::kFp8E4M3: return "fp8-e4m3";
    case KvDtype::kInt8: return "int8";
    case KvDtype::kInt4: return "int4";
    case KvDtype::kInt4Kivi: return "int4-kivi";
  }
  return "unknown";
}

Status validate_weight_layout(const WeightLayout& l) {
  const int f = static_cast<int>(l.format);
  if (f < 0 || f > static_cast<int>(WeightFormat::kInt4Asym)) {
    return invalid_argument("weight format " + std::to_string(f) + " is not a known format");
  }
  if (static_cast<int>(l.scale_dtype) > static_cast<int>(ScaleDtype::kBF16)) {
    return invalid_argument("scale dtype " + std::to_string(static_cast<int>(l.scale_dtype)) +
                            " is not known");
  }
  if (l.rows < 1 || l.cols < 1) {
    return invalid_argument("weight shape [" + std::to_string(l.rows) + ", " + std::to_string(l.cols) +
                            "] must be positive");
  }
  // 2^46 elements (64 Ti) is far beyond any layer and keeps every byte count far from overflow.
  if (l.rows > (int64_t{1} << 31) || l.cols > (int64_t{1} << 31) || l.rows * l.cols > (int64_t{1} << 46)) {
    return invalid_argument("weight shape [" + std::to_string(l.rows) + ", " + std::to_string(l.cols) +
                            "] is too large");
  }
  if (is_int4(l.format)) {
    bool known = false;
    for (int32_t g : kInt4GroupSizes) known = known || g == l.group_size;
    if (!known) {
      return invalid_argument(std::string(weight_format_name(l.format)) + " group size " +
                              std::to_string(l.group_size) + " is not one of 32, 64, 128");
    }
  } else if (l.group_size != 0) {
    return invalid_argument(std::string(weight_format_name(l.format)) + " takes no group size (got " +
                            std::to_string(l.group_size) + ")");
  }
  return ok_status();
}

Status validate_kv_layout(const KvPageLayout& l) {
  const int dt = static_cast<int>(l.dtype);
  if (dt < 0 || dt > static_cast<int>(KvDtype::kInt4Kivi)) {
    return invalid_argument("kv dtype " + std::to_string(dt) + " is not a known dtype");
  }
  if (l.page_size < 1 || l.page_size > 4096) {
    return invalid_argument("kv page size " + std::to_string(l.page_size) + " is outside 1..4096");
  }
  if (l.num_kv_heads < 1 || l.num_kv_heads > 1024) {
    return invalid_argument("kv heads " + std::to_string(l.num_kv_heads) + " is outside 1..1024");
  }
  if (l.head_dim < 1 || l.head_dim > 1024) {
    return invalid_argument("head_dim " + std::to_string(l.head_dim) + " is outside 1..1024");
  }
  if (l.int4_group != kKvInt4Group && !(l.dtype == KvDtype::kInt4 && l.int4_group == kKvInt4LatentGroup)) {
    return invalid_argument("int4 group of " + std::to_string(l.int4_group) +
                            " values: " + std::to_string(kKvInt4Group) + ", or " +
                            std::to_string(kKvInt4LatentGroup) + " for int4 latent pages");
  }
  return ok_status();
}

}  // namespace infergate::kernels
