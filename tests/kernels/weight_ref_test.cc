// The weight formats' reference quantizer and dequantizer: error bounds per format over a grid of
// shapes (tiny, odd, not a multiple of the group), exact zeros, and refusals of bad input.
#include <gtest/gtest.h>

#include "common/refusal.h"

#include <cmath>
#include <limits>
#include <vector>

#include "infergate/kernels/ref.h"
#include "kernels/test_util.h"

namespace infergate::kernels {
namespace {

using infergate::testing::refused;

using testing::Rng;

struct Quantized {
  WeightLayout layout;
  std::vector<uint8_t> data, zeros;
  std::vector<uint16_t> scales;
  WeightView view() const {
    return {layout, data.data(), scales.data(), zeros.empty() ? nullptr : zeros.data()};
  }
};

Status quantize(const std::vector<float>& w, const WeightLayout& l, Quantized* q) {
  q->layout = l;
  const WeightBytes b = weight_bytes(l);
  q->data.assign(static_cast<size_t>(b.data), 0xAB);
  q->scales.assign(static_cast<size_t>(b.scales / 2), 0);
  q->zeros.assign(static_cast<size_t>(b.zeros), 0);
  MatrixSource src{w.data(), SourceDtype::kF32, l.rows, l.cols, l.cols};
  return quantize_weight_ref(
      src, l, {q->data.data(), q->scales.data(), q->zeros.empty() ? nullptr : q->zeros.data()});
}

std::vector<float> dequantize(const Quantized& q) {
  std::vector<float> out(static_cast<size_t>(q.layout.rows * q.layout.cols));
  EXPECT_TRUE(dequantize_weight_ref(q.view(), contiguous(out.data(), q.layout.rows, q.layout.cols)).ok());
  return out;
}

struct Shape {
  int64_t n, k;
};
const Shape kShapes[] = {{1, 1},  {1, 2},   {3, 7},   {2, 31},  {5, 33},
                         {4, 64}, {3, 100}, {2, 129}, {7, 255}, {3, 512}};

TEST(WeightRef, Int8RoundTripStaysWithinHalfTheRowScale) {
  Rng rng(101);
  SCOPED_TRACE(rng.trace());
  for (ScaleDtype sd : {ScaleDtype::kF16, ScaleDtype::kBF16}) {
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(::testing::Message()
                   << "shape " << s.n << "x" << s.k << " scale " << scale_dtype_name(sd));
      std::vector<float> w = rng.normals(static_cast<size_t>(s.n * s.k), 0.05f);
      if (s.k > 3) w[3] = 0.9f;  // an outlier
      Quantized q;
      ASSERT_TRUE(quantize(w, {WeightFormat::kInt8, s.n, s.k, 0, sd}, &q).ok());
      const std::vector<float> dq = dequantize(q);
      for (int64_t r = 0; r < s.n; ++r) {
        const float d = scale_to_float(q.scales[r], sd);
        float amax = 0;
        for (int64_t c = 0; c < s.k; ++c) amax = std::max(amax, std::fabs(w[r * s.k + c]));
        ASSERT_GE(d * 127.0f, amax * (1 - 1e-6f)) << "the scale must cover the row";
        for (int64_t c = 0; c < s.k; ++c) {
          ASSERT_LE(std::fabs(w[r * s.k + c] - dq[r * s.k + c]), d * 0.5f * (1 + 1e-5f)) << r << "," << c;
          ASSERT_LE(std::abs(static_cast<int8_t>(q.data[r * s.k + c])), 127);
        }
      }
    }
  }
}

TEST(WeightRef, Int4RoundTripStaysWithinHalfTheGroupScaleForEveryGroupSize) {
  Rng rng(102);
  SCOPED_TRACE(rng.trace());
  for (WeightFormat f : {WeightFormat::kInt4Sym, WeightFormat::kInt4Asym}) {
    for (int32_t g : kInt4GroupSizes) {
      for (ScaleDtype sd : {ScaleDtype::kF16, ScaleDtype::kBF16}) {
        for (const Shape& s : kShapes) {
          SCOPED_TRACE(::testing::Message() << weight_format_name(f) << " g" << g << " "
                                            << scale_dtype_name(sd) << " shape " << s.n << "x" << s.k);
          std::vector<float> w = rng.normals(static_cast<size_t>(s.n * s.k), 0.02f);
          if (f == WeightFormat::kInt4Asym) {
            for (auto& x : w) x += 0.03f;  // a shifted distribution is what the zero point is for
          }
          Quantized q;
          const WeightLayout l{f, s.n, s.k, g, sd};
          ASSERT_TRUE(quantize(w, l, &q).ok());
          const std::vector<float> dq = dequantize(q);
          const int64_t groups = weight_groups_per_row(l);
          for (int64_t r = 0; r < s.n; ++r) {
            for (int64_t c = 0; c < s.k; ++c) {
              const float d = scale_to_float(q.scales[r * groups + c / g], sd);
              ASSERT_LE(std::fabs(w[r * s.k + c] - dq[r * s.k + c]), d * 0.5f * (1 + 1e-5f) + 1e-12f)
                  << r << "," << c;
            }
            if (s.k % 2 == 1) {
              EXPECT_EQ(q.data[r * weight_row_bytes(l) + s.k / 2] >> 4, 0) << "padding nibble";
            }
          }
        }
      }
    }
  }
}

TEST(WeightRef, AsymmetricInt4RepresentsZeroExactly) {
  std::vector<float> w = {0.0f, 0.5f, 0.25f, 0.0f, 1.0f, 0.75f, 0.1f, 0.0f};
  w.resize(32, 0.3f);
  Quantized q;
  ASSERT_TRUE(quantize(w, {WeightFormat::kInt4Asym, 1, 32, 32, ScaleDtype::kF16}, &q).ok());
  const std::vector<float> dq = dequantize(q);
  EXPECT_EQ(dq[0], 0.0f);
  EXPECT_EQ(dq[3], 0.0f);
  EXPECT_EQ(dq[7], 0.0f);
  EXPECT_EQ(q.zeros[0], 0);  // everything is >= 0: the zero point sits at the bottom
}

TEST(WeightRef, AllZeroRowsQuantizeToZeroWithAZeroScale) {
  std::vector<float> w(2 * 64, 0.0f);
  for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kInt4Sym, WeightFormat::kInt4Asym}) {
    Quantized q;
    ASSERT_TRUE(quantize(w, {f, 2, 64, f == WeightFormat::kInt8 ? 0 : 32, ScaleDtype::kF16}, &q).ok());
    for (float x : dequantize(q)) ASSERT_EQ(x, 0.0f) << weight_format_name(f);
    for (uint16_t s : q.scales) ASSERT_EQ(s, 0);
  }
}

