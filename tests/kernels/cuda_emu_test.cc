// The streaming CUDA kernels (kernels/src/cuda/gemv_stream.cuh and attention_decode.cuh), MoE
// routing and routed experts (moe_route.cuh, moe_experts.cuh), absorbed MLA decode (mla_decode.cuh)
// the element-wise ops (elementwise.cuh), the KV / latent page writes and reads (kv_write.cuh) and the
// weight quantization, dequantization and int4 repacking (weight_ops.cuh), run on the CPU emulator of the
// CUDA execution model (emu/cuda_emu.h) against the scalar references: their indexing, cp.async pipelines
// (both legal completion orders), masking, softmax and merges are checked on every machine, GPU or not. The
// same kernels run on the GPU in kernels_cuda_tests.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>
#include <vector>

#include "cuda/attention_decode.cuh"
#include "cuda/elementwise.cuh"
#include "cuda/gemv_stream.cuh"
#include "cuda/kv_write.cuh"
#include "cuda/mla_decode.cuh"
#include "cuda/moe_experts.cuh"
#include "cuda/moe_route.cuh"
#include "cuda/weight_ops.cuh"
#include "infergate/kernels/cuda_layouts.h"
#include "infergate/kernels/ref.h"
#include "kernels/test_util.h"

namespace infergate::kernels {
namespace {

using testing::Rng;

// ---- int4 GEMV ----

// The mma packing of an int4 weight, from its element map (cuda_layouts.h), independently of the
// library's packer.
std::vector<uint8_t> mma_packed(const testing::HostWeight& w) {
  const WeightLayout& l = w.layout;
  std::vector<uint8_t> packed(w.data.size(), 0);
  for (int64_t r = 0; r < l.rows; ++r) {
    for (int64_t k = 0; k < l.cols; ++k) {
      int64_t off;
      int nib;
      int4_mma_locate(l.cols, r, k, &off, &nib);
      const uint32_t code = int4_get(w.data.data() + r * weight_row_bytes(l), k);
      packed[static_cast<size_t>(off + nib / 2)] |= static_cast<uint8_t>(code << (4 * (nib % 2)));
    }
  }
  return packed;
}

struct Weight : testing::HostWeight {
  std::vector<uint8_t> packed;
};

Weight make_int4(Rng& rng, const WeightLayout& l) {
  Weight w{testing::make_host_weight(rng, l), {}};
  w.packed = mma_packed(w);
  return w;
}

// |y - ref| <= tol * sum_k |x_k w_k| + 1e-6 for every output, and nothing non-finite.
::testing::AssertionResult linear_close(const Weight& w, const std::vector<float>& x, int64_t m,
                                        const std::vector<float>& got, const std::vector<float>& want,
                                        double tol) {
  const int64_t n_out = w.layout.rows, k_in = w.layout.cols;
  std::vector<float> dq(static_cast<size_t>(n_out * k_in));
  if (!dequantize_weight_ref(w.view(), contiguous(dq.data(), n_out, k_in)).ok())
    return ::testing::AssertionFailure() << "dequantize failed";
  int bad = 0;
  std::ostringstream msg;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t n = 0; n < n_out; ++n) {
      double mag = 0;
      for (int64_t k = 0; k < k_in; ++k)
        mag += std::fabs(static_cast<double>(x[i * k_in + k]) * dq[n * k_in + k]);
      const float g = got[i * n_out + n], r = want[i * n_out + n];
      if (!std::isfinite(g) || std::fabs(g - r) > tol * mag + 1e-6) {
        if (bad++ < 8)
          msg << "\n  y[" << i << "," << n << "] = " << g << ", reference " << r << " (magnitude " << mag
              << ")";
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " outputs differ" << msg.str();
}

struct GemvCase {
  WeightLayout layout;
  int64_t m;
  int64_t slots;        // resident blocks assumed (sets the row tiles per block)
  bool params_aligned;  // cp.async copies of the scales, or element copies
  bool x_padded;        // x rows a few floats longer than K
};

template <int WARPS, int P, int TPS, bool ASYNC>
void run_gemv(Rng& rng, const GemvCase& c) {
  const WeightLayout& l = c.layout;
  SCOPED_TRACE(::testing::Message() << "warps " << WARPS << " depth " << P << " tiles/step " << TPS
                                    << (ASYNC ? " cp.async ring " : " register ring ")
                                    << weight_format_name(l.format) << " " << l.rows << "x" << l.cols << " G"
                                    << l.group_size << " M" << c.m << " slots " << c.slots
                                    << (c.params_aligned ? "" : " unaligned-params")
                                    << (c.x_padded ? " strided-x" : ""));
  const Weight w = make_int4(rng, l);
  const int64_t x_stride = l.cols + (c.x_padded ? 3 : 0);
  std::vector<float> x(static_cast<size_t>(c.m * x_stride)), xc(static_cast<size_t>(c.m * l.cols));
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t k = 0; k < l.cols; ++k) x[i * x_stride + k] = xc[i * l.cols + k] = rng.normal(1.0f);
  }
  const std::vector<float> bias = rng.normals(static_cast<size_t>(l.rows));
  std::vector<float> want(static_cast<size_t>(c.m * l.rows)), got(want.size(), NAN);
  ASSERT_TRUE(linear_ref(contiguous<const float>(xc.data(), c.m, l.cols), w.view(), bias.data(),
                         contiguous(want.data(), c.m, l.rows))
                  .ok());
  const int32_t kb_total = static_cast<int32_t>(l.cols / 64), tiles = static_cast<int32_t>(l.rows / 16);
  const int32_t groups = static_cast<int32_t>(weight_groups_per_row(l));
  const int32_t rt = static_cast<int32_t>((tiles + c.slots - 1) / c.slots);
  const int32_t nkb = cuda::gemv::max_warp_kb(kb_total, WARPS);
  const int32_t ngroups = cuda::gemv::max_warp_groups(kb_total, WARPS, l.group_size);
  const bool asym = l.format == WeightFormat::kInt4Asym;
  const int32_t smem = cuda::gemv::stream_smem(WARPS, static_cast<int32_t>(c.m), nkb, ngroups, rt, groups,
                                               asym, ASYNC ? P * TPS * 512 : 0)
                           .total;
  const int flags = c.params_aligned ? cuda::gemv::kParamsAligned : 0;
  const View2<const float> xv{x.data(), c.m, l.cols, x_stride};
  const View2<float> yv = contiguous(got.data(), c.m, l.rows);
  const WeightView wv = w.view();
  emu::launch({static_cast<unsigned>((tiles + rt - 1) / rt)}, {WARPS * 32}, static_cast<size_t>(smem), [&] {
    cuda::gemv::gemv_int4_stream_kernel<WARPS, P, 2, TPS, ASYNC>(
        xv, wv, reinterpret_cast<const uint4*>(w.packed.data()), bias.data(), yv, rt, flags);
  });
  EXPECT_TRUE(linear_close(w, xc, c.m, got, want, 3e-3));
}

TEST(CudaEmuGemv, StreamingInt4GemvMatchesTheReference) {
  Rng rng(801);
  SCOPED_TRACE(rng.trace());
  // clang-format off
  const GemvCase cases[] = {
      {{WeightFormat::kInt4Sym, 64, 512, 128, ScaleDtype::kF16}, 1, 2, true, false},    // 2 tiles per block
      {{WeightFormat::kInt4Asym, 48, 256, 32, ScaleDtype::kBF16}, 3, 8, true, false},   // 1 tile per block
      {{WeightFormat::kInt4Sym, 32, 192, 128, ScaleDtype::kF16}, 8, 1, true, true},     // K not a multiple of G
      {{WeightFormat::kInt4Asym, 16, 64, 64, ScaleDtype::kF16}, 2, 1, false, false},    // fewer k blocks than warps
      {{WeightFormat::kInt4Asym, 80, 1024, 64, ScaleDtype::kF16}, 5, 2, false, true},   // 3 tiles per block
      {{WeightFormat::kInt4Sym, 32, 1088, 32, ScaleDtype::kF16}, 7, 1, true, true},     // slices not group-aligned
      // Long enough for every warp's pipeline to refill many times (16+ steps per warp).
      {{WeightFormat::kInt4Asym, 64, 8192, 128, ScaleDtype::kF16}, 1, 2, true, false},  // 2 tiles per block
      {{WeightFormat::kInt4Sym, 48, 4160, 64, ScaleDtype::kBF16}, 2, 1, true, false},   // 3 tiles, 65 k blocks
  };
  // clang-format on
  for (bool immediate : {false, true}) {
    emu::g_cp_immediate = immediate;
    for (const GemvCase& c : cases) {
      run_gemv<8, 8, 2, true>(rng, c);
      run_gemv<8, 8, 1, true>(rng, c);
    }
  }
  emu::g_cp_immediate = false;
  for (const GemvCase& c : cases) run_gemv<8, 4, 2, false>(rng, c);
  run_gemv<16, 4, 2, true>(rng, cases[0]);
  run_gemv<16, 4, 2, true>(rng, cases[4]);
  run_gemv<8, 6, 2, true>(rng, cases[5]);
}

// ---- decode attention ----

struct DecodeCase {
  KvDtype dtype;
  int32_t page, hk, hq, dim;
  std::vector<int32_t> kv;
  std::vector<int32_t> q;  // query tokens per sequence: 1, or 0 for a sequence with none this step
  int32_t split_tokens;    // forced split, 0 = by slots
  int64_t slots;
  int stages;
};

template <KvDtype DT, int D>
void run_decode_typed(Rng& rng, const DecodeCase& a) {
  SCOPED_TRACE(::testing::Message() << kv_dtype_name(a.dtype) << " page " << a.page << " heads " << a.hq
                                    << "/" << a.hk << " dim " << a.dim << " split " << a.split_tokens
                                    << " slots " << a.slots << " stages " << a.stages
                                    << (emu::g_cp_immediate ? " cp-immediate" : " cp-deferred"));
  const KvPageLayout l{a.dtype, a.page, a.hk, a.dim};
  const int32_t seqs = static_cast<int32_t>(a.kv.size());
  int32_t max_pages = 1, total_pages = 2, max_kv = 1;
  for (int32_t s = 0; s < seqs; ++s) {
    const int32_t p = (a.kv[s] + a.page - 1) / a.page;
    max_pages = std::max(max_pages, p);
    total_pages += p;
    max_kv = std::max(max_kv, a.kv[s]);
  }
  // Unwritten bytes are NaN in every format (0xFF): a kernel that lets them into a sum fails.
  std::vector<uint8_t> pages(static_cast<size_t>(total_pages * kv_page_bytes(l)), 0xFF);
  std::vector<uint8_t> stage(16);
  std::vector<float> ks, vs;
  for (int h = 0; h < a.hk; ++h) {
    ks.push_back(rng.uniform(0.005f, 0.02f));
    vs.push_back(rng.uniform(0.005f, 0.02f));
  }
  KvCache cache{l, pages.data(), total_pages, stage.data(), 1, ks.data(), vs.data()};
  std::vector<int32_t> ids(static_cast<size_t>(total_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng.engine());
  std::vector<int32_t> table(static_cast<size_t>(seqs * max_pages), 0), q_start = {0}, sids(seqs, 0);
  size_t next = 0;
  for (int32_t s = 0; s < seqs; ++s) {
    for (int32_t p = 0; p * a.page < a.kv[s]; ++p) table[s * max_pages + p] = ids[next++];
    const int64_t row = int64_t{a.hk} * a.dim;
    std::vector<float> k = rng.normals(static_cast<size_t>(a.kv[s] * row), 1.0f), v = rng.normals(k.size());
    for (int64_t t = 0; t < a.kv[s]; ++t) k[t * row] += 3.0f;  // an outlier channel
    std::vector<int32_t> pid, slot, win;
    for (int32_t t = 0; t < a.kv[s]; ++t) {
      pid.push_back(table[s * max_pages + t / a.page]);
      slot.push_back(t % a.page);
      win.push_back(0);
    }
    ASSERT_TRUE(kv_append_ref(cache, {contiguous<const float>(k.data(), a.kv[s], a.hk, a.dim),
                                      contiguous<const float>(v.data(), a.kv[s], a.hk, a.dim), pid.data(),
                                      slot.data(), win.data()})
                    .ok());
    q_start.push_back(q_start.back() + a.q[s]);
  }
  const int64_t tokens = q_start.back();
  const std::vector<float> q = rng.normals(static_cast<size_t>(tokens * a.hq * a.dim));
  AttentionBatch b;
  b.num_seqs = seqs;
  b.num_q_heads = a.hq;
  b.scale = 1.0f / std::sqrt(static_cast<float>(a.dim));
  b.q_start = q_start.data();
  b.kv_len = a.kv.data();
  b.block_table = table.data();
  b.max_pages_per_seq = max_pages;
  b.staging_ids = sids.data();
  b.split_tokens = a.split_tokens;
  std::vector<float> want(q.size()), got(q.size(), NAN);
  ASSERT_TRUE(attention_ref(cache, b, contiguous<const float>(q.data(), tokens, a.hq, a.dim),
                            contiguous(want.data(), tokens, a.hq, a.dim))
                  .ok());

  namespace dec = cuda::decode;
  dec::DecodePlan p =
      dec::plan_decode(seqs, a.hk, a.hq / a.hk, a.dim, max_kv, a.split_tokens, a.slots, a.stages);
  std::vector<float> ws(static_cast<size_t>(std::max<int64_t>(1, p.workspace_bytes / 4)), NAN);
  p.args.workspace = ws.data();
  const unsigned pairs = static_cast<unsigned>(seqs * a.hk);
  const View3<const float> qv = contiguous<const float>(q.data(), tokens, a.hq, a.dim);
  const View3<float> ov = contiguous(got.data(), tokens, a.hq, a.dim);
  const int64_t smem = dec::decode_smem_bytes(DT, D, a.stages);
  emu::launch({static_cast<unsigned>(p.args.splits), static_cast<unsigned>(p.args.row_tiles), pairs},
              {dec::kWarps * 32}, static_cast<size_t>(smem),
              [&] { dec::attention_decode_kernel<DT, D>(cache, b, qv, ov, p.args); });
  if (p.args.splits > 1) {
    emu::launch({dec::kRows, static_cast<unsigned>(p.args.row_tiles), pairs}, {D},
                static_cast<size_t>(dec::merge_smem_bytes(p.args.splits)), [&] {
                  dec::attention_decode_merge_kernel<D>(b, a.hk, ov, p.args.row_tiles, p.args.splits,
                                                        ws.data());
                });
  }
  EXPECT_TRUE(testing::all_finite(got));
  const float rtol = a.dtype == KvDtype::kBF16 ? 3e-2f : 1e-2f;
  EXPECT_TRUE(testing::all_close(got, want, rtol / 2, rtol))
      << "splits " << p.args.splits << " chunks/split " << p.args.chunks_per_split;
}

template <int D>
void run_decode_dim(Rng& rng, const DecodeCase& a) {
  switch (a.dtype) {
    case KvDtype::kF16: return run_decode_typed<KvDtype::kF16, D>(rng, a);
    case KvDtype::kBF16: return run_decode_typed<KvDtype::kBF16, D>(rng, a);
    case KvDtype::kFp8E4M3: return run_decode_typed<KvDtype::kFp8E4M3, D>(rng, a);
    case KvDtype::kInt8: return run_decode_typed<KvDtype::kInt8, D>(rng, a);
    case KvDtype::kInt4: return run_decode_typed<KvDtype::kInt4, D>(rng, a);
    case KvDtype::kInt4Kivi: break;
  }
  FAIL() << "no decode kernel for " << kv_dtype_name(a.dtype);
}

void run_decode(Rng& rng, const DecodeCase& a) {
  if (a.dim == 64) return run_decode_dim<64>(rng, a);
  return run_decode_dim<128>(rng, a);
}

constexpr KvDtype kDecodeDtypes[] = {KvDtype::kF16, KvDtype::kBF16, KvDtype::kFp8E4M3, KvDtype::kInt8,
                                     KvDtype::kInt4};

TEST(CudaEmuDecode, EveryKvDtypeMatchesTheReferenceWithAndWithoutSplits) {
  Rng rng(802);
  SCOPED_TRACE(rng.trace());
  for (KvDtype dt : kDecodeDtypes) {
    // Several sequences of different lengths (a partial last chunk, a single token), GQA 4, split
    // across 3 pieces of the longest one; then one pass per sequence.
    run_decode(rng, {dt, 16, 2, 8, 128, {100, 1, 37}, {1, 1, 1}, 0, 8, 2});
    run_decode(rng, {dt, 32, 1, 4, 64, {70, 33}, {1, 1}, 0, 1000, 3});
  }
}

TEST(CudaEmuDecode, CoversRowTilesForcedSplitsPipelineDepthsAndEmptySequences) {
  Rng rng(803);
  SCOPED_TRACE(rng.trace());
  for (bool immediate : {false, true}) {
    emu::g_cp_immediate = immediate;
    // One long sequence in one block: every warp refills its ring many times (63 chunks).
    run_decode(rng, {KvDtype::kInt8, 16, 1, 4, 128, {1000}, {1}, 0, 1, 2});
    run_decode(rng, {KvDtype::kFp8E4M3, 16, 1, 4, 64, {1000}, {1}, 0, 1, 3});
    // 12 query heads per KV head: two row tiles; a forced split of 64 tokens; 4 stages.
    run_decode(rng, {KvDtype::kInt8, 16, 1, 12, 64, {150}, {1}, 64, 1, 4});
    // Sequence 1 has no query token this step; one query head per KV head.
    run_decode(rng, {KvDtype::kFp8E4M3, 16, 2, 2, 128, {40, 90, 17}, {1, 0, 1}, 0, 4, 2});
  }
  emu::g_cp_immediate = false;
  run_decode(rng, {KvDtype::kInt4, 16, 1, 8, 128, {16, 15}, {1, 1}, 0, 16, 3});  // exact and short chunks
}

// The routing kernel, one warp per token, against moe_route_ref on DeepSeek-V3's (256 experts in 8
// groups, 4 kept, top 8), Kimi K2's (384, one group), GLM-4.5's (160, one group) and small odd shapes,
// with and without the bias, normalisation and softmax scores.
TEST(CudaEmuMoe, RoutingMatchesTheReference) {
  Rng rng(501);
  SCOPED_TRACE(rng.trace());
  struct Shape {
    int32_t experts, top_k, groups, topk_groups;
    bool bias, normalize, softmax;
    int64_t tokens;
  };
  const Shape shapes[] = {{256, 8, 8, 4, true, true, false, 9}, {384, 8, 1, 1, true, true, false, 5},
                          {160, 8, 1, 1, true, true, false, 6}, {12, 3, 4, 2, true, false, false, 7},
                          {8, 2, 2, 1, false, true, false, 4},  {33, 5, 1, 1, false, false, true, 3},
                          {64, 32, 1, 1, true, true, false, 2}};
  for (const Shape& sh : shapes) {
    SCOPED_TRACE("experts " + std::to_string(sh.experts) + " top " + std::to_string(sh.top_k) + " groups " +
                 std::to_string(sh.groups));
    std::vector<float> logits = rng.normals(static_cast<size_t>(sh.tokens * sh.experts), 1.5f);
    std::vector<float> bias = rng.normals(static_cast<size_t>(sh.experts), 0.1f);
    MoeRouting r;
    r.num_experts = sh.experts;
    r.top_k = sh.top_k;
    r.num_groups = sh.groups;
    r.topk_groups = sh.topk_groups;
    r.softmax = sh.softmax;
    r.normalize = sh.normalize;
    r.scaling = 2.5f;
    r.bias = sh.bias ? bias.data() : nullptr;
    std::vector<int32_t> want_e(static_cast<size_t>(sh.tokens * sh.top_k)), got_e(want_e.size(), -1);
    std::vector<float> want_w(want_e.size()), got_w(want_e.size(), NAN);
    ASSERT_TRUE(moe_route_ref(r, contiguous<const float>(logits.data(), sh.tokens, sh.experts), want_e.data(),
                              want_w.data())
                    .ok());
    cuda::moe::RouteArgs a;
    a.logits = logits.data();
    a.row_stride = sh.experts;
    a.tokens = sh.tokens;
    a.num_experts = sh.experts;
    a.top_k = sh.top_k;
    a.num_groups = sh.groups;
    a.topk_groups = sh.topk_groups;
    a.softmax = sh.softmax;
    a.normalize = sh.normalize;
    a.scaling = r.scaling;
    a.bias = r.bias;
    a.experts = got_e.data();
    a.weights = got_w.data();
    const unsigned blocks = static_cast<unsigned>((sh.tokens + cuda::moe::kWarps - 1) / cuda::moe::kWarps);
    emu::launch({blocks}, {cuda::moe::kWarps * 32}, cuda::moe::route_smem_bytes(sh.experts),
                [&] { cuda::moe::moe_route_kernel<>(a); });
    EXPECT_EQ(got_e, want_e);
    EXPECT_TRUE(testing::all_close(got_w, want_w, 1e-6f, 1e-5f));
  }
}

// ---- absorbed MLA decode over latent pages ----

struct MlaCase {
  KvDtype dtype;
  int32_t page;
  int32_t hq;         // query heads (one cached row per token for all of them)
  int32_t dim;        // latent + rope values per row
  int32_t value_dim;  // the latent's width
  std::vector<int32_t> kv;
  std::vector<int32_t> q;  // query tokens per sequence: 1, or 0 for one with none this step
  int32_t split_tokens;    // forced split, 0 = by slots
  int64_t slots;
};

template <int DV>
void run_mla_typed(Rng& rng, const MlaCase& a) {
  SCOPED_TRACE(::testing::Message() << kv_dtype_name(a.dtype) << " page " << a.page << " heads " << a.hq
                                    << " row " << a.dim << "/" << a.value_dim << " split " << a.split_tokens
                                    << " slots " << a.slots);
  const KvPageLayout l = kv_latent_layout(a.dtype, a.page, a.value_dim, a.dim - a.value_dim);
  const int32_t seqs = static_cast<int32_t>(a.kv.size());
  int32_t max_pages = 1, total_pages = 2, max_kv = 1;
  for (int32_t kv : a.kv) {
    max_pages = std::max(max_pages, (kv + a.page - 1) / a.page);
    total_pages += (kv + a.page - 1) / a.page;
    max_kv = std::max(max_kv, kv);
  }
  // Unwritten bytes are NaN in every format (0xFF): a kernel that reads past a sequence fails.
  std::vector<uint8_t> pages(static_cast<size_t>(total_pages * kv_latent_page_bytes(l)), 0xFF);
  const float fp8_scale = 0.02f;
  LatentCache cache{l, pages.data(), total_pages, &fp8_scale};
  std::vector<int32_t> ids(static_cast<size_t>(total_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng.engine());
  std::vector<int32_t> table(static_cast<size_t>(seqs * max_pages), 0), q_start = {0};
  size_t next = 0;
  for (int32_t s = 0; s < seqs; ++s) {
    for (int32_t p = 0; p * a.page < a.kv[s]; ++p) table[s * max_pages + p] = ids[next++];
    std::vector<float> rows = rng.normals(static_cast<size_t>(a.kv[s]) * a.dim);
    for (int32_t t = 0; t < a.kv[s]; ++t) rows[static_cast<size_t>(t) * a.dim + 1] *= 8.0f;  // an outlier
    std::vector<int32_t> pid, slot;
    for (int32_t t = 0; t < a.kv[s]; ++t) {
      pid.push_back(table[s * max_pages + t / a.page]);
      slot.push_back(t % a.page);
    }
    ASSERT_TRUE(latent_append_ref(cache, contiguous<const float>(rows.data(), a.kv[s], a.dim), pid.data(),
                                  slot.data())
                    .ok());
    q_start.push_back(q_start.back() + a.q[s]);
  }
  const int64_t tokens = q_start.back();
  const std::vector<float> q = rng.normals(static_cast<size_t>(tokens * a.hq * a.dim), 0.3f);
  std::vector<int32_t> kv_len = a.kv;
  AttentionBatch b;
  b.num_seqs = seqs;
  b.num_q_heads = a.hq;
  b.scale = 1.0f / std::sqrt(static_cast<float>(a.dim));
  b.q_start = q_start.data();
  b.kv_len = kv_len.data();
  b.block_table = table.data();
  b.max_pages_per_seq = max_pages;
  b.split_tokens = a.split_tokens;
  const size_t outs = static_cast<size_t>(tokens * a.hq * a.value_dim);
  std::vector<float> want(outs), got(outs, NAN);
  const View3<const float> qv = contiguous<const float>(q.data(), tokens, a.hq, a.dim);
  ASSERT_TRUE(
      mla_attention_ref(cache, b, qv, a.value_dim, contiguous(want.data(), tokens, a.hq, a.value_dim)).ok());

  namespace m = cuda::mla;
  m::MlaPlan p = m::plan_mla_decode(seqs, a.hq, a.value_dim, max_kv, a.split_tokens, a.slots, true);
  std::vector<float> ws(static_cast<size_t>(std::max<int64_t>(1, p.workspace_bytes / 4)), NAN);
  p.args.workspace = ws.data();
  const View3<float> ov = contiguous(got.data(), tokens, a.hq, a.value_dim);
  emu::launch({static_cast<unsigned>(p.args.splits), static_cast<unsigned>(p.args.row_tiles),
               static_cast<unsigned>(seqs)},
              {m::kThreads}, static_cast<size_t>(m::mla_smem_bytes(a.dim)),
              [&] { m::mla_decode_kernel<>(cache, b, qv, ov, p.args); });
  if (p.args.splits > 1) {
    emu::launch({m::kHeads, static_cast<unsigned>(p.args.row_tiles), static_cast<unsigned>(seqs)}, {DV},
                static_cast<size_t>(cuda::decode::merge_smem_bytes(p.args.splits)), [&] {
                  cuda::decode::attention_decode_merge_kernel<DV>(b, 1, ov, p.args.row_tiles, p.args.splits,
                                                                  ws.data());
                });
  }
  // Rows are dequantized exactly as the reference does; what differs is fp32 against double sums.
  EXPECT_TRUE(testing::all_close(got, want, 2e-5f, 2e-4f))
      << "splits " << p.args.splits << " tokens/split " << p.args.split_tokens;
}

void run_mla(Rng& rng, const MlaCase& a) {
  if (a.value_dim == 512) return run_mla_typed<512>(rng, a);
  ASSERT_EQ(a.value_dim, 64);
  run_mla_typed<64>(rng, a);
}

constexpr KvDtype kLatentDtypes[] = {KvDtype::kF16, KvDtype::kBF16, KvDtype::kFp8E4M3, KvDtype::kInt8,
                                     KvDtype::kInt4};

TEST(CudaEmuMla, EveryLatentDtypeMatchesTheReferenceWithAndWithoutSplits) {
  Rng rng(905);
  SCOPED_TRACE(rng.trace());
  for (KvDtype dt : kLatentDtypes) {
    // The engine tests' shape (a 64-wide latent and a 16-wide rope key; int4's groups are 64 and 16
    // values), 12 heads (a full and a partial head tile), sequences with a partial chunk, a single token
    // and none this step; then a forced split of 24 tokens (3 chunks) that a short sequence does not
    // reach, merged.
    run_mla(rng, {dt, 16, 12, 80, 64, {37, 1, 20}, {1, 1, 0}, 0, 1});
    run_mla(rng, {dt, 16, 12, 80, 64, {100, 9}, {1, 1}, 24, 1});
  }
}

TEST(CudaEmuMla, KimiWidthsSplitByTheSlotsTheyWouldLeaveEmpty) {
  Rng rng(906);
  SCOPED_TRACE(rng.trace());
  // Kimi K2's 576-value row (512 latent + 64 rope; int4 in groups of 128), 16 heads (its 64 over 4 GPUs),
  // a page of 64 tokens:
  // two sequences leave a 32-slot GPU empty, so the KV range is split (min 256 tokens) and merged.
  run_mla(rng, {KvDtype::kInt4, 64, 16, 576, 512, {600, 70}, {1, 1}, 0, 32});
  run_mla(rng, {KvDtype::kInt8, 64, 16, 576, 512, {130}, {1}, 0, 1});
}

// ---- routed experts: align, the experts' linear layers, combine ----

using testing::HostWeight;
constexpr auto make_weight = &testing::make_host_weight;

// Runs align + expert linear (+ combine) on the emulator for `experts` [T, top_k] and compares every
// assignment's row with linear_ref of its expert, in both x layouts (a token's x for all its experts,
// and one x row per assignment).
void run_experts(Rng& rng, const WeightLayout& l, int32_t num_experts, int32_t top_k,
                 const std::vector<int32_t>& experts) {
  SCOPED_TRACE(::testing::Message() << weight_format_name(l.format) << " g" << l.group_size << " " << l.rows
                                    << "x" << l.cols << " experts " << num_experts << " top " << top_k);
  const int64_t A = static_cast<int64_t>(experts.size()), T = A / top_k, N = l.rows, K = l.cols;
  std::vector<HostWeight> ws;
  std::vector<WeightView> views;
  for (int32_t e = 0; e < num_experts; ++e) ws.push_back(make_weight(rng, l));
  for (const HostWeight& w : ws) views.push_back(w.view());
  std::vector<int32_t> order(static_cast<size_t>(A), -1), offsets(static_cast<size_t>(num_experts) + 1, -1),
      active(static_cast<size_t>(num_experts), -1), num_active(1, -1);
  namespace m = cuda::moe;
  m::AlignArgs al;
  al.experts = experts.data();
  al.assignments = A;
  al.num_experts = num_experts;
  al.order = order.data();
  al.offsets = offsets.data();
  al.active = active.data();
  al.num_active = num_active.data();
  emu::launch({1}, {m::kAlignThreads}, static_cast<size_t>(m::align_smem_bytes(num_experts)),
              [&] { m::moe_align_kernel<>(al); });
  // The alignment itself: offsets are the prefix sums of the counts, each expert's assignments are
  // exactly those routed to it, the active list is the experts with any, ascending.
  std::vector<int32_t> want_active;
  for (int32_t e = 0; e < num_experts; ++e) {
    std::vector<int32_t> want_ids, got_ids(order.begin() + offsets[e], order.begin() + offsets[e + 1]);
    for (int64_t a = 0; a < A; ++a) {
      if (experts[a] == e) want_ids.push_back(static_cast<int32_t>(a));
    }
    std::sort(got_ids.begin(), got_ids.end());
    EXPECT_EQ(got_ids, want_ids) << "expert " << e;
    if (!want_ids.empty()) want_active.push_back(e);
  }
  EXPECT_EQ(offsets[num_experts], A);
  ASSERT_EQ(num_active[0], static_cast<int32_t>(want_active.size()));
  EXPECT_EQ(std::vector<int32_t>(active.begin(), active.begin() + num_active[0]), want_active);

  for (int32_t x_div : {top_k, 1}) {
    const int64_t xr = x_div == 1 ? A : T;
    std::vector<float> x = rng.normals(static_cast<size_t>(xr * K)), want(static_cast<size_t>(A * N)),
                       got(want.size(), NAN);
    for (int64_t a = 0; a < A; ++a) {
      ASSERT_TRUE(linear_ref(contiguous<const float>(x.data() + (a / x_div) * K, 1, K), views[experts[a]],
                             nullptr, contiguous(want.data() + a * N, 1, N))
                      .ok());
    }
    m::ExpertLinearArgs la;
    la.x = contiguous<const float>(x.data(), xr, K);
    la.x_div = x_div;
    la.w = views.data();
    la.order = order.data();
    la.offsets = offsets.data();
    la.active = active.data();
    la.num_active = num_active.data();
    la.y = contiguous(got.data(), A, N);
    // One spare expert slot past the active ones: its blocks must return without writing.
    emu::launch({static_cast<unsigned>((N + m::kBlockRows - 1) / m::kBlockRows),
                 static_cast<unsigned>(std::min<int64_t>(num_active[0] + 1, num_experts))},
                {m::kLinearWarps * 32}, 0, [&] { m::moe_expert_linear_kernel<>(la); });
    EXPECT_TRUE(testing::all_close(got, want, 1e-5f, 1e-4f)) << "x_div " << x_div;
    if (x_div != top_k) continue;
    // Combine into an existing output (the shared expert's), k in order.
    std::vector<float> wts = rng.normals(static_cast<size_t>(A)),
                       base = rng.normals(static_cast<size_t>(T * N));
    std::vector<float> out = base, want_out = base;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t n = 0; n < N; ++n) {
        float s = want_out[t * N + n];
        for (int32_t k = 0; k < top_k; ++k) s += wts[t * top_k + k] * got[(t * top_k + k) * N + n];
        want_out[t * N + n] = s;
      }
    }
    emu::launch({static_cast<unsigned>((T * N + 255) / 256)}, {256}, 0, [&] {
      m::moe_combine_kernel<>(contiguous<const float>(got.data(), A, N), wts.data(), top_k,
                              contiguous(out.data(), T, N), true);
    });
    EXPECT_TRUE(testing::bit_equal(out.data(), want_out.data(), out.size()));
  }
}

TEST(CudaEmuMoe, RoutedExpertsMatchLinearRefForEveryAssignmentInEveryWeightFormat) {
  Rng rng(907);
  SCOPED_TRACE(rng.trace());
  // 12 tokens, top 2 of 6 experts: expert 0 takes 10 assignments (two passes of 8), expert 4 none.
  std::vector<int32_t> experts;
  for (int32_t t = 0; t < 12; ++t) {
    experts.push_back(t < 10 ? 0 : 1);
    experts.push_back(t % 2 ? 2 : 3);
  }
  experts[23] = 5;
  // K = 100: 12 units of 8 and a tail of 4; N = 40: a full and a partial block of rows.
  const WeightLayout layouts[] = {{WeightFormat::kF16, 40, 100, 0},
                                  {WeightFormat::kBF16, 40, 100, 0},
                                  {WeightFormat::kInt8, 40, 100, 0},
                                  {WeightFormat::kInt4Sym, 40, 96, 32},
                                  {WeightFormat::kInt4Asym, 40, 100, 128, ScaleDtype::kBF16}};
  for (const WeightLayout& l : layouts) run_experts(rng, l, 6, 2, experts);
  // Decode: one token, top 8 of 64 (GLM-4.5's routing width, smaller), K a multiple of 256.
  std::vector<int32_t> one = {3, 17, 62, 5, 40, 41, 0, 9};
  run_experts(rng, {WeightFormat::kInt4Sym, 64, 512, 32}, 64, 8, one);
}

// ---- element-wise ops ----

unsigned ew_grid(int64_t n) {
  return static_cast<unsigned>((n + cuda::ew::kThreads - 1) / cuda::ew::kThreads);
}

// RMSNorm on rows narrower and wider than a block, not a multiple of 32, strided, in place and not;
// with the launcher's 256 threads and with 64 (two warps: the block sum's other branch).
TEST(CudaEmuElementwise, RmsnormMatchesTheReferenceOnOddWidthsStridesAndInPlace) {
  Rng rng(601);
  SCOPED_TRACE(rng.trace());
  for (int64_t cols : {1, 31, 200, 700}) {
    for (unsigned threads : {unsigned{cuda::ew::kThreads}, 64u}) {
      SCOPED_TRACE(::testing::Message() << "cols " << cols << " threads " << threads);
      const int64_t rows = 3, stride = cols + 5;
      std::vector<float> x = rng.normals(static_cast<size_t>(rows * stride), 2.0f), w = rng.normals(cols);
      std::vector<float> want(x.size(), 0.0f), got(x.size(), 0.0f), inplace = x;
      const View2<const float> xv{x.data(), rows, cols, stride};
      ASSERT_TRUE(rmsnorm_ref(xv, w.data(), 1e-5f, {want.data(), rows, cols, stride}).ok());
      emu::launch({static_cast<unsigned>(rows)}, {threads}, cuda::ew::kRmsnormSmem, [&] {
        cuda::ew::rmsnorm_kernel<>(xv, w.data(), 1e-5f, View2<float>{got.data(), rows, cols, stride});
      });
      emu::launch({static_cast<unsigned>(rows)}, {threads}, cuda::ew::kRmsnormSmem, [&] {
        cuda::ew::rmsnorm_kernel<>(View2<const float>{inplace.data(), rows, cols, stride}, w.data(), 1e-5f,
                                   View2<float>{inplace.data(), rows, cols, stride});
      });
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = cols; c < stride; ++c) {  // the padding untouched
          EXPECT_EQ(got[static_cast<size_t>(r * stride + c)], 0.0f);
          want[static_cast<size_t>(r * stride + c)] = inplace[static_cast<size_t>(r * stride + c)] =
              x[static_cast<size_t>(r * stride + c)];
          got[static_cast<size_t>(r * stride + c)] = x[static_cast<size_t>(r * stride + c)];
        }
      }
      EXPECT_TRUE(testing::all_close(got, want, 1e-6f, 1e-5f));
      EXPECT_TRUE(testing::all_close(inplace, want, 1e-6f, 1e-5f));
    }
  }
}

