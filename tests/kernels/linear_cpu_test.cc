// linear_cpu against linear_ref for every weight format, group size and instruction set over a grid
// of shapes (tiny, odd, not a multiple of the group or the vector width), with and without bias.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "infergate/kernels/cpu.h"
#include "infergate/kernels/ref.h"
#include "kernels/test_util.h"

namespace infergate::kernels {
namespace {

using testing::Rng;

using Weight = testing::HostWeight;
constexpr auto make_weight = &testing::make_host_weight;

// |y - ref| <= 2e-6 * sum_k |x_k w_k| + 2^-23 |ref| + 1e-7 per output: fp32 summation against the double
// reference, plus one unit in the last place of the output itself (the fp32 scale and bias steps).
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
      if (std::fabs(g - r) > 2e-6 * mag + 0x1p-23 * std::fabs(r) + 1e-7) {
        return ::testing::AssertionFailure()
               << "y[" << i << "," << n << "] = " << g << ", reference " << r << " (magnitude " << mag << ")";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// Whether linear_cpu takes the integer int4 path (linear_int4_a8_ref) for this layout right now.
bool int_path_now(const WeightLayout& l) {
  return cpu_int_linear() && is_int4(l.format) && l.cols % l.group_size == 0 && l.cols / l.group_size <= 1024;
}

// Runs fn(isa) per instruction set, and on AVX-512 with VNNI once more with the integer int4 path
// off, so both the exact loops and the integer ones are checked there.
template <class Fn>
void for_each_path(Fn&& fn) {
  testing::for_each_isa([&](CpuIsa isa) {
    set_cpu_int_linear(false);
    fn(isa);
    set_cpu_int_linear(true);
    if (cpu_int_linear()) {
      SCOPED_TRACE("integer int4 path");
      fn(isa);
    }
  });
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
  std::vector<float> want_a8;
  if (is_int4(l.format) && l.cols % l.group_size == 0) {
    want_a8.resize(want.size());
    ASSERT_TRUE(linear_int4_a8_ref(contiguous<const float>(x.data(), m, l.cols), w.view(), b,
                                   contiguous(want_a8.data(), m, l.rows))
                    .ok());
  }
  for_each_path([&](CpuIsa) {
    std::fill(got.begin(), got.end(), NAN);
    const Status s = linear_cpu(contiguous<const float>(x.data(), m, l.cols), w.view(), b,
                                contiguous(got.data(), m, l.rows));
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(close_to_ref(w, x, m, got, int_path_now(l) ? want_a8 : want));
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

// Up to 8 rows of x take the int8 GEMV path too: tiles of 4 weight rows at M = 1 (2 at M = 2, 1 at
// M = 3..4, passes of 4 rows of x beyond), any K (vectors of two accumulators, then a scalar tail).
// Row counts not a multiple of the tile leave a partial last tile.
// fp16 and bf16 weights share the int8 tile (2-byte weights: a prefetched line is half the columns).
TEST(LinearCpu, DenseSmallBatchPathMatchesTheReferenceForOddShapesAndEveryBatchUpTo8) {
  Rng rng(307);
  SCOPED_TRACE(rng.trace());
  for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kF16, WeightFormat::kBF16}) {
    SCOPED_TRACE(weight_format_name(f));
    for (int64_t k : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{33}, int64_t{64}, int64_t{100},
                      int64_t{200}, int64_t{773}}) {
      for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{6}, int64_t{37}}) {
        for (int64_t m = 1; m <= 8; ++m) {
          check(rng, {f, n, k, 0, m % 2 == 0 ? ScaleDtype::kF16 : ScaleDtype::kBF16}, m, (n + m) % 3 == 0);
        }
      }
    }
  }
}

// The engine's own shapes (K = 768 in 6 groups of 128, K = 2048) for every batch size up to 8:
// every pass split of the rows of x (4 + 4, 4 + 3, 4 + 1, ...) on both GEMV paths.
TEST(LinearCpu, GemvPathsMatchTheReferenceAtTheEngineShapesForEveryBatchUpTo8) {
  Rng rng(308);
  SCOPED_TRACE(rng.trace());
  for (int64_t m = 1; m <= 8; ++m) {
    check(rng, {WeightFormat::kInt4Asym, 21, 768, 128, ScaleDtype::kF16}, m, m % 2 == 0);
    check(rng, {WeightFormat::kInt4Sym, 10, 2048, 64, ScaleDtype::kBF16}, m, false);
    check(rng, {WeightFormat::kInt8, 21, 768, 0, ScaleDtype::kF16}, m, m % 2 == 1);
    check(rng, {WeightFormat::kInt8, 6, 2048, 0, ScaleDtype::kF16}, m, false);
    check(rng, {WeightFormat::kF16, 21, 768, 0, ScaleDtype::kF16}, m, m % 2 == 0);
    check(rng, {WeightFormat::kBF16, 10, 2048, 0, ScaleDtype::kF16}, m, m % 2 == 1);
  }
}

// A row of x gets bit-for-bit the same outputs alone as in any batch of up to 8 (the GEMV paths do the
// same arithmetic per (weight row, x row) whatever the tile), so batched decode is batch-invariant.
TEST(LinearCpu, GemvPathsGiveARowOfXTheSameResultAloneAsInABatch) {
  Rng rng(309);
  SCOPED_TRACE(rng.trace());
  for (const WeightLayout& l : {WeightLayout{WeightFormat::kInt8, 37, 200, 0, ScaleDtype::kF16},
                                WeightLayout{WeightFormat::kF16, 37, 200, 0, ScaleDtype::kF16},
                                WeightLayout{WeightFormat::kBF16, 37, 136, 0, ScaleDtype::kF16},
                                WeightLayout{WeightFormat::kInt4Asym, 37, 256, 64, ScaleDtype::kF16},
                                WeightLayout{WeightFormat::kInt4Sym, 37, 256, 128, ScaleDtype::kBF16}}) {
    SCOPED_TRACE(weight_format_name(l.format));
    const Weight w = make_weight(rng, l);
    std::vector<float> x = rng.normals(static_cast<size_t>(8 * l.cols));
    testing::for_each_isa([&](CpuIsa) {
      for (int64_t m = 2; m <= 8; ++m) {
        std::vector<float> batch(static_cast<size_t>(m * l.rows)), one(static_cast<size_t>(l.rows));
        ASSERT_TRUE(linear_cpu(contiguous<const float>(x.data(), m, l.cols), w.view(), nullptr,
                               contiguous(batch.data(), m, l.rows))
                        .ok());
        for (int64_t i = 0; i < m; ++i) {
          ASSERT_TRUE(linear_cpu(contiguous<const float>(x.data() + i * l.cols, 1, l.cols), w.view(), nullptr,
                                 contiguous(one.data(), 1, l.rows))
                          .ok());
          EXPECT_TRUE(testing::bit_equal(batch.data() + i * l.rows, one.data(), one.size()))
              << "row " << i << " of a batch of " << m;
        }
      }
    });
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

// At batch 1 (the GEMV paths, with tiles of 4 weight rows) an odd row count splits differently over 1,
// 2 and 3 threads; every row's output must not depend on it.
TEST(LinearCpu, GemvGivesTheSameResultWithAnyThreadCount) {
  Rng rng(310);
  SCOPED_TRACE(rng.trace());
  for (const WeightLayout& l : {WeightLayout{WeightFormat::kInt8, 203, 300, 0, ScaleDtype::kF16},
                                WeightLayout{WeightFormat::kF16, 203, 300, 0, ScaleDtype::kF16},
                                WeightLayout{WeightFormat::kInt4Asym, 203, 384, 128, ScaleDtype::kF16}}) {
    const Weight w = make_weight(rng, l);
    std::vector<float> x = rng.normals(static_cast<size_t>(l.cols));
    std::vector<float> y1(static_cast<size_t>(l.rows)), y(y1.size());
    const int before = cpu_threads();
    set_cpu_threads(1);
    ASSERT_TRUE(linear_cpu(contiguous<const float>(x.data(), 1, l.cols), w.view(), nullptr,
                           contiguous(y1.data(), 1, l.rows))
                    .ok());
    for (int threads : {2, 3}) {
      set_cpu_threads(threads);
      ASSERT_TRUE(linear_cpu(contiguous<const float>(x.data(), 1, l.cols), w.view(), nullptr,
                             contiguous(y.data(), 1, l.rows))
                      .ok());
      EXPECT_TRUE(testing::bit_equal(y.data(), y1.data(), y1.size()))
          << weight_format_name(l.format) << ", " << threads << " threads";
    }
    set_cpu_threads(before);
  }
}

// q/k/v or gate/up in one call: each output bit for bit what linear_cpu gives it alone, for mixed
// formats and sizes, batch 1 (the GEMV paths) and beyond (the general loops).
TEST(LinearCpu, MultiGivesEveryOutputExactlyWhatLinearGivesIt) {
  Rng rng(311);
  SCOPED_TRACE(rng.trace());
  const int64_t k_in = 256;
  const Weight ws[] = {make_weight(rng, {WeightFormat::kInt4Asym, 96, k_in, 128, ScaleDtype::kF16}),
                       make_weight(rng, {WeightFormat::kInt4Sym, 33, k_in, 64, ScaleDtype::kF16}),
                       make_weight(rng, {WeightFormat::kInt8, 50, k_in, 0, ScaleDtype::kBF16}),
                       make_weight(rng, {WeightFormat::kF16, 17, k_in, 0, ScaleDtype::kF16})};
  std::vector<float> bias = rng.normals(96);
  testing::for_each_isa([&](CpuIsa) {
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{9}}) {
      std::vector<float> x = rng.normals(static_cast<size_t>(m * k_in));
      std::vector<std::vector<float>> multi, single;
      std::vector<LinearOutput> outs;
      for (size_t i = 0; i < std::size(ws); ++i) {
        const int64_t n = ws[i].layout.rows;
        multi.emplace_back(static_cast<size_t>(m * n), NAN);
        single.emplace_back(static_cast<size_t>(m * n), NAN);
      }
      for (size_t i = 0; i < std::size(ws); ++i) {
        const int64_t n = ws[i].layout.rows;
        const float* b = i % 2 == 0 ? bias.data() : nullptr;
        outs.push_back({ws[i].view(), b, contiguous(multi[i].data(), m, n)});
        ASSERT_TRUE(linear_cpu(contiguous<const float>(x.data(), m, k_in), ws[i].view(), b,
                               contiguous(single[i].data(), m, n))
                        .ok());
      }
      const Status s = linear_multi_cpu(contiguous<const float>(x.data(), m, k_in), outs.data(),
                                        static_cast<int64_t>(outs.size()));
      ASSERT_TRUE(s.ok()) << s.to_string();
      for (size_t i = 0; i < std::size(ws); ++i) {
        EXPECT_TRUE(testing::bit_equal(multi[i].data(), single[i].data(), single[i].size()))
            << "output " << i << ", M " << m;
      }
    }
  });
}

TEST(LinearCpu, MultiNamesTheOutputThatDoesNotFitAndWritesNothing) {
  Rng rng(312);
  const Weight a = make_weight(rng, {WeightFormat::kInt8, 4, 8, 0, ScaleDtype::kF16});
  const Weight b = make_weight(rng, {WeightFormat::kInt8, 4, 16, 0, ScaleDtype::kF16});
  std::vector<float> x(8, 1.0f), ya(4, NAN), yb(4, NAN);
  const LinearOutput outs[] = {{a.view(), nullptr, contiguous(ya.data(), 1, 4)},
                               {b.view(), nullptr, contiguous(yb.data(), 1, 4)}};
  const Status s = linear_multi_cpu(contiguous<const float>(x.data(), 1, 8), outs, 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("linear_multi[1]"), std::string::npos) << s.message();
  EXPECT_TRUE(std::isnan(ya[0]));
  EXPECT_EQ(linear_multi_cpu(contiguous<const float>(x.data(), 1, 8), nullptr, 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(linear_multi_cpu(contiguous<const float>(x.data(), 1, 8), outs, 0).ok());
}

// A MoE layer's experts in one call: products with their own x (different row counts, one of them
// empty, two int4 ones sharing an x, inputs of different widths), each bit for bit what linear_cpu
// gives it alone.
TEST(LinearCpu, GroupedGivesEveryProductExactlyWhatLinearGivesItWithItsOwnInput) {
  Rng rng(313);
  SCOPED_TRACE(rng.trace());
  const Weight ws[] = {make_weight(rng, {WeightFormat::kInt4Sym, 64, 256, 32, ScaleDtype::kF16}),
                       make_weight(rng, {WeightFormat::kInt4Sym, 64, 256, 32, ScaleDtype::kF16}),
                       make_weight(rng, {WeightFormat::kInt4Asym, 40, 96, 32, ScaleDtype::kBF16}),
                       make_weight(rng, {WeightFormat::kInt8, 24, 256, 0, ScaleDtype::kF16}),
                       make_weight(rng, {WeightFormat::kBF16, 16, 96, 0, ScaleDtype::kF16}),
                       make_weight(rng, {WeightFormat::kF16, 8, 256, 0, ScaleDtype::kF16})};
  const int64_t rows[] = {3, 3, 1, 0, 5, 2};
  const int x_of[] = {0, 0, 1, 2, 3, 4};  // products 0 and 1 share their input
  std::vector<float> bias = rng.normals(64);
  testing::for_each_isa([&](CpuIsa) {
    std::vector<std::vector<float>> xs, grouped, single;
    for (size_t i = 0; i < std::size(ws); ++i) {
      if (i == 0 || x_of[i] != x_of[i - 1]) {
        xs.push_back(rng.normals(static_cast<size_t>(std::max<int64_t>(rows[i], 1) * ws[i].layout.cols)));
      }
    }
    std::vector<LinearProduct> products;
    for (size_t i = 0; i < std::size(ws); ++i) {
      const int64_t m = rows[i], n = ws[i].layout.rows, k = ws[i].layout.cols;
      grouped.emplace_back(static_cast<size_t>(std::max<int64_t>(m * n, 1)), NAN);
      single.emplace_back(static_cast<size_t>(std::max<int64_t>(m * n, 1)), NAN);
      const float* b = i % 2 == 0 ? bias.data() : nullptr;
      const View2<const float> x = contiguous<const float>(xs[static_cast<size_t>(x_of[i])].data(), m, k);
      products.push_back({x, ws[i].view(), b, contiguous(grouped[i].data(), m, n)});
      ASSERT_TRUE(linear_cpu(x, ws[i].view(), b, contiguous(single[i].data(), m, n)).ok());
    }
    const Status s = linear_grouped_cpu(products.data(), static_cast<int64_t>(products.size()));
    ASSERT_TRUE(s.ok()) << s.to_string();
    for (size_t i = 0; i < std::size(ws); ++i) {
      EXPECT_TRUE(testing::bit_equal(grouped[i].data(), single[i].data(), single[i].size()))
          << "product " << i;
    }
  });
}

TEST(LinearCpu, GroupedNamesTheProductThatDoesNotFitAndWritesNothing) {
  Rng rng(314);
  const Weight a = make_weight(rng, {WeightFormat::kInt8, 4, 8, 0, ScaleDtype::kF16});
  std::vector<float> x(8, 1.0f), ya(4, NAN), yb(4, NAN);
  const LinearProduct products[] = {
      {contiguous<const float>(x.data(), 1, 8), a.view(), nullptr, contiguous(ya.data(), 1, 4)},
      {contiguous<const float>(x.data(), 2, 4), a.view(), nullptr, contiguous(yb.data(), 2, 2)}};
  const Status s = linear_grouped_cpu(products, 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("linear_grouped[1]"), std::string::npos) << s.message();
  EXPECT_TRUE(std::isnan(ya[0]));
  EXPECT_EQ(linear_grouped_cpu(nullptr, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(linear_grouped_cpu(products, 0).ok());
}

// The integer path's contract (linear_int4_a8_ref) against the exact product: within the documented
// bound sum_g (s_g / 2) sum_{k in g} |w_k| per output, on inputs with outlier channels (the case per-group
// scales are for), and no looser than it needs to be (the bound is within 50x of the error seen).
TEST(LinearInt4A8Ref, StaysWithinItsErrorBoundOfTheExactProduct) {
  Rng rng(311);
  SCOPED_TRACE(rng.trace());
  for (WeightFormat f : {WeightFormat::kInt4Sym, WeightFormat::kInt4Asym}) {
    for (int32_t g : kInt4GroupSizes) {
      const WeightLayout l{f, 24, 768, g, ScaleDtype::kF16};
      const Weight w = make_weight(rng, l);
      const int64_t m = 5;
      std::vector<float> x = rng.normals(static_cast<size_t>(m * l.cols));
      for (int64_t i = 0; i < m; ++i) x[static_cast<size_t>(i * l.cols + 7 + 97 * i)] *= 40.0f;  // outliers
      std::fill(x.begin() + 2 * l.cols, x.begin() + 2 * l.cols + g, 0.0f);  // an all-zero group
      std::vector<float> exact(static_cast<size_t>(m * l.rows)), a8(exact.size());
      ASSERT_TRUE(linear_ref(contiguous<const float>(x.data(), m, l.cols), w.view(), nullptr,
                             contiguous(exact.data(), m, l.rows))
                      .ok());
      ASSERT_TRUE(linear_int4_a8_ref(contiguous<const float>(x.data(), m, l.cols), w.view(), nullptr,
                                     contiguous(a8.data(), m, l.rows))
                      .ok());
      std::vector<float> dq(static_cast<size_t>(l.rows * l.cols));
      ASSERT_TRUE(dequantize_weight_ref(w.view(), contiguous(dq.data(), l.rows, l.cols)).ok());
      double worst = 0;  // largest error / bound
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t n = 0; n < l.rows; ++n) {
          double bound = 0;
          for (int64_t g0 = 0; g0 < l.cols; g0 += g) {
            float amax = 0;
            double wsum = 0;
            for (int64_t k = g0; k < g0 + g; ++k) {
              amax = std::max(amax, std::fabs(x[static_cast<size_t>(i * l.cols + k)]));
              wsum += std::fabs(dq[static_cast<size_t>(n * l.cols + k)]);
            }
            bound += amax / 127.0 / 2 * wsum;
          }
          const double err = std::fabs(static_cast<double>(a8[i * l.rows + n]) - exact[i * l.rows + n]);
          ASSERT_LE(err, bound * (1 + 1e-5) + 1e-6)
              << weight_format_name(f) << " g" << g << " y[" << i << "," << n << "]";
          worst = std::max(worst, err / bound);
        }
      }
      EXPECT_GT(worst, 0.02) << "the bound is far looser than the error";
    }
  }
}

TEST(LinearInt4A8Ref, RefusesLayoutsItHasNoContractFor) {
  Rng rng(312);
  const Weight w = make_weight(rng, {WeightFormat::kInt4Sym, 4, 96, 64, ScaleDtype::kF16});
  std::vector<float> x(96), y(4);
  const Status s = linear_int4_a8_ref(contiguous<const float>(x.data(), 1, 96), w.view(), nullptr,
                                      contiguous(y.data(), 1, 4));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("K (96)"), std::string::npos) << s.to_string();
  const Weight d = make_weight(rng, {WeightFormat::kInt8, 4, 96, 0, ScaleDtype::kF16});
  EXPECT_FALSE(linear_int4_a8_ref(contiguous<const float>(x.data(), 1, 96), d.view(), nullptr,
                                  contiguous(y.data(), 1, 4))
                   .ok());
}

// The integer path over shapes that reach each of its edges: K with a partial last block of 128 (32,
// 96, 160, 224 columns), tiles of 8 rows with 1..7 left over, rows of x across passes of 64 (63, 64,
// 65, 130), scale dtypes; and every row of a 130-row batch bit for bit what it gets alone.
TEST(LinearCpu, IntegerInt4PathMatchesItsContractAtEveryEdgeAndIsBatchInvariant) {
  set_cpu_int_linear(true);
  if (!cpu_int_linear()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI: only the exact int4 loops run";
  Rng rng(313);
  SCOPED_TRACE(rng.trace());
  for (WeightFormat f : {WeightFormat::kInt4Sym, WeightFormat::kInt4Asym}) {
    for (int32_t g : kInt4GroupSizes) {
      for (int64_t k : {int64_t{32}, int64_t{96}, int64_t{128}, int64_t{160}, int64_t{224}, int64_t{640}}) {
        if (k % g != 0) continue;
        for (int64_t n : {int64_t{1}, int64_t{8}, int64_t{13}}) {
          for (int64_t m : {int64_t{1}, int64_t{63}, int64_t{65}})
            check(rng, {f, n, k, g, (n + m) % 2 == 0 ? ScaleDtype::kF16 : ScaleDtype::kBF16}, m, n == 13);
        }
      }
    }
  }
  const WeightLayout l{WeightFormat::kInt4Asym, 45, 5632, 128, ScaleDtype::kF16};
  const Weight w = make_weight(rng, l);
  const int64_t m = 130;
  std::vector<float> x = rng.normals(static_cast<size_t>(m * l.cols));
  std::vector<float> batch(static_cast<size_t>(m * l.rows)), one(static_cast<size_t>(l.rows));
  ASSERT_TRUE(linear_cpu(contiguous<const float>(x.data(), m, l.cols), w.view(), nullptr,
                         contiguous(batch.data(), m, l.rows))
                  .ok());
  for (int64_t i : {int64_t{0}, int64_t{63}, int64_t{64}, int64_t{129}}) {
    ASSERT_TRUE(linear_cpu(contiguous<const float>(x.data() + i * l.cols, 1, l.cols), w.view(), nullptr,
                           contiguous(one.data(), 1, l.rows))
                    .ok());
    EXPECT_TRUE(testing::bit_equal(batch.data() + i * l.rows, one.data(), one.size())) << "row " << i;
  }
  std::vector<float> want(batch.size());
  ASSERT_TRUE(linear_int4_a8_ref(contiguous<const float>(x.data(), m, l.cols), w.view(), nullptr,
                                 contiguous(want.data(), m, l.rows))
                  .ok());
  EXPECT_TRUE(close_to_ref(w, x, m, batch, want));
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
