// Paged attention: the reference against a direct dense computation, and attention_cpu against the
// reference for every KV dtype, instruction set, GQA shape, decode and prefill chunks, page sizes,
// and forced KV splits (the flash-decoding merge).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <sstream>
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

bool int_dtype(KvDtype dt) {
  return dt == KvDtype::kInt8 || dt == KvDtype::kInt4 || dt == KvDtype::kInt4Kivi;
}

// Per-element tolerance of the integer decode path (attn_vnni.cc) against the reference `want`,
// derived from its two roundings (docs/quant-formats.md, "Integer decode attention"):
//  - q is quantized per query head to int8 with sq = amax|q * scale| / 127, so each score moves by at
//    most eps_t = sq/2 * sum_c |k_tc| (kivi: q' = q * d_c quantized per page, eps_t = sq'/2 * sum_c u_tc);
//    softmax weights then change by factors within e^(+-eps), eps = max_t eps_t, which moves the
//    output by at most (e^(2 eps) - 1) * max_t |v_tc - o_c|;
//  - w_t = p_t * (V scale of t) is quantized per chunk of <= 32 tokens to u8 with sw = max w / 255, so
//    each code product moves by at most sw/2 * |code_tc|; the chunk holding t lies within 31 tokens
//    of it, so sw <= max_{|t'-t| <= 31} w_t' / 255 (with p normalised to sum 1, times e^(2 eps)).
//  - plus fp32 rounding: 1e-5 of max|v_c|.
std::vector<float> int_path_tolerance(const Batch& b, const std::vector<float>& want) {
  const KvPageLayout& l = b.layout;
  const int64_t d = l.head_dim, hk = l.num_kv_heads, group = b.num_q_heads / hk, P = l.page_size;
  const KvPageRegions reg = kv_page_regions(l);
  const bool int4 = l.dtype != KvDtype::kInt8, kivi = l.dtype == KvDtype::kInt4Kivi;
  std::vector<float> tol(want.size(), 0.0f);
  auto f16 = [](const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return static_cast<double>(fp16_to_float(v));
  };
  for (size_t s = 0; s < b.kv_len.size(); ++s) {
    const int64_t kv = b.kv_len[s], q_len = b.q_len[s];
    std::vector<float> keys(static_cast<size_t>(hk * kv * d)), values(keys.size());
    for (int64_t pi = 0; pi * P < kv; ++pi) {
      const int32_t filled = static_cast<int32_t>(std::min<int64_t>(P, kv - pi * P));
      View3<float> kv3{keys.data() + pi * P * d, hk, filled, d, kv * d, d};
      View3<float> vv3{values.data() + pi * P * d, hk, filled, d, kv * d, d};
      EXPECT_TRUE(kv_read_page_ref(b.cache, b.block_table[s * b.max_pages + pi], filled,
                                   kivi ? b.staging_ids[s] : -1, kv3, vv3)
                      .ok());
    }
    auto page_of = [&](int64_t t) { return b.cache.page(b.block_table[s * b.max_pages + t / P]); };
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t tok = b.q_start[s] + i, visible = kv - q_len + i + 1;
      for (int64_t hq = 0; hq < b.num_q_heads; ++hq) {
        const int64_t h = hq / group;
        const float* qv = b.q.data() + (tok * b.num_q_heads + hq) * d;
        std::vector<double> qs(static_cast<size_t>(d));
        double qmax = 0;
        for (int64_t c = 0; c < d; ++c) {
          qs[c] = static_cast<double>(qv[c] * b.batch.scale);
          qmax = std::max(qmax, std::fabs(qs[c]));
        }
        // Score error bound and the exact scores.
        double eps = 0, smax = -1e300;
        std::vector<double> sc(static_cast<size_t>(visible));
        for (int64_t t = 0; t < visible; ++t) {
          const float* kt = keys.data() + (h * kv + t) * d;
          double dot = 0, absdot = 0, e = 0;
          for (int64_t c = 0; c < d; ++c) {
            dot += qs[c] * kt[c];
            absdot += std::fabs(qs[c] * kt[c]);
          }
          if (kivi && t < kv / P * P) {  // sealed page: q' = q * d_c, error sq'/2 * sum u
            const uint8_t* page = page_of(t);
            double qpmax = 0, usum = 0;
            for (int64_t c = 0; c < d; ++c) {
              const uint8_t* prm = page + kv_kivi_param_offset(l, reg.k_params, h, c);
              const double dc = f16(prm), mc = f16(prm + 2);
              qpmax = std::max(qpmax, std::fabs(qs[c] * dc));
              usum += dc > 0 ? std::round((kt[c] - mc) / dc) : 0.0;
            }
            e = qpmax / 254 * usum;
          } else if (!kivi) {
            double ksum = 0;
            for (int64_t c = 0; c < d; ++c) ksum += std::fabs(kt[c]);
            e = qmax / 254 * ksum;
          }
          eps = std::max(eps, e + 1e-6 * absdot + 1e-7);
          sc[t] = dot;
          smax = std::max(smax, dot);
        }
        std::vector<double> p(static_cast<size_t>(visible));
        double psum = 0;
        for (int64_t t = 0; t < visible; ++t) psum += (p[t] = std::exp(sc[t] - smax));
        for (auto& x : p) x /= psum;
        const double grow = std::exp(2 * eps);
        // Weights w[t][g] = p_t * V scale and their 63-token window maxima.
        const int64_t G = int4 ? kv_int4_groups(d) : 1;
        std::vector<double> w(static_cast<size_t>(visible * G)), wmax(w.size());
        for (int64_t t = 0; t < visible; ++t) {
          const uint8_t* page = page_of(t);
          for (int64_t g = 0; g < G; ++g) {
            const double sc_v = int4 ? f16(page + kv_int4_param_offset(l, reg.v_params, h, t % P, g))
                                     : f16(page + kv_int8_param_offset(l, reg.v_params, h, t % P));
            w[t * G + g] = p[t] * sc_v;
          }
        }
        for (int64_t t = 0; t < visible; ++t) {
          for (int64_t g = 0; g < G; ++g) {
            double m = 0;
            for (int64_t t2 = std::max<int64_t>(0, t - 31); t2 <= std::min(visible - 1, t + 31); ++t2)
              m = std::max(m, w[t2 * G + g]);
            wmax[t * G + g] = m;
          }
        }
        for (int64_t c = 0; c < d; ++c) {
          const double o = want[(tok * b.num_q_heads + hq) * d + c];
          const int64_t g = int4 ? c / kKvInt4Group : 0;
          double spread = 0, vabs = 0, wq = 0;
          for (int64_t t = 0; t < visible; ++t) {
            const double v = values[(h * kv + t) * d + c];
            spread = std::max(spread, std::fabs(v - o));
            vabs = std::max(vabs, std::fabs(v));
            const uint8_t* page = page_of(t);
            double code;
            if (int4) {
              const uint8_t* prm = page + kv_int4_param_offset(l, reg.v_params, h, t % P, g);
              const double dv = f16(prm), mv = f16(prm + 2);
              code = dv > 0 ? std::round((v - mv) / dv) : 0.0;
            } else {
              const double dv = f16(page + kv_int8_param_offset(l, reg.v_params, h, t % P));
              code = dv > 0 ? std::fabs(std::round(v / dv)) : 0.0;
            }
            wq += wmax[t * G + g] / 510 * code;
          }
          tol[(tok * b.num_q_heads + hq) * d + c] =
              static_cast<float>((grow - 1) * spread + grow * wq + 1e-5 * vabs + 1e-6);
        }
      }
    }
  }
  return tol;
}