// RoPE in both layouts, full and partial rotary (GLM's half), q and k with different head counts,
// positions out of order; the unrotated tail of each head untouched.
TEST(CudaEmuElementwise, RopeMatchesTheReferenceInBothLayoutsAndPartialRotary) {
  Rng rng(602);
  SCOPED_TRACE(rng.trace());
  for (RopeStyle style : {RopeStyle::kHalfSplit, RopeStyle::kInterleaved}) {
    for (int32_t rotary : {64, 32}) {
      SCOPED_TRACE(::testing::Message() << (style == RopeStyle::kHalfSplit ? "half-split" : "interleaved")
                                        << " rotary " << rotary);
      RopeConfig c;
      c.style = style;
      c.head_dim = 64;
      c.rotary_dim = rotary;
      c.theta = 10000.0f;
      std::vector<float> inv;
      ASSERT_TRUE(rope_inv_freq(c, &inv).ok());
      const int64_t T = 5, hq = 6, hk = 2;
      std::vector<int32_t> pos = {0, 7, 3, 4095, 100};
      std::vector<float> q = rng.normals(static_cast<size_t>(T * hq * 64)),
                         k = rng.normals(static_cast<size_t>(T * hk * 64));
      std::vector<float> qw = q, kw = k;
      ASSERT_TRUE(rope_ref(c, inv.data(), pos.data(), contiguous(qw.data(), T, hq, 64),
                           contiguous(kw.data(), T, hk, 64))
                      .ok());
      const int64_t n = (T * hq + T * hk) * (rotary / 2);
      emu::launch({ew_grid(n)}, {unsigned{cuda::ew::kThreads}}, 0, [&] {
        cuda::ew::rope_kernel<>(style, rotary / 2, inv.data(), pos.data(), contiguous(q.data(), T, hq, 64),
                                contiguous(k.data(), T, hk, 64));
      });
      EXPECT_TRUE(testing::all_close(q, qw, 2e-5f, 1e-5f));
      EXPECT_TRUE(testing::all_close(k, kw, 2e-5f, 1e-5f));
    }
  }
}

