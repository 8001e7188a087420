// config.json -> ModelConfig, with per-architecture defaults from huggingface/transformers, and the
// list of tensors each architecture reads.
#include "infergate/runtime/model/config.h"

#include <cmath>

namespace infergate::runtime::model {
namespace {

struct ArchInfo {
  Architecture arch;
  std::string_view name;
  std::string_view model_type;
};
constexpr ArchInfo kArchs[] = {
    {Architecture::kLlama, "LlamaForCausalLM", "llama"},
    {Architecture::kMistral, "MistralForCausalLM", "mistral"},
    {Architecture::kQwen2, "Qwen2ForCausalLM", "qwen2"},
    {Architecture::kGlm, "GlmForCausalLM", "glm"},
    {Architecture::kGlm4, "Glm4ForCausalLM", "glm4"},
    {Architecture::kDeepseekV3, "DeepseekV3ForCausalLM", "deepseek_v3"},
    {Architecture::kGlm4Moe, "Glm4MoeForCausalLM", "glm4_moe"},
};

std::string supported_list() {
  std::string s;
  for (const auto& a : kArchs) {
    if (!s.empty()) s += ", ";
    s += a.name;
  }
  return s;
}

// Reads fields of one JSON object, turning every problem into an InvalidConfig error that names the
// field (with its path inside nested objects).
class Fields {
 public:
  Fields(const Json& j, std::string file, std::string path = {})
      : j_(j), file_(std::move(file)), path_(std::move(path)) {}

  Error error(std::string_view key, std::string message) const {
    std::string field = json_path(path_, key);
    Error e(ErrorCode::kInvalidArgument, file_ + ": " + field + ": " + message, "InvalidConfig");
    e.with_detail("file", file_).with_detail("field", field);
    return e;
  }

  bool has(std::string_view key) const {
    auto it = j_.find(std::string(key));
    return it != j_.end() && !it->is_null();
  }
  const Json& at(std::string_view key) const { return j_.at(std::string(key)); }

  // A positive integer no larger than `max`; `fallback` when absent (nullopt: required).
  Result<int64_t> count(std::string_view key, std::optional<int64_t> fallback, int64_t max,
                        bool allow_zero = false) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      return error(key, "required field is missing");
    }
    const Json& v = at(key);
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX)) {
      return error(key, "expected an integer, got " + describe(v));
    }
    int64_t n = v.get<int64_t>();
    if (n < 0 || (n == 0 && !allow_zero)) return error(key, "must be positive, got " + std::to_string(n));
    if (n > max)
      return error(key, std::to_string(n) + " is larger than the supported maximum " + std::to_string(max));
    return n;
  }

  Result<double> number(std::string_view key, double fallback, bool positive = true) const {
    if (!has(key)) return fallback;
    const Json& v = at(key);
    if (!v.is_number()) return error(key, "expected a number, got " + describe(v));
    double d = v.get<double>();
    if (!std::isfinite(d)) return error(key, "must be finite");
    if (positive && d <= 0) return error(key, "must be positive");
    return d;
  }

  Result<bool> flag(std::string_view key, bool fallback) const {
    if (!has(key)) return fallback;
    const Json& v = at(key);
    if (!v.is_boolean()) return error(key, "expected true or false, got " + describe(v));
    return v.get<bool>();
  }

  Result<std::string> text(std::string_view key, std::string fallback) const {
    if (!has(key)) return fallback;
    const Json& v = at(key);
    if (!v.is_string()) return error(key, "expected a string, got " + describe(v));
    return v.get<std::string>();
  }

  Result<std::optional<int64_t>> token_id(std::string_view key) const {
    if (!has(key)) return std::optional<int64_t>();
    const Json& v = at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      return error(key, "expected a token id (a non-negative integer)");
    return std::optional<int64_t>(v.get<int64_t>());
  }

  Result<std::vector<int64_t>> token_ids(std::string_view key) const {
    std::vector<int64_t> out;
    if (!has(key)) return out;
    const Json& v = at(key);
    auto one = [&](const Json& x) -> Status {
      if (!x.is_number_integer() || x.get<int64_t>() < 0) {
        return error(key, "expected a token id or a list of token ids");
      }
      out.push_back(x.get<int64_t>());
      return ok_status();
    };
    if (v.is_array()) {
      for (const Json& x : v) INFERGATE_RETURN_IF_ERROR(one(x));
    } else {
      INFERGATE_RETURN_IF_ERROR(one(v));
    }
    return out;
  }

  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  const Json& json() const { return j_; }

  static std::string describe(const Json& v) {
    if (v.is_string()) return "a string";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number_float()) return "a non-integer number";
    if (v.is_number()) return "a number";
    if (v.is_array()) return "an array";
    if (v.is_object()) return "an object";
    return "null";
  }

 private:
  const Json& j_;
  std::string file_;
  std::string path_;
};

constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxHidden = int64_t{1} << 18;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 16384;
constexpr int64_t kMaxPositions = int64_t{1} << 26;
constexpr int64_t kMaxExperts = 65536;

Result<std::optional<DType>> parse_torch_dtype(const Fields& f) {
  // transformers v5 writes "dtype", earlier versions "torch_dtype".
  std::string key = f.has("torch_dtype") ? "torch_dtype" : "dtype";
  INFERGATE_ASSIGN_OR_RETURN(std::string s, f.text(key, ""));
  if (s.empty()) return std::optional<DType>();
  if (s == "float16") return std::optional<DType>(DType::kF16);
  if (s == "bfloat16") return std::optional<DType>(DType::kBF16);
  if (s == "float32") return std::optional<DType>(DType::kF32);
  return f.error(key, "unsupported dtype '" + s + "' (float16, bfloat16 or float32)");
}

Status parse_rope_scaling(const Fields& f, std::string_view key, ModelConfig& c) {
  if (!f.has(key)) return ok_status();
  const Json& rs = f.at(key);
  if (!rs.is_object()) return f.error(key, "expected an object or null");
  Fields r(rs, f.file(), json_path(f.path(), key));
  std::string type_key = r.has("rope_type") ? "rope_type" : "type";
  INFERGATE_ASSIGN_OR_RETURN(std::string type, r.text(type_key, "default"));
  RopeScaling& s = c.rope_scaling;
  if (type == "default") {
    s.type = RopeType::kDefault;
    return ok_status();
  }
  if (type == "linear" || type == "dynamic") {
    s.type = type == "linear" ? RopeType::kLinear : RopeType::kDynamic;
    INFERGATE_ASSIGN_OR_RETURN(s.factor, r.number("factor", 0));
    if (s.factor < 1) return r.error("factor", "must be at least 1");
    return ok_status();
  }
  if (type == "llama3") {
    s.type = RopeType::kLlama3;
    INFERGATE_ASSIGN_OR_RETURN(s.factor, r.number("factor", 0));
    if (s.factor < 1) return r.error("factor", "must be at least 1");
    INFERGATE_ASSIGN_OR_RETURN(s.low_freq_factor, r.number("low_freq_factor", 0));
    INFERGATE_ASSIGN_OR_RETURN(s.high_freq_factor, r.number("high_freq_factor", 0));
    if (s.low_freq_factor <= 0) return r.error("low_freq_factor", "required and must be positive");
    if (s.high_freq_factor <= s.low_freq_factor) {
      return r.error("high_freq_factor", "must be larger than low_freq_factor");
    }
    INFERGATE_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                               r.count("original_max_position_embeddings", std::nullopt, kMaxPositions));
    return ok_status();
  }
  if (type == "yarn") {
    s.type = RopeType::kYarn;
    INFERGATE_ASSIGN_OR_RETURN(s.factor, r.number("factor", 0));
    if (s.factor < 1) return r.error("factor", "must be at least 1");
    INFERGATE_ASSIGN_OR_RETURN(
        s.original_max_position_embeddings,
        r.count("original_max_position_embeddings", c.max_position_embeddings, kMaxPositions));
    INFERGATE_ASSIGN_OR_RETURN(s.beta_fast, r.number("beta_fast", 32));
    INFERGATE_ASSIGN_OR_RETURN(s.beta_slow, r.number("beta_slow", 1));
    INFERGATE_ASSIGN_OR_RETURN(s.mscale, r.number("mscale", 1));
    INFERGATE_ASSIGN_OR_RETURN(s.mscale_all_dim, r.number("mscale_all_dim", 0, /*positive=*/false));
    if (r.has("attention_factor")) {
      INFERGATE_ASSIGN_OR_RETURN(double af, r.number("attention_factor", 1));
      s.attention_factor = af;
    }
    return ok_status();
  }
  return r.error(type_key, "unsupported rope type '" + type + "' (default, linear, dynamic, yarn, llama3)");
}

