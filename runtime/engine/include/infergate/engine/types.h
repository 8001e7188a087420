// The engine's vocabulary: which weight format and KV-cache dtype a model is served in, their names on
// the command line, and sequence ids.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "infergate/common/result.h"
#include "infergate/kernels/formats.h"

namespace infergate::runtime::engine {

// How the linear layers are held and multiplied.
//   kF32  the fp32 reference path (dense weights upcast to fp32; for quality baselines, not serving)
//   kF16 / kBF16  dense; a dense checkpoint in another float dtype is converted once at load
//   kInt8 / kInt4 served in the checkpoint's compressed form (written by `infergate-runtime quantize`)
enum class WeightFormat : uint8_t { kF32, kF16, kBF16, kInt8, kInt4 };

// The KV cache's element type. kF32 is the reference path's unquantized cache (quality baselines);
// the others are the kernels' page formats (docs/quant-formats.md). kInt4 quantizes keys per token,
// kInt4Kivi per channel (KIVI).
enum class KvCacheDtype : uint8_t { kF32, kF16, kBF16, kFp8, kInt8, kInt4, kInt4Kivi };

// Canonical names: "fp32", "fp16", "bf16", "int8", "int4".
std::string_view weight_format_name(WeightFormat f);
// Accepts the canonical names and "f32", "f16", "float16", "bfloat16". Unknown names are refused with
// reason "UnknownWeightFormat".
Result<WeightFormat> parse_weight_format(std::string_view name);

// Canonical names: "fp32", "fp16", "bf16", "fp8", "int8", "int4", "int4-kivi".
std::string_view kv_cache_dtype_name(KvCacheDtype d);
// Accepts the canonical names and "f32", "f16", "float16", "bfloat16", "fp8-e4m3", "fp8_e4m3".
// Unknown names are refused with reason "UnknownKvCacheDtype".
Result<KvCacheDtype> parse_kv_cache_dtype(std::string_view name);
// The kernels' page dtype; nullopt for kF32 (which has no paged kernels format).
std::optional<kernels::KvDtype> kernel_kv_dtype(KvCacheDtype d);

// A sequence's id inside one Engine: assigned by add_sequence, never reused.
using SeqId = uint64_t;

}  // namespace infergate::runtime::engine
