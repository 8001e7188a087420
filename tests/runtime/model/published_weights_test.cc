// The published weight formats end to end on the checkpoint side: make-test-model writes each family as
// published (tensor names, dtypes, packing, config keys, per-expert tensors, ragged shapes) on the Llama,
// GLM-4.5 MoE and DeepSeek-V3 / Kimi-K2 architectures; the one description reads it back; the kernels'
// scalar reference dequantizes every quantized linear; and an independent NumPy reference
// (published_reference.py, written from the format descriptions) agrees with it bit for bit.
#include "infergate/runtime/model/published_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "infergate/common/json.h"
#include "infergate/runtime/model/quantize.h"
#include "infergate/runtime/model/test_model.h"
#include "testing.h"

namespace infergate::runtime::model {
namespace {
namespace fs = std::filesystem;

struct Case {
  std::string name;
  Architecture arch;
  std::string format;  // a format word, or "ours-int8" / "ours-int4" (made with quantize)
  int64_t intermediate = 0;
  bool act_order = false;
  TestPublishedOptions::Modules modules = TestPublishedOptions::Modules::kDefault;
  DType dtype = DType::kBF16;
  bool ue8m0 = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

TestModelOptions options(const fs::path& out, const Case& c) {
  TestModelOptions o = testing::small_model(out, c.arch);
  o.dtype = c.dtype;
  o.intermediate = c.intermediate;
  o.published.format = c.format;
  o.published.act_order = c.act_order;
  o.published.modules = c.modules;
  o.published.ue8m0 = c.ue8m0;
  if (c.arch == Architecture::kDeepseekV3) o.mla.kimi = true;
  return o;
}

std::vector<float> floats_of(std::span<const uint8_t> d, DType dt) {
  std::vector<float> out(d.size() / dtype_size(dt));
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, d.data() + 2 * i, 2);
    out[i] = dt == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
  return out;
}

struct Described {
  std::unique_ptr<ModelDirectory> dir;
  std::unique_ptr<Checkpoint> ckpt;
  weights::ReleaseMetadata meta;
  weights::WeightDescription d;
};

std::unique_ptr<Described> describe(const fs::path& model) {
  auto out = std::make_unique<Described>();
  auto dir = ModelDirectory::open(model);
  EXPECT_TRUE(dir.ok()) << dir.error().to_string();
  out->dir = std::make_unique<ModelDirectory>(std::move(*dir));
  auto ckpt = Checkpoint::open(*out->dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.error().to_string();
  out->ckpt = std::make_unique<Checkpoint>(std::move(*ckpt));
  auto d = describe_checkpoint(*out->dir, *out->ckpt, &out->meta);
  EXPECT_TRUE(d.ok()) << d.error().to_string();
  if (d.ok()) out->d = std::move(*d);
  return out;
}

// Makes the case's release (and its dense original), dequantizes every quantized linear with the C++
// reference into dequant.safetensors, and has the NumPy reference compare; returns the description.
std::unique_ptr<Described> check_case(const Case& c, const fs::path& root, const std::string& word) {
  const fs::path model = root / "model", original = root / "original";
  TestModelOptions o = options(original, c);
  o.published = TestPublishedOptions{};
  testing::make_small_model(o);
  if (c.format.starts_with("ours-")) {  // ours: quantize the original
    QuantizeOptions q;
    q.model = original;
    q.out = model;
    q.scheme.format = c.format == "ours-int8" ? WeightFormat::kInt8 : WeightFormat::kInt4;
    q.scheme.group_size = c.format == "ours-int8" ? 0 : 32;
    q.scheme.symmetric = c.format == "ours-int8";
    auto r = quantize_model(q);
    EXPECT_TRUE(r.ok()) << r.error().to_string();
  } else {
    testing::make_small_model(options(model, c));
  }
  auto described = describe(model);
  const weights::WeightDescription& d = described->d;
  EXPECT_EQ(d.word, word) << c.name;
  EXPECT_FALSE(d.quantized.empty()) << c.name;

  auto orig_dir = ModelDirectory::open(original);
  auto orig = Checkpoint::open(*orig_dir);
  std::vector<std::vector<float>> outs;
  std::vector<TensorData> tensors;
  outs.reserve(d.quantized.size());
  for (const weights::QuantizedLinear& q : d.quantized) {
    auto w = dequantize_described(*described->ckpt, q, d.scheme);
    EXPECT_TRUE(w.ok()) << q.module << ": " << w.error().to_string();
    if (!w.ok()) return described;
    // Against the dense original: quantized (not a copy), and within the format's error.
    const Checkpoint::Entry* e = orig->find(q.module + ".weight");
    EXPECT_NE(e, nullptr) << q.module;
    if (e == nullptr) return described;
    std::vector<float> x = floats_of(orig->data(*e), c.dtype);
    double err = 0, norm = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (x[i] - (*w)[i]) * (x[i] - (*w)[i]);
      norm += x[i] * x[i];
    }
    const double rel = std::sqrt(err / norm);
    const bool fp8 =
        d.scheme.family == weights::Family::kFp8Block || d.scheme.family == weights::Family::kFp8Channel;
    EXPECT_GT(rel, 0.0) << q.module;
    EXPECT_LT(rel, fp8 ? 0.05 : 0.2) << q.module << " in " << c.name;
    outs.push_back(std::move(*w));
    tensors.push_back({{q.module + ".weight", DType::kF32, {q.rows, q.cols}},
                       std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(outs.back().data()),
                                                outs.back().size() * 4)});
  }
  const fs::path cpp = root / "dequant.safetensors";
  EXPECT_TRUE(write_safetensors(cpp, tensors).ok());
  CommandResult r = testing::run_python(
      {testing::source_file("published_reference.py").string(), model.string(), cpp.string()});
  EXPECT_TRUE(r.status.success()) << c.name << ": " << r.err << r.out;
  auto summary = parse_json(r.out, "published_reference.py");
  EXPECT_TRUE(summary.ok()) << r.out;
  if (summary.ok()) {
    EXPECT_EQ(*json_string(*summary, "word"), word) << c.name;
    EXPECT_EQ(static_cast<size_t>(*json_int(*summary, "quantized")), d.quantized.size()) << c.name;
  }
  return described;
}

class PublishedFamilies : public ::testing::TestWithParam<std::tuple<Case, std::string>> {};

TEST_P(PublishedFamilies, AgreeBitForBitWithTheIndependentNumpyReference) {
  const auto& [c, word] = GetParam();
  auto dir = testing::temp_dir();
  check_case(c, dir.path(), word);
}

using M = TestPublishedOptions::Modules;
INSTANTIATE_TEST_SUITE_P(
    Families, PublishedFamilies,
    ::testing::Values(
        // Kimi-K2-Thinking: routed experts only, group 32, symmetric.
        std::make_tuple(Case{"kimi_thinking", Architecture::kDeepseekV3, "int4-ct-g32-sym"},
                        "int4-ct-g32-sym"),
        // DeepSeek-V3 / Kimi-K2-Instruct: every linear FP8 in 128 x 128 blocks; N and K 200 are ragged
        // (one full block and a partial one), the rest smaller than a block.
        std::make_tuple(Case{"deepseek_fp8", Architecture::kDeepseekV3, "fp8-block", 200}, "fp8-block"),
        std::make_tuple(Case{"deepseek_fp8_ue8m0", Architecture::kDeepseekV3, "fp8-block", 0, false,
                             M::kDefault, DType::kBF16, true},
                        "fp8-block"),
        // GLM-4.5/4.6-FP8: compressed-tensors per-channel FP8 on the MoE architecture.
        std::make_tuple(Case{"glm45_fp8", Architecture::kGlm4Moe, "fp8-channel"}, "fp8-channel"),
        // GLM-4.5-Air AWQ (fp16 as AutoAWQ writes it).
        std::make_tuple(Case{"glm45_awq", Architecture::kGlm4Moe, "awq-g32", 128, false, M::kDefault,
                             DType::kF16},
                        "awq-g32"),
        // Every linear of the MLA model, asymmetric with activation order.
        std::make_tuple(Case{"mla_ct_asym_act", Architecture::kDeepseekV3, "int4-ct-g32-asym", 0, true,
                             M::kAllLinear},
                        "int4-ct-g32-asym"),
        // Ragged for compressed-tensors: N and K 100 are not multiples of the pack width 8 (per channel).
        std::make_tuple(Case{"llama_ct_channel_ragged", Architecture::kLlama, "int4-ct-ch-asym", 100},
                        "int4-ct-ch-asym"),
        // GPTQ with activation order and a ragged last group (K 104 = 3 x 32 + 8).
        std::make_tuple(Case{"llama_gptq_act", Architecture::kLlama, "gptq-g32", 104, true, M::kDefault,
                             DType::kF16},
                        "gptq-g32"),
        std::make_tuple(Case{"glm45_gptq_v2", Architecture::kGlm4Moe, "gptq-g64-v2", 128, false, M::kDefault,
                             DType::kF16},
                        "gptq-g64-v2"),
        // Ours, made by quantize from the same original (K 100: a ragged last group of 4).
        std::make_tuple(Case{"llama_ours_int4", Architecture::kLlama, "ours-int4", 100, false, M::kDefault,
                             DType::kF16},
                        "int4"),
        std::make_tuple(Case{"llama_ours_int8", Architecture::kLlama, "ours-int8", 100, false, M::kDefault,
                             DType::kF16},
                        "int8")),
    [](const auto& p) { return std::get<0>(p.param).name; });

TEST(PublishedRelease, KimiK2ThinkingKeepsAttentionSharedExpertsAndDenseMlpsInBf16) {
  auto dir = testing::temp_dir();
  testing::make_small_model(options(dir.path(), {"kimi", Architecture::kDeepseekV3, "int4-ct-g32-sym"}));
  auto config = parse_json(testing::read_bytes(dir.path() / "config.json"), "config.json");
  ASSERT_TRUE(config.ok());
  const Json& q = (*config)["quantization_config"];
  EXPECT_EQ(q["quant_method"], "compressed-tensors");
  EXPECT_EQ(q["format"], "pack-quantized");
  EXPECT_EQ(q["quantization_status"], "compressed");
  EXPECT_EQ(q["ignore"], Json({"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                               R"(re:.*mlp\.(gate|up|gate_up|down)_proj.*)"}));
  const Json& w = q["config_groups"]["group_0"]["weights"];
  EXPECT_EQ(w["num_bits"], 4);
  EXPECT_EQ(w["group_size"], 32);
  EXPECT_EQ(w["strategy"], "group");
  EXPECT_EQ(w["symmetric"], true);
  EXPECT_EQ(w["type"], "int");
  EXPECT_TRUE(w["actorder"].is_null());
  EXPECT_EQ(q["config_groups"]["group_0"]["targets"], Json({"Linear"}));

  auto d = describe(dir.path());
  const std::string expert = "model.layers.1.mlp.experts.3.down_proj";
  const weights::QuantizedLinear* e = d->d.find(expert);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->part(weights::PartRole::kData)->tensor->name, expert + ".weight_packed");
  EXPECT_EQ(e->part(weights::PartRole::kShape)->tensor->dtype, weights::Dtype::kI64);
  auto dtype_of = [&](const std::string& name) -> std::string {
    const Checkpoint::Entry* t = d->ckpt->find(name);
    return t ? std::string(dtype_name(t->info->dtype)) : "absent";
  };
  EXPECT_EQ(dtype_of(expert + ".weight_scale"), "BF16");
  EXPECT_EQ(dtype_of("model.layers.1.self_attn.q_a_proj.weight"), "BF16");
  EXPECT_EQ(dtype_of("model.layers.1.mlp.shared_experts.up_proj.weight"), "BF16");
  EXPECT_EQ(dtype_of("model.layers.0.mlp.gate_proj.weight"), "BF16");
  EXPECT_EQ(dtype_of("model.layers.1.mlp.gate.weight"), "BF16");
  EXPECT_EQ(dtype_of("model.layers.1.mlp.gate.e_score_correction_bias"), "F32");
  EXPECT_EQ(dtype_of("lm_head.weight"), "BF16");
  EXPECT_EQ(dtype_of(expert + ".weight"), "absent");
}

TEST(PublishedRelease, DeepSeekV3Fp8QuantizesEveryLinearButTheRouterEmbeddingsAndLmHead) {
  auto dir = testing::temp_dir();
  testing::make_small_model(options(dir.path(), {"ds", Architecture::kDeepseekV3, "fp8-block"}));
  auto config = parse_json(testing::read_bytes(dir.path() / "config.json"), "config.json");
  EXPECT_EQ((*config)["quantization_config"], Json({{"activation_scheme", "dynamic"},
                                                    {"fmt", "e4m3"},
                                                    {"quant_method", "fp8"},
                                                    {"weight_block_size", {128, 128}}}));
  auto d = describe(dir.path());
  for (const weights::DenseTensor& t : d->d.dense) {
    if (!t.linear) continue;
    EXPECT_EQ(t.tensor->name, "lm_head.weight");
  }
  const weights::QuantizedLinear* kv_b = d->d.find("model.layers.0.self_attn.kv_b_proj");
  ASSERT_NE(kv_b, nullptr);
  EXPECT_EQ(kv_b->part(weights::PartRole::kScale)->tensor->name,
            "model.layers.0.self_attn.kv_b_proj.weight_scale_inv");
  EXPECT_EQ(kv_b->part(weights::PartRole::kScale)->tensor->dtype, weights::Dtype::kF32);
}

TEST(PublishedRelease, TheCliWritesTheSameBytesAsTheLibrary) {
  auto dir = testing::temp_dir();
  testing::make_small_model(options(dir.path() / "lib", {"gptq", Architecture::kLlama, "gptq-g32", 0, true}));
  const std::vector<std::string> args = {"make-test-model",
                                         "--out",
                                         (dir.path() / "cli").string(),
                                         "--arch",
                                         "llama",
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
                                         "--dtype",
                                         "bf16",
                                         "--weight-format",
                                         "gptq-g32",
                                         "--act-order"};
  auto r = testing::run_runtime(args);
  ASSERT_TRUE(r.status.success()) << r.err;
  EXPECT_EQ(testing::tree(dir.path() / "lib"), testing::tree(dir.path() / "cli"));
}

TEST(PublishedRelease, RefusesShapesAndOptionsTheFormatCannotHoldNamingTheTensor) {
  auto dir = testing::temp_dir();
  // AWQ groups of 128 do not divide K = 64 (hidden).
  Status s = make_test_model(options(dir.path() / "a", {"awq", Architecture::kLlama, "awq-g128"}));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().reason(), "InvalidQuantScheme");
  EXPECT_NE(s.error().message().find("model.layers.0.self_attn.q_proj.weight"), std::string::npos)
      << s.error().to_string();
  for (const Case& c :
       {Case{"ours", Architecture::kLlama, "int8"}, Case{"bad", Architecture::kLlama, "int4-ct-g32"},
        Case{"llama_experts", Architecture::kLlama, "int4-ct-g32-sym", 0, false, M::kRoutedExperts},
        Case{"act_fp8", Architecture::kLlama, "fp8-block", 0, true}}) {
    Status st = make_test_model(options(dir.path() / c.name, c));
    ASSERT_FALSE(st.ok()) << c.name;
    EXPECT_EQ(st.error().reason(), "InvalidOption") << c.name << ": " << st.error().to_string();
    EXPECT_FALSE(fs::exists(dir.path() / c.name)) << "nothing is left behind";
  }
}

TEST(PublishedWeights, ActOrderGroupsFollowColumnEnergyAndHoldExactlyGColumnsEach) {
  // Column 2 has the most energy, then 0, 3, 1.
  const std::vector<float> w = {2, 0.5f, 3, 1, 2, 0.5f, 3, 1};
  EXPECT_EQ(act_order_groups(w.data(), 2, 4, 2), (std::vector<int32_t>{0, 1, 0, 1}));
}

}  // namespace
}  // namespace infergate::runtime::model
