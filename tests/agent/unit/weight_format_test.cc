// Weight-format detection: quantization.json, then safetensors dtypes, then config.json.
#include "infergate/agent/manifest/weight_format.h"

#include <gtest/gtest.h>

#include "agent_test_util.h"
#include "infergate/agent/hashing/tree.h"
#include "infergate/agent/manifest/tree_check.h"

namespace infergate::agent {
namespace {

using testing::safetensors_bytes;
using testing::write_file;

Result<std::optional<std::string>> detect(const std::map<std::string, std::string>& files) {
  auto tmp = *TempDir::create("format-test");
  for (const auto& [p, c] : files) write_file(tmp.path(), p, c);
  auto root = *ArtifactRoot::open(tmp.path());
  auto m = build_manifest(root.fd());
  if (!m.ok()) return std::move(m).error();
  return detect_weight_format(root.fd(), *m);
}

TEST(DetectWeightFormat, PrefersQuantizationJson) {
  auto f = detect({{"quantization.json", R"({"format":"int4","group_size":128})"},
                   {"model.safetensors", safetensors_bytes("F16", 10, 2)},
                   {"config.json", R"({"torch_dtype":"bfloat16"})"}});
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_EQ(**f, "int4");
}

TEST(DetectWeightFormat, ReadsTheWeightFormatFieldThatQuantizeWrites) {
  auto f = detect({{"quantization.json", R"({"format_version":1,"weight_format":"int8","bits":8})"},
                   {"model.safetensors", safetensors_bytes("F16", 10, 2)}});
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_EQ(**f, "int8");
}

TEST(DetectWeightFormat, TakesTheDtypeHoldingMostBytes) {
  auto f = detect({{"a.safetensors", safetensors_bytes("BF16", 1000, 2)},
                   {"b.safetensors", safetensors_bytes("F32", 10, 4)},
                   {"config.json", R"({"torch_dtype":"float16"})"}});
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_EQ(**f, "bf16");
}

TEST(DetectWeightFormat, FallsBackOnConfigJsonThenNothing) {
  EXPECT_EQ(**detect({{"config.json", R"({"torch_dtype":"float16"})"}}), "fp16");
  auto none = detect({{"README.md", "hello"}});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(DetectWeightFormat, RefusesAQuantizationJsonWithoutAValidFormat) {
  EXPECT_EQ(detect({{"quantization.json", "{}"}}).error().reason(), "MetadataInvalid");
  EXPECT_EQ(detect({{"quantization.json", R"({"format":"Int 4"})"}}).error().reason(), "MetadataInvalid");
  EXPECT_EQ(detect({{"quantization.json", "not json"}}).error().reason(), "MetadataInvalid");
}

TEST(DetectWeightFormat, RefusesASafetensorsHeaderLongerThanTheFile) {
  std::string bad = safetensors_bytes("F16", 10, 2);
  bad[0] = '\x7f';
  bad[1] = '\x7f';
  EXPECT_EQ(detect({{"m.safetensors", bad}}).error().reason(), "MetadataInvalid");
  EXPECT_EQ(detect({{"m.safetensors", "short"}}).error().reason(), "MetadataInvalid");
}

TEST(DetectWeightFormat, RefusesAnUnknownDominantDtype) {
  EXPECT_EQ(detect({{"m.safetensors", safetensors_bytes("C64", 10, 8)}}).error().reason(), "MetadataInvalid");
}

}  // namespace
}  // namespace infergate::agent