// SiLU-and-multiply, the residual add and the bias add over strided views, in place where the ops
// allow it; the embedding lookup from fp32, fp16 and bf16 tables, an out-of-range id writing zeros.
TEST(CudaEmuElementwise, PointwiseOpsAndEmbeddingMatchTheReference) {
  Rng rng(603);
  SCOPED_TRACE(rng.trace());
  const int64_t rows = 3, cols = 333, stride = 340, n = rows * cols;
  std::vector<float> a = rng.normals(static_cast<size_t>(rows * stride), 3.0f), b = rng.normals(a.size());
  std::vector<float> bias = rng.normals(static_cast<size_t>(cols));
  auto view = [&](std::vector<float>& v) { return View2<float>{v.data(), rows, cols, stride}; };
  auto cview = [&](const std::vector<float>& v) { return View2<const float>{v.data(), rows, cols, stride}; };
  {
    std::vector<float> want = a, got = a;
    ASSERT_TRUE(silu_mul_ref(cview(a), cview(b), view(want)).ok());
    emu::launch({ew_grid(n)}, {unsigned{cuda::ew::kThreads}}, 0,
                [&] { cuda::ew::silu_mul_kernel<>(cview(a), cview(b), view(got)); });
    EXPECT_TRUE(testing::all_close(got, want, 1e-6f, 1e-6f)) << "silu_mul";
  }
  {
    std::vector<float> want = a, got = a;
    ASSERT_TRUE(add_ref(cview(want), cview(b), view(want)).ok());
    emu::launch({ew_grid(n)}, {unsigned{cuda::ew::kThreads}}, 0,
                [&] { cuda::ew::add_kernel<>(cview(got), cview(b), view(got)); });
    EXPECT_TRUE(testing::bit_equal(got.data(), want.data(), got.size())) << "add";
  }
  {
    std::vector<float> want = a, got = a;
    ASSERT_TRUE(bias_add_ref(view(want), bias.data()).ok());
    emu::launch({ew_grid(n)}, {unsigned{cuda::ew::kThreads}}, 0,
                [&] { cuda::ew::bias_add_kernel<>(view(got), bias.data()); });
    EXPECT_TRUE(testing::bit_equal(got.data(), want.data(), got.size())) << "bias_add";
  }
  const int64_t vocab = 11, width = 300, row_stride = 304;
  const std::vector<float> table = rng.normals(static_cast<size_t>(vocab * row_stride));
  std::vector<uint16_t> t16(table.size()), tb16(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    t16[i] = fp16_from_float(table[i]);
    tb16[i] = bf16_from_float(table[i]);
  }
  const std::vector<int32_t> ids = {3, 0, 10, 3, 7};
  for (SourceDtype dt : {SourceDtype::kF32, SourceDtype::kF16, SourceDtype::kBF16}) {
    SCOPED_TRACE(static_cast<int>(dt));
    const void* data = dt == SourceDtype::kF32   ? static_cast<const void*>(table.data())
                       : dt == SourceDtype::kF16 ? static_cast<const void*>(t16.data())
                                                 : static_cast<const void*>(tb16.data());
    const MatrixSource src{data, dt, vocab, width, row_stride};
    const int64_t T = static_cast<int64_t>(ids.size());
    std::vector<float> want(static_cast<size_t>(T * width)), got(want.size(), NAN);
    ASSERT_TRUE(embedding_ref(src, ids.data(), T, contiguous(want.data(), T, width)).ok());
    emu::launch({static_cast<unsigned>(T)}, {unsigned{cuda::ew::kThreads}}, 0,
                [&] { cuda::ew::embedding_kernel<>(src, ids.data(), contiguous(got.data(), T, width)); });
    EXPECT_TRUE(testing::bit_equal(got.data(), want.data(), got.size()));
    const std::vector<int32_t> bad = {vocab, -1};
    std::vector<float> zeros(static_cast<size_t>(2 * width), NAN);
    emu::launch({2u}, {unsigned{cuda::ew::kThreads}}, 0,
                [&] { cuda::ew::embedding_kernel<>(src, bad.data(), contiguous(zeros.data(), 2, width)); });
    EXPECT_TRUE(std::all_of(zeros.begin(), zeros.end(), [](float x) { return x == 0.0f; }));
  }
}

