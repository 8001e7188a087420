// The published formats' scalar reference (published.h, published_ref.cc): the bit positions each
// format defines, written out by hand here; quantize-dequantize error bounds on ragged shapes; and the
// refusals of what would decode to noise.
#include <gtest/gtest.h>

#include "common/refusal.h"

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "infergate/kernels/ref.h"
#include "test_util.h"

namespace infergate::kernels {
namespace {

using infergate::testing::refused;

using testing::Rng;

PublishedLayout layout(PublishedFormat f, int64_t n, int64_t k, int32_t g = 0,
                       PublishedScale s = PublishedScale::kF32) {
  PublishedLayout l;
  l.format = f;
  l.rows = n;
  l.cols = k;
  l.group_size = g;
  l.scale = s;
  if (f == PublishedFormat::kFp8Block) l.block_rows = l.block_cols = 128;
  return l;
}

std::vector<float> dequant(const PublishedView& v) {
  std::vector<float> out(static_cast<size_t>(v.layout.rows * v.layout.cols));
  Status s = dequantize_published_ref(v, contiguous(out.data(), v.layout.rows, v.layout.cols));
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

TEST(PublishedFormats, CompressedTensorsPutsElementKInSlotKMod8StoredPlus8) {
  // N 1, K 10 (ragged: the second word holds two elements); u_k = k, per-channel scale 0.5 (bf16).
  PublishedLayout l = layout(PublishedFormat::kCtInt4, 1, 10, 0, PublishedScale::kBF16);
  std::vector<int32_t> words(2, 0);
  for (uint32_t k = 0; k < 10; ++k)
    words[k / 8] = static_cast<int32_t>(static_cast<uint32_t>(words[k / 8]) | (k << (4 * (k % 8))));
  EXPECT_EQ(static_cast<uint32_t>(words[0]), 0x76543210u);
  const uint16_t half = 0x3F00;  // 0.5
  auto w = dequant({l, words.data(), &half, nullptr, nullptr});
  for (int k = 0; k < 10; ++k) EXPECT_EQ(w[k], 0.5f * static_cast<float>(k - 8)) << k;
}

TEST(PublishedFormats, CompressedTensorsZeroPointsArePackedAlongN) {
  // N 10 rows (2 words of zero points), K 8, one group; row n has zero point uz = n, code u = 12.
  PublishedLayout l = layout(PublishedFormat::kCtInt4, 10, 8, 8, PublishedScale::kF32);
  l.symmetric = false;
  std::vector<int32_t> words(10, static_cast<int32_t>(0xCCCCCCCCu));
  std::vector<int32_t> zeros(2, 0);
  for (uint32_t n = 0; n < 10; ++n)
    zeros[n / 8] = static_cast<int32_t>(static_cast<uint32_t>(zeros[n / 8]) | (n << (4 * (n % 8))));
  std::vector<float> scales(10, 1.0f);
  auto w = dequant({l, words.data(), scales.data(), zeros.data(), nullptr});
  for (int n = 0; n < 10; ++n) EXPECT_EQ(w[static_cast<size_t>(n) * 8], static_cast<float>(12 - n)) << n;
}

TEST(PublishedFormats, AwqInterleavesColumnsInTheOrder02461357) {
  // K 1, N 8: slot i of the word holds value i + 1; AutoAWQ packs column [0,2,4,6,1,3,5,7][i] in slot i.
  PublishedLayout l = layout(PublishedFormat::kAwqInt4, 8, 1, 0, PublishedScale::kF16);
  int32_t word = static_cast<int32_t>(0x87654321u);
  int32_t zero = 0;
  std::vector<uint16_t> scales(8, 0x3C00);  // 1.0
  auto w = dequant({l, &word, scales.data(), &zero, nullptr});
  EXPECT_EQ(w, (std::vector<float>{1, 5, 2, 6, 3, 7, 4, 8}));
}

TEST(PublishedFormats, GptqPacksAlongKAndStoresZeroMinusOneUnlessV2) {
  // K 8, N 8: column n's word holds u_k = k + n % 2 in slot k; stored zeros 7 (z = 8, or 7 for v2).
  PublishedLayout l = layout(PublishedFormat::kGptqInt4, 8, 8, 8, PublishedScale::kF16);
  std::vector<int32_t> words(8, 0);
  for (uint32_t n = 0; n < 8; ++n) {
    for (uint32_t k = 0; k < 8; ++k)
      words[n] = static_cast<int32_t>(static_cast<uint32_t>(words[n]) | ((k + n % 2) << (4 * k)));
  }
  int32_t zeros = static_cast<int32_t>(0x77777777u);
  std::vector<uint16_t> scales(8, 0x3C00);
  auto v1 = dequant({l, words.data(), scales.data(), &zeros, nullptr});
  l.gptq_v2 = true;
  auto v2 = dequant({l, words.data(), scales.data(), &zeros, nullptr});
  for (int n = 0; n < 8; ++n) {
    for (int k = 0; k < 8; ++k) {
      EXPECT_EQ(v1[static_cast<size_t>(n * 8 + k)], static_cast<float>(k + n % 2 - 8));
      EXPECT_EQ(v2[static_cast<size_t>(n * 8 + k)], static_cast<float>(k + n % 2 - 7));
    }
  }
  // A stored 15 reads as z = 16 (gptq), as AutoGPTQ and vLLM read it.
  int32_t wrapped = static_cast<int32_t>(0xFFFFFFFFu);
  l.gptq_v2 = false;
  EXPECT_EQ(dequant({l, words.data(), scales.data(), &wrapped, nullptr})[0], -16.0f);
}

TEST(PublishedFormats, Fp8BlockScalesMultiplyAndAPartialBlockHasItsOwn) {
  // N 130: rows 0..127 use scale 2, rows 128..129 scale 0.25; code 0x38 is 1.0.
  PublishedLayout l = layout(PublishedFormat::kFp8Block, 130, 3);
  std::vector<uint8_t> codes(130 * 3, 0x38);
  const float scales[2] = {2.0f, 0.25f};
  auto w = dequant({l, codes.data(), scales, nullptr, nullptr});
  EXPECT_EQ(w[0], 2.0f);
  EXPECT_EQ(w[127 * 3 + 2], 2.0f);
  EXPECT_EQ(w[128 * 3], 0.25f);
  static_assert(published_shapes({PublishedFormat::kFp8Block, 130, 3, 0, 128, 128}).scales[0] == 2);
}

// ---- quantize, then dequantize: within half a step everywhere, on ragged shapes ----

struct RoundTrip {
  PublishedFormat format;
  int64_t n, k;
  int32_t group;
  PublishedScale scale;
  bool symmetric = true;
  bool act_order = false;
  bool v2 = false;
};

class PublishedRoundTrip : public ::testing::TestWithParam<RoundTrip> {};

TEST_P(PublishedRoundTrip, StaysWithinHalfAStepOfTheSource) {
  const RoundTrip& p = GetParam();
  Rng rng(2024);
  SCOPED_TRACE(rng.trace());
  PublishedLayout l = layout(p.format, p.n, p.k, p.group, p.scale);
  l.symmetric = p.symmetric;
  l.act_order = p.act_order;
  l.gptq_v2 = p.v2;
  ASSERT_TRUE(validate_published_layout(l).ok()) << validate_published_layout(l).to_string();
  std::vector<float> x = rng.normals(static_cast<size_t>(p.n * p.k), 0.05f);
  for (int64_t c = 0; c < p.k; ++c)
    x[static_cast<size_t>(c)] = std::fabs(x[static_cast<size_t>(c)]);  // a one-signed row
  const PublishedBytes b = published_bytes(l);
  std::vector<uint8_t> data(static_cast<size_t>(b.data)), scales(static_cast<size_t>(b.scales));
  std::vector<int32_t> zeros(static_cast<size_t>(b.zeros / 4));
  std::vector<int32_t> g_idx;
  if (p.act_order) {  // a permutation's groups: column c goes to group (7 c mod K) / G
    for (int64_t c = 0; c < p.k; ++c) g_idx.push_back(static_cast<int32_t>(((c * 7) % p.k) / p.group));
  }
  MatrixSource src{x.data(), SourceDtype::kF32, p.n, p.k, p.k};
  Status q = quantize_published_ref(src, l,
                                    {data.data(), scales.data(), zeros.empty() ? nullptr : zeros.data(),
                                     g_idx.empty() ? nullptr : g_idx.data()});
  ASSERT_TRUE(q.ok()) << q.to_string();
  auto y = dequant({l, data.data(), scales.data(), zeros.empty() ? nullptr : zeros.data(),
                    g_idx.empty() ? nullptr : g_idx.data()});
  const bool fp8 = p.format == PublishedFormat::kFp8Block || p.format == PublishedFormat::kFp8Channel;
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t c = 0; c < p.k; ++c) {
      const size_t i = static_cast<size_t>(n * p.k + c);
      if (fp8) {
        // e4m3 keeps 3 mantissa bits: half a step is 2^-4 of the value; subnormals step by 2^-9 s.
        EXPECT_LE(std::fabs(x[i] - y[i]), std::fabs(x[i]) / 16.0f + 1e-6f) << n << ", " << c;
        continue;
      }
      // The group's range bounds the step: symmetric s = amax / 7.5, asymmetric s <= range / 15 (x 15/14
      // for gptq v1, which keeps z >= 1), rounded up to the scale dtype.
      const int64_t g = p.act_order ? g_idx[static_cast<size_t>(c)] : (p.group > 0 ? c / p.group : 0);
      float lo = 0, hi = 0;
      for (int64_t cc = 0; cc < p.k; ++cc) {
        const int64_t gg = p.act_order ? g_idx[static_cast<size_t>(cc)] : (p.group > 0 ? cc / p.group : 0);
        if (gg != g) continue;
        lo = std::min(lo, x[static_cast<size_t>(n * p.k + cc)]);
        hi = std::max(hi, x[static_cast<size_t>(n * p.k + cc)]);
      }
      const bool sym = p.format != PublishedFormat::kAwqInt4 && p.symmetric;
      float step = sym ? std::max(-lo, hi) / 7.5f : (hi - lo) / 15.0f;
      if (p.format == PublishedFormat::kGptqInt4 && !p.v2 && !sym)
        step = (hi - std::min(lo, -hi / 14.0f)) / 15.0f;
      EXPECT_LE(std::fabs(x[i] - y[i]), step * 0.5f * 1.01f + 1e-7f) << n << ", " << c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, PublishedRoundTrip,
    ::testing::Values(RoundTrip{PublishedFormat::kFp8Block, 200, 130, 0, PublishedScale::kF32},
                      RoundTrip{PublishedFormat::kFp8Channel, 37, 21, 0, PublishedScale::kBF16},
                      RoundTrip{PublishedFormat::kCtInt4, 37, 96, 32, PublishedScale::kBF16},
                      RoundTrip{PublishedFormat::kCtInt4, 37, 100, 0, PublishedScale::kBF16, false},
                      RoundTrip{PublishedFormat::kCtInt4, 19, 64, 16, PublishedScale::kF16, false, true},
                      RoundTrip{PublishedFormat::kAwqInt4, 40, 96, 32, PublishedScale::kF16},
                      RoundTrip{PublishedFormat::kGptqInt4, 24, 104, 32, PublishedScale::kF16},
                      RoundTrip{PublishedFormat::kGptqInt4, 24, 104, 32, PublishedScale::kF16, false},
                      RoundTrip{PublishedFormat::kGptqInt4, 24, 96, 32, PublishedScale::kF16, false, true,
                                true}));

TEST(PublishedRefQuantize, Ue8m0ScalesArePowersOfTwo) {
  Rng rng(7);
  PublishedLayout l = layout(PublishedFormat::kFp8Block, 130, 140);
  l.scale_ue8m0 = true;
  std::vector<float> x = rng.normals(130 * 140, 0.3f);
  std::vector<uint8_t> data(130 * 140);
  std::vector<float> scales(4);
  ASSERT_TRUE(quantize_published_ref({x.data(), SourceDtype::kF32, 130, 140, 140}, l,
                                     {data.data(), scales.data(), nullptr, nullptr})
                  .ok());
  for (float s : scales) {
    int e = 0;
    EXPECT_EQ(std::frexp(s, &e), 0.5f) << s;
  }
}

// ---- refusals ----

TEST(PublishedRefRefuses, ScalesThatAreNotFiniteOrNegativeNamingThePosition) {
  PublishedLayout l = layout(PublishedFormat::kFp8Channel, 2, 4);
  std::vector<uint8_t> codes(8, 0x38);
  std::vector<float> out(8);
  for (float bad : {std::nanf(""), INFINITY, -1.0f}) {
    const float scales[2] = {1.0f, bad};
    Status s =
        dequantize_published_ref({l, codes.data(), scales, nullptr, nullptr}, contiguous(out.data(), 2, 4));
    ASSERT_TRUE(refused(s, "", {"scale [1, 0]"}));
    EXPECT_NE(s.message().find("scale [1, 0]"), std::string::npos) << s.message();
  }
}

TEST(PublishedRefRefuses, AnFp8NanCode) {
  PublishedLayout l = layout(PublishedFormat::kFp8Block, 2, 2);
  std::vector<uint8_t> codes = {0x38, 0x38, 0xFF, 0x38};
  const float scale = 1.0f;
  std::vector<float> out(4);
  Status s =
      dequantize_published_ref({l, codes.data(), &scale, nullptr, nullptr}, contiguous(out.data(), 2, 2));
  ASSERT_TRUE(refused(s, "", {"fp8 NaN code at row 1, column 0"}));
  EXPECT_NE(s.message().find("row 1, column 0"), std::string::npos) << s.message();
}

TEST(PublishedRefRefuses, AGIdxOutOfRangeOrWithGroupsOfTheWrongSize) {
  PublishedLayout l = layout(PublishedFormat::kCtInt4, 1, 16, 8, PublishedScale::kF32);
  l.act_order = true;
  std::vector<int32_t> words(2, 0);
  std::vector<float> scales(2, 1.0f), out(16);
  std::vector<int32_t> g_idx(16, 0);
  for (int i = 8; i < 16; ++i) g_idx[static_cast<size_t>(i)] = 1;
  EXPECT_TRUE(dequantize_published_ref({l, words.data(), scales.data(), nullptr, g_idx.data()},
                                       contiguous(out.data(), 1, 16))
                  .ok());
  g_idx[3] = 2;
  EXPECT_TRUE(refused(dequantize_published_ref({l, words.data(), scales.data(), nullptr, g_idx.data()},
                                               contiguous(out.data(), 1, 16)),
                      "", {"g_idx[3] = 2 is outside"}));
  g_idx[3] = 1;  // group 1 now has 9 columns, group 0 seven
  Status s = dequantize_published_ref({l, words.data(), scales.data(), nullptr, g_idx.data()},
                                      contiguous(out.data(), 1, 16));
  ASSERT_TRUE(refused(s, "", {"group 0 7 columns, not 8"}));
  EXPECT_NE(s.message().find("group 0 7 columns, not 8"), std::string::npos) << s.message();
}

TEST(PublishedRefRefuses, LayoutsTheFormatCannotHold) {
  EXPECT_TRUE(refused(validate_published_layout(layout(PublishedFormat::kAwqInt4, 36, 64, 32)), "",
                      {"N = 36 is not a multiple of 8"}));  // N % 8
  EXPECT_FALSE(
      validate_published_layout(layout(PublishedFormat::kAwqInt4, 32, 96, 64)).ok());  // G does not divide K
  EXPECT_TRUE(refused(validate_published_layout(layout(PublishedFormat::kCtInt4, 32, 96, 64)), "",
                      {"group size 64 does not divide K = 96"}));
  EXPECT_TRUE(
      validate_published_layout(layout(PublishedFormat::kGptqInt4, 32, 96, 64)).ok());  // a short last group
  EXPECT_TRUE(refused(validate_published_layout(layout(PublishedFormat::kGptqInt4, 32, 100, 32)), "",
                      {"K = 100 is not a multiple of 8"}));  // K % 8
  PublishedLayout no_block = layout(PublishedFormat::kFp8Block, 4, 4);
  no_block.block_rows = 0;
  EXPECT_TRUE(refused(validate_published_layout(no_block), "", {"positive block size"}));
  PublishedLayout act = layout(PublishedFormat::kAwqInt4, 32, 64, 32);
  act.act_order = true;
  EXPECT_TRUE(refused(validate_published_layout(act), "", {"awq has no activation order"}));
}

TEST(PublishedRefRefuses, ANonFiniteWeightToQuantize) {
  PublishedLayout l = layout(PublishedFormat::kCtInt4, 2, 8, 8, PublishedScale::kBF16);
  std::vector<float> x(16, 0.5f);
  x[11] = std::nanf("");
  std::vector<int32_t> words(2);
  std::vector<uint16_t> scales(2);
  Status s = quantize_published_ref({x.data(), SourceDtype::kF32, 2, 8, 8}, l,
                                    {words.data(), scales.data(), nullptr, nullptr});
  ASSERT_TRUE(refused(s, "", {"row 1, column 3"}));
  EXPECT_NE(s.message().find("row 1, column 3"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace infergate::kernels
