// Which weight format an artifact holds, for the release statement: the word of the one weights
// description (weights/description.h) read from the listed config.json, quantization.json and
// safetensors headers, so the agent, the planner, the operator and the runtime name a release alike.
#pragma once

#include <optional>
#include <string>

#include "infergate/common/manifest.h"
#include "infergate/common/result.h"

namespace infergate::agent {

// Reads only listed files, through the no-follow opens, with caps (config.json and quantization.json
// 16 MiB, a safetensors header 100 MB). With safetensors files at the top level (the checkpoint a loader
// reads; copies in subdirectories are not part of it) the release is described
// (weights::describe_weights, values checked: weight_shape, scales, g_idx) and its word returned, e.g.
// "bf16", "int4", "fp8-block", "int4-ct-g32-sym", "awq-g128". Refusals: a safetensors header that cannot
// be read (MetadataInvalid, naming the file); weights that disagree with their config or that no
// described format holds (WeightsInvalid, with the description's reason word in the detail "problem"
// and the tensor or config field named). Without safetensors: config.json's torch_dtype (fp16, bf16,
// fp32), or nullopt when nothing says; a quantization_config or quantization.json then names a format
// no tensor has (WeightsInvalid).
Result<std::optional<std::string>> detect_weight_format(int root_fd, const Manifest& manifest);

}  // namespace infergate::agent
