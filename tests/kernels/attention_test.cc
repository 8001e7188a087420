// Paged attention: the reference against a direct dense computation, and attention_cpu against the
// reference for every KV dtype, instruction set, GQA shape, decode and prefill chunks, page sizes,
// and forced KV splits (the flash-decoding merge).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "infergate/kernels/cpu.h"
#include "infergate/kernels/ref.h"
#include "kernels/test_util.h"

namespace infergate::kernels {
namespace {

using testing::Rng;

constexpr KvDtype kAllDtypes[] = {KvDtype::kF16,  KvDtype::kBF16, KvDtype::kFp8E4M3,
                                  KvDtype::kInt8, KvDtype::kInt4, KvDtype::kInt4Kivi};

// A paged cache holding a batch of sequences, filled through kv_append_ref, plus the query batch.
struct Batch {
  KvPageLayout layout;
  int32_t num_q_heads = 0;
  std::vector<int32_t> kv_len, q_len;
  std::vector<uint8_t> pages, staging;
  std::vector<int32_t> block_table, q_start, staging_ids;
  std::vector<float> keys, values;  // [seq][pos][head][dim], as appended (fp32)
  std::vector<float> q;             // [T, Hq, D]
  std::vector<float> k_scale, v_scale;
  KvCache cache;
  AttentionBatch batch;
  int32_t max_pages = 0;

