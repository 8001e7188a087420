// fp16, bf16 and fp8 e4m3fn conversions: exhaustive where the space is small, against independent
// brute-force rounding (and the CPU's own F16C instructions) where it is not.
#include "infergate/kernels/numeric.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <limits>

#include "kernels/test_util.h"

namespace infergate::kernels {
namespace {

using testing::Rng;

TEST(Fp16, EveryHalfSurvivesARoundTripThroughFloat) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_float(fp16_from_float(f)))) << h;
      continue;
    }
    ASSERT_EQ(fp16_from_float(f), h) << "half bits " << h << " value " << f;
  }
}

__attribute__((target("f16c"))) uint16_t hardware_fp16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

TEST(Fp16, RoundsLikeTheF16cInstructionOnASweepOfFloatBitPatterns) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU";
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 1021) {
    const float f = bits_to_float(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;  // NaN payloads differ by design: we return the quiet NaN 0x7E00
    ASSERT_EQ(fp16_from_float(f), hardware_fp16(f)) << "float bits " << u;
  }
}

TEST(Fp16, OverflowGoesToInfinityAndTiesGoToEven) {
  EXPECT_EQ(fp16_from_float(65504.0f), 0x7BFF);
  EXPECT_EQ(fp16_from_float(65519.0f), 0x7BFF);
  EXPECT_EQ(fp16_from_float(65520.0f), 0x7C00);
  EXPECT_EQ(fp16_from_float(-1e9f), 0xFC00);
  EXPECT_EQ(fp16_from_float(1.0f + 1.0f / 2048.0f), 0x3C00);     // tie between 1 and 1+2^-10: even
  EXPECT_EQ(fp16_from_float(1.0f + 3.0f / 2048.0f), 0x3C02);     // tie: rounds up to even
  EXPECT_EQ(fp16_from_float(5.9604644775390625e-08f), 0x0001);   // smallest subnormal
  EXPECT_EQ(fp16_from_float(2.98023223876953125e-08f), 0x0000);  // half of it: tie to even (0)
  EXPECT_EQ(fp16_from_float(std::numeric_limits<float>::quiet_NaN()) & 0x7FFF, 0x7E00);
}

TEST(Fp16, RoundUpAndDownBracketTheValue) {
  Rng rng(11);
  SCOPED_TRACE(rng.trace());
  for (int i = 0; i < 100000; ++i) {
    const float v = std::ldexp(rng.uniform(0.0f, 1.0f), static_cast<int>(rng.index(-26, 15)));
    const uint16_t up = fp16_round_up(v);
    ASSERT_GE(fp16_to_float(up), v);
    if (up > 0) {
      ASSERT_LT(fp16_to_float(static_cast<uint16_t>(up - 1)), v);  // and it is the smallest such
    }
    const float s = rng.index(0, 1) ? v : -v;
    const uint16_t dn = fp16_round_down(s);
    ASSERT_LE(fp16_to_float(dn), s) << s;
  }
  EXPECT_EQ(fp16_round_down(0.0f), 0x0000);
  EXPECT_LT(fp16_to_float(fp16_round_down(-1e-9f)), 0.0f);
  EXPECT_EQ(fp16_to_float(fp16_round_down(1e-9f)), 0.0f);
}

TEST(Bf16, EveryBf16SurvivesARoundTripThroughFloat) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(bf16_from_float(f), b) << b;
  }
}

TEST(Bf16, RoundsToTheNearestNeighbourTiesToEven) {
  Rng rng(12);
  SCOPED_TRACE(rng.trace());
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = rng.bits();
    const float f = bits_to_float(u);
    if (!std::isfinite(f) || std::fabs(f) > 3.3e38f) continue;
    const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = static_cast<uint16_t>(lo + 1);
    const double dl = std::fabs(static_cast<double>(f) - bf16_to_float(lo));
    const double dh = std::fabs(static_cast<double>(f) - bf16_to_float(hi));
    const uint16_t want = dl < dh ? lo : (dh < dl ? hi : ((lo & 1) ? hi : lo));
    ASSERT_EQ(bf16_from_float(f), want) << "float bits " << u;
  }
}

TEST(E4m3, DecodesTheFormatsDefiningValues) {
  EXPECT_EQ(e4m3_to_float(0x00), 0.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0.001953125f);  // 2^-9
  EXPECT_EQ(e4m3_to_float(0x07), 7 * 0.001953125f);
  EXPECT_EQ(e4m3_to_float(0x08), 0.015625f);  // 2^-6
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
}

TEST(E4m3, EveryFiniteCodeSurvivesARoundTrip) {
  for (uint32_t c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    const float f = e4m3_to_float(static_cast<uint8_t>(c));
    if (c == 0x80) {  // -0 encodes back to -0
      EXPECT_EQ(e4m3_from_float(f), 0x80);
      continue;
    }
    ASSERT_EQ(e4m3_from_float(f), c) << c;
  }
}

// The nearest finite code by exhaustive search, ties to the even code, saturating beyond 448.
uint8_t brute_force_e4m3(float f) {
  int best = -1;
  double best_d = 0;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    const double d = std::fabs(static_cast<double>(f) - e4m3_to_float(static_cast<uint8_t>(c)));
    if (best < 0 || d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(E4m3, RoundsToTheNearestCodeAndSaturates) {
  Rng rng(13);
  SCOPED_TRACE(rng.trace());
  for (int i = 0; i < 50000; ++i) {
    const float f = std::ldexp(rng.uniform(-1.0f, 1.0f), static_cast<int>(rng.index(-12, 10)));
    const uint8_t got = e4m3_from_float(f);
    const uint8_t want = brute_force_e4m3(f);
    // +0 and -0 are both nearest to tiny values of either sign; compare values there.
    if (e4m3_to_float(want) == 0.0f) {
      ASSERT_EQ(e4m3_to_float(got), 0.0f) << f;
      continue;
    }
    ASSERT_EQ(got, want) << "value " << f;
  }
  EXPECT_EQ(e4m3_from_float(1.0625f), 0x38) << "tie between 1 and 1.125 goes to the even code";
  EXPECT_EQ(e4m3_from_float(1.1875f), 0x3A) << "tie between 1.125 and 1.25 goes to the even code";
  EXPECT_EQ(e4m3_from_float(-0.0029296875f), 0x82) << "subnormal tie 1.5 * 2^-9 goes to 2 * 2^-9";
  EXPECT_EQ(e4m3_from_float(447.0f), 0x7E);
  EXPECT_EQ(e4m3_from_float(463.0f), 0x7E);
  EXPECT_EQ(e4m3_from_float(1e30f), 0x7E);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(e4m3_from_float(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::quiet_NaN()) & 0x7F, 0x7F);
}

}  // namespace
}  // namespace infergate::kernels