// ---- KV and latent pages ----

constexpr unsigned kKvThreads = cuda::kvw::kWarpsPerBlock * 32;
unsigned kv_grid(int64_t items) {
  return static_cast<unsigned>((items + cuda::kvw::kWarpsPerBlock - 1) / cuda::kvw::kWarpsPerBlock);
}

// The page bytes and staging windows kv_append_ref writes, bit for bit, in every dtype, over two calls
// (the second finishing one page, filling another and starting a third, so int4-kivi seals pages whose
// keys come partly from the window and partly from the call), with non-finite inputs; then every page
// read back with the reference's bits.
TEST(CudaEmuKv, AppendWritesTheReferencesBytesAndReadsBackBitIdentically) {
  Rng rng(611);
  SCOPED_TRACE(rng.trace());
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kBF16, KvDtype::kFp8E4M3, KvDtype::kInt8, KvDtype::kInt4,
                     KvDtype::kInt4Kivi}) {
    for (int32_t d : {8, 33, 128}) {
      SCOPED_TRACE(::testing::Message() << kv_dtype_name(dt) << " head_dim " << d);
      const KvPageLayout l{dt, 4, 3, d};
      const int64_t pages = 6, wins = 2;
      std::vector<uint8_t> want_pages(static_cast<size_t>(pages * kv_page_bytes(l)), 0x5A);
      std::vector<uint8_t> want_stage(static_cast<size_t>(std::max<int64_t>(16, wins * kv_staging_bytes(l))),
                                      0);
      std::vector<uint8_t> got_pages = want_pages, got_stage = want_stage;
      const std::vector<float> ks = {0.5f, 1.0f, 2.0f}, vs = {0.25f, 1.0f, 3.0f};
      const KvCache want{l, want_pages.data(), pages, want_stage.data(), wins, ks.data(), vs.data()};
      const KvCache got{l, got_pages.data(), pages, got_stage.data(), wins, ks.data(), vs.data()};
      int64_t pos = 0;
      const int32_t page_of[3] = {4, 1, 5};
      for (int64_t n : {3, 7}) {
        std::vector<float> k = rng.normals(static_cast<size_t>(n * 3 * d), 2.0f), v = rng.normals(k.size());
        k[1] = std::numeric_limits<float>::infinity();
        v[2] = std::numeric_limits<float>::quiet_NaN();
        std::vector<int32_t> ids, slots, wid;
        for (int64_t t = 0; t < n; ++t, ++pos) {
          ids.push_back(page_of[pos / 4]);
          slots.push_back(static_cast<int32_t>(pos % 4));
          wid.push_back(1);
        }
        const KvAppend a{contiguous<const float>(k.data(), n, 3, d),
                         contiguous<const float>(v.data(), n, 3, d), ids.data(), slots.data(), wid.data()};
        ASSERT_TRUE(kv_append_ref(want, a).ok());
        if (dt == KvDtype::kInt4Kivi) {
          emu::launch({kv_grid(n * 3)}, {kKvThreads}, 0, [&] { cuda::kvw::kivi_seal_kernel<>(got, a, n); });
        }
        emu::launch({kv_grid(n * 3)}, {kKvThreads}, 0, [&] { cuda::kvw::kv_append_kernel<>(got, a, n); });
      }
      EXPECT_EQ(got_pages, want_pages);
      EXPECT_EQ(got_stage, want_stage);
      for (auto [page, filled] : {std::pair{4, 4}, std::pair{1, 4}, std::pair{5, 2}}) {
        const size_t n = static_cast<size_t>(3 * filled * d);
        std::vector<float> rk(n), rv(n), gk(n, NAN), gv(n, NAN);
        ASSERT_TRUE(kv_read_page_ref(want, page, filled, 1, contiguous(rk.data(), 3, filled, d),
                                     contiguous(rv.data(), 3, filled, d))
                        .ok());
        emu::launch({static_cast<unsigned>((n + 255) / 256)}, {256u}, 0, [&] {
          cuda::kvw::kv_read_page_kernel<>(got, page, filled, 1, contiguous(gk.data(), 3, filled, d),
                                           contiguous(gv.data(), 3, filled, d));
        });
        EXPECT_TRUE(testing::bit_equal(gk.data(), rk.data(), n)) << "K page " << page;
        EXPECT_TRUE(testing::bit_equal(gv.data(), rv.data(), n)) << "V page " << page;
      }
    }
  }
}

