// The KV-cache formats' reference writer and reader: exact page sizes, error bounds per dtype,
// the non-finite policy, int4-kivi's staging window and sealing, and refusals of bad input.
#include <gtest/gtest.h>

#include "common/refusal.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "infergate/kernels/ref.h"
#include "kernels/test_util.h"

namespace infergate::kernels {
namespace {

using infergate::testing::refused;

using testing::Rng;

constexpr KvDtype kAllDtypes[] = {KvDtype::kF16,  KvDtype::kBF16, KvDtype::kFp8E4M3,
                                  KvDtype::kInt8, KvDtype::kInt4, KvDtype::kInt4Kivi};

// A page pool plus staging windows in host memory.
struct Pool {
  explicit Pool(KvPageLayout l, int64_t pages = 8, int64_t windows = 2)
      : layout(l),
        page_mem(static_cast<size_t>(kv_page_bytes(l) * pages), 0),
        staging_mem(static_cast<size_t>(std::max<int64_t>(kv_staging_bytes(l), 1) * windows), 0) {
    cache.layout = l;
    cache.pages = page_mem.data();
    cache.num_pages = pages;
    cache.staging = staging_mem.data();
    cache.num_staging = windows;
  }
  // Appends tokens [k, v] ([T, H, D] contiguous) into consecutive slots starting at `first_slot` of the
  // pages listed (page_list[i] holds slots [i*P, (i+1)*P) of this sequence).
  Status append(const std::vector<float>& k, const std::vector<float>& v, int64_t first_pos,
                const std::vector<int32_t>& page_list, int32_t window = 0) {
    const int64_t h = layout.num_kv_heads, d = layout.head_dim, t = static_cast<int64_t>(k.size()) / (h * d);
    std::vector<int32_t> pages, slots, wins;
    for (int64_t i = 0; i < t; ++i) {
      const int64_t pos = first_pos + i;
      pages.push_back(page_list[pos / layout.page_size]);
      slots.push_back(static_cast<int32_t>(pos % layout.page_size));
      wins.push_back(window);
    }
    KvAppend a{contiguous(k.data(), t, h, d), contiguous(v.data(), t, h, d), pages.data(), slots.data(),
               wins.data()};
    return kv_append_ref(cache, a);
  }
  // Reads `filled` tokens of a page into [H, filled, D] buffers.
  void read(int32_t page, int32_t filled, std::vector<float>* k, std::vector<float>* v, int32_t window = 0) {
    const int64_t h = layout.num_kv_heads, d = layout.head_dim;
    k->assign(static_cast<size_t>(h * filled * d), -7.0f);
    v->assign(k->size(), -7.0f);
    Status s = kv_read_page_ref(cache, page, filled, window, contiguous(k->data(), h, filled, d),
                                contiguous(v->data(), h, filled, d));
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  const uint8_t* page(int32_t p) const { return cache.page(p); }

  KvPageLayout layout;
  std::vector<uint8_t> page_mem, staging_mem;
  KvCache cache;
};

uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

TEST(KvFormats, PageRegionsAreAlignedDisjointAndExactlySized) {
  for (KvDtype dt : kAllDtypes) {
    for (int32_t p : {1, 3, 16}) {
      for (int32_t h : {1, 2, 5}) {
        for (int32_t d : {1, 7, 32, 33, 128}) {
          const KvPageLayout l{dt, p, h, d};
          const KvPageRegions r = kv_page_regions(l);
          SCOPED_TRACE(::testing::Message() << kv_dtype_name(dt) << " P" << p << " H" << h << " D" << d);
          const int64_t data = int64_t{h} * p * kv_row_bytes(dt, d);
          EXPECT_EQ(r.k_data, 0);
          EXPECT_EQ(r.v_data % 16, 0);
          EXPECT_EQ(r.k_params % 16, 0);
          EXPECT_EQ(r.v_params % 16, 0);
          EXPECT_EQ(r.bytes % 16, 0);
          EXPECT_GE(r.v_data, data);
          EXPECT_GE(r.k_params, r.v_data + data);
          EXPECT_LE(r.bytes - data * 2, 16 * 4 + int64_t{h} * d * 4 +
                                            int64_t{h} * p * 8 * ((d + kKvInt4Group - 1) / kKvInt4Group))
              << "no more than padding beyond data and params";
        }
      }
    }
  }
  // The compression the capacity planner counts on (Llama-3-8B-like layer, 16-token pages).
  const double f16 = static_cast<double>(kv_page_bytes({KvDtype::kF16, 16, 8, 128}));
  EXPECT_NEAR(f16 / kv_page_bytes({KvDtype::kInt8, 16, 8, 128}), 1.969, 0.001);
  EXPECT_NEAR(f16 / kv_page_bytes({KvDtype::kInt4, 16, 8, 128}), 3.556, 0.001);  // >= 3.5x (issue 6)
  EXPECT_EQ(kv_staging_bytes({KvDtype::kInt8, 16, 8, 128}), 0);
}

// The bound each dtype guarantees for element x (head h, slot t, channel c), given the page.
float error_bound(const KvPageLayout& l, const uint8_t* page, bool key, int64_t h, int64_t t, int64_t c,
                  float x) {
  const KvPageRegions r = kv_page_regions(l);
  const int64_t params = key ? r.k_params : r.v_params;
  switch (l.dtype) {
    case KvDtype::kF16: return std::fabs(x) / 2048 + 3e-8f;
    case KvDtype::kBF16: return std::fabs(x) / 256 + 1e-38f;
    case KvDtype::kFp8E4M3: {
      float s;
      std::memcpy(&s, page + kv_fp8_param_offset(params, h), 4);
      return std::max(std::fabs(x) / 16, s * 0.0009765625f) * (1 + 1e-6f);
    }
    case KvDtype::kInt8:
      return fp16_to_float(u16_at(page + kv_int8_param_offset(l, params, h, t))) * 0.5f * (1 + 1e-5f);
    case KvDtype::kInt4:
    case KvDtype::kInt4Kivi: {
      if (key && l.dtype == KvDtype::kInt4Kivi) {
        return fp16_to_float(u16_at(page + kv_kivi_param_offset(l, params, h, c))) * 0.5f * (1 + 1e-4f) +
               std::fabs(x) / 2048 + 1e-6f;  // keys are rounded to fp16 before the channel quantization
      }
      const int64_t g = c / kKvInt4Group;
      return fp16_to_float(u16_at(page + kv_int4_param_offset(l, params, h, t, g))) * 0.5f * (1 + 1e-4f) +
             1e-6f;
    }
  }
  return 0;
}

// RMS round-trip error of int4 KV rows quantized per `group` channels with the format's own
// per-element maths (kv_int4_params / kv_int4_code / kv_int4_dequant), relative to the RMS value.
double int4_relative_rms_error(const std::vector<float>& x, int64_t d, int64_t group) {
  double err = 0, ref = 0;
  for (size_t r = 0; r * d < x.size(); ++r) {
    const float* row = x.data() + r * d;
    for (int64_t c0 = 0; c0 < d; c0 += group) {
      const int64_t c1 = std::min(d, c0 + group);
      float lo = row[c0], hi = row[c0];
      for (int64_t c = c0; c < c1; ++c) lo = std::min(lo, row[c]), hi = std::max(hi, row[c]);
      const KvInt4Params p = kv_int4_params(lo, hi);
      const float m = fp16_to_float(p.min), dd = fp16_to_float(p.scale);
      for (int64_t c = c0; c < c1; ++c) {
        const float y = kv_int4_dequant(kv_int4_code(row[c], m, safe_inverse(dd)), dd, m);
        err += (y - row[c]) * (y - row[c]);
        ref += row[c] * row[c];
      }
    }
  }
  return std::sqrt(err / ref);
}

TEST(KvFormats, Int4GroupsOf64CostLittleOverGroupsOf32) {
  // The page format uses 64-channel groups (4.5 bits per value, 3.56x smaller than fp16 at
  // head_dim 128) instead of 32 (5 bits, 3.2x): the scale and minimum span more values, so the
  // quantization step grows with the range of 64 values instead of 32. For Gaussian rows the
  // expected range of 64 samples is about 15% wider than of 32; an outlier channel widens the step
  // of 63 other values instead of 31 (the engine smooths key outliers before the cache, and kivi
  // keys are per channel: docs/quant-formats.md).
  Rng rng(205);
  SCOPED_TRACE(rng.trace());
  const int64_t d = 128, rows = 4096;
  std::vector<float> gauss = rng.normals(static_cast<size_t>(rows * d), 1.0f);
  std::vector<float> outlier = gauss;
  for (int64_t r = 0; r < rows; ++r) outlier[r * d + 5] *= 8.0f;
  const double g32 = int4_relative_rms_error(gauss, d, 32), g64 = int4_relative_rms_error(gauss, d, 64);
  const double o32 = int4_relative_rms_error(outlier, d, 32), o64 = int4_relative_rms_error(outlier, d, 64);
  EXPECT_EQ(kKvInt4Group, 64);
  EXPECT_NEAR(g64, int4_relative_rms_error(gauss, d, kKvInt4Group), 0.0);
  std::printf(
      "[ int4 KV ] relative RMS round-trip error, Gaussian rows: group 32 %.4f, group 64 %.4f (%.2fx); "
      "with an 8x outlier channel: %.4f, %.4f (%.2fx)\n",
      g32, g64, g64 / g32, o32, o64, o64 / o32);
  EXPECT_GT(g64 / g32, 1.0);
  EXPECT_LT(g64 / g32, 1.25);
  EXPECT_LT(o64 / o32, 1.45);
}

TEST(KvRef, EveryDtypeRoundTripsWithinItsBound) {
  Rng rng(201);
  SCOPED_TRACE(rng.trace());
  for (KvDtype dt : kAllDtypes) {
    for (int32_t d : {1, 7, 32, 33, 64, 128}) {
      const KvPageLayout l{dt, 16, 3, d};
      SCOPED_TRACE(::testing::Message() << kv_dtype_name(dt) << " head_dim " << d);
      Pool pool(l);
      const int64_t tokens = 40;  // two full pages and half of a third
      std::vector<float> k = rng.normals(static_cast<size_t>(tokens * 3 * d), 1.5f);
      std::vector<float> v = rng.normals(k.size(), 0.7f);
      for (int64_t i = 0; i < tokens; ++i)
        k[(i * 3 + 1) * d] += 12.0f;  // an outlier channel, as real keys have
      const std::vector<int32_t> pages = {5, 2, 7};
      ASSERT_TRUE(pool.append(k, v, 0, pages).ok());
      for (int64_t pi = 0; pi < 3; ++pi) {
        const int32_t filled = pi < 2 ? 16 : 8;
        std::vector<float> rk, rv;
        pool.read(pages[pi], filled, &rk, &rv);
        for (int64_t h = 0; h < 3; ++h) {
          for (int64_t t = 0; t < filled; ++t) {
            for (int64_t c = 0; c < d; ++c) {
              const int64_t tok = pi * 16 + t;
              const float xk = k[(tok * 3 + h) * d + c], xv = v[(tok * 3 + h) * d + c];
              const float gk = rk[(h * filled + t) * d + c], gv = rv[(h * filled + t) * d + c];
              const uint8_t* page = pool.page(pages[pi]);
              if (dt == KvDtype::kInt4Kivi && filled < 16) {
                ASSERT_EQ(gk, fp16_to_float(fp16_from_float(xk))) << "staged keys are fp16";
              } else {
                ASSERT_LE(std::fabs(gk - xk), error_bound(l, page, true, h, t, c, xk))
                    << "K page " << pi << " h" << h << " t" << t << " c" << c;
              }
              ASSERT_LE(std::fabs(gv - xv), error_bound(l, page, false, h, t, c, xv))
                  << "V page " << pi << " h" << h << " t" << t << " c" << c;
            }
          }
        }
      }
    }
  }
}

TEST(KvRef, NonFiniteInputsFollowThePolicy) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (KvDtype dt : {KvDtype::kFp8E4M3, KvDtype::kInt8, KvDtype::kInt4}) {
    SCOPED_TRACE(kv_dtype_name(dt));
    Pool pool({dt, 4, 1, 8});
    std::vector<float> k = {1.0f, -2.0f, nan, inf, -inf, 0.5f, 0.0f, 2.0f};
    std::vector<float> v = k;
    ASSERT_TRUE(pool.append(k, v, 0, {0}).ok());
    std::vector<float> rk, rv;
    pool.read(0, 1, &rk, &rv);
    for (float x : rk) ASSERT_TRUE(std::isfinite(x)) << "nothing non-finite comes back";
    EXPECT_NEAR(rk[0], 1.0f, 0.15f) << "finite values keep their scale: inf does not blow it up";
    EXPECT_NEAR(rk[1], -2.0f, 0.15f);
    EXPECT_NEAR(rk[2], 0.0f, 0.15f) << "NaN is stored as 0";
    if (dt == KvDtype::kFp8E4M3) {
      EXPECT_EQ(rk[3], 448.0f);
      EXPECT_EQ(rk[4], -448.0f);
    } else {
      EXPECT_NEAR(rk[3], 2.0f, 0.15f) << "+inf saturates to the top of the finite range";
      EXPECT_NEAR(rk[4], -2.0f, 0.15f);
    }
  }
  // A row with nothing finite quantizes to zeros.
  Pool pool({KvDtype::kInt8, 4, 1, 3});
  std::vector<float> k = {nan, inf, -inf};
  ASSERT_TRUE(pool.append(k, k, 0, {0}).ok());
  std::vector<float> rk, rv;
  pool.read(0, 1, &rk, &rv);
  EXPECT_EQ(rk[0], 0.0f);
  EXPECT_TRUE(std::isfinite(rk[1]));
}

TEST(KvRef, Fp8UsesEachHeadsScaleAndCopiesItIntoThePage) {
  Pool pool({KvDtype::kFp8E4M3, 4, 2, 4});
  const float ks[2] = {0.5f, 4.0f}, vs[2] = {2.0f, 0.25f};
  pool.cache.k_scale = ks;
  pool.cache.v_scale = vs;
  std::vector<float> k = {100, 200, -300, 1, 1000, 1500, -1700, 3};  // head 1 needs its larger scale
  ASSERT_TRUE(pool.append(k, k, 0, {3}).ok());
  std::vector<float> rk, rv;
  pool.read(3, 1, &rk, &rv);
  EXPECT_EQ(rk[0], 96.0f) << "100 / 0.5 = 200 -> e4m3 192 -> 96";
  EXPECT_EQ(rk[2], -224.0f) << "-300 / 0.5 saturates at -448 -> -224";
  EXPECT_NEAR(rk[4], 1000.0f, 1000.0f / 16);
  EXPECT_NEAR(rk[6], -1700.0f, 1700.0f / 16);
  EXPECT_EQ(rv[4], 448.0f * 0.25f) << "V head 1 saturates at 448 * 0.25";
  // The page carries its scales: a copy elsewhere reads back the same values without the cache's arrays.
  std::memcpy(pool.cache.page(0), pool.page(3), static_cast<size_t>(kv_page_bytes(pool.layout)));
  pool.cache.k_scale = pool.cache.v_scale = nullptr;
  std::vector<float> ck, cv;
  pool.read(0, 1, &ck, &cv);
  EXPECT_EQ(ck, rk);
  EXPECT_EQ(cv, rv);
}

TEST(KvRef, PagesAreSelfContainedForEveryDtype) {
  Rng rng(202);
  SCOPED_TRACE(rng.trace());
  for (KvDtype dt : kAllDtypes) {
    SCOPED_TRACE(kv_dtype_name(dt));
    Pool pool({dt, 8, 2, 40});
    std::vector<float> k = rng.normals(8 * 2 * 40), v = rng.normals(8 * 2 * 40);
    ASSERT_TRUE(pool.append(k, v, 0, {1}).ok());
    std::vector<float> a_k, a_v, b_k, b_v;
    pool.read(1, 8, &a_k, &a_v);
    std::memcpy(pool.cache.page(6), pool.page(1), static_cast<size_t>(kv_page_bytes(pool.layout)));
    std::memset(pool.cache.page(1), 0x5A, static_cast<size_t>(kv_page_bytes(pool.layout)));
    pool.read(6, 8, &b_k, &b_v);
    EXPECT_TRUE(testing::bit_equal(b_k.data(), a_k.data(), a_k.size()));
    EXPECT_TRUE(testing::bit_equal(b_v.data(), a_v.data(), a_v.size()));
  }
}

TEST(KvRef, KiviKeepsAFillingPagesKeysInStagingAndSealsOnTheLastSlot) {
  Rng rng(203);
  SCOPED_TRACE(rng.trace());
  const KvPageLayout l{KvDtype::kInt4Kivi, 4, 2, 32};
  Pool pool(l);
  std::vector<float> k = rng.normals(4 * 2 * 32), v = rng.normals(4 * 2 * 32);
  std::vector<float> first3(k.begin(), k.begin() + 3 * 64), first3v(v.begin(), v.begin() + 3 * 64);
  ASSERT_TRUE(pool.append(first3, first3v, 0, {2}, /*window=*/1).ok());
  const KvPageRegions r = kv_page_regions(l);
  for (int64_t b = r.k_data; b < r.v_data; ++b)
    ASSERT_EQ(pool.page(2)[b], 0) << "keys not written before sealing";
  std::vector<float> rk, rv;
  pool.read(2, 3, &rk, &rv, 1);
  EXPECT_EQ(rk[0], fp16_to_float(fp16_from_float(k[0])));
  // The last slot seals the page: the keys move into it, quantized per channel.
  std::vector<float> last(k.begin() + 3 * 64, k.end()), lastv(v.begin() + 3 * 64, v.end());
  ASSERT_TRUE(pool.append(last, lastv, 3, {2}, 1).ok());
  std::memset(pool.staging_mem.data(), 0, pool.staging_mem.size());  // a sealed page needs no staging
  pool.read(2, 4, &rk, &rv, -1);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t t = 0; t < 4; ++t) {
      for (int64_t c = 0; c < 32; ++c) {
        const float x = k[(t * 2 + h) * 32 + c];
        ASSERT_LE(std::fabs(rk[(h * 4 + t) * 32 + c] - x), error_bound(l, pool.page(2), true, h, t, c, x));
      }
    }
  }
}