// |got - want| <= tol per element.
::testing::AssertionResult within(const std::vector<float>& got, const std::vector<float>& want,
                                  const std::vector<float>& tol, double* worst_ratio = nullptr) {
  size_t bad = 0;
  double worst = 0;
  std::ostringstream msg;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, err / tol[i]);
    if (!(err <= tol[i])) {
      if (bad < 8)
        msg << "\n  [" << i << "] got " << got[i] << " want " << want[i] << " tolerance " << tol[i];
      ++bad;
    }
  }
  if (worst_ratio != nullptr) *worst_ratio = worst;
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " beyond the derived bound" << msg.str();
}

// RMS of a - b relative to the RMS of b.
double rel_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (a[i] - b[i]) * (a[i] - b[i]);
    ref += b[i] * b[i];
  }
  return std::sqrt(err / ref);
}

// attention_cpu on every instruction set against the reference: the exact paths within fp32 rounding;
// on AVX-512 also the integer decode path (when the CPU has VNNI) within its derived bound.
void check_cpu(Rng& rng, KvDtype dt, const Shape& s, int32_t split) {
  SCOPED_TRACE(::testing::Message() << kv_dtype_name(dt) << " page " << s.page << " heads " << s.hq << "/"
                                    << s.hk << " dim " << s.dim << " split " << split);
  Batch b(rng, {dt, s.page, s.hk, s.dim}, s.hq, s.kv, s.q);
  b.batch.split_tokens = split;
  std::vector<float> want = b.out_buffer();
  ASSERT_TRUE(attention_ref(b.cache, b.batch, b.qv(), b.ov(want)).ok());
  testing::for_each_isa([&](CpuIsa isa) {
    for (bool int_path : {false, true}) {
      set_cpu_int_attention(int_path);
      if (int_path && (isa != CpuIsa::kAvx512 || !cpu_int_attention())) continue;
      SCOPED_TRACE(int_path ? "integer decode path" : "exact path");
      std::vector<float> got = b.out_buffer();
      const Status st = attention_cpu(b.cache, b.batch, b.qv(), b.ov(got));
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_TRUE(testing::all_finite(got));
      if (int_path && int_dtype(dt)) {
        EXPECT_TRUE(within(got, want, int_path_tolerance(b, want)));
      } else {
        EXPECT_TRUE(testing::all_close(got, want, 2e-5f, 2e-4f));
      }
    }
  });
  set_cpu_int_attention(true);
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

// ---- the integer decode path (AVX-512 VNNI, int8 / int4 / int4-kivi KV) ----

bool have_int_path() {
  set_cpu_int_attention(true);
  return cpu_isa_detected() == CpuIsa::kAvx512 && cpu_int_attention();
}

TEST(AttentionCpuInt, StaysWithinTheBoundOfItsEightBitQueryAndWeights) {
  if (!have_int_path()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI: the exact path is the only one";
  Rng rng(408);
  SCOPED_TRACE(rng.trace());
  const Shape shapes[] = {
      {16, 4, 4, 128, {1, 15, 17, 32, 33, 100, 333}, {1, 1, 1, 1, 1, 1, 1}},  // GQA 1, around the chunks
      {16, 2, 8, 128, {63, 200, 31}, {1, 1, 1}},                              // GQA 4 (Llama-3)
      {16, 1, 8, 64, {90, 7}, {1, 1}},                                        // GQA 8, head_dim 64
      {16, 1, 16, 256, {45}, {1}},                                            // 16 query heads, head_dim 256
      {8, 2, 4, 128, {50, 21}, {1, 1}},                                       // 8-token pages: 8-token chunks
      {4, 1, 3, 128, {13}, {1}},                                              // 4-token pages, 3 query heads
      {5, 1, 4, 128, {37, 64}, {1, 1}},  // 5-token pages: tiles straddle pages
      {16, 2, 4, 40, {30}, {1}},         // a head_dim the path refuses
  };
  for (KvDtype dt : {KvDtype::kInt8, KvDtype::kInt4, KvDtype::kInt4Kivi}) {
    for (const Shape& s : shapes) check_cpu(rng, dt, s, 0);
    check_cpu(rng, dt, {16, 2, 8, 128, {500, 130}, {1, 1}}, 64);  // split and merged
  }
}

bool have_int_path();

// Decode units take up to kAttnMaxHeads (8) KV heads each and walk them chunk by chunk; long
// sequences are split by their share of the work (tokens x heads) across the pool's threads. Over
// long contexts of random data the per-element bound is loose next to outputs near 0, so the integer
// path must also add less RMS error than the KV format itself (a head's rows written from another
// head's state, or a piece merged into the wrong head, is 100% error).
TEST(AttentionCpu, UnitsOfSeveralHeadsAndSplitsByWork) {
  Rng rng(411);
  SCOPED_TRACE(rng.trace());
  const int threads = cpu_threads();
  set_cpu_threads(4);
  const Shape shapes[] = {
      {16, 12, 24, 128, {40, 300}, {1, 1}},         // 12 KV heads: units of 8 and 4 heads
      {16, 8, 32, 128, {2000}, {1}},                // one long sequence: split 4 ways, merged per head
      {16, 8, 32, 128, {1500, 20, 33}, {1, 1, 1}},  // one long among short ones: only it is split
      {16, 3, 6, 64, {700, 9}, {1, 1}},             // 3 KV heads, head_dim 64
      {5, 4, 8, 128, {37, 64}, {1, 1}},             // 5-token pages: tiles straddle pages, 4 heads
  };
  for (KvDtype dt : kAllDtypes) {
    for (const Shape& s : shapes) {
      check_cpu(rng, dt, s, 0);
      if (!int_dtype(dt) || s.dim % 128 != 0 || !have_int_path()) continue;
      SCOPED_TRACE(::testing::Message() << kv_dtype_name(dt) << " heads " << s.hq << "/" << s.hk);
      Batch b(rng, {dt, s.page, s.hk, s.dim}, s.hq, s.kv, s.q);
      std::vector<float> want = b.out_buffer(), got = b.out_buffer();
      ASSERT_TRUE(attention_ref(b.cache, b.batch, b.qv(), b.ov(want)).ok());
      ASSERT_TRUE(attention_cpu(b.cache, b.batch, b.qv(), b.ov(got)).ok());
      EXPECT_LT(rel_rms(got, want), rel_rms(want, dense_attention(b)));
    }
  }
  set_cpu_threads(threads);
}

TEST(AttentionCpuInt, PeakedSoftmaxStaysFiniteAndWithinTheBound) {
  if (!have_int_path()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  Rng rng(409);
  SCOPED_TRACE(rng.trace());
  for (KvDtype dt : {KvDtype::kInt8, KvDtype::kInt4, KvDtype::kInt4Kivi}) {
    SCOPED_TRACE(kv_dtype_name(dt));
    Batch b(rng, {dt, 16, 2, 128}, 8, {300, 77}, {1, 1});
    for (float& x : b.q) x *= 25.0f;  // scores spread over hundreds: most weights underflow to 0
    std::vector<float> want = b.out_buffer(), got = b.out_buffer();
    ASSERT_TRUE(attention_ref(b.cache, b.batch, b.qv(), b.ov(want)).ok());
    ASSERT_TRUE(attention_cpu(b.cache, b.batch, b.qv(), b.ov(got)).ok());
    EXPECT_TRUE(testing::all_finite(got));
    EXPECT_TRUE(within(got, want, int_path_tolerance(b, want)));
  }
}

TEST(AttentionCpuInt, AddsLessErrorThanTheKvFormatItself) {
  if (!have_int_path()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  Rng rng(410);
  SCOPED_TRACE(rng.trace());
  // The decode shape of the benchmark, shorter: the error the 8-bit q and weights add (integer path
  // against the reference over the same pages), next to the error of the KV format itself (the
  // reference against attention over the unquantized K and V), both as RMS relative to the output;
  // and the worst fraction of the derived per-element bound used.
  for (KvDtype dt : {KvDtype::kInt8, KvDtype::kInt4, KvDtype::kInt4Kivi}) {
    Batch b(rng, {dt, 16, 8, 128}, 32, {1024, 700}, {1, 1});
    std::vector<float> want = b.out_buffer(), got = b.out_buffer();
    ASSERT_TRUE(attention_ref(b.cache, b.batch, b.qv(), b.ov(want)).ok());
    ASSERT_TRUE(attention_cpu(b.cache, b.batch, b.qv(), b.ov(got)).ok());
    double worst = 0;
    EXPECT_TRUE(within(got, want, int_path_tolerance(b, want), &worst));
    const double added = rel_rms(got, want), format = rel_rms(want, dense_attention(b));
    std::printf(
        "[ int path ] %-9s KV format error %.2e, added by 8-bit q and weights %.2e (RMS / RMS output); "
        "worst error / bound %.3f\n",
        kv_dtype_name(dt), format, added, worst);
    EXPECT_LT(added, format) << kv_dtype_name(dt);
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
