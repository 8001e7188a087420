// The checkpoint side of the published weight formats (FP8 block / channel, compressed-tensors INT4,
// AWQ, GPTQ): the stored tensors of one linear layer (names, dtypes, shapes, bytes) written from float
// weights with the kernels' quantize_published_ref, and read back with dequantize_published_ref; and the
// weights description (weights/description.h) of a model directory. The quantizer math lives once, in
// kernels/src/ref/published_ref.cc; make-test-model writes its published families through here, and so
// will `quantize --weight-format fp8-block|int4-ct`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/kernels/published.h"
#include "infergate/runtime/model/checkpoint.h"
#include "infergate/runtime/model/dtype.h"
#include "infergate/runtime/model/files.h"
#include "infergate/runtime/model/safetensors_writer.h"
#include "infergate/weights/description.h"

namespace infergate::runtime::model {

// The kernels' layout of a [rows, cols] linear in a published scheme (fp8-block, fp8-channel, ct-int4,
// awq, gptq); refuses our own and dense schemes, and what validate_published_layout refuses (reason
// "InvalidQuantScheme", naming the shape).
Result<kernels::PublishedLayout> published_layout(const weights::Scheme& s, uint64_t rows, uint64_t cols);

// The tensors (names, dtypes, shapes) a [rows, cols] linear stored as `weight_name` ("X.weight") in the
// original becomes in a published scheme, in the order quantize_published_linear returns them.
Result<std::vector<TensorSpec>> published_part_specs(std::string_view weight_name, uint64_t rows,
                                                     uint64_t cols, const weights::Scheme& s);

struct QuantizedPart {
  TensorSpec spec;
  std::vector<uint8_t> bytes;
};

// Quantizes W [rows, cols] (fp32, row-major), stored as `weight_name` ("X.weight") in the original,
// into the scheme's tensors, as the publisher's tool names and shapes them:
//   fp8-block   X.weight F8_E4M3 [N, K], X.weight_scale_inv F32 [ceil(N/R), ceil(K/C)]
//   fp8-channel X.weight F8_E4M3 [N, K], X.weight_scale [N, 1]
//   ct-int4     X.weight_packed I32 [N, ceil(K/8)], X.weight_scale [N, K/G], X.weight_shape I64 [2],
//               X.weight_zero_point I32 [ceil(N/8), K/G] (asymmetric), X.weight_g_idx I32 [K] (act order)
//   awq         X.qweight I32 [K, N/8], X.qzeros I32 [K/G, N/8], X.scales F16 [K/G, N]
//   gptq        X.qweight I32 [K/8, N], X.qzeros I32 [ceil(K/G), N/8], X.scales F16, X.g_idx I32 [K]
// Scales are stored as scheme.scale_dtype (fp8-block: F32). With act_order the column groups come from
// act_order_groups(w). Errors name the tensor.
Result<std::vector<QuantizedPart>> quantize_published_linear(std::string_view weight_name, const float* w,
                                                             uint64_t rows, uint64_t cols,
                                                             const weights::Scheme& s);

// Column groups for activation order without calibration data: columns sorted by descending sum of
// squares (GPTQ orders by the Hessian diagonal, which calibration activations give; the format only
// needs a permutation), then group i / G for the i-th column in that order. Ties keep column order.
std::vector<int32_t> act_order_groups(const float* w, uint64_t rows, uint64_t cols, int64_t group_size);

// The weights description of a model directory: config.json, quantization.json and every shard's
// header from `ckpt`, values (weight_shape, scales, g_idx) checked through the mapped shards.
// `metadata` receives the headers the description points into, and must outlive it.
Result<weights::WeightDescription> describe_checkpoint(const ModelDirectory& dir, const Checkpoint& ckpt,
                                                       weights::ReleaseMetadata* metadata);

// W [rows, cols] of one described quantized linear as fp32, through the kernels' scalar references
// (dequantize_published_ref; dequantize_weight_ref for our int8/int4).
Result<std::vector<float>> dequantize_described(const Checkpoint& ckpt, const weights::QuantizedLinear& q,
                                                const weights::Scheme& s);

}  // namespace infergate::runtime::model