Status parse_quantization(const Fields& f, ModelConfig& c) {
  if (!f.has("quantization_config")) return ok_status();
  const Json& qj = f.at("quantization_config");
  if (!qj.is_object()) return f.error("quantization_config", "expected an object");
  Fields q(qj, f.file(), "quantization_config");
  QuantizationConfig out;
  INFERGATE_ASSIGN_OR_RETURN(out.quant_method, q.text("quant_method", ""));
  if (out.quant_method.empty()) return q.error("quant_method", "required field is missing");
  if (out.quant_method == "infergate") {
    INFERGATE_ASSIGN_OR_RETURN(out.weight_format, q.text("weight_format", ""));
    if (out.weight_format != "int8" && out.weight_format != "int4") {
      return q.error("weight_format", "expected int8 or int4, got '" + out.weight_format + "'");
    }
    INFERGATE_ASSIGN_OR_RETURN(out.bits, q.count("bits", out.weight_format == "int8" ? 8 : 4, 8));
    if (out.bits != (out.weight_format == "int8" ? 8 : 4))
      return q.error("bits", "does not match weight_format");
    INFERGATE_ASSIGN_OR_RETURN(out.group_size, q.count("group_size", 0, 1 << 20, /*allow_zero=*/true));
    INFERGATE_ASSIGN_OR_RETURN(out.symmetric, q.flag("symmetric", true));
    INFERGATE_ASSIGN_OR_RETURN(out.scale_dtype, q.text("scale_dtype", "float16"));
    if (out.scale_dtype != "float16" && out.scale_dtype != "bfloat16") {
      return q.error("scale_dtype", "expected float16 or bfloat16");
    }
  } else {
    // Another tool's scheme: keep what the planner can use.
    if (q.has("bits")) {
      INFERGATE_ASSIGN_OR_RETURN(out.bits, q.count("bits", 0, 64));
    }
    if (q.has("group_size")) {
      INFERGATE_ASSIGN_OR_RETURN(out.group_size, q.count("group_size", 0, 1 << 20, true));
    }
    if (q.has("weight_block_size")) {
      const Json& b = q.at("weight_block_size");
      if (!b.is_array()) return q.error("weight_block_size", "expected a list of integers");
      for (const Json& x : b) {
        if (!x.is_number_integer() || x.get<int64_t>() <= 0) {
          return q.error("weight_block_size", "expected a list of positive integers");
        }
        out.weight_block_size.push_back(x.get<int64_t>());
      }
    }
  }
  c.quantization = std::move(out);
  return ok_status();
}

Result<Architecture> parse_architecture(const Fields& f, ModelConfig& c) {
  INFERGATE_ASSIGN_OR_RETURN(c.model_type, f.text("model_type", ""));
  if (f.has("architectures")) {
    const Json& a = f.at("architectures");
    if (!a.is_array() || a.size() != 1 || !a[0].is_string()) {
      return f.error("architectures", "expected a list with exactly one architecture name");
    }
    std::string name = a[0].get<std::string>();
    for (const auto& info : kArchs) {
      if (info.name == name) return info.arch;
    }
    return f.error("architectures",
                   "unsupported architecture '" + name + "' (supported: " + supported_list() + ")");
  }
  for (const auto& info : kArchs) {
    if (info.model_type == c.model_type) return info.arch;
  }
  if (c.model_type == "kimi_k2") return Architecture::kDeepseekV3;
  return f.error("architectures", "missing, and model_type '" + c.model_type + "' is not one we know");
}

}  // namespace

std::string_view architecture_name(Architecture a) {
  for (const auto& info : kArchs) {
    if (info.arch == a) return info.name;
  }
  return "unknown";
}