// Latent rows into their pages, bit for bit the reference's, in every latent dtype: Kimi K2's row
// (512 + 64: int4 in groups of 128 and one of 64), an odd row (int4 groups of 64 with a short last
// one), non-finite values, a whole group of NaN; a row aimed outside the pool is skipped.
TEST(CudaEmuKv, LatentAppendWritesTheReferencesBytes) {
  Rng rng(612);
  SCOPED_TRACE(rng.trace());
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kBF16, KvDtype::kFp8E4M3, KvDtype::kInt8, KvDtype::kInt4}) {
    for (auto [latent, rope] : {std::pair{512, 64}, std::pair{40, 18}}) {
      const int32_t d = latent + rope;
      SCOPED_TRACE(::testing::Message() << kv_dtype_name(dt) << " row " << latent << " + " << rope);
      const float scale = 0.75f;
      LatentCache want{kv_latent_layout(dt, 16, latent, rope), nullptr, 3, &scale};
      std::vector<uint8_t> want_pages(static_cast<size_t>(3 * kv_latent_page_bytes(want.layout)), 0xA5);
      std::vector<uint8_t> got_pages = want_pages;
      want.pages = want_pages.data();
      LatentCache got = want;
      got.pages = got_pages.data();
      const int64_t n = 21;
      std::vector<float> rows = rng.normals(static_cast<size_t>(n * d), 2.0f);
      rows[3] = std::numeric_limits<float>::infinity();
      rows[static_cast<size_t>(d + 5)] = std::numeric_limits<float>::quiet_NaN();
      for (int32_t c = 0; c < 64 && c < d; ++c) rows[static_cast<size_t>(2 * d + c)] = NAN;
      std::vector<int32_t> ids, slots;
      for (int64_t t = 0; t < n; ++t) {
        ids.push_back(static_cast<int32_t>(2 - t / 16));
        slots.push_back(static_cast<int32_t>(t % 16));
      }
      const View2<const float> rv{rows.data(), n, d, d};
      ASSERT_TRUE(latent_append_ref(want, rv, ids.data(), slots.data()).ok());
      emu::launch({kv_grid(n)}, {kKvThreads}, 0,
                  [&] { cuda::kvw::latent_append_kernel<>(got, rv, ids.data(), slots.data()); });
      EXPECT_EQ(got_pages, want_pages);
      const std::vector<int32_t> bad_ids = {3, -1}, bad_slots = {0, 0};
      emu::launch({1u}, {kKvThreads}, 0, [&] {
        cuda::kvw::latent_append_kernel<>(got, View2<const float>{rows.data(), 2, d, d}, bad_ids.data(),
                                          bad_slots.data());
      });
      EXPECT_EQ(got_pages, want_pages) << "a row aimed outside the pool wrote something";
    }
  }
}

