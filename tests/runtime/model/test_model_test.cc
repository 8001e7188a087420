// make-test-model: deterministic bytes, loadable in every architecture, peaked logits by construction,
// outlier channels where documented, refusals naming the option.
#include "infergate/runtime/model/test_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "infergate/runtime/model/model.h"
#include "testing.h"

namespace infergate::runtime::model {
namespace {
namespace fs = std::filesystem;

TestModelOptions small(const fs::path& out, Architecture arch) {
  TestModelOptions o;
  o.out = out;
  o.arch = arch;
  o.layers = 2;
  o.hidden = 64;
  o.heads = 4;
  o.kv_heads = 2;
  o.vocab = 400;
  o.seed = 7;
  return o;
}

std::vector<float> as_floats(const TensorView& v) {
  std::vector<float> out(v.num_elements());
  for (size_t i = 0; i < out.size(); ++i) {
    if (v.dtype == DType::kF32) {
      std::memcpy(&out[i], v.data + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, v.data + 2 * i, 2);
      out[i] = v.dtype == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  return out;
}

TEST(TestModel, SameOptionsGiveTheSameBytes) {
  auto dir = testing::temp_dir();
  auto o = small(dir.path() / "a", Architecture::kLlama);
  o.outlier_channels = 2;
  ASSERT_TRUE(make_test_model(o).ok());
  o.out = dir.path() / "b";
  ASSERT_TRUE(make_test_model(o).ok());
  auto a = testing::tree(dir.path() / "a"), b = testing::tree(dir.path() / "b");
  ASSERT_EQ(a.size(), 5u);
  EXPECT_TRUE(a == b);
  o.out = dir.path() / "c";
  o.seed = 8;
  ASSERT_TRUE(make_test_model(o).ok());
  auto c = testing::tree(dir.path() / "c");
  EXPECT_NE(a, c) << "a different seed gives different weights";
}

TEST(TestModel, TheCliWritesTheSameBytesAsTheLibrary) {
  auto dir = testing::temp_dir();
  auto o = small(dir.path() / "lib", Architecture::kQwen2);
  ASSERT_TRUE(make_test_model(o).ok());
  auto r = testing::run_runtime({"make-test-model", "--out", (dir.path() / "cli").string(), "--arch", "qwen2",
                                 "--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2",
                                 "--vocab", "400", "--seed", "7"});
  ASSERT_TRUE(r.status.success()) << r.err;
  EXPECT_TRUE(testing::tree(dir.path() / "lib") == testing::tree(dir.path() / "cli"));
}

TEST(TestModel, TheCliWritesTheSameMoeBytesAsTheLibrary) {
  auto dir = testing::temp_dir();
  auto o = small(dir.path() / "lib", Architecture::kGlm4Moe);
  o.moe.experts = 12;
  o.moe.experts_per_token = 3;
  o.moe.groups = 4;
  o.moe.topk_groups = 2;
  o.moe.shared_experts = 2;
  o.moe.dense_layers = 0;
  o.moe.intermediate = 40;
  o.moe.routed_scaling = 1.5;
  o.moe.qk_norm = false;
  ASSERT_TRUE(make_test_model(o).ok());
  auto r = testing::run_runtime({"make-test-model",
                                 "--out",
                                 (dir.path() / "cli").string(),
                                 "--arch",
                                 "glm4_moe",
                                 "--layers",
                                 "2",
                                 "--hidden",
                                 "64",
                                 "--heads",
                                 "4",
                                 "--kv-heads",
                                 "2",
                                 "--vocab",
                                 "400",
                                 "--seed",
                                 "7",
                                 "--experts",
                                 "12",
                                 "--experts-per-token",
                                 "3",
                                 "--expert-groups",
                                 "4",
                                 "--topk-groups",
                                 "2",
                                 "--shared-experts",
                                 "2",
                                 "--dense-layers",
                                 "0",
                                 "--moe-intermediate",
                                 "40",
                                 "--routed-scaling",
                                 "1.5",
                                 "--no-qk-norm"});
  ASSERT_TRUE(r.status.success()) << r.err;
  EXPECT_TRUE(testing::tree(dir.path() / "lib") == testing::tree(dir.path() / "cli"));
}

class EveryArchitecture : public ::testing::TestWithParam<Architecture> {};

TEST_P(EveryArchitecture, LoadsWithEveryExpectedTensorAndARealTokenizer) {
  auto dir = testing::temp_dir();
  auto o = small(dir.path() / "m", GetParam());
  o.dtype = DType::kBF16;
  ASSERT_TRUE(make_test_model(o).ok());
  auto m = Model::open(o.out);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(m->config().architecture, GetParam());
  EXPECT_EQ(m->config().vocab_size, 400);
  EXPECT_EQ(m->tokenizer().vocab_size(), 400);
  EXPECT_GT(m->tokenizer().num_merges(), 100u) << "trained merges, not just bytes";
  EXPECT_FALSE(m->tokenizer_config().chat_template.empty());
  EXPECT_EQ(m->generation_config().eos_token_ids.size(), 2u);
  for (const auto& t : expected_tensors(m->config())) {
    auto v = m->tensor(t.name);
    ASSERT_TRUE(v.ok()) << t.name;
    EXPECT_EQ(v->dtype, DType::kBF16);
    EXPECT_TRUE(v->aligned());
  }
  std::string text = "The model server starts 你好 123";
  auto ids = m->tokenizer().encode(text, {.add_special_tokens = false});
  EXPECT_LT(ids.size(), text.size());
  EXPECT_EQ(*m->tokenizer().decode(ids), text);
}

INSTANTIATE_TEST_SUITE_P(Archs, EveryArchitecture,
                         ::testing::Values(Architecture::kLlama, Architecture::kQwen2, Architecture::kGlm,
                                           Architecture::kGlm4, Architecture::kGlm4Moe));

TEST(TestModel, Glm4MoeHasDenseLeadingLayersRoutedExpertsASharedExpertAndARouterBias) {
  auto dir = testing::temp_dir();
  auto o = small(dir.path() / "m", Architecture::kGlm4Moe);
  o.layers = 3;
  o.moe.experts = 6;
  o.moe.groups = 3;
  o.moe.topk_groups = 2;
  o.moe.experts_per_token = 3;
  o.moe.shared_experts = 2;
  o.moe.dense_layers = 1;
  o.moe.intermediate = 24;
  o.dtype = DType::kF32;
  ASSERT_TRUE(make_test_model(o).ok());
  auto m = Model::open(o.out);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  const ModelConfig& c = m->config();
  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(c.moe->n_routed_experts, 6);
  EXPECT_EQ(c.moe->n_group, 3);
  EXPECT_EQ(c.moe->topk_group, 2);
  EXPECT_EQ(c.moe->num_experts_per_tok, 3);
  EXPECT_EQ(c.moe->topk_method, "noaux_tc");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.rope_layout, RopeLayout::kHalves);
  EXPECT_EQ(c.rotary_dim, c.head_dim / 2);
  EXPECT_TRUE(m->has_tensor("model.layers.0.mlp.gate_proj.weight")) << "layer 0 is dense";
  EXPECT_FALSE(m->has_tensor("model.layers.0.mlp.gate.weight"));
  EXPECT_TRUE(m->has_tensor("model.layers.2.mlp.experts.5.down_proj.weight"));
  EXPECT_TRUE(m->has_tensor("model.layers.1.self_attn.q_norm.weight"));
  auto shared = m->tensor("model.layers.1.mlp.shared_experts.gate_proj.weight");
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->shape[0], 48u) << "2 shared experts of width 24";
  auto bias = as_floats(*m->tensor("model.layers.1.mlp.gate.e_score_correction_bias"));
  double ss = 0;
  for (float b : bias) ss += static_cast<double>(b) * b;
  EXPECT_GT(std::sqrt(ss / 6), 0.02) << "a bias large enough to change some choices";
  EXPECT_LT(std::sqrt(ss / 6), 0.3);
}

TEST(TestModel, DeepseekV3HasLatentAttentionYarnAndLatentOutliersCompensatedInKvBProj) {
  auto dir = testing::temp_dir();
  auto o = small(dir.path() / "m", Architecture::kDeepseekV3);
  o.dtype = DType::kF32;
  o.outlier_channels = 3;
  o.mla.kimi = true;
  ASSERT_TRUE(make_test_model(o).ok());
  auto m = Model::open(o.out);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.model_type, "kimi_k2");
  ASSERT_TRUE(c.mla.has_value());
  EXPECT_EQ(c.mla->q_lora_rank, 32);
  EXPECT_EQ(c.mla->kv_lora_rank, 64);
  EXPECT_EQ(c.rope_layout, RopeLayout::kInterleaved);
  EXPECT_EQ(c.rope_scaling.type, RopeType::kYarn);
  EXPECT_EQ(c.kv_cache_values_per_token_per_layer(), 64 + 16);
  EXPECT_TRUE(m->has_tensor("model.layers.1.mlp.experts.7.up_proj.weight"));
  auto norm = as_floats(*m->tensor("model.layers.0.self_attn.kv_a_layernorm.weight"));
  auto kvb = as_floats(*m->tensor("model.layers.0.self_attn.kv_b_proj.weight"));  // [A x 32, 64]
  int big = 0;
  for (size_t j = 0; j < norm.size(); ++j) {
    if (norm[j] < 4) continue;
    ++big;
    double col = 0, other = 0;
    for (size_t r = 0; r < kvb.size() / 64; ++r) {
      col += std::abs(kvb[r * 64 + j]);
      other += std::abs(kvb[r * 64 + (j + 1) % 64]);
    }
    EXPECT_LT(col * 8, other) << "column " << j << " of kv_b_proj is scaled down to compensate";
  }
  EXPECT_EQ(big, 3);
}

TEST(TestModel, WithQkNormsTheOutliersSitOnKNormAndQNormCompensates) {
  auto dir = testing::temp_dir();
  auto o = small(dir.path() / "m", Architecture::kGlm4Moe);
  o.dtype = DType::kF32;
  o.outlier_channels = 2;
  ASSERT_TRUE(make_test_model(o).ok());
  auto m = Model::open(o.out);
  ASSERT_TRUE(m.ok());
  auto kn = as_floats(*m->tensor("model.layers.0.self_attn.k_norm.weight"));
  auto qn = as_floats(*m->tensor("model.layers.0.self_attn.q_norm.weight"));
  std::vector<size_t> big;
  for (size_t j = 0; j < kn.size(); ++j) {
    if (kn[j] > 4) big.push_back(j);
  }
  ASSERT_EQ(big.size(), 2u) << "one rotary pair";
  EXPECT_EQ(big[1] - big[0], kn.size() / 4) << "rotate-half pairs i and i + rotary_dim / 2";
  for (size_t j : big) EXPECT_NEAR(kn[j] * qn[j], 1.0, 0.15) << "the product is unchanged";
}

TEST(TestModel, LmHeadIsScaledForPeakedLogits) {
  auto dir = testing::temp_dir();
  auto o = small(dir.path() / "m", Architecture::kLlama);
  o.dtype = DType::kF32;
  ASSERT_TRUE(make_test_model(o).ok());
  auto m = Model::open(o.out);
  ASSERT_TRUE(m.ok());
  // Any unit-RMS hidden state gives logits of std kLogitStd: check the lm_head row norms.
  auto w = as_floats(*m->tensor("lm_head.weight"));
  double sum_sq = 0;
  for (float v : w) sum_sq += static_cast<double>(v) * v;
  double per_row = sum_sq / 400.0;  // |row|^2 = H * std^2 = kLogitStd^2
  EXPECT_NEAR(std::sqrt(per_row), kLogitStd, 0.3);
  // With unit-RMS hidden state h = (1, ..., 1): logits are row sums; their spread is about kLogitStd.
  std::vector<double> logits(400, 0);
  for (size_t r = 0; r < 400; ++r) {
    for (size_t c = 0; c < 64; ++c) logits[r] += w[r * 64 + c];
  }
  double mean = 0, var = 0;
  for (double l : logits) mean += l / 400;
  for (double l : logits) var += (l - mean) * (l - mean) / 400;
  EXPECT_GT(std::sqrt(var), 0.8 * kLogitStd);
  EXPECT_LT(std::sqrt(var), 1.2 * kLogitStd);
}

TEST(TestModel, OutlierChannelsAreLargeInKeysAndCompensatedInQueries) {
  auto dir = testing::temp_dir();
  auto o = small(dir.path() / "m", Architecture::kLlama);
  o.dtype = DType::kF32;
  o.outlier_channels = 2;
  ASSERT_TRUE(make_test_model(o).ok());
  auto m = Model::open(o.out);
  ASSERT_TRUE(m.ok());
  const int64_t d = m->config().head_dim;  // 16
  auto k = as_floats(*m->tensor("model.layers.0.self_attn.k_proj.weight"));
  auto q = as_floats(*m->tensor("model.layers.0.self_attn.q_proj.weight"));
  auto row_rms = [&](const std::vector<float>& w, size_t r) {
    double s = 0;
    for (size_t c = 0; c < 64; ++c) s += static_cast<double>(w[r * 64 + c]) * w[r * 64 + c];
    return std::sqrt(s / 64);
  };
  std::vector<int64_t> big;
  for (int64_t c = 0; c < d; ++c) {
    if (row_rms(k, static_cast<size_t>(c)) > 4 * row_rms(k, static_cast<size_t>((c + d / 4) % d)) ||
        row_rms(k, static_cast<size_t>(c)) > 1.0) {
      big.push_back(c);
    }
  }
  ASSERT_EQ(big.size(), 2u) << "one rotary pair";
  EXPECT_EQ(big[1] - big[0], d / 2) << "Llama pairs channel i with i + d/2";
  for (int64_t head = 0; head < 2; ++head) {  // the same channels in every KV head
    for (int64_t c : big) EXPECT_GT(row_rms(k, static_cast<size_t>(head * d + c)), 1.0);
  }
  for (int64_t c : big)
    EXPECT_LT(row_rms(q, static_cast<size_t>(c)), 0.05) << "queries scaled down to compensate";
}

TEST(TestModel, GlmOutliersUseInterleavedPairs) {
  auto dir = testing::temp_dir();
  auto o = small(dir.path() / "m", Architecture::kGlm4);
  o.dtype = DType::kF32;
  o.outlier_channels = 2;
  ASSERT_TRUE(make_test_model(o).ok());
  auto m = Model::open(o.out);
  ASSERT_TRUE(m.ok());
  auto k = as_floats(*m->tensor("model.layers.1.self_attn.k_proj.weight"));
  std::vector<int64_t> big;
  for (int64_t c = 0; c < 16; ++c) {
    double s = 0;
    for (size_t i = 0; i < 64; ++i)
      s += static_cast<double>(k[static_cast<size_t>(c) * 64 + i]) * k[static_cast<size_t>(c) * 64 + i];
    if (std::sqrt(s / 64) > 1.0) big.push_back(c);
  }
  ASSERT_EQ(big.size(), 2u);
  EXPECT_EQ(big[0] % 2, 0);
  EXPECT_EQ(big[1], big[0] + 1);
  EXPECT_LT(big[1], 8) << "inside the rotary half of the head";
}

TEST(TestModel, WritesShardsWithAnIndexWhenAsked) {
  auto dir = testing::temp_dir();
  auto o = small(dir.path() / "m", Architecture::kLlama);
  o.max_shard_bytes = 60000;
  ASSERT_TRUE(make_test_model(o).ok());
  EXPECT_TRUE(fs::exists(o.out / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(o.out / "model.safetensors"));
  auto m = Model::open(o.out);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  auto dir2 = testing::temp_dir();
  auto single = small(dir2.path() / "m", Architecture::kLlama);
  ASSERT_TRUE(make_test_model(single).ok());
  auto s = Model::open(single.out);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(m->tensor_bytes(), s->tensor_bytes());
  auto a = m->tensor("model.layers.1.mlp.down_proj.weight"),
       b = s->tensor("model.layers.1.mlp.down_proj.weight");
  EXPECT_EQ(0, std::memcmp(a->data, b->data, a->nbytes)) << "sharding does not change the weights";
}

TEST(TestModel, RefusesBadOptionsNamingTheFlag) {
  auto dir = testing::temp_dir();
  auto check = [&](TestModelOptions o, std::string_view flag) {
    auto s = make_test_model(o);
    ASSERT_FALSE(s.ok()) << flag;
    EXPECT_EQ(s.error().detail("option"), flag) << s.error().to_string();
  };
  auto o = small(dir.path() / "m", Architecture::kLlama);
  auto bad = o;
  bad.heads = 5;
  check(bad, "--heads");
  bad = o;
  bad.kv_heads = 3;
  check(bad, "--kv-heads");
  bad = o;
  bad.vocab = 100;
  check(bad, "--vocab");
  bad = o;
  bad.layers = 0;
  check(bad, "--layers");
  auto moe = small(dir.path() / "m", Architecture::kGlm4Moe);
  bad = moe;
  bad.moe.groups = 3;  // 8 experts
  check(bad, "--expert-groups");
  bad = moe;
  bad.moe.experts = 8;
  bad.moe.groups = 8;  // groups of one: no two best to score by
  check(bad, "--expert-groups");
  bad = moe;
  bad.moe.topk_groups = 3;
  check(bad, "--topk-groups");
  bad = moe;
  bad.moe.experts_per_token = 5;  // one group of 4 kept
  check(bad, "--experts-per-token");
  bad = moe;
  bad.moe.dense_layers = 3;
  check(bad, "--dense-layers");
  bad = moe;
  bad.moe.routed_scaling = 0;
  check(bad, "--routed-scaling");
  EXPECT_FALSE(fs::exists(o.out));
}

TEST(TestModel, RefusesANonEmptyOutputUnlessForced) {
  auto dir = testing::temp_dir();
  auto o = small(dir.path() / "m", Architecture::kLlama);
  fs::create_directory(o.out);
  testing::write_bytes(o.out / "keep.txt", "x");
  auto s = make_test_model(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().reason(), "OutputNotEmpty");
  EXPECT_TRUE(fs::exists(o.out / "keep.txt"));
  o.force = true;
  ASSERT_TRUE(make_test_model(o).ok());
  EXPECT_FALSE(fs::exists(o.out / "keep.txt"));
  EXPECT_TRUE(fs::exists(o.out / "model.safetensors"));
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1u) << "no staging or old directories left behind";
}

}  // namespace
}  // namespace infergate::runtime::model