TEST(WeightRef, Fp16AndBf16FormatsRoundToNearest) {
  Rng rng(103);
  SCOPED_TRACE(rng.trace());
  std::vector<float> w = rng.normals(3 * 77, 2.0f);
  for (WeightFormat f : {WeightFormat::kF16, WeightFormat::kBF16}) {
    Quantized q;
    ASSERT_TRUE(quantize(w, {f, 3, 77}, &q).ok());
    const std::vector<float> dq = dequantize(q);
    const float rel = f == WeightFormat::kF16 ? 1.0f / 2048 : 1.0f / 256;
    EXPECT_TRUE(testing::all_close(dq, w, 1e-7f, rel)) << weight_format_name(f);
  }
}

TEST(WeightRef, RefusesANonFiniteWeightNamingItsRowAndColumn) {
  std::vector<float> w(4 * 40, 0.1f);
  w[2 * 40 + 17] = std::numeric_limits<float>::quiet_NaN();
  Quantized q;
  Status s = quantize(w, {WeightFormat::kInt4Sym, 4, 40, 32, ScaleDtype::kF16}, &q);
  ASSERT_TRUE(refused(s, "", {"row 2, column 17"}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row 2, column 17"), std::string::npos) << s.message();
  w[2 * 40 + 17] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(refused(quantize(w, {WeightFormat::kInt8, 4, 40, 0, ScaleDtype::kF16}, &q), "",
                      {"not finite", "row 2, column 17"}));
}

TEST(WeightRef, RefusesAScaleTheScaleDtypeCannotHold) {
  std::vector<float> w(8, 1e7f);
  Quantized q;
  Status s = quantize(w, {WeightFormat::kInt8, 1, 8, 0, ScaleDtype::kF16}, &q);
  ASSERT_TRUE(refused(s, "", {"exceeds the f16 range"}));
  EXPECT_NE(s.message().find("f16 range"), std::string::npos) << s.message();
  EXPECT_TRUE(quantize(w, {WeightFormat::kInt8, 1, 8, 0, ScaleDtype::kBF16}, &q).ok());
  EXPECT_TRUE(refused(quantize(w, {WeightFormat::kF16, 1, 8}, &q), "", {"exceeds the fp16 range"}));
}

TEST(WeightRef, ReadsFp16AndBf16Sources) {
  std::vector<uint16_t> h = {fp16_from_float(0.5f), fp16_from_float(-1.25f), fp16_from_float(3.0f)};
  std::vector<uint16_t> b = {bf16_from_float(0.5f), bf16_from_float(-1.25f), bf16_from_float(3.0f)};
  for (auto [data, dt] : {std::pair{&h, SourceDtype::kF16}, std::pair{&b, SourceDtype::kBF16}}) {
    const WeightLayout l{WeightFormat::kF16, 1, 3};
    std::vector<uint16_t> out(3);
    ASSERT_TRUE(quantize_weight_ref({data->data(), dt, 1, 3, 3}, l, {out.data(), nullptr, nullptr}).ok());
    EXPECT_EQ(fp16_to_float(out[1]), -1.25f);
  }
}

TEST(WeightRef, RefusesBadLayoutsWithTheReason) {
  std::vector<float> w(64, 0.0f);
  Quantized q;
  Status s = quantize(w, {WeightFormat::kInt4Sym, 1, 64, 48, ScaleDtype::kF16}, &q);
  EXPECT_NE(s.message().find("group size 48"), std::string::npos) << s.message();
  s = quantize(w, {WeightFormat::kInt8, 1, 64, 32, ScaleDtype::kF16}, &q);
  EXPECT_NE(s.message().find("takes no group size"), std::string::npos) << s.message();
  EXPECT_TRUE(refused(validate_weight_layout({WeightFormat::kInt8, 0, 64}), "", {"weight shape [0, 64]"}));
  EXPECT_TRUE(refused(validate_weight_layout({static_cast<WeightFormat>(9), 1, 64}), "",
                      {"weight format 9 is not a known format"}));
  std::vector<uint8_t> data(64);
  EXPECT_TRUE(refused(quantize_weight_ref({w.data(), SourceDtype::kF32, 1, 64, 64},
                                          {WeightFormat::kInt8, 1, 64}, {data.data(), nullptr, nullptr}),
                      "", {"scales buffer is null"}))
      << "int8 needs a scales buffer";
  EXPECT_FALSE(quantize_weight_ref({w.data(), SourceDtype::kF32, 2, 32, 32}, {WeightFormat::kInt8, 1, 64},
                                   {data.data(), data.data(), nullptr})
                   .ok())
      << "source shape differs from the layout";
}

TEST(WeightFormats, ByteSizesAreExact) {
  EXPECT_EQ(weight_bytes({WeightFormat::kF16, 4096, 4096}).total(), 4096 * 4096 * 2);
  EXPECT_EQ(weight_bytes({WeightFormat::kInt8, 4096, 4096}).total(), 4096 * 4096 + 4096 * 2);
  const WeightBytes b = weight_bytes({WeightFormat::kInt4Asym, 4096, 4096, 128, ScaleDtype::kF16});
  EXPECT_EQ(b.data, 4096 * 2048);
  EXPECT_EQ(b.scales, 4096 * 32 * 2);
  EXPECT_EQ(b.zeros, 4096 * 32);
  EXPECT_EQ(weight_bytes({WeightFormat::kInt4Sym, 3, 33, 32, ScaleDtype::kF16}).data, 3 * 17);
  EXPECT_EQ(weight_bytes({WeightFormat::kInt4Sym, 3, 33, 32, ScaleDtype::kF16}).scales, 3 * 2 * 2);
}

}  // namespace
}  // namespace infergate::kernels