  Batch(Rng& rng, KvPageLayout l, int32_t hq, std::vector<int32_t> kv, std::vector<int32_t> ql)
      : layout(l), num_q_heads(hq), kv_len(std::move(kv)), q_len(std::move(ql)) {
    const int32_t seqs = static_cast<int32_t>(kv_len.size());
    int32_t total_pages = 0;
    for (int32_t s = 0; s < seqs; ++s) {
      const int32_t p = (kv_len[s] + l.page_size - 1) / l.page_size;
      max_pages = std::max(max_pages, p);
      total_pages += p;
    }
    max_pages = std::max(max_pages, 1);
    total_pages = std::max(total_pages, 1) + 3;  // a few unused pages
    pages.assign(static_cast<size_t>(total_pages * kv_page_bytes(l)), 0xCD);
    staging.assign(static_cast<size_t>(std::max<int64_t>(1, seqs * kv_staging_bytes(l))), 0xCD);
    for (int h = 0; h < l.num_kv_heads; ++h) {
      k_scale.push_back(rng.uniform(0.005f, 0.02f));  // fp8: values of ~1-10 use the e4m3 range
      v_scale.push_back(rng.uniform(0.005f, 0.02f));
    }
    cache = {l, pages.data(), total_pages, staging.data(), std::max(1, seqs), k_scale.data(), v_scale.data()};
    // Shuffled physical pages, as a block manager hands them out.
    std::vector<int32_t> free(static_cast<size_t>(total_pages));
    std::iota(free.begin(), free.end(), 0);
    std::shuffle(free.begin(), free.end(), rng.engine());
    block_table.assign(static_cast<size_t>(seqs * max_pages), -1);
    const int64_t row = int64_t{l.num_kv_heads} * l.head_dim;
    size_t next = 0;
    q_start.push_back(0);
    for (int32_t s = 0; s < seqs; ++s) {
      staging_ids.push_back(seqs - 1 - s);
      for (int32_t p = 0; p * l.page_size < kv_len[s]; ++p) block_table[s * max_pages + p] = free[next++];
      std::vector<float> k = rng.normals(static_cast<size_t>(kv_len[s] * row), 1.0f);
      std::vector<float> v = rng.normals(k.size(), 1.0f);
      for (int64_t t = 0; t < kv_len[s]; ++t) k[t * row] += 4.0f;  // an outlier channel
      // Append in two calls (the cached prefix, then the chunk), as an engine does.
      const int32_t split = kv_len[s] - q_len[s];
      for (auto [a, e] : {std::pair{0, split}, std::pair{split, kv_len[s]}}) {
        if (a == e) continue;
        std::vector<int32_t> ids, slots, wins;
        for (int32_t t = a; t < e; ++t) {
          ids.push_back(block_table[s * max_pages + t / l.page_size]);
          slots.push_back(t % l.page_size);
          wins.push_back(staging_ids[s]);
        }
        KvAppend ap{
            View3<const float>{k.data() + a * row, e - a, l.num_kv_heads, l.head_dim, row, l.head_dim},
            View3<const float>{v.data() + a * row, e - a, l.num_kv_heads, l.head_dim, row, l.head_dim},
            ids.data(), slots.data(), wins.data()};
        Status st = kv_append_ref(cache, ap);
        EXPECT_TRUE(st.ok()) << st.to_string();
      }
      keys.insert(keys.end(), k.begin(), k.end());
      values.insert(values.end(), v.begin(), v.end());
      q_start.push_back(q_start.back() + q_len[s]);
    }
    q = rng.normals(static_cast<size_t>(q_start.back() * hq * l.head_dim), 1.0f);
    batch.num_seqs = seqs;
    batch.num_q_heads = hq;
    batch.scale = 1.0f / std::sqrt(static_cast<float>(l.head_dim));
    batch.q_start = q_start.data();
    batch.kv_len = kv_len.data();
    batch.block_table = block_table.data();
    batch.max_pages_per_seq = max_pages;
    batch.staging_ids = staging_ids.data();
  }
  int64_t tokens() const { return q_start.back(); }
  View3<const float> qv() const {
    return contiguous<const float>(q.data(), tokens(), num_q_heads, layout.head_dim);
  }
  std::vector<float> out_buffer() const { return std::vector<float>(q.size(), NAN); }
  View3<float> ov(std::vector<float>& o) const {
    return contiguous(o.data(), tokens(), num_q_heads, layout.head_dim);
  }
};

// Direct dense causal attention over the appended fp32 K/V (no quantization), in double.
std::vector<float> dense_attention(const Batch& b) {
  const KvPageLayout& l = b.layout;
  const int64_t d = l.head_dim, hk = l.num_kv_heads, group = b.num_q_heads / hk, row = hk * d;
  std::vector<float> out(b.q.size());
  int64_t kv_base = 0;
  for (size_t s = 0; s < b.kv_len.size(); ++s) {
    for (int64_t i = 0; i < b.q_len[s]; ++i) {
      const int64_t tok = b.q_start[s] + i, visible = b.kv_len[s] - b.q_len[s] + i + 1;
      for (int64_t hq = 0; hq < b.num_q_heads; ++hq) {
        const float* qv = b.q.data() + (tok * b.num_q_heads + hq) * d;
        const int64_t h = hq / group;
        std::vector<double> sc(static_cast<size_t>(visible));
        double mx = -1e300, sum = 0;
        for (int64_t t = 0; t < visible; ++t) {
          const float* kt = b.keys.data() + (kv_base + t) * row + h * d;
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(qv[c]) * kt[c];
          sc[t] = dot * b.batch.scale;
          mx = std::max(mx, sc[t]);
        }
        std::vector<double> acc(static_cast<size_t>(d), 0.0);
        for (int64_t t = 0; t < visible; ++t) {
          const double e = std::exp(sc[t] - mx);
          sum += e;
          for (int64_t c = 0; c < d; ++c) acc[c] += e * b.values[(kv_base + t) * row + h * d + c];
        }
        for (int64_t c = 0; c < d; ++c)
          out[(tok * b.num_q_heads + hq) * d + c] = static_cast<float>(acc[c] / sum);
      }
    }
    kv_base += b.kv_len[s];
  }
  return out;
}

TEST(AttentionRef, Fp16CacheMatchesDenseAttentionWithinFp16Rounding) {
  Rng rng(401);
  SCOPED_TRACE(rng.trace());
  Batch b(rng, {KvDtype::kF16, 4, 2, 16}, 6, {1, 9, 16, 23}, {1, 1, 5, 23});
  std::vector<float> got = b.out_buffer();
  ASSERT_TRUE(attention_ref(b.cache, b.batch, b.qv(), b.ov(got)).ok());
  EXPECT_TRUE(testing::all_close(got, dense_attention(b), 5e-3f, 5e-3f));
}

TEST(AttentionRef, ASingleVisibleTokenReturnsItsValue) {
  Rng rng(402);
  SCOPED_TRACE(rng.trace());
  // A 3-token prefill chunk: query 0 sees only position 0, so its output is exactly v_0.
  Batch b(rng, {KvDtype::kF16, 16, 1, 8}, 1, {3}, {3});
  std::vector<float> got = b.out_buffer();
  ASSERT_TRUE(attention_ref(b.cache, b.batch, b.qv(), b.ov(got)).ok());
  for (int c = 0; c < 8; ++c) EXPECT_EQ(got[c], fp16_to_float(fp16_from_float(b.values[c]))) << c;
  // Query 2 sees all three: not equal to v_0.
  EXPECT_NE(got[2 * 8], got[0]);
}

TEST(AttentionRef, QuantizedCachesStayCloseToDenseAttention) {
  Rng rng(403);
  SCOPED_TRACE(rng.trace());
  // The attention output error each KV dtype introduces, against unquantized attention.
  const std::pair<KvDtype, float> budget[] = {{KvDtype::kBF16, 0.02f},
                                              {KvDtype::kFp8E4M3, 0.08f},
                                              {KvDtype::kInt8, 0.03f},
                                              {KvDtype::kInt4, 0.25f},
                                              {KvDtype::kInt4Kivi, 0.25f}};
  for (auto [dt, tol] : budget) {
    SCOPED_TRACE(kv_dtype_name(dt));
    Batch b(rng, {dt, 16, 2, 64}, 4, {40, 100}, {1, 3});
    std::vector<float> got = b.out_buffer();
    ASSERT_TRUE(attention_ref(b.cache, b.batch, b.qv(), b.ov(got)).ok());
    const std::vector<float> want = dense_attention(b);
    double err = 0, ref = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err += (got[i] - want[i]) * (got[i] - want[i]);
      ref += want[i] * want[i];
    }
    EXPECT_LT(std::sqrt(err / ref), tol) << "relative RMS error";
  }
}

struct Shape {
  int32_t page, hk, hq, dim;
  std::vector<int32_t> kv, q;
};

void check_cpu(Rng& rng, KvDtype dt, const Shape& s, int32_t split) {
  SCOPED_TRACE(::testing::Message() << kv_dtype_name(dt) << " page " << s.page << " heads " << s.hq << "/"
                                    << s.hk << " dim " << s.dim << " split " << split);
  Batch b(rng, {dt, s.page, s.hk, s.dim}, s.hq, s.kv, s.q);
  b.batch.split_tokens = split;
  std::vector<float> want = b.out_buffer();
  ASSERT_TRUE(attention_ref(b.cache, b.batch, b.qv(), b.ov(want)).ok());
  testing::for_each_isa([&](CpuIsa) {
    std::vector<float> got = b.out_buffer();
    const Status st = attention_cpu(b.cache, b.batch, b.qv(), b.ov(got));
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(testing::all_finite(got));
    EXPECT_TRUE(testing::all_close(got, want, 2e-5f, 2e-4f));
  });
}

TEST(AttentionCpu, MatchesTheReferenceForEveryKvDtypeInDecode) {
  Rng rng(404);
  SCOPED_TRACE(rng.trace());
  const Shape shapes[] = {{16, 2, 8, 128, {1, 17, 64, 100}, {1, 1, 1, 1}},
                          {16, 1, 16, 64, {33, 5}, {1, 1}},  // GLM-4-like: 16 query heads per KV head
                          {4, 3, 3, 33, {9, 13}, {1, 1}},    // odd head_dim, no GQA, tiny pages
                          {1, 2, 4, 8, {7}, {1}},            // one-token pages
                          {16, 2, 14, 32, {50}, {1}},        // 7 query heads per KV head
                          {16, 2, 8, 96, {40, 3}, {1, 1}},   // output slices that do not divide the row
                          {8, 1, 3, 256, {30}, {1}}};        // wide heads, 3 query heads per KV head
  for (KvDtype dt : kAllDtypes) {
    for (const Shape& s : shapes) check_cpu(rng, dt, s, 0);
  }
}

TEST(AttentionCpu, MatchesTheReferenceForPrefillAndChunkedPrefill) {
  Rng rng(405);
  SCOPED_TRACE(rng.trace());
  const Shape shapes[] = {{16, 2, 4, 64, {37, 20, 50}, {37, 3, 17}},  // full prompt, chunks after a prefix
                          {8, 1, 6, 40, {19}, {19}}};
  for (KvDtype dt : kAllDtypes) {
    for (const Shape& s : shapes) check_cpu(rng, dt, s, 0);
  }
}

TEST(AttentionCpu, SplitsLongSequencesAndMergesThePiecesExactly) {
  Rng rng(406);
  SCOPED_TRACE(rng.trace());
  for (KvDtype dt : kAllDtypes) {
    check_cpu(rng, dt, {16, 2, 8, 64, {300, 45}, {1, 1}}, 32);
    check_cpu(rng, dt, {16, 1, 2, 32, {70}, {9}}, 16);  // prefill rows that see different amounts
  }
}

TEST(AttentionCpu, RefusesBadBatches) {
  Rng rng(407);
  Batch b(rng, {KvDtype::kInt8, 16, 2, 16}, 4, {20}, {1});
  std::vector<float> out = b.out_buffer();
  b.batch.num_q_heads = 3;
  EXPECT_NE(attention_cpu(b.cache, b.batch, b.qv(), b.ov(out)).message().find("not a multiple"),
            std::string::npos);
  b.batch.num_q_heads = 4;
  b.kv_len[0] = 40;  // needs 3 pages; the table row holds 2
  EXPECT_EQ(attention_cpu(b.cache, b.batch, b.qv(), b.ov(out)).code(), StatusCode::kOutOfRange);
  b.kv_len[0] = 20;
  b.block_table[1] = 999;
  EXPECT_EQ(attention_cpu(b.cache, b.batch, b.qv(), b.ov(out)).code(), StatusCode::kOutOfRange);
  b.block_table[1] = 0;
  b.q_start[1] = 30;  // more query tokens than the cache holds
  EXPECT_EQ(attention_cpu(b.cache, b.batch, b.qv(), b.ov(out)).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace infergate::kernels
