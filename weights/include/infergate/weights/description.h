// One description of a release's weights, read once from config.json's quantization_config (top level
// or nested under text_config), quantization.json (our own quantize's record) and the safetensors
// headers, and shared by the agent (the word it signs), the planner (the bytes it budgets), the operator
// (the word it checks) and the runtime (the parts it loads), so that no part guesses differently.
//
// What it checks, each refusal an Error with one of the reason words below and the details "tensor"
// (the tensor or module concerned) or "field" (the config path):
//   - the config: a known quant_method (UnknownQuantMethod) in a variant we describe
//     (UnsupportedQuantization: per-tensor fp8, static activation scales, 8-bit GPTQ, sparsity,
//     transforms, several different config groups, ...), with well-typed fields (InvalidQuantizationConfig);
//   - the parts of every quantized linear: present (MissingQuantPart), of the right dtype (QuantPartDtype)
//     and shape (QuantPartShape), none without its data tensor (OrphanQuantPart), a group size that
//     divides K where the format requires it (GroupSizeMismatch), AWQ / GPTQ packing widths;
//   - the format against the tensors: a config that names a format its tensors do not have, or
//     quantized tensors without a config that says so (FormatMismatch);
//   - the rules against the tensors: a linear the ignore / targets / modules_to_not_convert rules say is
//     quantized but is not, or the other way round (IgnoreRuleMismatch); rules that cannot be evaluated
//     exactly (UnsupportedPattern, module_rules.h);
//   - with a TensorReader, the values that decide the layout or would decode to noise: weight_shape
//     against the packed size, NaN / infinite / negative scales, ue8m0 scales that are not powers of two,
//     g_idx entries (QuantValueInvalid).
// Safetensors header errors keep their own word (InvalidSafetensors).
//
// Module classes, told from tensor names: a module is a *linear* when it has a 2-D weight (or quantized
// parts) and is neither an embedding (a name ending in embed_tokens, wte or word_embeddings) nor a MoE
// router (a name ending in mlp.gate: DeepSeek-V3's MoEGate and GLM-4.5's router are not nn.Linear).
// Layers at or past the config's num_hidden_layers (multi-token-prediction layers) are described, and
// their parts checked, but the rules are not applied to them: publishers treat them apart.
//
// Thread-safe (pure functions of their inputs, plus reads through the caller's reader).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/json.h"
#include "infergate/common/result.h"
#include "infergate/weights/module_rules.h"
#include "infergate/weights/safetensors_header.h"
#include "infergate/weights/scheme.h"

namespace infergate::weights {

// The stable reason words of a refused description.
namespace reasons {
inline constexpr std::string_view kUnknownQuantMethod = "UnknownQuantMethod";
inline constexpr std::string_view kUnsupportedQuantization = "UnsupportedQuantization";
inline constexpr std::string_view kInvalidQuantizationConfig = "InvalidQuantizationConfig";
inline constexpr std::string_view kMissingQuantPart = "MissingQuantPart";
inline constexpr std::string_view kOrphanQuantPart = "OrphanQuantPart";
inline constexpr std::string_view kQuantPartDtype = "QuantPartDtype";
inline constexpr std::string_view kQuantPartShape = "QuantPartShape";
inline constexpr std::string_view kGroupSizeMismatch = "GroupSizeMismatch";
inline constexpr std::string_view kFormatMismatch = "FormatMismatch";
inline constexpr std::string_view kIgnoreRuleMismatch = "IgnoreRuleMismatch";
inline constexpr std::string_view kQuantValueInvalid = "QuantValueInvalid";
}  // namespace reasons
// Every reason word describe_weights may return (docs/quant-formats.md lists them; a test keeps the two
// in step), InvalidSafetensors and UnsupportedPattern included.
std::span<const std::string_view> description_reasons();

// What a stored tensor is to its quantized linear.
enum class PartRole : uint8_t { kData, kScale, kZeros, kGIdx, kShape };
std::string_view part_role_name(PartRole r);  // "data", "scale", "zeros", "g_idx", "shape"

struct Part {
  PartRole role = PartRole::kData;
  const TensorHeader* tensor = nullptr;  // into ReleaseMetadata::tensors (the caller keeps it alive)
};

struct QuantizedLinear {
  std::string module;       // "model.layers.3.mlp.experts.7.up_proj"
  uint64_t rows = 0;        // N, output features
  uint64_t cols = 0;        // K, input features
  std::vector<Part> parts;  // data first, then scale, zeros, g_idx, shape as the family has them
  const Part* part(PartRole r) const;
  uint64_t stored_bytes() const;
};

struct DenseTensor {
  const TensorHeader* tensor = nullptr;
  bool linear = false;  // the 2-D weight of a linear module (left unquantized)
};

struct WeightDescription {
  Scheme scheme;
  std::string word;                        // format_word(scheme)
  std::string quant_method;                // as config.json names it ("" for a dense release)
  std::string config_field;                // "quantization_config", "text_config.quantization_config" or ""
  std::vector<QuantizedLinear> quantized;  // sorted by module
  std::vector<DenseTensor> dense;          // every other tensor, in the order given
  uint64_t quantized_bytes = 0;            // all parts of all quantized linears
  uint64_t dense_bytes = 0;

  const QuantizedLinear* find(std::string_view module) const;
};

// What a release holds, as the caller read it (the agent through its no-follow opens, the runtime from
// its model directory). Only tensors of *.safetensors files belong in `tensors`.
struct ReleaseMetadata {
  std::optional<std::string> config_json;        // config.json
  std::optional<std::string> quantization_json;  // quantization.json (ours)
  std::vector<TensorHeader> tensors;             // every tensor of every shard
};

// Reads tensor bytes for the value checks (weight_shape, scales, g_idx): `out.size()` bytes at
// `offset` within tensor `t`. Implementations may be called from one thread at a time.
class TensorReader {
 public:
  virtual ~TensorReader() = default;
  virtual Status read(const TensorHeader& t, uint64_t offset, std::span<uint8_t> out) = 0;
};

struct DescribeOptions {
  // With a reader the values are checked too (weight_shape is then required for compressed-tensors
  // channel-wise int4, whose K the headers alone do not fix). Scales are read in chunks of 1 MiB.
  TensorReader* reader = nullptr;
};

Result<WeightDescription> describe_weights(const ReleaseMetadata& release,
                                           const DescribeOptions& options = {});

// The quantization_config object and where it was found, or null when config.json has none.
struct ConfigQuantization {
  const Json* config = nullptr;   // quantization_config
  std::string field;              // "quantization_config" or "text_config.quantization_config"
  int64_t num_hidden_layers = 0;  // from the same level (0 when absent)
};
Result<ConfigQuantization> find_quantization_config(const Json& config);

// The module a tensor belongs to and the tensor's suffix ("model.layers.0.mlp.down_proj", "weight").
std::pair<std::string_view, std::string_view> split_tensor_name(std::string_view tensor);
// The module classes described above.
bool is_embedding_module(std::string_view module);
bool is_router_module(std::string_view module);
// The decoder layer index of a module ("...layers.12.mlp..." -> 12), or -1.
int64_t layer_index(std::string_view module);

}  // namespace infergate::weights
