// RMSNorm, RoPE (half-split, GLM interleaved, partial rotary, llama3 scaling), SiLU-and-multiply,
// residual and bias adds, embedding lookup: the references on known values, and the CPU versions
// against the references for every instruction set.
#include <gtest/gtest.h>

#include "common/refusal.h"

#include <cmath>
#include <limits>
#include <vector>

#include "infergate/kernels/cpu.h"
#include "infergate/kernels/ref.h"
#include "kernels/test_util.h"

namespace infergate::kernels {
namespace {

using infergate::testing::refused;

using testing::Rng;

TEST(RmsNorm, NormalisesByTheRootMeanSquare) {
  std::vector<float> x = {3.0f, 4.0f}, w = {1.0f, 2.0f}, y(2);
  ASSERT_TRUE(
      rmsnorm_ref(contiguous<const float>(x.data(), 1, 2), w.data(), 0.0f, contiguous(y.data(), 1, 2)).ok());
  const float rms = std::sqrt(12.5f);
  EXPECT_NEAR(y[0], 3.0f / rms, 1e-6f);
  EXPECT_NEAR(y[1], 8.0f / rms, 1e-6f);
}

TEST(RmsNorm, CpuMatchesTheReferenceInPlaceAndOnOddWidths) {
  Rng rng(601);
  SCOPED_TRACE(rng.trace());
  for (int64_t h : {1, 7, 16, 100, 4096}) {
    std::vector<float> x = rng.normals(static_cast<size_t>(3 * h), 3.0f),
                       w = rng.normals(static_cast<size_t>(h));
    std::vector<float> want(x.size());
    ASSERT_TRUE(
        rmsnorm_ref(contiguous<const float>(x.data(), 3, h), w.data(), 1e-6f, contiguous(want.data(), 3, h))
            .ok());
    testing::for_each_isa([&](CpuIsa) {
      std::vector<float> y = x;  // in place
      ASSERT_TRUE(
          rmsnorm_cpu(contiguous<const float>(y.data(), 3, h), w.data(), 1e-6f, contiguous(y.data(), 3, h))
              .ok());
      EXPECT_TRUE(testing::all_close(y, want, 1e-6f, 2e-6f)) << "width " << h;
    });
  }
}

// Rotates q [1, 1, head_dim] and returns it.
std::vector<float> rotate(const RopeConfig& c, std::vector<float> q, int32_t pos, bool cpu) {
  std::vector<float> inv;
  EXPECT_TRUE(rope_inv_freq(c, &inv).ok());
  std::vector<float> k(static_cast<size_t>(c.head_dim), 0.0f);
  auto qv = contiguous(q.data(), 1, 1, c.head_dim);
  auto kv = contiguous(k.data(), 1, 1, c.head_dim);
  EXPECT_TRUE((cpu ? rope_cpu(c, inv.data(), &pos, qv, kv) : rope_ref(c, inv.data(), &pos, qv, kv)).ok());
  return q;
}

TEST(Rope, HalfSplitPairsElementIWithElementIPlusHalf) {
  const RopeConfig c{RopeStyle::kHalfSplit, 4, 4, 10000.0f, {}, {}};
  // x = e0: rotates within the pair (0, 2) by angle pos * inv_freq[0] = pos.
  const std::vector<float> y = rotate(c, {1, 0, 0, 0}, 1, false);
  EXPECT_NEAR(y[0], std::cos(1.0f), 1e-6f);
  EXPECT_NEAR(y[2], std::sin(1.0f), 1e-6f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[3], 0.0f);
}

TEST(Rope, InterleavedPairsAdjacentElementsLikeGlm) {
  // GLM-4: head_dim 8, partial_rotary_factor 0.5 -> rotary_dim 4; pairs (0,1), (2,3); 4..7 untouched.
  const RopeConfig c{RopeStyle::kInterleaved, 8, 4, 10000.0f, {}, {}};
  std::vector<float> inv;
  ASSERT_TRUE(rope_inv_freq(c, &inv).ok());
  ASSERT_EQ(inv.size(), 2u);
  EXPECT_FLOAT_EQ(inv[1], 1.0f / 100.0f);  // 10000^(-2/4)
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> y = rotate(c, x, 3, false);
  const float a0 = 3.0f, a1 = 3.0f * inv[1];
  EXPECT_NEAR(y[0], 1 * std::cos(a0) - 2 * std::sin(a0), 1e-6f);
  EXPECT_NEAR(y[1], 2 * std::cos(a0) + 1 * std::sin(a0), 1e-6f);
  EXPECT_NEAR(y[2], 3 * std::cos(a1) - 4 * std::sin(a1), 1e-6f);
  EXPECT_NEAR(y[3], 4 * std::cos(a1) + 3 * std::sin(a1), 1e-6f);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(y[i], x[i]) << "beyond rotary_dim passes through";
}

TEST(Rope, PositionZeroIsTheIdentityAndRotationKeepsTheNorm) {
  Rng rng(602);
  for (RopeStyle st : {RopeStyle::kHalfSplit, RopeStyle::kInterleaved}) {
    const RopeConfig c{st, 64, 64, 500000.0f, {}, {}};
    std::vector<float> x = rng.normals(64);
    EXPECT_EQ(rotate(c, x, 0, false), x);
    const std::vector<float> y = rotate(c, x, 12345, false);
    double nx = 0, ny = 0;
    for (int i = 0; i < 64; ++i) {
      nx += x[i] * x[i];
      ny += y[i] * y[i];
    }
    EXPECT_NEAR(nx, ny, 1e-4 * nx);
  }
}

TEST(Rope, Llama3ScalingDividesLowFrequenciesAndKeepsHighOnes) {
  RopeConfig c{RopeStyle::kHalfSplit, 128, 128, 500000.0f, {}, {}};
  std::vector<float> plain, scaled;
  ASSERT_TRUE(rope_inv_freq(c, &plain).ok());
  c.llama3 = {true, 8.0f, 1.0f, 4.0f, 8192};
  ASSERT_TRUE(rope_inv_freq(c, &scaled).ok());
  const double pi = 3.14159265358979323846;
  int low = 0, high = 0, mid = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * pi / plain[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(scaled[i], plain[i]);
      ++high;
    } else if (wavelen > 8192.0) {
      EXPECT_NEAR(scaled[i], plain[i] / 8, 1e-12);
      ++low;
    } else {
      EXPECT_LT(scaled[i], plain[i]);
      EXPECT_GT(scaled[i], plain[i] / 8 * 0.999);
      ++mid;
    }
  }
  EXPECT_GT(low, 0);
  EXPECT_GT(high, 0);
  EXPECT_GT(mid, 0);
  c.llama3.high_freq_factor = 0.5f;
  EXPECT_TRUE(
      refused(rope_inv_freq(c, &scaled), "", {"llama3 scaling needs", "low_freq_factor < high_freq_factor"}));
}

TEST(Rope, CpuMatchesTheReferenceForBothStylesAndPartialRotary) {
  Rng rng(603);
  SCOPED_TRACE(rng.trace());
  for (RopeStyle st : {RopeStyle::kHalfSplit, RopeStyle::kInterleaved}) {
    for (auto [d, r] : {std::pair{128, 128}, std::pair{128, 64}, std::pair{6, 2}}) {
      const RopeConfig c{st, d, r, 10000.0f, {}, {}};
      std::vector<float> inv;
      ASSERT_TRUE(rope_inv_freq(c, &inv).ok());
      const int64_t t = 5, hq = 4, hk = 2;
      std::vector<int32_t> pos = {0, 1, 17, 4095, 131071};
      std::vector<float> q = rng.normals(static_cast<size_t>(t * hq * d)),
                         k = rng.normals(static_cast<size_t>(t * hk * d));
      std::vector<float> rq = q, rk = k;
      ASSERT_TRUE(rope_ref(c, inv.data(), pos.data(), contiguous(rq.data(), t, hq, d),
                           contiguous(rk.data(), t, hk, d))
                      .ok());
      testing::for_each_isa([&](CpuIsa) {
        std::vector<float> cq = q, ck = k;
        ASSERT_TRUE(rope_cpu(c, inv.data(), pos.data(), contiguous(cq.data(), t, hq, d),
                             contiguous(ck.data(), t, hk, d))
                        .ok());
        EXPECT_TRUE(testing::all_close(cq, rq, 1e-5f, 1e-5f));
        EXPECT_TRUE(testing::all_close(ck, rk, 1e-5f, 1e-5f));
      });
    }
  }
  const RopeConfig bad{RopeStyle::kHalfSplit, 8, 5, 10000.0f, {}, {}};
  std::vector<float> inv;
  EXPECT_TRUE(refused(rope_inv_freq(bad, &inv), "", {"rotary_dim 5 must be even"}));
}

TEST(SiluMul, MatchesTheDefinitionAndTheReference) {
  Rng rng(604);
  SCOPED_TRACE(rng.trace());
  for (int64_t n : {1, 15, 64, 1000}) {
    std::vector<float> g = rng.normals(static_cast<size_t>(2 * n), 4.0f),
                       u = rng.normals(static_cast<size_t>(2 * n));
    g[0] = 100.0f;              // silu(100) = 100
    if (n > 1) g[1] = -100.0f;  // silu(-100) ~ 0
    std::vector<float> want(g.size());
    ASSERT_TRUE(silu_mul_ref(contiguous<const float>(g.data(), 2, n), contiguous<const float>(u.data(), 2, n),
                             contiguous(want.data(), 2, n))
                    .ok());
    EXPECT_NEAR(want[0], 100.0f * u[0], 1e-4f * std::fabs(u[0]));
    testing::for_each_isa([&](CpuIsa) {
      std::vector<float> got(g.size());
      ASSERT_TRUE(silu_mul_cpu(contiguous<const float>(g.data(), 2, n),
                               contiguous<const float>(u.data(), 2, n), contiguous(got.data(), 2, n))
                      .ok());
      EXPECT_TRUE(testing::all_finite(got));
      EXPECT_TRUE(testing::all_close(got, want, 1e-6f, 1e-5f));
    });
  }
}

TEST(AddAndBias, CpuMatchesTheReferenceInPlace) {
  Rng rng(605);
  for (int64_t n : {1, 17, 256}) {
    std::vector<float> a = rng.normals(static_cast<size_t>(3 * n)), b = rng.normals(a.size()),
                       bias = rng.normals(static_cast<size_t>(n));
    std::vector<float> want(a.size());
    ASSERT_TRUE(add_ref(contiguous<const float>(a.data(), 3, n), contiguous<const float>(b.data(), 3, n),
                        contiguous(want.data(), 3, n))
                    .ok());
    std::vector<float> want_b = want;
    ASSERT_TRUE(bias_add_ref(contiguous(want_b.data(), 3, n), bias.data()).ok());
    testing::for_each_isa([&](CpuIsa) {
      std::vector<float> x = a;
      ASSERT_TRUE(add_cpu(contiguous<const float>(x.data(), 3, n), contiguous<const float>(b.data(), 3, n),
                          contiguous(x.data(), 3, n))
                      .ok());
      EXPECT_TRUE(testing::bit_equal(x.data(), want.data(), x.size()));
      ASSERT_TRUE(bias_add_cpu(contiguous(x.data(), 3, n), bias.data()).ok());
      EXPECT_TRUE(testing::bit_equal(x.data(), want_b.data(), x.size()));
    });
  }
  std::vector<float> y(4);
  EXPECT_TRUE(refused(bias_add_cpu(contiguous(y.data(), 1, 4), nullptr), "", {"bias is null"}));
}

TEST(Embedding, LooksUpRowsOfEveryTableDtypeAndRefusesUnknownIds) {
  Rng rng(606);
  const int64_t vocab = 11, h = 37;
  std::vector<float> f32 = rng.normals(static_cast<size_t>(vocab * h));
  std::vector<uint16_t> f16(f32.size()), b16(f32.size());
  for (size_t i = 0; i < f32.size(); ++i) {
    f16[i] = fp16_from_float(f32[i]);
    b16[i] = bf16_from_float(f32[i]);
  }
  const std::vector<int32_t> ids = {3, 0, 10, 3};
  for (auto [data, dt] : {std::pair<const void*, SourceDtype>{f32.data(), SourceDtype::kF32},
                          std::pair<const void*, SourceDtype>{f16.data(), SourceDtype::kF16},
                          std::pair<const void*, SourceDtype>{b16.data(), SourceDtype::kBF16}}) {
    const MatrixSource table{data, dt, vocab, h, h};
    std::vector<float> want(static_cast<size_t>(4 * h)), got(want.size());
    ASSERT_TRUE(embedding_ref(table, ids.data(), 4, contiguous(want.data(), 4, h)).ok());
    ASSERT_TRUE(embedding_cpu(table, ids.data(), 4, contiguous(got.data(), 4, h)).ok());
    EXPECT_TRUE(testing::bit_equal(got.data(), want.data(), got.size()));
    EXPECT_EQ(want[0], source_at(table, 3, 0));
    const std::vector<int32_t> bad = {1, 11};
    for (const Status& s : {embedding_ref(table, bad.data(), 2, contiguous(got.data(), 2, h)),
                            embedding_cpu(table, bad.data(), 2, contiguous(got.data(), 2, h))}) {
      EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
      EXPECT_NE(s.message().find("token 1 has id 11"), std::string::npos) << s.message();
    }
  }
}

}  // namespace
}  // namespace infergate::kernels
