// Reading a quantization_config (and our quantization.json) into a scheme and the rules that say
// which linears it quantizes. Internal to the weights library: describe_weights is the interface.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/json.h"
#include "infergate/common/result.h"
#include "infergate/weights/module_rules.h"
#include "infergate/weights/scheme.h"

namespace infergate::weights::detail {

Error refuse(std::string_view reason, std::string message);
Error field_error(std::string_view reason, std::string_view field, std::string message);
Error tensor_error(std::string_view reason, std::string_view tensor, std::string message);

// Which linears a config says are quantized.
struct Rules {
  enum class Kind {
    kNothing,         // a dense release
    kTargetsIgnore,   // compressed-tensors: a target matches and no ignore entry does
    kAllButExcluded,  // fp8 / AWQ / GPTQ: every linear but lm_head (unless quantized) and the substrings
    kListed,          // ours: exactly the modules quantization.json lists
  };
  Kind kind = Kind::kNothing;
  ModuleRules targets;                        // kTargetsIgnore
  ModuleRules ignore;                         // kTargetsIgnore
  std::vector<std::string> not_convert;       // kAllButExcluded (modules_to_not_convert)
  bool lm_head_quantized = false;             // kAllButExcluded (GPTQ's lm_head flag)
  std::set<std::string, std::less<>> listed;  // kListed

  // Whether the config quantizes `module`, and (for messages) why: the rule that decides.
  struct Verdict {
    bool quantized = false;
    std::string why;
  };
  Result<Verdict> verdict(std::string_view module, bool is_linear) const;
};

struct ParsedConfig {
  Scheme scheme;
  std::string quant_method;
  std::string field;  // where the quantization_config was
  int64_t num_hidden_layers = 0;
  Rules rules;
  // fp8-block: the scale tensor's suffix ("weight_scale_inv" as DeepSeek-V3 names it, or "weight_scale"
  // for compressed-tensors' block strategy).
  std::string fp8_scale_suffix = "weight_scale_inv";
  // ours: each quantized tensor's logical shape from quantization.json ("X.weight" -> [N, K]).
  std::map<std::string, std::vector<uint64_t>, std::less<>> ours_shapes;
};

// config: config.json parsed (or null when the release has none); quantization_json: its text or null.
Result<ParsedConfig> parse_quantization(const Json* config, const std::string* quantization_json);

}  // namespace infergate::weights::detail