// ---- weights ----

// Odd shapes in every format: a row shorter than a block, a last group short of its size, bf16 scales.
const WeightLayout kEmuWeightLayouts[] = {{WeightFormat::kF16, 5, 100},
                                          {WeightFormat::kBF16, 4, 64},
                                          {WeightFormat::kInt8, 6, 129, 0, ScaleDtype::kF16},
                                          {WeightFormat::kInt8, 3, 300, 0, ScaleDtype::kBF16},
                                          {WeightFormat::kInt4Sym, 5, 130, 32, ScaleDtype::kF16},
                                          {WeightFormat::kInt4Asym, 4, 256, 64, ScaleDtype::kF16},
                                          {WeightFormat::kInt4Sym, 3, 512, 128, ScaleDtype::kBF16},
                                          {WeightFormat::kInt4Asym, 7, 33, 32, ScaleDtype::kF16}};

// quantize_weight's kernel writes quantize_weight_ref's bytes (data, scales, zero points), one block of
// 256 threads per row; a row the reference refuses (a non-finite weight) is reported by its index, the
// lowest of several; dequantize_weight gives the reference's bits.
TEST(CudaEmuWeight, QuantizeWritesTheReferencesBytesAndDequantizeItsBits) {
  Rng rng(621);
  SCOPED_TRACE(rng.trace());
  const unsigned threads = cuda::wq::kThreads;
  for (const WeightLayout& l : kEmuWeightLayouts) {
    SCOPED_TRACE(::testing::Message() << weight_format_name(l.format) << " " << l.rows << "x" << l.cols);
    std::vector<float> src = rng.normals(static_cast<size_t>(l.rows * l.cols), 0.05f);
    if (l.format == WeightFormat::kInt4Asym) {
      for (auto& x : src) x += 0.02f;
    }
    const MatrixSource ms{src.data(), SourceDtype::kF32, l.rows, l.cols, l.cols};
    const WeightBytes b = weight_bytes(l);
    std::vector<uint8_t> want_d(static_cast<size_t>(b.data)), got_d(want_d.size(), 0xEE);
    std::vector<uint16_t> want_s(static_cast<size_t>(b.scales / 2)), got_s(want_s.size(), 0xEEEE);
    std::vector<uint8_t> want_z(static_cast<size_t>(b.zeros)), got_z(want_z.size(), 0xEE);
    ASSERT_TRUE(
        quantize_weight_ref(ms, l, {want_d.data(), want_s.data(), b.zeros ? want_z.data() : nullptr}).ok());
    int32_t bad = INT32_MAX;
    const WeightBuffers out{got_d.data(), got_s.data(), b.zeros ? got_z.data() : nullptr};
    emu::launch({static_cast<unsigned>(l.rows)}, {threads}, sizeof(cuda::wq::QuantizeSmem),
                [&] { cuda::wq::quantize_weight_kernel<>(ms, l, out, &bad); });
    EXPECT_EQ(bad, INT32_MAX);
    EXPECT_EQ(got_d, want_d);
    EXPECT_EQ(got_s, want_s);
    EXPECT_EQ(got_z, want_z);

    const WeightView wv{l, want_d.data(), want_s.data(), b.zeros ? want_z.data() : nullptr};
    std::vector<float> want(static_cast<size_t>(l.rows * l.cols)), got(want.size(), NAN);
    ASSERT_TRUE(dequantize_weight_ref(wv, contiguous(want.data(), l.rows, l.cols)).ok());
    emu::launch({static_cast<unsigned>((want.size() + threads - 1) / threads)}, {threads}, 0,
                [&] { cuda::wq::dequantize_weight_kernel<>(wv, contiguous(got.data(), l.rows, l.cols)); });
    EXPECT_TRUE(testing::bit_equal(got.data(), want.data(), want.size()));

    if (l.rows < 3) continue;
    src[static_cast<size_t>(2 * l.cols + 1)] = std::numeric_limits<float>::infinity();
    src[static_cast<size_t>((l.rows - 1) * l.cols)] = NAN;
    bad = INT32_MAX;
    emu::launch({static_cast<unsigned>(l.rows)}, {threads}, sizeof(cuda::wq::QuantizeSmem),
                [&] { cuda::wq::quantize_weight_kernel<>(ms, l, out, &bad); });
    EXPECT_EQ(bad, 2) << "the first refused row";
  }
}

// The device repacking for the tensor-core GEMV puts every code where the layout's map says (the map
// the host packer and the GEMV's loads use).
TEST(CudaEmuWeight, Int4RepackingPutsEveryCodeWhereTheLayoutMapSays) {
  Rng rng(622);
  SCOPED_TRACE(rng.trace());
  for (const WeightLayout& l : {WeightLayout{WeightFormat::kInt4Sym, 32, 128, 32, ScaleDtype::kF16},
                                WeightLayout{WeightFormat::kInt4Asym, 16, 192, 64, ScaleDtype::kBF16}}) {
    SCOPED_TRACE(weight_format_name(l.format));
    const testing::HostWeight w = testing::make_host_weight(rng, l);
    const std::vector<uint8_t> want = mma_packed(w);
    std::vector<uint8_t> got(want.size(), 0xEE);
    const int64_t words = l.rows * l.cols / 8;
    emu::launch({static_cast<unsigned>((words + 255) / 256)}, {256u}, 0,
                [&] { cuda::wq::pack_int4_kernel<>(w.view(), reinterpret_cast<uint32_t*>(got.data())); });
    EXPECT_EQ(got, want);
  }
}

}  // namespace
}  // namespace infergate::kernels
