// Multi-head latent attention's kernels: latent pages (one row per token, no V side) written and read
// as the KV formats specify a K row, the optimised append bit for bit the reference's, absorbed
// attention against the reference on odd widths, several heads and ragged batches in every dtype, YaRN
// frequencies, and the refusals.
#include <gtest/gtest.h>

#include "common/refusal.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "infergate/kernels/cpu.h"
#include "infergate/kernels/ref.h"
#include "test_util.h"

namespace infergate::kernels {
namespace {

using infergate::testing::refused;
using testing::Rng;

const KvDtype kLatentDtypes[] = {KvDtype::kF16, KvDtype::kBF16, KvDtype::kFp8E4M3, KvDtype::kInt8,
                                 KvDtype::kInt4};

struct Pool {
  std::vector<uint8_t> bytes;
  LatentCache cache;
  // latent > 0: the model's layout (kv_latent_layout: int4 groups of 128 when latent % 128 == 0).
  Pool(KvDtype dt, int32_t dim, int64_t pages, int32_t latent = 0, int32_t page_size = 16) {
    cache.layout = latent > 0 ? kv_latent_layout(dt, page_size, latent, dim - latent)
                              : KvPageLayout{dt, page_size, 1, dim};
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
  EXPECT_TRUE(refused(validate_kv_layout({KvDtype::kInt4Kivi, 16, 1, 576, 128}), "", {"int4 group of 128"}));
  EXPECT_TRUE(refused(validate_kv_layout({KvDtype::kInt4, 16, 1, 576, 96}), "", {"int4 group of 96"}));
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
// prompt; pages scattered through the pool. The exact path on every instruction set (the integer path
// over int8 / int4 pages has its own test below).
TEST(MlaAttention, MatchesTheReferenceInEveryDtypeHeadCountAndIsa) {
  set_cpu_int_attention(false);
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
  set_cpu_int_attention(true);
}

// ---- the integer path (AVX-512 VNNI) over int8 / int4 latent pages ----

// Absorbed attention over the unquantized rows in double: what the latent format's error is measured
// against. rows[s]: sequence s's [kv_len][dim] rows; q [tokens][heads][dim].
std::vector<float> dense_mla(const std::vector<std::vector<float>>& rows, const std::vector<int32_t>& kv_len,
                             const std::vector<int32_t>& q_start, const std::vector<float>& q, int32_t heads,
                             int32_t dim, int32_t value_dim, float scale) {
  std::vector<float> out(static_cast<size_t>(q_start.back() * heads * value_dim));
  for (size_t s = 0; s < kv_len.size(); ++s) {
    const int32_t q_len = q_start[s + 1] - q_start[s];
    for (int32_t i = 0; i < q_len; ++i) {
      const int32_t tok = q_start[s] + i, visible = kv_len[s] - q_len + i + 1;
      for (int32_t h = 0; h < heads; ++h) {
        const float* qh = q.data() + (static_cast<size_t>(tok) * heads + h) * dim;
        std::vector<double> sc(static_cast<size_t>(visible));
        double mx = -INFINITY, sum = 0;
        for (int32_t t = 0; t < visible; ++t) {
          double dot = 0;
          for (int32_t x = 0; x < dim; ++x) dot += double{qh[x]} * rows[s][static_cast<size_t>(t * dim + x)];
          sc[static_cast<size_t>(t)] = dot * scale;
          mx = std::max(mx, sc[static_cast<size_t>(t)]);
        }
        std::vector<double> o(static_cast<size_t>(value_dim), 0.0);
        for (int32_t t = 0; t < visible; ++t) {
          const double p = std::exp(sc[static_cast<size_t>(t)] - mx);
          sum += p;
          for (int32_t x = 0; x < value_dim; ++x)
            o[static_cast<size_t>(x)] += p * rows[s][static_cast<size_t>(t * dim + x)];
        }
        for (int32_t x = 0; x < value_dim; ++x) {
          out[(static_cast<size_t>(tok) * heads + h) * value_dim + x] =
              static_cast<float>(o[static_cast<size_t>(x)] / sum);
        }
      }
    }
  }
  return out;
}

// RMS of a - b over the rows [r0, r1) of width w, relative to the RMS of b there.
double rel_rms(const std::vector<float>& a, const std::vector<float>& b, size_t r0, size_t r1, size_t w) {
  double e = 0, x = 0;
  for (size_t i = r0 * w; i < r1 * w; ++i) {
    e += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    x += double{b[i]} * b[i];
  }
  return std::sqrt(e / x);
}

// The integer path quantizes q per head to int8 and the softmax weights per (head, 32-token chunk,
// group) to u8. Over the same pages it must add less error than the latent format itself (the
// reference against attention over the unquantized rows), overall and in every (token, head) row (a
// row written from another head's state, a group's minimum added to the wrong channels, or a chunk
// dropped is an error of the output's own size). Shapes: Kimi K2's row (512 + 64, int4 groups of 128
// with the rope key a group of 64), a 128 + 64 row (int4 groups of 64), head counts that leave 1-3
// heads after the blocks of 4, decode and prefill rows, chunks that end mid-page and 5-token pages
// (tiles straddle pages, scales gathered).
TEST(MlaAttentionInt, AddsLessErrorThanTheLatentFormatInEveryRow) {
  set_cpu_int_attention(true);
  if (cpu_isa_detected() != CpuIsa::kAvx512 || !cpu_int_attention())
    GTEST_SKIP() << "this CPU has no AVX-512 VNNI: the exact path is the only one";
  Rng rng(412);
  SCOPED_TRACE(rng.trace());
  struct Shape {
    int32_t dim, latent, page;
  };
  const std::vector<int32_t> kv_len = {300, 17, 40, 33}, q_start = {0, 1, 6, 9, 10};
  for (const Shape sh : {Shape{576, 512, 16}, Shape{192, 128, 16}, Shape{576, 512, 5}}) {
    const int32_t max_pages = 300 / sh.page + 1;
    std::vector<int32_t> table;
    std::vector<std::vector<float>> rows;
    for (size_t s = 0; s < kv_len.size(); ++s) {
      rows.push_back(rng.normals(static_cast<size_t>(kv_len[s] * sh.dim)));
      for (int32_t t = 0; t < kv_len[s] * sh.dim; ++t) {  // a rope key twice as large, outlier channels
        const int32_t x = t % sh.dim;
        if (x >= sh.latent) rows.back()[static_cast<size_t>(t)] *= 2.0f;
        if (x % 97 == 5) rows.back()[static_cast<size_t>(t)] *= 6.0f;
      }
    }
    const int32_t pages = static_cast<int32_t>(kv_len.size()) * max_pages;
    for (int32_t p = 0; p < max_pages; ++p) {
      for (size_t s = 0; s < kv_len.size(); ++s) table.push_back(0);
    }
    for (size_t s = 0; s < kv_len.size(); ++s) {  // sequences' pages interleaved, reversed
      for (int32_t p = 0; p < max_pages; ++p) {
        table[s * max_pages + p] =
            pages - 1 - (p * static_cast<int32_t>(kv_len.size()) + static_cast<int32_t>(s));
      }
    }
    for (KvDtype dt : {KvDtype::kInt8, KvDtype::kInt4}) {
      Pool pool(dt, sh.dim, pages, sh.latent, sh.page);
      for (size_t s = 0; s < kv_len.size(); ++s) {
        std::vector<int32_t> ids, slots;
        for (int32_t t = 0; t < kv_len[s]; ++t) {
          ids.push_back(table[s * max_pages + t / sh.page]);
          slots.push_back(t % sh.page);
        }
        ASSERT_TRUE(latent_append_cpu(pool.cache, contiguous<const float>(rows[s].data(), kv_len[s], sh.dim),
                                      ids.data(), slots.data())
                        .ok());
      }
      for (int32_t heads : {1, 7, 64}) {
        SCOPED_TRACE(::testing::Message()
                     << kv_dtype_name(dt) << " row " << sh.dim << " page " << sh.page << " heads " << heads);
        AttentionBatch b;
        b.num_seqs = static_cast<int32_t>(kv_len.size());
        b.num_q_heads = heads;
        b.scale = 1.0f / std::sqrt(192.0f);
        b.q_start = q_start.data();
        b.kv_len = kv_len.data();
        b.block_table = table.data();
        b.max_pages_per_seq = max_pages;
        const int32_t tokens = q_start.back();
        std::vector<float> q = rng.normals(static_cast<size_t>(tokens * heads * sh.dim), 1.5f);
        const auto qv = contiguous<const float>(q.data(), tokens, heads, sh.dim);
        std::vector<float> want(static_cast<size_t>(tokens * heads * sh.latent)), got(want.size(), NAN);
        ASSERT_TRUE(
            mla_attention_ref(pool.cache, b, qv, sh.latent, contiguous(want.data(), tokens, heads, sh.latent))
                .ok());
        ASSERT_TRUE(
            mla_attention_cpu(pool.cache, b, qv, sh.latent, contiguous(got.data(), tokens, heads, sh.latent))
                .ok());
        ASSERT_TRUE(testing::all_finite(got));
        const std::vector<float> exact =
            dense_mla(rows, kv_len, q_start, q, heads, sh.dim, sh.latent, b.scale);
        const size_t n = static_cast<size_t>(tokens * heads), w = static_cast<size_t>(sh.latent);
        const double added = rel_rms(got, want, 0, n, w), format = rel_rms(want, exact, 0, n, w);
        EXPECT_LT(added, format);
        // Per row: within 3x the format's own error of the row, or 4x its error over the whole batch
        // (a row whose format error happens to be small); a wrong row is ~1.4.
        double worst = 0;
        for (size_t r = 0; r < n; ++r) {
          const double row_added = rel_rms(got, want, r, r + 1, w),
                       row_format = rel_rms(want, exact, r, r + 1, w);
          worst = std::max(worst, row_added);
          EXPECT_LT(row_added, std::max(3 * row_format, 4 * format))
              << "token " << r / heads << " head " << r % heads;
        }
        std::printf(
            "[ int path ] %-5s latent, row %3d, page %2d, %2d heads: format error %.2e, added %.2e "
            "(RMS / RMS output); worst row added %.2e\n",
            kv_dtype_name(dt), sh.dim, sh.page, heads, format, added, worst);
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
  EXPECT_TRUE(refused(rope_inv_freq(c, &yarn), "", {"llama3 and yarn scaling are exclusive"}));
}

}  // namespace
}  // namespace infergate::kernels
