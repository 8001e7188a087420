// Weight-format detection through the weights description: dense dtypes, our own releases, the published
// families (Kimi-K2-Thinking's I32 tensors included), and every refusal named.
#include "infergate/agent/manifest/weight_format.h"

#include <gtest/gtest.h>

#include "agent_test_util.h"
#include "infergate/agent/hashing/tree.h"
#include "infergate/agent/manifest/tree_check.h"

namespace infergate::agent {
namespace {

using testing::safetensors_bytes;
using testing::TensorBytes;
using testing::write_file;

Result<std::optional<std::string>> detect(const std::map<std::string, std::string>& files) {
  auto tmp = *TempDir::create("format-test");
  for (const auto& [p, c] : files) write_file(tmp.path(), p, c);
  auto root = *ArtifactRoot::open(tmp.path());
  auto m = build_manifest(root.fd());
  if (!m.ok()) return std::move(m).error();
  return detect_weight_format(root.fd(), *m);
}

void expect_weights_invalid(const Result<std::optional<std::string>>& r, std::string_view problem,
                            std::string_view tensor) {
  ASSERT_FALSE(r.ok()) << "expected " << problem << ", got " << (r->value_or("nothing"));
  EXPECT_EQ(r.error().reason(), "WeightsInvalid") << r.error().to_string();
  EXPECT_EQ(r.error().detail("problem"), problem) << r.error().to_string();
  if (!tensor.empty()) {
    EXPECT_EQ(r.error().detail("tensor"), tensor) << r.error().to_string();
    EXPECT_NE(r.error().message().find(tensor), std::string::npos) << r.error().to_string();
  }
}

TEST(DetectWeightFormat, TakesTheDtypeHoldingMostBytesOfADenseRelease) {
  auto f = detect({{"a.safetensors", safetensors_bytes("BF16", 1000, 2, 1, "model.embed_tokens.weight")},
                   {"b.safetensors", safetensors_bytes("F32", 10, 4, 1, "model.norm.weight")},
                   {"config.json", R"({"torch_dtype":"float16"})"}});
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_EQ(**f, "bf16");
}

TEST(DetectWeightFormat, ReadsOurOwnQuantizeOutput) {
  auto f = detect(testing::ours_int8_files());
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_EQ(**f, "int8");
}

// The bug this description fixed: the dominant dtype of Kimi-K2-Thinking is I32 (packed int4), which
// named no format, so `sign` of the unmodified release failed.
TEST(DetectWeightFormat, NamesKimiK2ThinkingFromItsConfigAndI32Tensors) {
  auto f = detect(testing::kimi_thinking_files());
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_EQ(**f, "int4-ct-g32-sym");
}

TEST(DetectWeightFormat, NamesDeepSeekV3Fp8AsBlockScaled) {
  auto f = detect(testing::deepseek_fp8_files());
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_EQ(**f, "fp8-block");
}

TEST(DetectWeightFormat, FallsBackOnConfigJsonThenNothing) {
  EXPECT_EQ(**detect({{"config.json", R"({"torch_dtype":"float16"})"}}), "fp16");
  auto none = detect({{"README.md", "hello"}});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(DetectWeightFormat, RefusesAQuantizationJsonTheConfigAndTensorsDoNotBackUp) {
  // The old shape of a fake int4 release: quantization.json alone says int4, the tensors are F16.
  expect_weights_invalid(detect({{"quantization.json", R"({"format":"int4","group_size":128})"},
                                 {"model.safetensors", safetensors_bytes("F16", 10, 2)}}),
                         "InvalidQuantizationConfig", "");
  expect_weights_invalid(detect({{"quantization.json", "{}"}}), "FormatMismatch", "");
}

TEST(DetectWeightFormat, RefusesASafetensorsHeaderLongerThanTheFile) {
  std::string bad = safetensors_bytes("F16", 10, 2);
  bad[0] = '\x7f';
  bad[1] = '\x7f';
  auto r = detect({{"m.safetensors", bad}});
  EXPECT_EQ(r.error().reason(), "MetadataInvalid");
  EXPECT_EQ(r.error().detail("file"), "m.safetensors");
  EXPECT_EQ(detect({{"m.safetensors", "short"}}).error().reason(), "MetadataInvalid");
}

TEST(DetectWeightFormat, RefusesAnUnknownDtype) {
  EXPECT_EQ(detect({{"m.safetensors", safetensors_bytes("C64", 10, 8)}}).error().reason(), "MetadataInvalid");
}

// ---- each bad input `sign` must refuse, with the reason and the tensor named ----

TEST(DetectWeightFormatRefuses, APackedTensorWithoutItsScale) {
  const std::string scale = "model.layers.1.mlp.experts.1.down_proj.weight_scale";
  expect_weights_invalid(detect(testing::kimi_thinking_files([&](std::vector<TensorBytes>& t) {
                           std::erase_if(t, [&](const TensorBytes& x) { return x.name == scale; });
                         })),
                         "MissingQuantPart", scale);
}

TEST(DetectWeightFormatRefuses, AScaleOfTheWrongShape) {
  const std::string scale = "model.layers.1.mlp.experts.0.down_proj.weight_scale";
  expect_weights_invalid(detect(testing::kimi_thinking_files([&](std::vector<TensorBytes>& t) {
                           for (auto& x : t) {
                             if (x.name == scale) x.shape = {32, 3};
                           }
                         })),
                         "QuantPartShape", scale);
}

TEST(DetectWeightFormatRefuses, AWeightShapeThatDisagreesWithThePackedSize) {
  const std::string shape = "model.layers.1.mlp.experts.0.up_proj.weight_shape";
  expect_weights_invalid(detect(testing::kimi_thinking_files([&](std::vector<TensorBytes>& t) {
                           for (auto& x : t) {
                             if (x.name == shape) x.bytes[8] = 40;  // K 40: 5 words, not 4
                           }
                         })),
                         "QuantPartShape", shape);
}

TEST(DetectWeightFormatRefuses, AGroupSizeThatDoesNotDivideK) {
  const std::string m = "model.layers.1.mlp.experts.0.up_proj";
  expect_weights_invalid(detect(testing::kimi_thinking_files([&](std::vector<TensorBytes>& t) {
                           for (auto& x : t) {
                             if (x.name == m + ".weight_packed") x.shape = {64, 5};
                             if (x.name == m + ".weight_shape") x.bytes[8] = 40;  // K 40, groups of 32
                           }
                         })),
                         "GroupSizeMismatch", m + ".weight_packed");
}

TEST(DetectWeightFormatRefuses, AConfigThatNamesAFormatItsTensorsDoNotHave) {
  auto files = testing::deepseek_fp8_files();
  files["model.safetensors"] =
      testing::safetensors_tensors({{"model.layers.0.mlp.up_proj.weight", "BF16", {64, 32}, {}},
                                    {"lm_head.weight", "BF16", {64, 32}, {}}});
  auto r = detect(files);
  expect_weights_invalid(r, "FormatMismatch", "");
  EXPECT_EQ(r.error().detail("field"), "quantization_config");
}

TEST(DetectWeightFormatRefuses, ATensorTheIgnoreRulesSayIsQuantizedButIsNot) {
  const std::string m = "model.layers.1.mlp.experts.1.up_proj";
  expect_weights_invalid(detect(testing::kimi_thinking_files([&](std::vector<TensorBytes>& t) {
                           std::erase_if(t,
                                         [&](const TensorBytes& x) { return x.name.starts_with(m + "."); });
                           t.push_back({m + ".weight", "BF16", {64, 32}, {}});
                         })),
                         "IgnoreRuleMismatch", m + ".weight");
}

TEST(DetectWeightFormatRefuses, AnUnknownQuantMethod) {
  auto files = testing::deepseek_fp8_files();
  auto config = *parse_json(files["config.json"], "config.json");
  config["quantization_config"]["quant_method"] = "hqq";
  files["config.json"] = config.dump();
  auto r = detect(files);
  expect_weights_invalid(r, "UnknownQuantMethod", "");
  EXPECT_EQ(r.error().detail("field"), "quantization_config.quant_method");
}

TEST(DetectWeightFormatRefuses, AScaleThatIsNaN) {
  const std::string scale = "model.layers.0.self_attn.o_proj.weight_scale_inv";
  auto files = testing::deepseek_fp8_files();
  // One FP8 linear whose only scale is NaN.
  const std::string nan = std::string("\x00\x00\xc0\x7f", 4);
  files["model.safetensors"] =
      testing::safetensors_tensors({{"model.layers.0.self_attn.o_proj.weight", "F8_E4M3", {32, 32}, {}},
                                    {scale, "F32", {1, 1}, nan},
                                    {"lm_head.weight", "BF16", {64, 32}, {}}});
  auto r = detect(files);
  expect_weights_invalid(r, "QuantValueInvalid", scale);
}

}  // namespace
}  // namespace infergate::agent
