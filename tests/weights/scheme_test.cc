// The format words: the grammar both ways, and what it refuses.
#include "infergate/weights/scheme.h"

#include <gtest/gtest.h>

namespace infergate::weights {
namespace {

TEST(FormatWord, RoundTripsEveryFamily) {
  for (const char* w : {"fp16", "bf16", "fp32", "int8", "int4", "fp8-block", "fp8-block-64x128",
                        "fp8-channel", "int4-ct-g32-sym", "int4-ct-g128-asym", "int4-ct-ch-sym", "awq-g128",
                        "awq-ch", "gptq-g128", "gptq-g64-v2", "gptq-ch"}) {
    auto s = parse_format_word(w);
    ASSERT_TRUE(s.ok()) << w << ": " << s.error().to_string();
    auto back = format_word(*s);
    ASSERT_TRUE(back.ok()) << w;
    EXPECT_EQ(*back, w);
    EXPECT_TRUE(is_statement_word(w));
    EXPECT_LE(std::string_view(w).size(), 32u);
  }
}

TEST(FormatWord, CarriesTheParametersThatChangeWhatAnEngineRuns) {
  auto kimi = *parse_format_word("int4-ct-g32-sym");
  EXPECT_EQ(kimi.family, Family::kCtInt4);
  EXPECT_EQ(kimi.group_size, 32);
  EXPECT_TRUE(kimi.symmetric);
  auto deepseek = *parse_format_word("fp8-block");
  EXPECT_EQ(deepseek.family, Family::kFp8Block);
  EXPECT_EQ(deepseek.block[0], 128);
  EXPECT_EQ(deepseek.block[1], 128);
  EXPECT_TRUE(parse_format_word("gptq-g128-v2")->gptq_v2);
  EXPECT_EQ(parse_format_word("awq-ch")->group_size, 0);
}

TEST(FormatWord, RefusesWordsOutsideTheGrammar) {
  for (const char* w : {"", "FP16", "int4-ct-g32", "int4-ct-g0-sym", "int4-ct-g032-sym",
                        "int4-ct-g32-symmetric", "fp8-block-128x128", "fp8-block-0x8", "fp8-block-12", "awq",
                        "awq-128", "gptq-g128-v3", "fp8_e4m3", "int4-compressed-tensors-g32-sym"}) {
    auto s = parse_format_word(w);
    ASSERT_FALSE(s.ok()) << w;
    EXPECT_EQ(s.error().reason(), "InvalidFormatWord") << w;
  }
}

TEST(FormatWord, StatementWordsStayWideEnoughForOlderStatements) {
  EXPECT_TRUE(is_statement_word("fp8_e4m3"));
  EXPECT_TRUE(is_statement_word("uint8"));
  EXPECT_FALSE(is_statement_word("Int 4"));
  EXPECT_FALSE(is_statement_word(std::string(33, 'a')));
}

TEST(FormatWord, DenseDtypesWithoutAWordAreRefused) {
  Scheme s;
  s.dense_dtype = Dtype::kF64;
  EXPECT_EQ(format_word(s).error().reason(), "UnsupportedQuantization");
}

}  // namespace
}  // namespace infergate::weights
