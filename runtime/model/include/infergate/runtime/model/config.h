// The typed model configuration, read from a Hugging Face config.json.
//
// Architectures the engine runs: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (q/k/v bias),
// GlmForCausalLM and Glm4ForCausalLM (partial rotary over interleaved pairs, fused gate_up_proj; Glm4
// adds post-attention and post-MLP norms), Glm4MoeForCausalLM (GLM-4.5 / 4.6: routed and shared
// experts, per-head q/k norms, partial rotate-half rotary) and DeepseekV3ForCausalLM (also Kimi-K2:
// multi-head latent attention with interleaved rope and YaRN, and routed experts): all of them. Field names
// and defaults follow huggingface/transformers' configuration and modelling code. A bad config gets an error
// with the reason "InvalidConfig" and a detail "field" naming the offending field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/json.h"
#include "infergate/common/result.h"
#include "infergate/runtime/model/dtype.h"

namespace infergate::runtime::model {

enum class Architecture { kLlama, kMistral, kQwen2, kGlm, kGlm4, kDeepseekV3, kGlm4Moe };

// "LlamaForCausalLM", ...
std::string_view architecture_name(Architecture a);

enum class RopeType { kDefault, kLinear, kDynamic, kYarn, kLlama3 };
std::string_view rope_type_name(RopeType t);

// Which dimensions RoPE rotates together.
enum class RopeLayout {
  kHalves,       // Llama: (i, i + rotary_dim/2), rotate_half(x) = cat(-x2, x1)
  kInterleaved,  // GLM / GLM-4: (2i, 2i+1), cos/sin repeat_interleave(2)
};

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
  std::optional<double> attention_factor;
};

// Multi-head latent attention (DeepSeek-V3, Kimi-K2).
struct MlaConfig {
  int64_t q_lora_rank = 0;  // 0: queries projected directly (no low-rank q)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
};

// Routed experts (DeepSeek-V3, Kimi-K2, GLM-4.5).
struct MoeConfig {
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t first_k_dense_replace = 0;  // the first k layers keep a dense MLP
  int64_t moe_layer_freq = 1;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
  bool norm_topk_prob = true;
  std::string topk_method;   // "noaux_tc" adds a per-expert score-correction bias
  std::string scoring_func;  // "sigmoid" | "softmax"
  bool is_moe_layer(int64_t layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace && moe_layer_freq > 0 &&
           layer % moe_layer_freq == 0;
  }
};

// What config.json's quantization_config says (ours, or a publisher's such as DeepSeek's fp8).
struct QuantizationConfig {
  std::string quant_method;   // "infergate", "fp8", ...
  std::string weight_format;  // ours: "int8" | "int4"
  int64_t bits = 0;
  int64_t group_size = 0;  // 0: per output channel
  bool symmetric = true;
  std::string scale_dtype;                 // "float16" | "bfloat16"
  std::vector<int64_t> weight_block_size;  // fp8 block scaling ([128, 128])
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  std::string hidden_act = "silu";

  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double partial_rotary_factor = 1.0;
  int64_t rotary_dim = 0;  // int(head_dim * partial_rotary_factor): the leading dims RoPE rotates
  RopeLayout rope_layout = RopeLayout::kHalves;

  bool tie_word_embeddings = false;
  bool qkv_bias = false;                  // biases on q_proj, k_proj, v_proj
  bool o_bias = false;                    // bias on o_proj (Llama's attention_bias)
  bool mlp_bias = false;                  // biases on the MLP projections (Llama's mlp_bias)
  bool qk_norm = false;                   // RMSNorm over each head of q and k (GLM-4.5's use_qk_norm)
  bool fused_gate_up = false;             // mlp.gate_up_proj [2I, H], gate first (GLM, GLM-4)
  bool post_sublayer_norms = false;       // post_self_attn_layernorm, post_mlp_layernorm (GLM-4)
  std::optional<int64_t> sliding_window;  // Mistral / Qwen2 when enabled

  std::optional<DType> torch_dtype;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;

  std::optional<MlaConfig> mla;
  std::optional<MoeConfig> moe;
  int64_t num_nextn_predict_layers = 0;  // multi-token-prediction layers stored after the others
  std::optional<QuantizationConfig> quantization;

  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  // Values the KV cache holds per token per layer: 2 x kv_heads x head_dim, or for MLA the compressed
  // latent plus the shared rope key (kv_lora_rank + qk_rope_head_dim).
  int64_t kv_cache_values_per_token_per_layer() const;
};

// Parses config.json. `file_name` names the source in errors.
Result<ModelConfig> parse_model_config(std::string_view json_text,
                                       std::string_view file_name = "config.json");
Result<ModelConfig> model_config_from_json(const Json& j, std::string_view file_name = "config.json");

// A tensor the checkpoint of a configuration must hold, with its shape (in checkpoint names, e.g.
// "model.layers.0.self_attn.q_proj.weight" [q_dim, hidden]).
struct ExpectedTensor {
  std::string name;
  std::vector<uint64_t> shape;
};
// Every tensor the architecture reads, in layer order. lm_head.weight is left out when the
// embeddings are tied. Multi-token-prediction layers and publisher-specific scale tensors (fp8
// weight_scale_inv) are not included.
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);
// The number of parameters in expected_tensors().
uint64_t parameter_count(const ModelConfig& config);

}  // namespace infergate::runtime::model
