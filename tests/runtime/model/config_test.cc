// The typed model configuration on real published configs, and refusals that name the field.
#include "infergate/runtime/model/config.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace infergate::runtime::model {
namespace {

// Llama-3.1-8B-Instruct's config.json (the fields we read).
const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": false, "mlp_bias": false,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu", "hidden_size": 4096,
  "intermediate_size": 14336, "max_position_embeddings": 131072, "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256})";

const char* kQwen2_7B = R"({
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "bos_token_id": 151643, "eos_token_id": 151645,
  "hidden_act": "silu", "hidden_size": 3584, "intermediate_size": 18944, "max_position_embeddings": 32768,
  "max_window_layers": 28, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 152064})";

// THUDM/glm-4-9b-chat-hf
const char* kGlm4_9B = R"({
  "architectures": ["GlmForCausalLM"], "model_type": "glm", "attention_bias": true, "attention_dropout": 0.0,
  "eos_token_id": [151329, 151336, 151338], "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
  "intermediate_size": 13696, "max_position_embeddings": 131072, "num_attention_heads": 32,
  "num_hidden_layers": 40, "num_key_value_heads": 2, "pad_token_id": 151329, "partial_rotary_factor": 0.5,
  "rms_norm_eps": 1.5625e-07, "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "vocab_size": 151552})";

// THUDM/GLM-4-9B-0414
const char* kGlm4_0414 = R"({
  "architectures": ["Glm4ForCausalLM"], "model_type": "glm4", "attention_bias": true, "eos_token_id": [151329, 151336, 151338],
  "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 13696,
  "max_position_embeddings": 32768, "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 2,
  "pad_token_id": 151329, "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 151552})";

const char* kDeepseekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "attention_bias": false,
  "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432,
  "kv_lora_rank": 512, "max_position_embeddings": 163840, "moe_intermediate_size": 2048, "moe_layer_freq": 1,
  "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
  "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06, "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
    "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "tie_word_embeddings": false,
  "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "v_head_dim": 128, "vocab_size": 129280})";

const char* kKimiK2 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "attention_bias": false,
  "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432,
  "kv_lora_rank": 512, "max_position_embeddings": 131072, "moe_intermediate_size": 2048, "moe_layer_freq": 1,
  "n_group": 1, "n_routed_experts": 384, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 64, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 64,
  "num_nextn_predict_layers": 0, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "rms_norm_eps": 1e-06, "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0,
    "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
  "rope_theta": 50000.0, "routed_scaling_factor": 2.827, "scoring_func": "sigmoid", "tie_word_embeddings": false,
  "topk_group": 1, "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "v_head_dim": 128, "vocab_size": 163840})";

// zai-org/GLM-4.5
const char* kGlm45 = R"({
  "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "attention_bias": true,
  "eos_token_id": [151329, 151336, 151338], "first_k_dense_replace": 3, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 5120, "intermediate_size": 12288, "max_position_embeddings": 131072,
  "moe_intermediate_size": 1536, "n_group": 1, "n_routed_experts": 160, "n_shared_experts": 1,
  "norm_topk_prob": true, "num_attention_heads": 96, "num_experts_per_tok": 8, "num_hidden_layers": 92,
  "num_key_value_heads": 8, "num_nextn_predict_layers": 1, "pad_token_id": 151329, "partial_rotary_factor": 0.5,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000, "routed_scaling_factor": 2.5, "tie_word_embeddings": false,
  "topk_group": 1, "torch_dtype": "bfloat16", "use_qk_norm": true, "vocab_size": 151552})";

ModelConfig parse_ok(const char* text) {
  auto c = parse_model_config(std::string_view(text));
  EXPECT_TRUE(c.ok()) << c.error().to_string();
  return c.ok() ? *c : ModelConfig{};
}

