// Deterministic synthetic checkpoints in Hugging Face layout, for tests, demos and benchmarks (nothing
// downloads weights). Same options, same bytes.
//
// Weights: each tensor draws from its own counter-based generator seeded by (seed, tensor name), with
// an approximately normal distribution (the sum of six uniforms; plain IEEE arithmetic, so the bytes
// do not depend on the maths library). Scales are chosen so the model is numerically tame and its
// next-token distributions are peaked: after the final RMSNorm the hidden state has unit RMS, and
// lm_head rows have std kLogitStd / sqrt(hidden), so logits have std kLogitStd (6): with a vocabulary
// of 512 the top token then carries about 60% of the probability (about 1.7 bits of entropy out of 9),
// far from uniform, so top-1 agreement between weight or KV formats means something.
// Outlier channels (--outlier-channels N): in every layer, N key channels (whole rotary pairs) of
// every KV head are scaled up by kOutlierScale (rows of k_proj, and its bias), and the same query
// channels scaled down by the same factor, so q.k, and hence the fp32 model, is unchanged while keys
// get the large-magnitude channels real LLMs have: per-token int4 keys then lose the other channels,
// per-channel keys do not.
// Tokenizer: byte-level BPE trained deterministically on a built-in multilingual text (real merges),
// with <|begin_of_text|>, <|end_of_text|>, <|im_start|>, <|im_end|> as special tokens and reserved
// special tokens filling any vocabulary the merges do not reach.
// GLM-4.5 (kGlm4Moe): the first moe.dense_layers layers keep a dense MLP, the others route each token
// to moe.experts_per_token of moe.experts SwiGLU experts (group-limited when moe.groups > 1) plus the
// shared experts; the router's score-correction bias has std kRouterBiasStd, enough to change which
// experts some tokens get. With q/k norms the outlier channels are put on k_norm (and q_norm divided
// by the same factor) instead of on k_proj's rows, which the per-head norm would undo.
// DeepSeek-V3 / Kimi K2 (kDeepseekV3): multi-head latent attention (mla) over the same MoE block; the
// outlier channels are latent channels: kv_a_layernorm's weight is scaled up on them and kv_b_proj's
// matching columns down, so keys and values are unchanged while the cached latent has outliers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "infergate/common/result.h"
#include "infergate/runtime/model/config.h"
#include "infergate/runtime/model/dtype.h"

namespace infergate::runtime::model {

inline constexpr double kLogitStd = 6.0;
inline constexpr float kOutlierScale = 16.0f;

inline constexpr double kRouterBiasStd = 0.1;

// The routed-expert block of a kGlm4Moe test model (config.json's names in brackets).
struct TestMoeOptions {
  int64_t experts = 8;            // n_routed_experts
  int64_t experts_per_token = 2;  // num_experts_per_tok
  int64_t groups = 2;             // n_group
  int64_t topk_groups = 1;        // topk_group
  int64_t shared_experts = 1;     // n_shared_experts
  int64_t dense_layers = 1;       // first_k_dense_replace
  int64_t intermediate = 0;       // moe_intermediate_size; 0: hidden / 2 rounded up to 16
  double routed_scaling = 2.5;    // routed_scaling_factor
  bool qk_norm = true;            // use_qk_norm (GLM-4.5 and 4.6; 4.5-Air has none)
};

// The multi-head latent attention of a kDeepseekV3 test model (DeepSeek-V3, Kimi K2; config.json's
// names in brackets). Its MoE block is `moe` (with DeepSeek's noaux_tc routing).
struct TestMlaOptions {
  int64_t q_lora_rank = 32;       // q_lora_rank; 0: a plain q_proj (DeepSeek-V2-Lite)
  int64_t kv_lora_rank = 64;      // kv_lora_rank: the cached latent's width
  int64_t qk_nope_head_dim = 16;  // qk_nope_head_dim
  int64_t qk_rope_head_dim = 16;  // qk_rope_head_dim: the cached shared rope key's width
  int64_t v_head_dim = 16;        // v_head_dim
  bool yarn = true;               // rope_scaling yarn (factor 4, original context max_position / 4,
                                  // mscale = mscale_all_dim = 1 as DeepSeek-V3 and Kimi K2 publish)
  bool kimi = false;              // model_type kimi_k2 instead of deepseek_v3
};

// A published weight format to write the linear layers in, exactly as the publishers' tools write it
// (published_weights.h has the tensors, weights/quantization_config.h the config keys): the float
// weights are drawn as for a dense model, rounded to --dtype, then quantized, so the dense model of the
// same options is the original the release was made from.
struct TestPublishedOptions {
  // "" (a dense model), or a format word (weights/scheme.h): fp8-block[-RxC], fp8-channel,
  // int4-ct-<gG|ch>-<sym|asym>, awq-<gG|ch>, gptq-<gG|ch>[-v2]. Our own int8/int4 come from `quantize`.
  std::string format;
  bool act_order = false;  // int4-ct and gptq: group columns by activation order (g_idx)
  bool ue8m0 = false;      // fp8-block: scale_fmt ue8m0 (power-of-two scales, as DeepSeek-V3.1)
  // Which linears are quantized: kDefault is the routed experts only for int4-ct on a MoE architecture
  // (Kimi-K2-Thinking: attention, shared experts and dense MLPs stay BF16, listed in `ignore`), and
  // every linear but lm_head otherwise (DeepSeek-V3 / Kimi-K2-Instruct FP8, GLM-4.5-FP8, AWQ, GPTQ).
  // The MoE router (mlp.gate), embeddings and norms are never quantized; with a published format the
  // router's e_score_correction_bias is F32, as those releases store it.
  enum class Modules { kDefault, kAllLinear, kRoutedExperts };
  Modules modules = Modules::kDefault;
};

struct TestModelOptions {
  std::filesystem::path out;
  Architecture arch = Architecture::kLlama;  // kLlama, kQwen2, kGlm, kGlm4, kGlm4Moe or kDeepseekV3
  int64_t layers = 2;
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t vocab = 512;
  uint64_t seed = 0;
  int64_t intermediate = 0;  // 0: 8/3 x hidden rounded up to a multiple of 32
  int64_t outlier_channels = 0;
  DType dtype = DType::kF16;  // kF16, kBF16 or kF32
  int64_t max_position = 4096;
  bool tie_embeddings = false;
  uint64_t max_shard_bytes = 0;  // 0: one model.safetensors; else shards plus an index
  bool force = false;            // replace a non-empty output directory
  TestMoeOptions moe;            // kGlm4Moe and kDeepseekV3
  TestMlaOptions mla;            // kDeepseekV3 only
  TestPublishedOptions published;
};

// Writes the model into options.out atomically (see staged_dir.h). Errors name the offending option.
Status make_test_model(const TestModelOptions& options);

// The text the test tokenizer is trained on.
std::string_view test_model_training_text();

}  // namespace infergate::runtime::model
