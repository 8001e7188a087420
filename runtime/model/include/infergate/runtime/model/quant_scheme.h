// What a compressed checkpoint is, without reading one: the weight format and its scheme (int8 per
// output channel, int4 per group, symmetric or with zero points, the scale dtype), the kernels' layout
// a scheme gives a [rows, cols] weight, and the quantizer's rule for which of an architecture's
// tensors it compresses. Part of infergate_runtime_model_config (with config.h and dtype.h), the small
// library the capacity planner, and through it the operator, links without the checkpoint reader,
// the tokenizer, the quantizer or the CPU kernels.
#pragma once

#include <cstdint>
#include <string_view>

#include "infergate/common/result.h"
#include "infergate/kernels/formats.h"
#include "infergate/runtime/model/config.h"
#include "infergate/runtime/model/dtype.h"

namespace infergate::runtime::model {

enum class WeightFormat { kDense, kInt8, kInt4 };
std::string_view weight_format_name(WeightFormat f);  // "dense", "int8", "int4"

struct QuantScheme {
  WeightFormat format = WeightFormat::kInt8;
  int64_t group_size = 0;  // int4: 32, 64 or 128; int8: 0 (one scale per output row)
  bool symmetric = true;   // int8 is always symmetric
  DType scale_dtype = DType::kF16;

  int64_t groups_per_row(int64_t cols) const;
};
// Refuses what the kernels' formats cannot hold (reason "InvalidQuantScheme").
Status validate_scheme(const QuantScheme& s);
// The kernels' layout of a [rows, cols] weight in this scheme.
kernels::WeightLayout kernel_layout(const QuantScheme& s, int64_t rows, int64_t cols);

// The quantizer's rule for which of an architecture's tensors it compresses: every 2-D linear
// weight except the embeddings, the MoE router (mlp.gate) and, unless asked, lm_head. Norms and
// biases (1-D) stay as they are. The capacity planner sizes weights with the same rule.
bool quantizer_compresses(const ExpectedTensor& tensor, bool quantize_lm_head);

}  // namespace infergate::runtime::model
