// kv_append_cpu and kv_read_page_cpu write and read bit-identical bytes and values to the
// references, for every KV dtype and instruction set, including int4-kivi staging and sealing.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "infergate/kernels/cpu.h"
#include "infergate/kernels/ref.h"
#include "kernels/test_util.h"

namespace infergate::kernels {
namespace {

using testing::Rng;

constexpr KvDtype kAllDtypes[] = {KvDtype::kF16,  KvDtype::kBF16, KvDtype::kFp8E4M3,
                                  KvDtype::kInt8, KvDtype::kInt4, KvDtype::kInt4Kivi};

struct Pool {
  explicit Pool(KvPageLayout l)
      : pages(static_cast<size_t>(kv_page_bytes(l) * 6), 0),
        staging(static_cast<size_t>(kv_staging_bytes(l) * 2 + 16), 0) {
    cache = {l, pages.data(), 6, staging.data(), 2, nullptr, nullptr};
  }
  std::vector<uint8_t> pages, staging;
  KvCache cache;
};

TEST(KvCpu, AppendWritesTheSameBytesAsTheReference) {
  Rng rng(501);
  SCOPED_TRACE(rng.trace());
  const float inf = std::numeric_limits<float>::infinity();
  for (KvDtype dt : kAllDtypes) {
    for (int32_t d : {1, 8, 33, 64, 128}) {
      SCOPED_TRACE(::testing::Message() << kv_dtype_name(dt) << " head_dim " << d);
      const KvPageLayout l{dt, 4, 3, d};
      const int64_t tokens = 10;  // 2.5 pages: seals two kivi pages, leaves a filling one
      std::vector<float> k = rng.normals(static_cast<size_t>(tokens * 3 * d), 2.0f),
                         v = rng.normals(k.size());
      k[5 % k.size()] = inf;  // the non-finite policy must match too
      v[7 % v.size()] = std::numeric_limits<float>::quiet_NaN();
      std::vector<int32_t> ids, slots, wins;
      const int32_t page_of[3] = {4, 1, 5};
      for (int32_t t = 0; t < tokens; ++t) {
        ids.push_back(page_of[t / 4]);
        slots.push_back(t % 4);
        wins.push_back(1);
      }
      const float ks[3] = {0.5f, 1.0f, 2.0f}, vs[3] = {0.25f, 1.0f, 3.0f};
      KvAppend a{contiguous<const float>(k.data(), tokens, 3, d),
                 contiguous<const float>(v.data(), tokens, 3, d), ids.data(), slots.data(), wins.data()};
      Pool ref(l), cpu(l);
      ref.cache.k_scale = cpu.cache.k_scale = ks;
      ref.cache.v_scale = cpu.cache.v_scale = vs;
      ASSERT_TRUE(kv_append_ref(ref.cache, a).ok());
      testing::for_each_isa([&](CpuIsa) {
        std::fill(cpu.pages.begin(), cpu.pages.end(), 0);
        std::fill(cpu.staging.begin(), cpu.staging.end(), 0);
        ASSERT_TRUE(kv_append_cpu(cpu.cache, a).ok());
        EXPECT_EQ(cpu.pages, ref.pages);
        EXPECT_EQ(cpu.staging, ref.staging);
        // Reading back: bit-identical values for full and filling pages.
        for (auto [page, filled] : {std::pair{4, 4}, std::pair{1, 4}, std::pair{5, 2}}) {
          std::vector<float> rk(static_cast<size_t>(3 * filled * d)), rv(rk.size()), ck(rk.size()),
              cv(rk.size());
          ASSERT_TRUE(kv_read_page_ref(ref.cache, page, filled, 1, contiguous(rk.data(), 3, filled, d),
                                       contiguous(rv.data(), 3, filled, d))
                          .ok());
          ASSERT_TRUE(kv_read_page_cpu(cpu.cache, page, filled, 1, contiguous(ck.data(), 3, filled, d),
                                       contiguous(cv.data(), 3, filled, d))
                          .ok());
          EXPECT_TRUE(testing::bit_equal(ck.data(), rk.data(), rk.size())) << "K of page " << page;
          EXPECT_TRUE(testing::bit_equal(cv.data(), rv.data(), rv.size())) << "V of page " << page;
        }
      });
    }
  }
}

// Every 16-bit pattern in an f16 / bf16 page and every byte in an fp8 page reads back with the
// reference's bits on every instruction set (F16C's vcvtph2ps included): NaNs keep sign and payload
// with the quiet bit set, as docs/quant-formats.md specifies.
TEST(KvCpu, ReadsEveryStoredBitPatternAsTheReference) {
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kBF16, KvDtype::kFp8E4M3}) {
    SCOPED_TRACE(kv_dtype_name(dt));
    const KvPageLayout l{dt, 16, 16, 128};
    const KvPageRegions r = kv_page_regions(l);
    Pool p(l);
    const int64_t n = int64_t{l.num_kv_heads} * l.page_size * l.head_dim;
    for (int64_t i = 0; i < n; ++i) {
      if (dt == KvDtype::kFp8E4M3) {
        p.pages[static_cast<size_t>(r.k_data + i)] = static_cast<uint8_t>(i);
        p.pages[static_cast<size_t>(r.v_data + i)] = static_cast<uint8_t>(255 - i);
      } else {
        const uint16_t kb = static_cast<uint16_t>(i), vb = static_cast<uint16_t>(i + 32768);
        std::memcpy(p.pages.data() + r.k_data + 2 * i, &kb, 2);
        std::memcpy(p.pages.data() + r.v_data + 2 * i, &vb, 2);
      }
    }
    if (dt == KvDtype::kFp8E4M3) {
      for (int h = 0; h < l.num_kv_heads; ++h) {
        const float s = 0.5f + 0.25f * h;
        std::memcpy(p.pages.data() + kv_fp8_param_offset(r.k_params, h), &s, 4);
        std::memcpy(p.pages.data() + kv_fp8_param_offset(r.v_params, h), &s, 4);
      }
    }
    std::vector<float> rk(static_cast<size_t>(n)), rv(rk.size());
    ASSERT_TRUE(kv_read_page_ref(p.cache, 0, 16, 0, contiguous(rk.data(), 16, 16, 128),
                                 contiguous(rv.data(), 16, 16, 128))
                    .ok());
    if (dt == KvDtype::kF16) {  // spot checks of the specification itself
      uint32_t bits;
      std::memcpy(&bits, &rk[0x7E00], 4);
      EXPECT_EQ(bits, 0x7FC00000u);
      std::memcpy(&bits, &rk[0x7C01], 4);
      EXPECT_EQ(bits, 0x7FC02000u);
      std::memcpy(&bits, &rv[0xFE00 - 32768], 4);
      EXPECT_EQ(bits, 0xFFC00000u);
    }
    testing::for_each_isa([&](CpuIsa) {
      std::vector<float> ck(rk.size()), cv(rk.size());
      ASSERT_TRUE(kv_read_page_cpu(p.cache, 0, 16, 0, contiguous(ck.data(), 16, 16, 128),
                                   contiguous(cv.data(), 16, 16, 128))
                      .ok());
      EXPECT_TRUE(testing::bit_equal(ck.data(), rk.data(), rk.size())) << "K";
      EXPECT_TRUE(testing::bit_equal(cv.data(), rv.data(), rv.size())) << "V";
    });
  }
}

