// Which weight format an artifact holds, for the release statement: quantization.json's "format" when
// the artifact is compressed, else the dominant dtype of its safetensors checkpoint, else config.json's
// torch_dtype.
#pragma once

#include <optional>
#include <string>

#include "infergate/common/manifest.h"
#include "infergate/common/result.h"

namespace infergate::agent {

// Reads only listed files, through the no-follow opens, with caps (quantization.json and config.json
// 1 MiB, a safetensors header 100 MB). Returns nullopt when nothing says; refuses (MetadataInvalid)
// a quantization.json without a valid "format", or a safetensors header that cannot be read.
// safetensors dtypes map to: F16 fp16, BF16 bf16, F32 fp32, F64 fp64, F8_E4M3 fp8_e4m3,
// F8_E5M2 fp8_e5m2, I8 int8, U8 uint8; the dtype holding the most bytes wins.
Result<std::optional<std::string>> detect_weight_format(int root_fd, const Manifest& manifest);

}  // namespace infergate::agent
