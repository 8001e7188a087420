// The API's closed vocabularies.
#include "infergate/operator/api/enums.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

namespace infergate::op::api {
namespace {

using infergate::testing::refused;

TEST(Enums, RoundTripEverySpelling) {
  for (auto name : weight_format_names()) EXPECT_EQ(to_string(*parse_weight_format(name, "x")), name);
  for (auto name : kv_cache_dtype_names()) EXPECT_EQ(to_string(*parse_kv_cache_dtype(name, "x")), name);
  for (auto name : engine_kind_names()) EXPECT_EQ(to_string(*parse_engine_kind(name, "x")), name);
  for (auto name : stage_names()) EXPECT_EQ(to_string(*parse_stage_name(name, "x")), name);
}

TEST(Enums, UnknownValueNamesFieldAndAcceptedValues) {
  auto r = parse_kv_cache_dtype("fp9", "spec.serving.kvCacheDtype");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "InvalidSpec");
  EXPECT_NE(r.error().message().find("spec.serving.kvCacheDtype"), std::string::npos);
  EXPECT_NE(r.error().message().find("\"fp9\""), std::string::npos);
  EXPECT_NE(r.error().message().find("fp16, bf16, fp8, int8, int4"), std::string::npos);
}

TEST(Enums, SpellingsAreCaseSensitive) {
  EXPECT_TRUE(refused(parse_weight_format("INT8", "x"), "InvalidSpec", {"unknown value \"INT8\""}));
  EXPECT_TRUE(refused(parse_stage_name("kvcache", "x"), "InvalidSpec", {"unknown value \"kvcache\""}));
}

TEST(Enums, BitsPerElementFollowTheFormat) {
  EXPECT_EQ(bits_per_element(KvCacheDtype::kFp8), 8);
  EXPECT_EQ(bits_per_element(KvCacheDtype::kInt4), 4);
  EXPECT_EQ(bits_per_element(WeightFormat::kBf16), 16);
}

}  // namespace
}  // namespace infergate::op::api