bool has_tensor(const std::vector<ExpectedTensor>& ts, const std::string& name, std::vector<uint64_t> shape) {
  return std::any_of(ts.begin(), ts.end(),
                     [&](const ExpectedTensor& t) { return t.name == name && t.shape == shape; });
}
bool has_name(const std::vector<ExpectedTensor>& ts, const std::string& name) {
  return std::any_of(ts.begin(), ts.end(), [&](const ExpectedTensor& t) { return t.name == name; });
}

TEST(ModelConfig, ReadsLlama31WithLlama3RopeScaling) {
  ModelConfig c = parse_ok(kLlama31);
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeType::kLlama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.rotary_dim, 128);
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalves);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.torch_dtype, DType::kBF16);
  EXPECT_EQ(parameter_count(c), 8'030'261'248u) << "Llama-3.1-8B's published parameter count";
  EXPECT_EQ(c.kv_cache_values_per_token_per_layer(), 2 * 8 * 128);
}

TEST(ModelConfig, Qwen2HasQkvBiasButNoOutputBias) {
  ModelConfig c = parse_ok(kQwen2_7B);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.sliding_window.has_value()) << "use_sliding_window is false";
  auto ts = expected_tensors(c);
  EXPECT_TRUE(has_tensor(ts, "model.layers.0.self_attn.k_proj.bias", {512}));
  EXPECT_FALSE(has_name(ts, "model.layers.0.self_attn.o_proj.bias"));
  EXPECT_EQ(parameter_count(c), 7'615'616'512u) << "Qwen2-7B's published parameter count";
}

TEST(ModelConfig, GlmUsesPartialInterleavedRotaryAndAFusedGateUp) {
  ModelConfig c = parse_ok(kGlm4_9B);
  EXPECT_EQ(c.architecture, Architecture::kGlm);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.rope_layout, RopeLayout::kInterleaved);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.post_sublayer_norms);
  auto ts = expected_tensors(c);
  EXPECT_TRUE(has_tensor(ts, "model.layers.3.mlp.gate_up_proj.weight", {2 * 13696, 4096}));
  EXPECT_TRUE(has_tensor(ts, "model.layers.3.self_attn.q_proj.bias", {4096}));
  EXPECT_FALSE(has_name(ts, "model.layers.3.mlp.gate_proj.weight"));
  EXPECT_EQ(parameter_count(c), 9'399'951'360u) << "glm-4-9b's parameter count";
}

TEST(ModelConfig, Glm4AddsPostAttentionAndPostMlpNorms) {
  ModelConfig c = parse_ok(kGlm4_0414);
  EXPECT_EQ(c.architecture, Architecture::kGlm4);
  EXPECT_TRUE(c.post_sublayer_norms);
  auto ts = expected_tensors(c);
  EXPECT_TRUE(has_tensor(ts, "model.layers.0.post_self_attn_layernorm.weight", {4096}));
  EXPECT_TRUE(has_tensor(ts, "model.layers.39.post_mlp_layernorm.weight", {4096}));
  EXPECT_EQ(parameter_count(c), 9'399'951'360u + 40u * 2 * 4096);
}

TEST(ModelConfig, GlmDefaultsFollowTheTransformersConfigurationClass) {
  // Without head_dim and partial_rotary_factor, GlmConfig uses 128 and 0.5.
  ModelConfig c = parse_ok(R"({"architectures": ["GlmForCausalLM"], "vocab_size": 100, "hidden_size": 512,
    "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2})");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1.5625e-07);
}

