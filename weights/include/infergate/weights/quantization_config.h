// The quantization_config object each published family's releases carry in config.json, written the
// way the publishers' tools write it (keys sorted, as transformers saves configs), so that a release
// made here (make-test-model's published families today; `quantize --weight-format fp8-block|int4-ct`
// next) loads unchanged in vLLM and SGLang, and describe_weights reads it back to the same scheme.
#pragma once

#include <string>
#include <vector>

#include "infergate/common/json.h"
#include "infergate/common/result.h"
#include "infergate/weights/scheme.h"

namespace infergate::weights {

// `exclusions`: compressed-tensors' `ignore` entries (names or "re:" patterns), or the fp8 / AWQ / GPTQ
// `modules_to_not_convert` (null when empty, as AutoAWQ writes it; left out for fp8 and GPTQ).
//   fp8-block (128 x 128 or any block): DeepSeek-V3's {activation_scheme, fmt, quant_method: fp8,
//     weight_block_size} (+ scale_fmt: ue8m0 when the scheme says so);
//   fp8-channel: compressed-tensors float-quantized, channel weights, dynamic per-token activations;
//   int4-ct: compressed-tensors pack-quantized, group (or channel) weights, no activation quantization;
//   awq: AutoAWQ GEMM {bits, group_size, modules_to_not_convert, quant_method: awq, version: gemm,
//   zero_point}; gptq: {bits, checkpoint_format, damp_percent, desc_act, group_size, quant_method: gptq,
//   static_groups,
//     sym, true_sequential}.
// Our own int8/int4 (written by quantize itself) and dense schemes are refused here.
Result<Json> quantization_config_json(const Scheme& scheme, const std::vector<std::string>& exclusions);

}  // namespace infergate::weights