TEST(KvRef, OneMultiPageAppendEqualsTokenByTokenAppends) {
  Rng rng(204);
  SCOPED_TRACE(rng.trace());
  for (KvDtype dt : kAllDtypes) {
    SCOPED_TRACE(kv_dtype_name(dt));
    const KvPageLayout l{dt, 4, 2, 16};
    Pool batched(l), single(l);
    const int64_t tokens = 11;  // starts mid-page, fills two pages, ends mid-page
    std::vector<float> k = rng.normals(static_cast<size_t>(tokens * 32)), v = rng.normals(k.size());
    std::vector<float> pre_k = rng.normals(2 * 32), pre_v = rng.normals(2 * 32);
    const std::vector<int32_t> pages = {4, 0, 6, 1};
    ASSERT_TRUE(batched.append(pre_k, pre_v, 0, pages).ok());
    ASSERT_TRUE(single.append(pre_k, pre_v, 0, pages).ok());
    ASSERT_TRUE(batched.append(k, v, 2, pages).ok());
    for (int64_t i = 0; i < tokens; ++i) {
      std::vector<float> ki(k.begin() + i * 32, k.begin() + (i + 1) * 32),
          vi(v.begin() + i * 32, v.begin() + (i + 1) * 32);
      ASSERT_TRUE(single.append(ki, vi, 2 + i, pages).ok());
    }
    EXPECT_EQ(batched.page_mem, single.page_mem);
    EXPECT_EQ(batched.staging_mem, single.staging_mem);
  }
}