TEST(ModelConfig, ReadsDeepseekV3MlaAndExperts) {
  ModelConfig c = parse_ok(kDeepseekV3);
  ASSERT_TRUE(c.mla.has_value());
  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(c.mla->kv_lora_rank, 512);
  EXPECT_EQ(c.mla->q_lora_rank, 1536);
  EXPECT_EQ(c.moe->n_routed_experts, 256);
  EXPECT_EQ(c.moe->first_k_dense_replace, 3);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.rope_scaling.type, RopeType::kYarn);
  EXPECT_EQ(c.rope_scaling.factor, 40.0);
  ASSERT_TRUE(c.quantization.has_value());
  EXPECT_EQ(c.quantization->quant_method, "fp8");
  EXPECT_EQ(c.quantization->weight_block_size, (std::vector<int64_t>{128, 128}));
  // The latent KV cache: 512 + 64 values per token per layer, not 2 x 128 heads x 192.
  EXPECT_EQ(c.kv_cache_values_per_token_per_layer(), 576);
  auto ts = expected_tensors(c);
  EXPECT_TRUE(has_tensor(ts, "model.layers.0.mlp.gate_proj.weight", {18432, 7168}));
  EXPECT_TRUE(has_tensor(ts, "model.layers.3.mlp.experts.255.down_proj.weight", {7168, 2048}));
  EXPECT_TRUE(has_tensor(ts, "model.layers.3.mlp.gate.e_score_correction_bias", {256}));
  EXPECT_TRUE(has_tensor(ts, "model.layers.60.self_attn.kv_a_proj_with_mqa.weight", {576, 7168}));
  EXPECT_TRUE(has_tensor(ts, "model.layers.60.self_attn.kv_b_proj.weight", {128 * 256, 512}));
  // 671B parameters in the main model (the published 685B includes the 14B multi-token-prediction layer).
  EXPECT_EQ(parameter_count(c), 671'026'419'200u);
}

TEST(ModelConfig, ReadsKimiK2AsDeepseekV3) {
  ModelConfig c = parse_ok(kKimiK2);
  EXPECT_EQ(c.architecture, Architecture::kDeepseekV3);
  EXPECT_EQ(c.model_type, "kimi_k2");
  EXPECT_EQ(c.moe->n_routed_experts, 384);
  uint64_t n = parameter_count(c);
  EXPECT_GT(n, 1'020'000'000'000u) << "Kimi K2 has about 1.03 trillion parameters";
  EXPECT_LT(n, 1'045'000'000'000u);
}

TEST(ModelConfig, ReadsGlm45MoeWithQkNorm) {
  ModelConfig c = parse_ok(kGlm45);
  EXPECT_EQ(c.architecture, Architecture::kGlm4Moe);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalves) << "GLM-4.5 rotates halves, unlike GLM-4";
  EXPECT_EQ(c.rotary_dim, 64);
  EXPECT_EQ(c.moe->n_routed_experts, 160);
  auto ts = expected_tensors(c);
  EXPECT_TRUE(has_tensor(ts, "model.layers.0.self_attn.q_norm.weight", {128}));
  EXPECT_TRUE(has_tensor(ts, "model.layers.5.mlp.shared_experts.up_proj.weight", {1536, 5120}));
  EXPECT_TRUE(has_tensor(ts, "model.layers.2.mlp.up_proj.weight", {12288, 5120}));
  uint64_t n = parameter_count(c);
  EXPECT_GT(n, 350'000'000'000u) << "GLM-4.5 has about 355B parameters";
  EXPECT_LT(n, 360'000'000'000u);
}

TEST(ModelConfig, TiedEmbeddingsDropLmHead) {
  std::string text = kQwen2_7B;
  text.replace(text.find("\"tie_word_embeddings\": false"), 28, "\"tie_word_embeddings\": true");
  ModelConfig c = parse_ok(text.c_str());
  EXPECT_FALSE(has_name(expected_tensors(c), "lm_head.weight"));
}

TEST(ModelConfig, ReadsTransformersV5RopeParameters) {
  ModelConfig c = parse_ok(R"({"architectures": ["Glm4ForCausalLM"], "vocab_size": 100, "hidden_size": 256,
    "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "head_dim": 64,
    "rope_parameters": {"rope_theta": 20000.0, "rope_type": "default", "partial_rotary_factor": 0.25}})");
  EXPECT_EQ(c.rope_theta, 20000.0);
  EXPECT_EQ(c.rotary_dim, 16);
}