TEST(KvCpu, ReadsIntoStridedViews) {
  Rng rng(502);
  const KvPageLayout l{KvDtype::kInt4, 4, 2, 64};
  Pool p(l);
  std::vector<float> k = rng.normals(4 * 2 * 64), v = rng.normals(4 * 2 * 64);
  std::vector<int32_t> ids(4, 0), slots = {0, 1, 2, 3}, wins(4, 0);
  KvAppend a{contiguous<const float>(k.data(), 4, 2, 64), contiguous<const float>(v.data(), 4, 2, 64),
             ids.data(), slots.data(), wins.data()};
  ASSERT_TRUE(kv_append_cpu(p.cache, a).ok());
  // Token-major output [filled][heads][dim] through strides.
  std::vector<float> rk(4 * 2 * 64), rv(rk.size()), want_k(rk.size()), want_v(rk.size());
  View3<float> kt{rk.data(), 2, 4, 64, 64, 2 * 64}, vt{rv.data(), 2, 4, 64, 64, 2 * 64};
  ASSERT_TRUE(kv_read_page_cpu(p.cache, 0, 4, 0, kt, vt).ok());
  ASSERT_TRUE(kv_read_page_ref(p.cache, 0, 4, 0, View3<float>{want_k.data(), 2, 4, 64, 64, 128},
                               View3<float>{want_v.data(), 2, 4, 64, 64, 128})
                  .ok());
  EXPECT_TRUE(testing::bit_equal(rk.data(), want_k.data(), rk.size()));
  EXPECT_TRUE(testing::bit_equal(rv.data(), want_v.data(), rv.size()));
}

TEST(KvCpu, RefusesWhatTheReferenceRefuses) {
  Pool p({KvDtype::kInt8, 4, 1, 8});
  std::vector<float> k(8, 1.0f);
  std::vector<int32_t> ids = {7}, slots = {0};
  KvAppend a{contiguous<const float>(k.data(), 1, 1, 8), contiguous<const float>(k.data(), 1, 1, 8),
             ids.data(), slots.data(), nullptr};
  EXPECT_EQ(kv_append_cpu(p.cache, a).code(), StatusCode::kOutOfRange);
  std::vector<float> o(8);
  EXPECT_EQ(
      kv_read_page_cpu(p.cache, 6, 1, 0, contiguous(o.data(), 1, 1, 8), contiguous(o.data(), 1, 1, 8)).code(),
      StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace infergate::kernels
