// Multi-head latent attention's kernels: latent pages (one row per token, no V side) written and read
// as the KV formats specify a K row, the optimised append bit for bit the reference's, absorbed
// attention against the reference on odd widths, several heads and ragged batches in every dtype, YaRN
// frequencies, and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "infergate/kernels/cpu.h"
#include "infergate/kernels/ref.h"
#include "test_util.h"

namespace infergate::kernels {
namespace {
using testing::Rng;

const KvDtype kLatentDtypes[] = {KvDtype::kF16, KvDtype::kBF16, KvDtype::kFp8E4M3, KvDtype::kInt8,
                                 KvDtype::kInt4};

struct Pool {
  std::vector<uint8_t> bytes;
  LatentCache cache;
  // latent > 0: the model's layout (kv_latent_layout: int4 groups of 128 when latent % 128 == 0).
  Pool(KvDtype dt, int32_t dim, int64_t pages, int32_t latent = 0) {
    cache.layout = latent > 0 ? kv_latent_layout(dt, 16, latent, dim - latent) : KvPageLayout{dt, 16, 1, dim};
    bytes.assign(static_cast<size_t>(kv_latent_page_bytes(cache.layout) * pages), 0xA5);  // garbage
    cache.pages = bytes.data();
    cache.num_pages = pages;
  }
};

TEST(Latent, APageIsTheKSideOfAOneHeadPageAndRowsReadBackAsTheFormatSays) {
  Rng rng(401);
  SCOPED_TRACE(rng.trace());
  for (KvDtype dt : kLatentDtypes) {
    SCOPED_TRACE(kv_dtype_name(dt));
    const int32_t dim = 136;  // 128 + 8: a last int4 group of 8
    const KvPageLayout l{dt, 16, 1, dim};
    const KvPageRegions full = kv_page_regions(l), lat = kv_latent_page_regions(l);
    EXPECT_EQ(lat.bytes, (full.v_data - full.k_data) + (full.v_params - full.k_params));
    EXPECT_EQ(lat.k_params, full.v_data);
    // The same rows through a one-head KV page's K side and through a latent page read back the same.
    Pool p(dt, dim, 2);
    std::vector<uint8_t> kv(static_cast<size_t>(kv_page_bytes(l)));
    KvCache kc;
    kc.layout = l;
    kc.pages = kv.data();
    kc.num_pages = 1;
    const int32_t n = 11;
    std::vector<float> rows = rng.normals(static_cast<size_t>(n * dim), 2.0f);
    std::vector<int32_t> pages(n, 1), slots(n);
    for (int32_t i = 0; i < n; ++i) slots[static_cast<size_t>(i)] = i;
    ASSERT_TRUE(
        latent_append_ref(p.cache, contiguous<const float>(rows.data(), n, dim), pages.data(), slots.data())
            .ok());
    std::vector<int32_t> zero(n, 0);
    KvAppend a;
    a.k = contiguous<const float>(rows.data(), n, 1, dim);
    a.v = a.k;
    a.page_ids = zero.data();
    a.slots = slots.data();
    ASSERT_TRUE(kv_append_ref(kc, a).ok());
    std::vector<float> got(static_cast<size_t>(n * dim)), kk(got.size()), vv(got.size());
    ASSERT_TRUE(latent_read_page_ref(p.cache, 1, n, contiguous(got.data(), n, dim)).ok());
    ASSERT_TRUE(
        kv_read_page_ref(kc, 0, n, -1, contiguous(kk.data(), 1, n, dim), contiguous(vv.data(), 1, n, dim))
            .ok());
    EXPECT_TRUE(testing::bit_equal(got.data(), kk.data(), got.size()));
  }
}

TEST(Latent, TheOptimisedAppendWritesTheReferencesBytes) {
  Rng rng(402);
  SCOPED_TRACE(rng.trace());
  for (KvDtype dt : kLatentDtypes) {
    for (int32_t latent : {64, 128}) {  // int4: groups of 64; groups of 128 and a rope group of 8
      SCOPED_TRACE(std::string(kv_dtype_name(dt)) + " latent " + std::to_string(latent));
      const int32_t dim = latent + 8, n = 37;
      Pool a(dt, dim, 4, latent), b(dt, dim, 4, latent);
      std::vector<float> rows = rng.normals(static_cast<size_t>(n * dim));
      rows[5] = NAN;  // non-finite inputs follow the formats' policy, the same in both
      rows[9] = INFINITY;
      std::vector<int32_t> pages(n), slots(n);
      for (int32_t i = 0; i < n; ++i) {
        pages[static_cast<size_t>(i)] = 3 - i / 16;
        slots[static_cast<size_t>(i)] = i % 16;
      }
      const auto x = contiguous<const float>(rows.data(), n, dim);
      ASSERT_TRUE(latent_append_ref(a.cache, x, pages.data(), slots.data()).ok());
      ASSERT_TRUE(latent_append_cpu(b.cache, x, pages.data(), slots.data()).ok());
      EXPECT_EQ(a.bytes, b.bytes);
    }
  }
}

// int4 latent pages of a model whose latent width is a multiple of 128 (DeepSeek-V3, Kimi K2) keep one
// (d, m) pair per 128 latent values and one for the rope key: 308 bytes per 576-value row, 3.74x fewer
// than fp16. Each value reads back within half a step of its own group's range.
TEST(Latent, Int4LatentGroupsOf128EndWhereTheRopeKeyStarts) {
  EXPECT_EQ(kv_latent_layout(KvDtype::kInt4, 16, 512, 64).int4_group, 128);
  EXPECT_EQ(kv_latent_layout(KvDtype::kInt4, 16, 64, 16).int4_group, 64);  // the rope would share a group
  EXPECT_EQ(kv_latent_layout(KvDtype::kInt8, 16, 512, 64).int4_group, kKvInt4Group);
  EXPECT_EQ(kv_latent_page_bytes(kv_latent_layout(KvDtype::kInt4, 16, 512, 64)), 16 * 308);
  EXPECT_FALSE(validate_kv_layout({KvDtype::kInt4Kivi, 16, 1, 576, 128}).ok());
  EXPECT_FALSE(validate_kv_layout({KvDtype::kInt4, 16, 1, 576, 96}).ok());
  Rng rng(404);
  SCOPED_TRACE(rng.trace());
  const int32_t latent = 512, rope = 64, dim = latent + rope, n = 16;
  Pool p(KvDtype::kInt4, dim, 1, latent);
  std::vector<float> rows = rng.normals(static_cast<size_t>(n * dim));
  for (int32_t t = 0; t < n; ++t) rows[static_cast<size_t>(t * dim + latent + 3)] = 40.0f;  // a rope outlier
  std::vector<int32_t> pages(n, 0), slots(n);
  for (int32_t i = 0; i < n; ++i) slots[static_cast<size_t>(i)] = i;
  ASSERT_TRUE(
      latent_append_ref(p.cache, contiguous<const float>(rows.data(), n, dim), pages.data(), slots.data())
          .ok());
  std::vector<float> got(rows.size());
  ASSERT_TRUE(latent_read_page_ref(p.cache, 0, n, contiguous(got.data(), n, dim)).ok());
  for (int32_t t = 0; t < n; ++t) {
    for (int32_t g0 = 0; g0 < dim; g0 += (g0 < latent ? 128 : rope)) {
      const int32_t g1 = g0 < latent ? g0 + 128 : dim;
      const float* x = rows.data() + t * dim;
      const float lo = *std::min_element(x + g0, x + g1), hi = *std::max_element(x + g0, x + g1);
      const float half_step = (hi - lo) / 15.0f * 0.5f * 1.01f + 1e-3f;
      for (int32_t c = g0; c < g1; ++c) {
        ASSERT_LE(std::fabs(got[static_cast<size_t>(t * dim + c)] - x[c]), half_step)
            << "token " << t << " value " << c << " (group from " << g0 << ")";
      }
    }
  }
  // The rope outlier stays in its own group: the latent's last group keeps its small step.
  EXPECT_LT(std::fabs(got[static_cast<size_t>(latent - 1)] - rows[static_cast<size_t>(latent - 1)]), 0.5f);
}

// What the groups of 128 cost against groups of 64 on the same rows (576 values, a Gaussian latent
// and a rope key with an outlier channel), measured on absorbed attention's output against exact
// fp32 rows: the error grows by the wider groups' range (the largest of 128 Gaussians against 64).
TEST(Latent, Int4GroupsOf128CostLittleMoreAttentionErrorThanGroupsOf64) {
  Rng rng(405);
  SCOPED_TRACE(rng.trace());
  const int32_t latent = 512, rope = 64, dim = latent + rope, n = 256, heads = 16;
  std::vector<float> rows = rng.normals(static_cast<size_t>(n * dim));
  for (int32_t t = 0; t < n; ++t) rows[static_cast<size_t>(t * dim + latent + 5)] *= 6.0f;
  std::vector<int32_t> pages(n), slots(n), table(n / 16);
  for (int32_t i = 0; i < n; ++i) {
    pages[static_cast<size_t>(i)] = i / 16;
    slots[static_cast<size_t>(i)] = i % 16;
  }
  for (int32_t p = 0; p < n / 16; ++p) table[static_cast<size_t>(p)] = p;
  std::vector<float> q = rng.normals(static_cast<size_t>(heads * dim), 0.15f);
  std::vector<int32_t> q_start = {0, 1}, kv_len = {n};
  AttentionBatch b;
  b.num_seqs = 1;
  b.num_q_heads = heads;
  b.scale = 1.0f / std::sqrt(static_cast<float>(dim));
  b.q_start = q_start.data();
  b.kv_len = kv_len.data();
  b.block_table = table.data();
  b.max_pages_per_seq = n / 16;
  // Exact: softmax over fp32 rows, in double.
  std::vector<double> exact(static_cast<size_t>(heads * latent), 0.0);
  for (int32_t h = 0; h < heads; ++h) {
    std::vector<double> sc(n);
    double mx = -INFINITY, sum = 0;
    for (int32_t t = 0; t < n; ++t) {
      double d = 0;
      for (int32_t x = 0; x < dim; ++x)
        d += double{q[static_cast<size_t>(h * dim + x)]} * rows[static_cast<size_t>(t * dim + x)];
      sc[static_cast<size_t>(t)] = d * b.scale;
      mx = std::max(mx, sc[static_cast<size_t>(t)]);
    }
    for (int32_t t = 0; t < n; ++t) {
      const double e = std::exp(sc[static_cast<size_t>(t)] - mx);
      sum += e;
      for (int32_t x = 0; x < latent; ++x)
        exact[static_cast<size_t>(h * latent + x)] += e * rows[static_cast<size_t>(t * dim + x)];
    }
    for (int32_t x = 0; x < latent; ++x) exact[static_cast<size_t>(h * latent + x)] /= sum;
  }
  auto rms_error = [&](int32_t group) {
    KvPageLayout l{KvDtype::kInt4, 16, 1, dim};
    l.int4_group = group;
    std::vector<uint8_t> bytes(static_cast<size_t>(kv_latent_page_bytes(l) * (n / 16)));
    LatentCache c{l, bytes.data(), n / 16, nullptr};
    EXPECT_TRUE(
        latent_append_ref(c, contiguous<const float>(rows.data(), n, dim), pages.data(), slots.data()).ok());
    std::vector<float> out(static_cast<size_t>(heads * latent));
    EXPECT_TRUE(mla_attention_ref(c, b, contiguous<const float>(q.data(), 1, heads, dim), latent,
                                  contiguous(out.data(), 1, heads, latent))
                    .ok());
    double e2 = 0, x2 = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      e2 += (out[i] - exact[i]) * (out[i] - exact[i]);
      x2 += exact[i] * exact[i];
    }
    return std::sqrt(e2 / x2);
  };
  const double g64 = rms_error(64), g128 = rms_error(128);
  std::printf(
      "int4 latent, relative RMS error of the attention output: groups of 64 %.4f, of 128 %.4f (%.2fx)\n",
      g64, g128, g128 / g64);
  EXPECT_GT(g128, g64 * 0.9);  // the wider groups are not free...
  EXPECT_LT(g128, g64 * 1.5);  // ...but stay close (1.17x when written) for 5% fewer bytes
}

// A ragged batch: a decode token after 70 cached tokens, a 5-token chunk after 12, a fresh 3-token
// prompt; pages scattered through the pool.
TEST(MlaAttention, MatchesTheReferenceInEveryDtypeHeadCountAndIsa) {
  Rng rng(403);
  SCOPED_TRACE(rng.trace());
  const int32_t kv_len[] = {71, 17, 3}, q_len[] = {1, 5, 3};
  const int32_t max_pages = 5;
  std::vector<int32_t> table = {9, 2, 7, 0, 4, 5, 1, 0, 0, 0, 3, 0, 0, 0, 0};
  std::vector<int32_t> q_start = {0, 1, 6, 9};
  for (KvDtype dt : kLatentDtypes) {
    for (int32_t dim : {72, 576}) {
      const int32_t value_dim = dim == 576 ? 512 : 64;
      Pool p(dt, dim, 10, value_dim);  // 576: int4 groups of 128 (kv_latent_layout)
      for (int32_t s = 0; s < 3; ++s) {
        std::vector<float> rows = rng.normals(static_cast<size_t>(kv_len[s] * dim));
        std::vector<int32_t> pages, slots;
        for (int32_t t = 0; t < kv_len[s]; ++t) {
          pages.push_back(table[static_cast<size_t>(s * max_pages + t / 16)]);
          slots.push_back(t % 16);
        }
        ASSERT_TRUE(latent_append_ref(p.cache, contiguous<const float>(rows.data(), kv_len[s], dim),
                                      pages.data(), slots.data())
                        .ok());
      }
      for (int32_t heads : {1, 3, 16}) {
        SCOPED_TRACE(std::string(kv_dtype_name(dt)) + " dim " + std::to_string(dim) + " heads " +
                     std::to_string(heads));
        AttentionBatch b;
        b.num_seqs = 3;
        b.num_q_heads = heads;
        b.scale = 1.0f / std::sqrt(static_cast<float>(dim));
        b.q_start = q_start.data();
        b.kv_len = kv_len;
        b.block_table = table.data();
        b.max_pages_per_seq = max_pages;
        std::vector<float> q = rng.normals(static_cast<size_t>(9 * heads * dim), 3.0f);
        std::vector<float> want(static_cast<size_t>(9 * heads * value_dim)), got(want.size(), NAN);
        const auto qv = contiguous<const float>(q.data(), 9, heads, dim);
        ASSERT_TRUE(
            mla_attention_ref(p.cache, b, qv, value_dim, contiguous(want.data(), 9, heads, value_dim)).ok());
        testing::for_each_isa([&](CpuIsa) {
          std::fill(got.begin(), got.end(), NAN);
          const Status s =
              mla_attention_cpu(p.cache, b, qv, value_dim, contiguous(got.data(), 9, heads, value_dim));
          ASSERT_TRUE(s.ok()) << s.to_string();
          EXPECT_TRUE(testing::all_close(got, want, 2e-5f, 2e-5f));
        });
        (void)q_len;
      }
    }
  }
}

TEST(MlaAttention, RefusesKiviAValueWiderThanTheRowAndAMisshapedOutput) {
  Pool p(KvDtype::kInt8, 72, 2);
  std::vector<int32_t> q_start = {0, 1}, kv_len = {1}, table = {0};
  AttentionBatch b;
  b.num_seqs = 1;
  b.num_q_heads = 2;
  b.scale = 0.1f;
  b.q_start = q_start.data();
  b.kv_len = kv_len.data();
  b.block_table = table.data();
  b.max_pages_per_seq = 1;
  std::vector<float> q(2 * 72), out(2 * 80);
  const auto qv = contiguous<const float>(q.data(), 1, 2, 72);
  Status s = mla_attention_cpu(p.cache, b, qv, 80, contiguous(out.data(), 1, 2, 80));
  EXPECT_NE(s.message().find("value_dim 80"), std::string::npos) << s.message();
  s = mla_attention_cpu(p.cache, b, qv, 64, contiguous(out.data(), 1, 2, 60));
  EXPECT_NE(s.message().find("out"), std::string::npos) << s.message();
  Pool k(KvDtype::kInt4Kivi, 72, 2);
  s = mla_attention_ref(k.cache, b, qv, 64, contiguous(out.data(), 1, 2, 64));
  EXPECT_NE(s.message().find("int4-kivi"), std::string::npos) << s.message();
  std::vector<int32_t> bad_page = {5}, slot = {0};
  s = latent_append_cpu(p.cache, contiguous<const float>(q.data(), 1, 72), bad_page.data(), slot.data());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.message();
}

TEST(Rope, YarnKeepsTheFastDimensionsInterpolatesTheSlowOnesAndIsTheDefaultAtFactorOne) {
  RopeConfig c;
  c.head_dim = 64;
  c.rotary_dim = 64;
  c.theta = 10000.0f;
  std::vector<float> plain, yarn;
  ASSERT_TRUE(rope_inv_freq(c, &plain).ok());
  c.yarn = {true, 40.0f, 4096, 32.0f, 1.0f};
  ASSERT_TRUE(rope_inv_freq(c, &yarn).ok());
  // DeepSeek-V3's numbers: dimensions below floor(corr(32)) = 10 unchanged, from ceil(corr(1)) = 23 on
  // divided by 40 (corr(r) = 64 ln(4096 / (2 pi r)) / (2 ln 10000)), a ramp between.
  for (int i = 0; i < 10; ++i)
    EXPECT_FLOAT_EQ(yarn[static_cast<size_t>(i)], plain[static_cast<size_t>(i)]) << i;
  for (int i = 23; i < 32; ++i)
    EXPECT_NEAR(yarn[static_cast<size_t>(i)], plain[static_cast<size_t>(i)] / 40, 1e-9) << i;
  EXPECT_LT(yarn[16], plain[16]);
  EXPECT_GT(yarn[16], plain[16] / 40);
  c.yarn.factor = 1.0f;
  ASSERT_TRUE(rope_inv_freq(c, &yarn).ok());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(yarn[i], plain[i], 1e-7 * plain[i]) << i;
  c.llama3.enabled = true;
  EXPECT_FALSE(rope_inv_freq(c, &yarn).ok()) << "llama3 and yarn together";
}

}  // namespace
}  // namespace infergate::kernels
