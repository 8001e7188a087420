// The weight formats' reference quantizer: error bounds, packing, partial groups, non-finite input.
#include "infergate/runtime/model/weight_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace infergate::runtime::model {
namespace {

struct Buffers {
  std::vector<uint8_t> q, s, z;
  std::vector<float> back;
};

Buffers roundtrip(const std::vector<float>& x, uint64_t rows, uint64_t cols, const QuantScheme& scheme) {
  RowBytes b = row_bytes(rows, cols, scheme);
  Buffers out{std::vector<uint8_t>(b.qweight), std::vector<uint8_t>(b.scales), std::vector<uint8_t>(b.zeros),
              std::vector<float>(rows * cols)};
  quantize_rows(x.data(), rows, cols, scheme, out.q.data(), out.s.data(), out.z.data());
  dequantize_rows(out.q.data(), out.s.data(), out.z.data(), rows, cols, scheme, out.back.data());
  return out;
}

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

float scale_at(const Buffers& b, size_t i) {
  uint16_t h;
  std::memcpy(&h, b.s.data() + 2 * i, 2);
  return f16_to_f32(h);
}

TEST(WeightFormat, Int8ErrorIsAtMostHalfAStepPerElement) {
  const uint64_t rows = 7, cols = 33;
  auto x = gaussian(rows * cols, 1);
  QuantScheme s{WeightFormat::kInt8, 0, true, DType::kF16};
  Buffers b = roundtrip(x, rows, cols, s);
  for (uint64_t r = 0; r < rows; ++r) {
    float d = scale_at(b, r);
    for (uint64_t c = 0; c < cols; ++c) {
      EXPECT_LE(std::fabs(x[r * cols + c] - b.back[r * cols + c]), d / 2 * 1.0001f) << r << "," << c;
    }
  }
}

TEST(WeightFormat, Int4SymmetricAndAsymmetricBoundsWithAPartialLastGroup) {
  const uint64_t rows = 5, cols = 70;  // groups of 32: 32 + 32 + a last, shorter group of 6
  auto x = gaussian(rows * cols, 2);
  for (bool sym : {true, false}) {
    QuantScheme s{WeightFormat::kInt4, 32, sym, DType::kF16};
    EXPECT_EQ(s.groups_per_row(cols), 3);
    Buffers b = roundtrip(x, rows, cols, s);
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t c = 0; c < cols; ++c) {
        float d = scale_at(b, r * 3 + c / 32);
        EXPECT_LE(std::fabs(x[r * cols + c] - b.back[r * cols + c]), d / 2 * 1.0001f + 1e-6f)
            << (sym ? "sym " : "asym ") << r << "," << c;
      }
    }
  }
}

TEST(WeightFormat, Int4PacksTheEvenColumnInTheLowNibbleAndHandlesOddWidths) {
  // Row [1, -1, 0] with symmetric int4, group 4: scale = 1/7, codes 7+8=15, -7+8=1, 8; padding 8.
  std::vector<float> x = {1.0f, -1.0f, 0.0f};
  QuantScheme s{WeightFormat::kInt4, 4, true, DType::kF16};
  Buffers b = roundtrip(x, 1, 3, s);
  ASSERT_EQ(b.q.size(), 2u);
  EXPECT_EQ(b.q[0], 0x1f);  // low nibble 15 (column 0), high nibble 1 (column 1)
  EXPECT_EQ(b.q[1], 0x88);  // column 2 -> 8, padding 8
  EXPECT_NEAR(b.back[0], 1.0f, 1e-3);
  EXPECT_NEAR(b.back[1], -1.0f, 1e-3);
  EXPECT_EQ(b.back[2], 0.0f);
}

TEST(WeightFormat, AsymmetricInt4RepresentsZeroExactly) {
  std::vector<float> x = {0.1f, 0.5f, 0.0f, 2.0f, 1.3f, 0.7f};  // all non-negative
  QuantScheme s{WeightFormat::kInt4, 6, false, DType::kF16};
  Buffers b = roundtrip(x, 1, 6, s);
  EXPECT_EQ(b.back[2], 0.0f);
  EXPECT_EQ(b.z[0], 0);
}

TEST(WeightFormat, NonFiniteInputsSaturateAndDoNotPoisonTheScale) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.5f, inf, -inf, std::nanf(""), -0.25f, 0.125f};
  for (auto fmt : {WeightFormat::kInt8, WeightFormat::kInt4}) {
    QuantScheme s{fmt, fmt == WeightFormat::kInt4 ? 6 : 0, true, DType::kF16};
    Buffers b = roundtrip(x, 1, 6, s);
    for (float v : b.back) EXPECT_TRUE(std::isfinite(v));
    EXPECT_NEAR(b.back[0], 0.5f, 0.05f) << "the scale comes from the finite values";
    EXPECT_GT(b.back[1], 0.45f);
    EXPECT_LT(b.back[2], -0.45f);
    EXPECT_EQ(b.back[3], 0.0f);
  }
}

TEST(WeightFormat, AllZeroRowsGiveZeroScalesAndZeros) {
  std::vector<float> x(64, 0.0f);
  for (auto fmt : {WeightFormat::kInt8, WeightFormat::kInt4}) {
    QuantScheme s{fmt, fmt == WeightFormat::kInt4 ? 32 : 0, true, DType::kF16};
    Buffers b = roundtrip(x, 2, 32, s);
    for (float v : b.back) EXPECT_EQ(v, 0.0f);
  }
}

TEST(WeightFormat, PartsAreNamedAndShapedAsDocumented) {
  auto parts = quantized_parts("model.layers.0.mlp.up_proj.weight", 10, 65,
                               {WeightFormat::kInt4, 32, false, DType::kBF16});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].name, "model.layers.0.mlp.up_proj.qweight");
  EXPECT_EQ(parts[0].shape, (std::vector<uint64_t>{10, 33}));
  EXPECT_EQ(parts[1].name, "model.layers.0.mlp.up_proj.scales");
  EXPECT_EQ(parts[1].dtype, DType::kBF16);
  EXPECT_EQ(parts[1].shape, (std::vector<uint64_t>{10, 3}));
  EXPECT_EQ(parts[2].name, "model.layers.0.mlp.up_proj.zeros");
  auto int8 = quantized_parts("x.weight", 4, 8, {WeightFormat::kInt8, 0, true, DType::kF16});
  ASSERT_EQ(int8.size(), 2u);
  EXPECT_EQ(int8[0].dtype, DType::kI8);
  EXPECT_EQ(int8[1].shape, (std::vector<uint64_t>{4}));
  EXPECT_EQ(qweight_name("bias"), "");
}

TEST(WeightFormat, RefusesBadSchemes) {
  EXPECT_FALSE(validate_scheme({WeightFormat::kInt4, 0, true, DType::kF16}).ok());
  EXPECT_FALSE(validate_scheme({WeightFormat::kInt4, 33, true, DType::kF16}).ok());
  EXPECT_FALSE(validate_scheme({WeightFormat::kInt8, 0, false, DType::kF16}).ok());
  EXPECT_FALSE(validate_scheme({WeightFormat::kInt4, 32, true, DType::kF32}).ok());
  EXPECT_TRUE(validate_scheme({WeightFormat::kInt4, 128, false, DType::kF16}).ok());
}

}  // namespace
}  // namespace infergate::runtime::model