void expect_field_error(const std::string& text, std::string_view field) {
  auto c = parse_model_config(text);
  ASSERT_FALSE(c.ok()) << "accepted: " << text;
  EXPECT_EQ(c.error().reason(), "InvalidConfig") << c.error().to_string();
  EXPECT_EQ(c.error().detail("field"), field) << c.error().to_string();
  EXPECT_NE(c.error().message().find(std::string(field)), std::string::npos) << c.error().message();
}

std::string with(std::string base, const std::string& key, const std::string& value) {
  auto pos = base.find("\"" + key + "\"");
  if (pos == std::string::npos) {
    base.insert(base.find('{') + 1, "\"" + key + "\": " + value + ", ");
    return base;
  }
  auto colon = base.find(':', pos);
  auto end = base.find_first_of(",}", colon);
  if (base[colon + 1] == ' ' && base[colon + 2] == '{') end = base.find('}', colon) + 1;
  base.replace(colon + 1, end - colon - 1, " " + value);
  return base;
}

TEST(ModelConfig, RefusesBadConfigsNamingTheField) {
  const std::string q = kQwen2_7B;
  expect_field_error(with(q, "num_key_value_heads", "5"), "num_key_value_heads");
  expect_field_error(with(q, "hidden_size", "\"big\""), "hidden_size");
  expect_field_error(with(q, "hidden_size", "-4"), "hidden_size");
  expect_field_error(with(q, "vocab_size", "1e30"), "vocab_size");
  expect_field_error(with(q, "num_hidden_layers", "1000000"), "num_hidden_layers");
  expect_field_error(with(q, "architectures", "[\"GPT2LMHeadModel\"]"), "architectures");
  expect_field_error(with(q, "hidden_act", "\"gelu\""), "hidden_act");
  expect_field_error(with(q, "rms_norm_eps", "0"), "rms_norm_eps");
  expect_field_error(with(q, "eos_token_id", "999999"), "eos_token_id");
  expect_field_error(with(q, "torch_dtype", "\"float8\""), "torch_dtype");
  expect_field_error(with(q, "rope_scaling", "{\"rope_type\": \"longrope\", \"factor\": 2}"),
                     "rope_scaling.rope_type");
  expect_field_error(
      with(q, "rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1}"),
      "rope_scaling.high_freq_factor");
  expect_field_error(with(q, "partial_rotary_factor", "0.001"), "partial_rotary_factor");
  expect_field_error(
      with(q, "quantization_config", "{\"quant_method\": \"infergate\", \"weight_format\": \"int3\"}"),
      "quantization_config.weight_format");
  std::string missing = q;
  missing.replace(missing.find("\"intermediate_size\": 18944,"), 27, "");
  expect_field_error(missing, "intermediate_size");
  expect_field_error(with(kDeepseekV3, "num_experts_per_tok", "300"), "num_experts_per_tok");
}

TEST(ModelConfig, RefusesTextThatIsNotAJsonObject) {
  auto c = parse_model_config(std::string_view("[1]"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().reason(), "InvalidConfig");
  auto d = parse_model_config(std::string_view("{"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().reason(), "InvalidConfig");
}

TEST(ModelConfig, ReadsOurQuantizationConfig) {
  ModelConfig c =
      parse_ok(with(kQwen2_7B, "quantization_config",
                    R"({"quant_method": "infergate", "weight_format": "int4", "bits": 4, "group_size": 128,
                                   "symmetric": false, "scale_dtype": "float16"})")
                   .c_str());
  ASSERT_TRUE(c.quantization.has_value());
  EXPECT_EQ(c.quantization->weight_format, "int4");
  EXPECT_EQ(c.quantization->group_size, 128);
  EXPECT_FALSE(c.quantization->symmetric);
}

}  // namespace
}  // namespace infergate::runtime::model
