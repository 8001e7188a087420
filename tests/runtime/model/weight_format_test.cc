// The checkpoint side of the weight formats: part names and shapes match the kernels' layouts, and
// quantizing through the kernels' reference keeps |x - dequant(x)| <= d/2 for every element.
#include "infergate/runtime/model/weight_format.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace infergate::runtime::model {
namespace {

using infergate::testing::refused;

struct Buffers {
  std::vector<uint8_t> q, s, z;
  std::vector<float> back;
};

Buffers roundtrip(const std::vector<float>& x, uint64_t rows, uint64_t cols, const QuantScheme& scheme) {
  RowBytes b = row_bytes(rows, cols, scheme);
  Buffers out{std::vector<uint8_t>(b.qweight), std::vector<uint8_t>(b.scales), std::vector<uint8_t>(b.zeros),
              std::vector<float>(rows * cols)};
  EXPECT_TRUE(quantize_rows(reinterpret_cast<const uint8_t*>(x.data()), DType::kF32, rows, cols, scheme,
                            out.q.data(), out.s.data(), out.z.data())
                  .ok());
  EXPECT_TRUE(
      dequantize_rows(out.q.data(), out.s.data(), out.z.data(), rows, cols, scheme, out.back.data()).ok());
  return out;
}

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

float scale_at(const Buffers& b, size_t i, DType t) {
  uint16_t h;
  std::memcpy(&h, b.s.data() + 2 * i, 2);
  return t == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

TEST(WeightFormat, EveryFormatStaysWithinHalfAStepPerElement) {
  const uint64_t rows = 5, cols = 70;  // int4 groups of 32: 32 + 32 + a last, shorter group of 6
  auto x = gaussian(rows * cols, 2);
  for (QuantScheme s : {QuantScheme{WeightFormat::kInt8, 0, true, DType::kF16},
                        QuantScheme{WeightFormat::kInt4, 32, true, DType::kF16},
                        QuantScheme{WeightFormat::kInt4, 32, false, DType::kBF16}}) {
    Buffers b = roundtrip(x, rows, cols, s);
    const int64_t groups = s.groups_per_row(cols);
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t c = 0; c < cols; ++c) {
        size_t si = s.format == WeightFormat::kInt8 ? r : r * static_cast<uint64_t>(groups) + c / 32;
        float d = scale_at(b, si, s.scale_dtype);
        EXPECT_LE(std::fabs(x[r * cols + c] - b.back[r * cols + c]), d / 2)
            << weight_format_name(s.format) << " " << r << "," << c;
      }
    }
  }
}

TEST(WeightFormat, PartShapesAreTheKernelsLayouts) {
  for (QuantScheme s : {QuantScheme{WeightFormat::kInt8, 0, true, DType::kF16},
                        QuantScheme{WeightFormat::kInt4, 64, true, DType::kF16},
                        QuantScheme{WeightFormat::kInt4, 128, false, DType::kBF16}}) {
    const uint64_t rows = 10, cols = 131;
    auto parts = quantized_parts("model.layers.0.mlp.up_proj.weight", rows, cols, s);
    kernels::WeightBytes kb = kernels::weight_bytes(kernel_layout(s, rows, cols));
    uint64_t part_bytes[3] = {0, 0, 0};
    for (size_t i = 0; i < parts.size(); ++i) {
      uint64_t n = dtype_size(parts[i].dtype);
      for (uint64_t d : parts[i].shape) n *= d;
      part_bytes[i] = n;
    }
    EXPECT_EQ(part_bytes[0], static_cast<uint64_t>(kb.data));
    EXPECT_EQ(part_bytes[1], static_cast<uint64_t>(kb.scales));
    EXPECT_EQ(part_bytes[2], static_cast<uint64_t>(kb.zeros));
    EXPECT_EQ(parts[0].name, "model.layers.0.mlp.up_proj.qweight");
    EXPECT_EQ(parts[1].name, "model.layers.0.mlp.up_proj.scales");
    EXPECT_EQ(parts.size(), s.format == WeightFormat::kInt4 && !s.symmetric ? 3u : 2u);
  }
  EXPECT_EQ(qweight_name("bias"), "");
}

TEST(WeightFormat, PacksTheEvenColumnInTheLowNibble) {
  std::vector<float> x = {1.0f, -1.0f, 0.0f};
  QuantScheme s{WeightFormat::kInt4, 32, true, DType::kF16};
  Buffers b = roundtrip(x, 1, 3, s);
  ASSERT_EQ(b.q.size(), 2u);
  EXPECT_EQ(b.q[0] & 0xf, 15);  // column 0: +1 -> u = 7 + 8
  EXPECT_EQ(b.q[0] >> 4, 1);    // column 1: -1 -> u = -7 + 8
  EXPECT_EQ(b.q[1] & 0xf, 8);   // column 2: 0
  EXPECT_EQ(b.back[2], 0.0f);
}

TEST(WeightFormat, RefusesNonFiniteWeightsNamingTheElement) {
  std::vector<float> x = {0.5f, 0.25f, std::numeric_limits<float>::infinity(), 0.1f};
  QuantScheme s{WeightFormat::kInt8, 0, true, DType::kF16};
  RowBytes b = row_bytes(2, 2, s);
  std::vector<uint8_t> q(b.qweight), sc(b.scales);
  Status st = quantize_rows(reinterpret_cast<const uint8_t*>(x.data()), DType::kF32, 2, 2, s, q.data(),
                            sc.data(), nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().reason(), "QuantizationFailed");
  EXPECT_NE(st.error().message().find("row 1, column 0"), std::string::npos) << st.error().message();
}

TEST(WeightFormat, RefusesSchemesTheKernelsCannotHold) {
  EXPECT_TRUE(refused(validate_scheme({WeightFormat::kInt4, 0, true, DType::kF16}), "InvalidQuantScheme",
                      {"group size 0"}));
  EXPECT_TRUE(refused(validate_scheme({WeightFormat::kInt4, 48, true, DType::kF16}), "InvalidQuantScheme",
                      {"group size 48"}));
  EXPECT_TRUE(refused(validate_scheme({WeightFormat::kInt8, 0, false, DType::kF16}), "InvalidQuantScheme",
                      {"symmetric"}));
  EXPECT_TRUE(refused(validate_scheme({WeightFormat::kInt8, 128, true, DType::kF16}), "InvalidQuantScheme",
                      {"applies to int4 only"}));
  EXPECT_TRUE(refused(validate_scheme({WeightFormat::kInt4, 32, true, DType::kF32}), "InvalidQuantScheme",
                      {"scale dtype"}));
  EXPECT_TRUE(validate_scheme({WeightFormat::kInt4, 128, false, DType::kF16}).ok());
  EXPECT_TRUE(validate_scheme({WeightFormat::kInt8, 0, true, DType::kBF16}).ok());
}

}  // namespace
}  // namespace infergate::runtime::model