std::string_view rope_type_name(RopeType t) {
  switch (t) {
    case RopeType::kDefault: return "default";
    case RopeType::kLinear: return "linear";
    case RopeType::kDynamic: return "dynamic";
    case RopeType::kYarn: return "yarn";
    case RopeType::kLlama3: return "llama3";
  }
  return "default";
}

int64_t ModelConfig::kv_cache_values_per_token_per_layer() const {
  if (mla) return mla->kv_lora_rank + mla->qk_rope_head_dim;
  return 2 * num_key_value_heads * head_dim;
}

Result<ModelConfig> parse_model_config(std::string_view json_text, std::string_view file_name) {
  auto j = parse_json(json_text, file_name);
  if (!j.ok()) return Error(std::move(j).error()).with_reason("InvalidConfig");
  return model_config_from_json(*j, file_name);
}

Result<ModelConfig> model_config_from_json(const Json& j, std::string_view file_name) {
  std::string file(file_name);
  if (!j.is_object()) {
    return Error(ErrorCode::kInvalidArgument, file + ": expected a JSON object", "InvalidConfig")
        .with_detail("file", file);
  }
  Fields f(j, file);
  ModelConfig c;
  INFERGATE_ASSIGN_OR_RETURN(c.architecture, parse_architecture(f, c));
  const Architecture arch = c.architecture;
  const bool glm_dense = arch == Architecture::kGlm || arch == Architecture::kGlm4;

  INFERGATE_ASSIGN_OR_RETURN(c.vocab_size, f.count("vocab_size", std::nullopt, kMaxVocab));
  INFERGATE_ASSIGN_OR_RETURN(c.hidden_size, f.count("hidden_size", std::nullopt, kMaxHidden));
  INFERGATE_ASSIGN_OR_RETURN(c.intermediate_size, f.count("intermediate_size", std::nullopt, kMaxHidden * 8));
  INFERGATE_ASSIGN_OR_RETURN(c.num_hidden_layers, f.count("num_hidden_layers", std::nullopt, kMaxLayers));
  INFERGATE_ASSIGN_OR_RETURN(c.num_attention_heads, f.count("num_attention_heads", std::nullopt, kMaxHeads));
  INFERGATE_ASSIGN_OR_RETURN(c.num_key_value_heads,
                             f.count("num_key_value_heads", c.num_attention_heads, kMaxHeads));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return f.error("num_key_value_heads", std::to_string(c.num_key_value_heads) +
                                              " does not divide num_attention_heads " +
                                              std::to_string(c.num_attention_heads));
  }
  // head_dim: given, or hidden / heads (GLM's configuration class defaults to 128).
  std::optional<int64_t> head_dim_default;
  if (glm_dense) {
    head_dim_default = 128;
  } else if (c.hidden_size % c.num_attention_heads == 0) {
    head_dim_default = c.hidden_size / c.num_attention_heads;
  }
  if (!f.has("head_dim") && !head_dim_default) {
    return f.error("head_dim", "missing, and hidden_size " + std::to_string(c.hidden_size) +
                                   " is not a multiple of num_attention_heads");
  }
  INFERGATE_ASSIGN_OR_RETURN(c.head_dim, f.count("head_dim", head_dim_default, 4096));
  INFERGATE_ASSIGN_OR_RETURN(c.max_position_embeddings,
                             f.count("max_position_embeddings", glm_dense ? 131072 : 2048, kMaxPositions));
  double eps_default = glm_dense ? 1.5625e-07 : arch == Architecture::kGlm4Moe ? 1e-5 : 1e-6;
  INFERGATE_ASSIGN_OR_RETURN(c.rms_norm_eps, f.number("rms_norm_eps", eps_default));
  INFERGATE_ASSIGN_OR_RETURN(c.hidden_act, f.text("hidden_act", "silu"));
  if (c.hidden_act != "silu")
    return f.error("hidden_act", "'" + c.hidden_act + "' is not supported (silu only)");
  INFERGATE_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.flag("tie_word_embeddings", false));
  INFERGATE_ASSIGN_OR_RETURN(c.torch_dtype, parse_torch_dtype(f));
  INFERGATE_ASSIGN_OR_RETURN(c.bos_token_id, f.token_id("bos_token_id"));
  INFERGATE_ASSIGN_OR_RETURN(c.eos_token_ids, f.token_ids("eos_token_id"));
  INFERGATE_ASSIGN_OR_RETURN(c.pad_token_id, f.token_id("pad_token_id"));
  for (int64_t id : c.eos_token_ids) {
    if (id >= c.vocab_size)
      return f.error("eos_token_id", "token id " + std::to_string(id) + " is outside the vocabulary");
  }
  if (c.bos_token_id && *c.bos_token_id >= c.vocab_size) {
    return f.error("bos_token_id", "token id is outside the vocabulary");
  }

  // RoPE: rope_theta / rope_scaling (transformers 4.x) or rope_parameters (5.x).
  INFERGATE_ASSIGN_OR_RETURN(c.rope_theta, f.number("rope_theta", 10000.0));
  INFERGATE_RETURN_IF_ERROR(parse_rope_scaling(f, "rope_scaling", c));
  double prf_default = (glm_dense || arch == Architecture::kGlm4Moe) ? 0.5 : 1.0;
  INFERGATE_ASSIGN_OR_RETURN(c.partial_rotary_factor, f.number("partial_rotary_factor", prf_default));
  if (f.has("rope_parameters")) {
    const Json& rp = f.at("rope_parameters");
    if (!rp.is_object()) return f.error("rope_parameters", "expected an object");
    Fields r(rp, file, "rope_parameters");
    INFERGATE_ASSIGN_OR_RETURN(c.rope_theta, r.number("rope_theta", c.rope_theta));
    INFERGATE_ASSIGN_OR_RETURN(c.partial_rotary_factor,
                               r.number("partial_rotary_factor", c.partial_rotary_factor));
    INFERGATE_RETURN_IF_ERROR(parse_rope_scaling(f, "rope_parameters", c));
  }
  if (c.partial_rotary_factor > 1) return f.error("partial_rotary_factor", "must be in (0, 1]");
  c.rope_layout = glm_dense ? RopeLayout::kInterleaved : RopeLayout::kHalves;

  switch (arch) {
    case Architecture::kLlama: {
      INFERGATE_ASSIGN_OR_RETURN(c.qkv_bias, f.flag("attention_bias", false));
      c.o_bias = c.qkv_bias;
      INFERGATE_ASSIGN_OR_RETURN(c.mlp_bias, f.flag("mlp_bias", false));
      break;
    }
    case Architecture::kMistral: {
      if (f.has("sliding_window")) {
        INFERGATE_ASSIGN_OR_RETURN(int64_t w, f.count("sliding_window", std::nullopt, kMaxPositions));
        c.sliding_window = w;
      }
      break;
    }
    case Architecture::kQwen2: {
      c.qkv_bias = true;
      INFERGATE_ASSIGN_OR_RETURN(bool use_sw, f.flag("use_sliding_window", false));
      if (use_sw && f.has("sliding_window")) {
        INFERGATE_ASSIGN_OR_RETURN(int64_t w, f.count("sliding_window", std::nullopt, kMaxPositions));
        c.sliding_window = w;
      }
      break;
    }
    case Architecture::kGlm:
    case Architecture::kGlm4: {
      INFERGATE_ASSIGN_OR_RETURN(c.qkv_bias, f.flag("attention_bias", true));
      c.fused_gate_up = true;
      c.post_sublayer_norms = arch == Architecture::kGlm4;
      break;
    }
    case Architecture::kDeepseekV3: {
      MlaConfig m;
      INFERGATE_ASSIGN_OR_RETURN(m.q_lora_rank, f.count("q_lora_rank", 0, kMaxHidden, /*allow_zero=*/true));
      INFERGATE_ASSIGN_OR_RETURN(m.kv_lora_rank, f.count("kv_lora_rank", std::nullopt, kMaxHidden));
      INFERGATE_ASSIGN_OR_RETURN(m.qk_nope_head_dim, f.count("qk_nope_head_dim", std::nullopt, 4096));
      INFERGATE_ASSIGN_OR_RETURN(m.qk_rope_head_dim, f.count("qk_rope_head_dim", std::nullopt, 4096));
      INFERGATE_ASSIGN_OR_RETURN(m.v_head_dim, f.count("v_head_dim", std::nullopt, 4096));
      c.mla = m;
      INFERGATE_ASSIGN_OR_RETURN(c.qkv_bias, f.flag("attention_bias", false));
      c.head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
      // DeepSeek's RoPE pairs adjacent dimensions (transformers' rope_interleave, default true).
      INFERGATE_ASSIGN_OR_RETURN(bool interleave, f.flag("rope_interleave", true));
      c.rope_layout = interleave ? RopeLayout::kInterleaved : RopeLayout::kHalves;
      break;
    }
    case Architecture::kGlm4Moe: {
      INFERGATE_ASSIGN_OR_RETURN(c.qkv_bias, f.flag("attention_bias", false));
      INFERGATE_ASSIGN_OR_RETURN(c.qk_norm, f.flag("use_qk_norm", false));
      break;
    }
  }

  if (arch == Architecture::kDeepseekV3 || arch == Architecture::kGlm4Moe) {
    MoeConfig m;
    INFERGATE_ASSIGN_OR_RETURN(m.n_routed_experts, f.count("n_routed_experts", std::nullopt, kMaxExperts));
    INFERGATE_ASSIGN_OR_RETURN(m.n_shared_experts, f.count("n_shared_experts", 0, kMaxExperts, true));
    INFERGATE_ASSIGN_OR_RETURN(m.num_experts_per_tok,
                               f.count("num_experts_per_tok", std::nullopt, kMaxExperts));
    if (m.num_experts_per_tok > m.n_routed_experts) {
      return f.error("num_experts_per_tok", "is larger than n_routed_experts");
    }
    INFERGATE_ASSIGN_OR_RETURN(m.moe_intermediate_size,
                               f.count("moe_intermediate_size", std::nullopt, kMaxHidden * 8));
    INFERGATE_ASSIGN_OR_RETURN(m.first_k_dense_replace,
                               f.count("first_k_dense_replace", 0, kMaxLayers, true));
    INFERGATE_ASSIGN_OR_RETURN(m.moe_layer_freq, f.count("moe_layer_freq", 1, kMaxLayers));
    INFERGATE_ASSIGN_OR_RETURN(m.n_group, f.count("n_group", 1, kMaxExperts));
    INFERGATE_ASSIGN_OR_RETURN(m.topk_group, f.count("topk_group", 1, kMaxExperts));
    if (m.topk_group > m.n_group) return f.error("topk_group", "is larger than n_group");
    if (m.n_routed_experts % m.n_group != 0) return f.error("n_group", "does not divide n_routed_experts");
    INFERGATE_ASSIGN_OR_RETURN(m.routed_scaling_factor, f.number("routed_scaling_factor", 1.0));
    INFERGATE_ASSIGN_OR_RETURN(m.norm_topk_prob, f.flag("norm_topk_prob", true));
    // GLM-4.5 always has the noaux_tc score-correction bias; DeepSeek-V3 says so in topk_method.
    INFERGATE_ASSIGN_OR_RETURN(m.topk_method,
                               f.text("topk_method", arch == Architecture::kGlm4Moe ? "noaux_tc" : "greedy"));
    INFERGATE_ASSIGN_OR_RETURN(m.scoring_func, f.text("scoring_func", "sigmoid"));
    c.moe = m;
    INFERGATE_ASSIGN_OR_RETURN(c.num_nextn_predict_layers, f.count("num_nextn_predict_layers", 0, 64, true));
  }

  if (c.mla) {
    c.rotary_dim = c.mla->qk_rope_head_dim;
  } else {
    c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);
  }
  if (c.rotary_dim <= 0 || c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim) {
    return f.error(c.mla ? "qk_rope_head_dim" : "partial_rotary_factor",
                   "gives a rotary dimension of " + std::to_string(c.rotary_dim) +
                       ", which must be even and in (0, " + std::to_string(c.head_dim) + "]");
  }
  INFERGATE_RETURN_IF_ERROR(parse_quantization(f, c));
  return c;
}

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  const uint64_t H = u(c.hidden_size), V = u(c.vocab_size);
  auto add = [&](std::string name, std::vector<uint64_t> shape) {
    out.push_back({std::move(name), std::move(shape)});
  };
  auto linear = [&](const std::string& name, uint64_t out_dim, uint64_t in_dim, bool bias) {
    add(name + ".weight", {out_dim, in_dim});
    if (bias) add(name + ".bias", {out_dim});
  };
  auto swiglu = [&](const std::string& p, uint64_t inter, bool bias) {
    linear(p + ".gate_proj", inter, H, bias);
    linear(p + ".up_proj", inter, H, bias);
    linear(p + ".down_proj", H, inter, bias);
  };

  add("model.embed_tokens.weight", {V, H});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {H});
    if (c.mla) {
      const MlaConfig& m = *c.mla;
      const uint64_t A = u(c.num_attention_heads);
      const uint64_t qk = u(m.qk_nope_head_dim + m.qk_rope_head_dim);
      if (m.q_lora_rank > 0) {
        linear(p + "self_attn.q_a_proj", u(m.q_lora_rank), H, c.qkv_bias);
        add(p + "self_attn.q_a_layernorm.weight", {u(m.q_lora_rank)});
        linear(p + "self_attn.q_b_proj", A * qk, u(m.q_lora_rank), false);
      } else {
        linear(p + "self_attn.q_proj", A * qk, H, false);
      }
      linear(p + "self_attn.kv_a_proj_with_mqa", u(m.kv_lora_rank + m.qk_rope_head_dim), H, c.qkv_bias);
      add(p + "self_attn.kv_a_layernorm.weight", {u(m.kv_lora_rank)});
      linear(p + "self_attn.kv_b_proj", A * u(m.qk_nope_head_dim + m.v_head_dim), u(m.kv_lora_rank), false);
      linear(p + "self_attn.o_proj", H, A * u(m.v_head_dim), false);
    } else {
      linear(p + "self_attn.q_proj", u(c.q_dim()), H, c.qkv_bias);
      linear(p + "self_attn.k_proj", u(c.kv_dim()), H, c.qkv_bias);
      linear(p + "self_attn.v_proj", u(c.kv_dim()), H, c.qkv_bias);
      linear(p + "self_attn.o_proj", H, u(c.q_dim()), c.o_bias);
      if (c.qk_norm) {
        add(p + "self_attn.q_norm.weight", {u(c.head_dim)});
        add(p + "self_attn.k_norm.weight", {u(c.head_dim)});
      }
    }
    if (c.post_sublayer_norms) add(p + "post_self_attn_layernorm.weight", {H});
    add(p + "post_attention_layernorm.weight", {H});
    if (c.moe && c.moe->is_moe_layer(i)) {
      const MoeConfig& m = *c.moe;
      add(p + "mlp.gate.weight", {u(m.n_routed_experts), H});
      if (m.topk_method == "noaux_tc") add(p + "mlp.gate.e_score_correction_bias", {u(m.n_routed_experts)});
      for (int64_t e = 0; e < m.n_routed_experts; ++e) {
        swiglu(p + "mlp.experts." + std::to_string(e), u(m.moe_intermediate_size), false);
      }
      if (m.n_shared_experts > 0) {
        swiglu(p + "mlp.shared_experts", u(m.moe_intermediate_size * m.n_shared_experts), false);
      }
    } else if (c.fused_gate_up) {
      linear(p + "mlp.gate_up_proj", 2 * u(c.intermediate_size), H, false);
      linear(p + "mlp.down_proj", H, u(c.intermediate_size), false);
    } else {
      swiglu(p + "mlp", u(c.intermediate_size), c.mlp_bias);
    }
    if (c.post_sublayer_norms) add(p + "post_mlp_layernorm.weight", {H});
  }
  add("model.norm.weight", {H});
  if (!c.tie_word_embeddings) add("lm_head.weight", {V, H});
  return out;
}

uint64_t parameter_count(const ModelConfig& config) {
  uint64_t n = 0;
  for (const auto& t : expected_tensors(config)) {
    uint64_t e = 1;
    for (uint64_t d : t.shape) e *= d;
    n += e;
  }
  return n;
}

}  // namespace infergate::runtime::model
