// linear_cpu against linear_ref for every weight format, group size and instruction set over a grid
// of shapes (tiny, odd, not a multiple of the group or the vector width), with and without bias.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "infergate/kernels/cpu.h"
#include "infergate/kernels/ref.h"
#include "kernels/test_util.h"

namespace infergate::kernels {
namespace {

using testing::Rng;

struct Weight {
  WeightLayout layout;
  std::vector<uint8_t> data, zeros;
  std::vector<uint16_t> scales;
  WeightView view() const {
    return {layout, data.data(), scales.empty() ? nullptr : scales.data(),
            zeros.empty() ? nullptr : zeros.data()};
  }
};

Weight make_weight(Rng& rng, const WeightLayout& l) {
  Weight w;
  w.layout = l;
  const WeightBytes b = weight_bytes(l);
  w.data.resize(static_cast<size_t>(b.data));
  w.scales.resize(static_cast<size_t>(b.scales / 2));
  w.zeros.resize(static_cast<size_t>(b.zeros));
  std::vector<float> src = rng.normals(static_cast<size_t>(l.rows * l.cols), 0.05f);
  if (l.format == WeightFormat::kInt4Asym) {
    for (auto& x : src) x += 0.02f;
  }
  EXPECT_TRUE(
      quantize_weight_ref({src.data(), SourceDtype::kF32, l.rows, l.cols, l.cols}, l,
                          {w.data.data(), w.scales.data(), w.zeros.empty() ? nullptr : w.zeros.data()})
          .ok());
  return w;
}

// |y - ref| <= 2e-6 * sum_k |x_k w_k| + 1e-7 per output: fp32 summation against the double reference.
::testing::AssertionResult close_to_ref(const Weight& w, const std::vector<float>& x, int64_t m,
                                        const std::vector<float>& got, const std::vector<float>& want) {
  const int64_t n_out = w.layout.rows, k_in = w.layout.cols;
  std::vector<float> dq(static_cast<size_t>(n_out * k_in));
  if (!dequantize_weight_ref(w.view(), contiguous(dq.data(), n_out, k_in)).ok()) {
    return ::testing::AssertionFailure() << "dequantize failed";
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t n = 0; n < n_out; ++n) {
      double mag = 0;
      for (int64_t k = 0; k < k_in; ++k)
        mag += std::fabs(static_cast<double>(x[i * k_in + k]) * dq[n * k_in + k]);
      const float g = got[i * n_out + n], r = want[i * n_out + n];
      if (!std::isfinite(g)) return ::testing::AssertionFailure() << "y[" << i << "," << n << "] = " << g;
      if (std::fabs(g - r) > 2e-6 * mag + 1e-7) {
        return ::testing::AssertionFailure()
               << "y[" << i << "," << n << "] = " << g << ", reference " << r << " (magnitude " << mag << ")";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

void check(Rng& rng, const WeightLayout& l, int64_t m, bool with_bias) {
  SCOPED_TRACE(::testing::Message() << weight_format_name(l.format) << " g" << l.group_size << " "
                                    << scale_dtype_name(l.scale_dtype) << " M" << m << " N" << l.rows << " K"
                                    << l.cols << (with_bias ? " +bias" : ""));
  const Weight w = make_weight(rng, l);
  std::vector<float> x = rng.normals(static_cast<size_t>(m * l.cols));
  std::vector<float> bias = rng.normals(static_cast<size_t>(l.rows));
  std::vector<float> want(static_cast<size_t>(m * l.rows)), got(want.size(), NAN);
  const float* b = with_bias ? bias.data() : nullptr;
  ASSERT_TRUE(linear_ref(contiguous<const float>(x.data(), m, l.cols), w.view(), b,
                         contiguous(want.data(), m, l.rows))
                  .ok());
  testing::for_each_isa([&](CpuIsa) {
    std::fill(got.begin(), got.end(), NAN);
    const Status s = linear_cpu(contiguous<const float>(x.data(), m, l.cols), w.view(), b,
                                contiguous(got.data(), m, l.rows));
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(close_to_ref(w, x, m, got, want));
  });
}

const int64_t kKs[] = {1, 2, 15, 31, 32, 33, 64, 100, 129, 300};
const std::pair<int64_t, int64_t> kMn[] = {{1, 1}, {1, 33}, {3, 8}, {5, 17}, {9, 20}};

TEST(LinearCpu, MatchesTheReferenceForFp16Bf16AndInt8Weights) {
  Rng rng(301);
  SCOPED_TRACE(rng.trace());
  for (WeightFormat f : {WeightFormat::kF16, WeightFormat::kBF16, WeightFormat::kInt8}) {
    for (int64_t k : kKs) {
      for (auto [m, n] : kMn) check(rng, {f, n, k, 0, ScaleDtype::kF16}, m, (k + n) % 2 == 0);
    }
  }
  check(rng, {WeightFormat::kInt8, 16, 70, 0, ScaleDtype::kBF16}, 2, true);
}

TEST(LinearCpu, MatchesTheReferenceForInt4WeightsOfEveryGroupSize) {
  Rng rng(302);
  SCOPED_TRACE(rng.trace());
  for (WeightFormat f : {WeightFormat::kInt4Sym, WeightFormat::kInt4Asym}) {
    for (int32_t g : kInt4GroupSizes) {
      for (int64_t k : kKs) {
        for (auto [m, n] : kMn)
          check(rng, {f, n, k, g, (k % 3 == 0) ? ScaleDtype::kBF16 : ScaleDtype::kF16}, m, k % 2 == 1);
      }
    }
  }
}

TEST(LinearCpu, ALargeGemvMatchesTheReference) {
  Rng rng(303);
  SCOPED_TRACE(rng.trace());
  check(rng, {WeightFormat::kInt4Asym, 96, 4096, 128, ScaleDtype::kF16}, 1, true);
  check(rng, {WeightFormat::kInt8, 96, 4096, 0, ScaleDtype::kF16}, 1, false);
}

// Up to 8 rows of x take the int4 GEMV path (a pair of weight rows down the whole of K, in passes of
// up to 4 rows of x) when K is a multiple of the group and of 2 * vector width; an odd row count
// leaves one unpaired row per thread block. K that is not a multiple of the group (96 with group 64, 160 with
// 128) or of the width falls back to the general loops, which must agree too.
TEST(LinearCpu, Int4SmallBatchPathMatchesTheReferenceForEveryGroupSizeOddRowsAndFallbacks) {
  Rng rng(306);
  SCOPED_TRACE(rng.trace());
  for (WeightFormat f : {WeightFormat::kInt4Sym, WeightFormat::kInt4Asym}) {
    for (int32_t g : kInt4GroupSizes) {
      for (int64_t k : {int64_t{128}, int64_t{384}, int64_t{96}, int64_t{160}, int64_t{1024}}) {
        for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{37}, int64_t{64}}) {
          for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{7}}) {
            check(rng, {f, n, k, g, n % 2 == 0 ? ScaleDtype::kF16 : ScaleDtype::kBF16}, m, n == 37);
          }
        }
      }
    }
  }
}

TEST(LinearCpu, GivesTheSameResultWithAnyThreadCount) {
  Rng rng(304);
  SCOPED_TRACE(rng.trace());
  const Weight w = make_weight(rng, {WeightFormat::kInt4Sym, 200, 256, 64, ScaleDtype::kF16});
  std::vector<float> x = rng.normals(3 * 256);
  std::vector<float> y1(3 * 200), y3(3 * 200);
  const int before = cpu_threads();
  set_cpu_threads(1);
  ASSERT_TRUE(
      linear_cpu(contiguous<const float>(x.data(), 3, 256), w.view(), nullptr, contiguous(y1.data(), 3, 200))
          .ok());
  set_cpu_threads(3);
  ASSERT_TRUE(
      linear_cpu(contiguous<const float>(x.data(), 3, 256), w.view(), nullptr, contiguous(y3.data(), 3, 200))
          .ok());
  set_cpu_threads(before);
  EXPECT_TRUE(testing::bit_equal(y3.data(), y1.data(), y1.size()));
}

TEST(LinearCpu, RefusesMismatchedShapes) {
  Rng rng(305);
  const Weight w = make_weight(rng, {WeightFormat::kInt8, 4, 8, 0, ScaleDtype::kF16});
  std::vector<float> x(2 * 7), y(2 * 4);
  Status s =
      linear_cpu(contiguous<const float>(x.data(), 2, 7), w.view(), nullptr, contiguous(y.data(), 2, 4));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("x is [2, 7], expected [2, 8]"), std::string::npos) << s.message();
  WeightView broken = w.view();
  broken.scales = nullptr;
  EXPECT_FALSE(
      linear_cpu(contiguous<const float>(x.data(), 2, 8), broken, nullptr, contiguous(y.data(), 2, 4)).ok());
}

}  // namespace
}  // namespace infergate::kernels
