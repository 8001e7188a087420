// Weight-format schemes: names, validation against the kernels' formats, layouts, and which tensors
// the quantizer compresses.
#include "infergate/runtime/model/quant_scheme.h"

#include <string>

namespace infergate::runtime::model {

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

kernels::WeightLayout kernel_layout(const QuantScheme& s, int64_t rows, int64_t cols) {
  kernels::WeightLayout l;
  l.format = s.format == WeightFormat::kInt8 ? kernels::WeightFormat::kInt8
             : s.symmetric                   ? kernels::WeightFormat::kInt4Sym
                                             : kernels::WeightFormat::kInt4Asym;
  l.rows = rows;
  l.cols = cols;
  l.group_size = s.format == WeightFormat::kInt4 ? static_cast<int32_t>(s.group_size) : 0;
  l.scale_dtype = s.scale_dtype == DType::kBF16 ? kernels::ScaleDtype::kBF16 : kernels::ScaleDtype::kF16;
  return l;
}

Status validate_scheme(const QuantScheme& s) {
  auto bad = [](std::string m) {
    return Error(ErrorCode::kInvalidArgument, std::move(m), "InvalidQuantScheme");
  };
  if (s.format == WeightFormat::kDense) return bad("not a quantized format");
  if (s.scale_dtype != DType::kF16 && s.scale_dtype != DType::kBF16)
    return bad("scale dtype must be F16 or BF16");
  if (s.format == WeightFormat::kInt8 && !s.symmetric)
    return bad("int8 weights are symmetric per output channel");
  if (s.format == WeightFormat::kInt8 && s.group_size != 0) {
    return bad("int8 weights have one scale per output channel; a group size applies to int4 only");
  }
  kernels::Status k = kernels::validate_weight_layout(kernel_layout(s, 1, 1));
  if (!k.ok()) return bad(k.message() + " (int4 group sizes: 32, 64, 128)");
  return ok_status();
}

bool quantizer_compresses(const ExpectedTensor& e, bool quantize_lm_head) {
  if (e.shape.size() != 2 || e.name == "model.embed_tokens.weight") return false;
  if (e.name == "lm_head.weight" && !quantize_lm_head) return false;
  if (e.name.ends_with(".mlp.gate.weight")) return false;  // MoE router: small and sensitive
  // MLA's kv_b_proj: the engine re-lays it out per head at load (W_UK transposed into the query, W_UV
  // after attention), which a quantized copy would have to be dequantized for anyway.
  if (e.name.ends_with(".self_attn.kv_b_proj.weight")) return false;
  return true;
}

}  // namespace infergate::runtime::model