TEST(KvRef, RefusesOutOfRangeIdsAndBrokenSlotOrder) {
  Pool pool({KvDtype::kInt8, 4, 1, 8}, /*pages=*/2);
  std::vector<float> k(2 * 8, 1.0f);
  std::vector<int32_t> pages = {0, 2}, slots = {0, 1}, wins = {0, 0};
  KvAppend a{contiguous(k.data(), 2, 1, 8), contiguous(k.data(), 2, 1, 8), pages.data(), slots.data(),
             wins.data()};
  Status s = kv_append_ref(pool.cache, a);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("token 1 page id 2"), std::string::npos) << s.message();
  pages = {0, 0};
  slots = {0, 4};
  EXPECT_EQ(kv_append_ref(pool.cache, a).code(), StatusCode::kOutOfRange);
  slots = {1, 0};
  s = kv_append_ref(pool.cache, a);
  EXPECT_NE(s.message().find("slot order"), std::string::npos) << s.message();
  a.k.dim2 = 7;
  EXPECT_EQ(kv_append_ref(pool.cache, a).code(), StatusCode::kInvalidArgument);
  Pool kivi({KvDtype::kInt4Kivi, 4, 1, 8});
  kivi.cache.staging = nullptr;
  slots = {0, 1};
  a.k.dim2 = 8;
  EXPECT_NE(kv_append_ref(kivi.cache, a).message().find("staging"), std::string::npos);
  std::vector<float> rk(8), rv(8);
  EXPECT_EQ(
      kv_read_page_ref(pool.cache, 0, 5, 0, contiguous(rk.data(), 1, 5, 8), contiguous(rv.data(), 1, 5, 8))
          .code(),
      StatusCode::kOutOfRange);
  const float bad[1] = {-1.0f};
  Pool fp8({KvDtype::kFp8E4M3, 4, 1, 8});
  fp8.cache.k_scale = bad;
  EXPECT_NE(kv_append_ref(fp8.cache, a).message().find("fp8 scale"), std::string::npos);
  EXPECT_TRUE(refused(validate_kv_layout({KvDtype::kInt8, 0, 1, 8}), "", {"kv page size 0 is outside"}));
  EXPECT_TRUE(refused(validate_kv_layout({KvDtype::kInt8, 16, 1, 2048}), "", {"head_dim 2048 is outside"}));
}

}  // namespace
}  // namespace infergate::kernels
