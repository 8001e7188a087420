// fp16 / bf16 conversions and dtype names.
#include "infergate/runtime/model/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace infergate::runtime::model {
namespace {

TEST(DType, NamesRoundTripAndSizesMatchSafetensors) {
  for (auto t : {DType::kBool, DType::kU8, DType::kI8, DType::kF16, DType::kBF16, DType::kF32, DType::kI64,
                 DType::kF8E4M3}) {
    auto parsed = parse_dtype(dtype_name(t));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF64), 8u);
  EXPECT_FALSE(parse_dtype("F4").has_value());
  EXPECT_FALSE(parse_dtype("f16").has_value());
}

TEST(DType, HalfConversionIsExactForEveryHalfValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    EXPECT_EQ(f32_to_f16(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(DType, HalfRoundsToNearestEvenAndSaturatesToInfinity) {
  // 1 + 2^-11 is exactly between 1 and the next half (1 + 2^-10): ties go to the even one (1).
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(f32_to_f16(70000.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
}

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: goes to 1 (even).
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  for (uint32_t b = 0; b < 0x10000; b += 7) {
    float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      EXPECT_EQ(f32_to_bf16(f), b);
    }
  }
}

}  // namespace
}  // namespace infergate::runtime::model
