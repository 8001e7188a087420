// The CUDA ops against the CPU references: bit-identical quantization, dequantization and KV pages;
// linear layers, attention and element-wise ops within dtype-aware tolerances, with a separate
// no-NaN check. Two builds of this file: kernels_cuda_tests on a real GPU (every test that needs one
// skips cleanly without it), and kernels_cuda_emu_tests on emulated devices (the emulated CUDA runtime
// and the CPU emulator, tests/kernels/emu), which runs the same launchers and kernels in CI.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <sstream>
#include <vector>

#include "cuda/tuning.h"
#include "infergate/kernels/cuda.h"
#include "infergate/kernels/cuda_layouts.h"
#include "infergate/kernels/ref.h"
#include "kernels/test_util.h"

namespace infergate::kernels {
namespace {

using testing::Rng;

// Under the emulator the longest grids shrink to what a CPU runs in seconds; a GPU runs them in full.
#if defined(INFERGATE_CUDA_EMU)
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif
template <class T>
T full_or_emulated(T full, T emulated) {
  return kEmulated ? emulated : full;
}

// ---- device memory ----

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(std::max<size_t>(bytes, 16)) {
    const cudaError_t e = cudaMalloc(&p_, bytes_);
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    if (e == cudaSuccess) cudaMemset(p_, 0, bytes_);
  }
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    if (!host.empty()) {
      EXPECT_EQ(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T = void>
  T* get() const {
    return static_cast<T*>(p_);
  }
  template <class T>
  std::vector<T> download(size_t n) const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p_, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no GPU: " << cuda::device_description();
  }
  void TearDown() override {
    if (cuda::device_count() == 0) return;
    const cudaError_t e = cudaDeviceSynchronize();
    EXPECT_EQ(e, cudaSuccess) << "a kernel failed: " << cudaGetErrorString(e);
  }
};

void ok(const Status& s) { ASSERT_TRUE(s.ok()) << s.to_string(); }

// ---- weights ----

using testing::HostWeight;
constexpr auto make_weight = testing::make_host_weight;

// The weight's arrays on the device.
struct DeviceWeight {
  explicit DeviceWeight(const HostWeight& h)
      : data(h.data),
        scales(h.scales),
        zeros(h.zeros.empty() ? std::vector<uint8_t>(1) : h.zeros),
        layout(h.layout),
        has_zeros(!h.zeros.empty()),
        has_scales(!h.scales.empty()) {}
  WeightView view() const {
    return {layout, data.get(), has_scales ? scales.get() : nullptr,
            has_zeros ? zeros.get<uint8_t>() : nullptr};
  }
  DeviceBuffer data, scales, zeros;
  WeightLayout layout;
  bool has_zeros, has_scales;
};

const WeightLayout kWeightLayouts[] = {{WeightFormat::kF16, 33, 100},
                                       {WeightFormat::kBF16, 16, 64},
                                       {WeightFormat::kInt8, 40, 129, 0, ScaleDtype::kF16},
                                       {WeightFormat::kInt8, 64, 256, 0, ScaleDtype::kBF16},
                                       {WeightFormat::kInt4Sym, 48, 130, 32, ScaleDtype::kF16},
                                       {WeightFormat::kInt4Asym, 32, 256, 64, ScaleDtype::kF16},
                                       {WeightFormat::kInt4Sym, 64, 512, 128, ScaleDtype::kBF16},
                                       {WeightFormat::kInt4Asym, 7, 33, 32, ScaleDtype::kF16}};

TEST_F(CudaOps, QuantizeWeightWritesTheReferencesBytes) {
  Rng rng(701);
  SCOPED_TRACE(rng.trace());
  for (const WeightLayout& l : kWeightLayouts) {
    SCOPED_TRACE(::testing::Message() << weight_format_name(l.format) << " " << l.rows << "x" << l.cols);
    const HostWeight ref = make_weight(rng, l);
    DeviceBuffer src(ref.source);
    const WeightBytes b = weight_bytes(l);
    DeviceBuffer data(b.data), scales(b.scales), zeros(b.zeros);
    ok(cuda::quantize_weight({src.get(), SourceDtype::kF32, l.rows, l.cols, l.cols}, l,
                             {data.get(), scales.get(), b.zeros ? zeros.get<uint8_t>() : nullptr}, nullptr));
    EXPECT_EQ(data.download<uint8_t>(ref.data.size()), ref.data);
    EXPECT_EQ(scales.download<uint16_t>(ref.scales.size()), ref.scales);
    EXPECT_EQ(zeros.download<uint8_t>(ref.zeros.size()), ref.zeros);
  }
  // A refused row gives the reference's message.
  std::vector<float> bad(4 * 64, 0.1f);
  bad[2 * 64 + 5] = std::numeric_limits<float>::infinity();
  DeviceBuffer src(bad), data(4 * 64), scales(64);
  const Status s =
      cuda::quantize_weight({src.get(), SourceDtype::kF32, 4, 64, 64}, {WeightFormat::kInt8, 4, 64},
                            {data.get(), scales.get(), nullptr}, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row 2, column 5"), std::string::npos) << s.message();
}

TEST_F(CudaOps, DequantizeWeightIsBitIdenticalToTheReference) {
  Rng rng(702);
  SCOPED_TRACE(rng.trace());
  for (const WeightLayout& l : kWeightLayouts) {
    SCOPED_TRACE(weight_format_name(l.format));
    const HostWeight h = make_weight(rng, l);
    DeviceWeight d(h);
    std::vector<float> want(static_cast<size_t>(l.rows * l.cols));
    ok(dequantize_weight_ref(h.view(), contiguous(want.data(), l.rows, l.cols)));
    DeviceBuffer out(want.size() * 4);
    ok(cuda::dequantize_weight(d.view(), contiguous(out.get<float>(), l.rows, l.cols), nullptr));
    const std::vector<float> got = out.download<float>(want.size());
    EXPECT_TRUE(testing::bit_equal(got.data(), want.data(), want.size()));
  }
}

// ---- int4 mma layout (CPU emulation, no GPU needed) ----

// D (16 x 8) = A (16 x 16) B (16 x 8) as mma.m16n8k16 computes it, from each lane's registers, with
// the fragment layouts of the PTX ISA written out here independently of cuda_layouts.h.
void emulate_mma(const float a[32][8], const float b[32][4], float d[16][8]) {
  float A[16][16] = {}, B[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, c = lane % 4;
    for (int i = 0; i < 8; ++i) {  // a_i: rows g (i in 0,1,4,5) or g+8; cols 2c + (i & 1) (+8 for i >= 4)
      const int row = g + ((i == 2 || i == 3 || i == 6 || i == 7) ? 8 : 0);
      const int col = 2 * c + (i & 1) + (i >= 4 ? 8 : 0);
      A[row][col] = a[lane][i];
    }
    for (int i = 0; i < 4; ++i) B[2 * c + (i & 1) + (i >= 2 ? 8 : 0)][g] = b[lane][i];
  }
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 8; ++n) {
      double s = 0;
      for (int k = 0; k < 16; ++k) s += static_cast<double>(A[r][k]) * B[k][n];
      d[r][n] = static_cast<float>(s);
    }
  }
}

// ---- mixture of experts ----

// The routing kernel on the device (its logic is also checked on the CPU emulator, CudaEmuMoe):
// DeepSeek-V3's shape (256 experts, 8 groups, 4 kept, top 8) for a prefill-sized batch.
TEST_F(CudaOps, MoeRoutingMatchesTheReference) {
  Rng rng(502);
  const int64_t tokens = 1000;
  const int32_t experts = 256, top = 8;
  std::vector<float> logits = rng.normals(static_cast<size_t>(tokens * experts), 1.5f);
  std::vector<float> bias = rng.normals(experts, 0.1f);
  MoeRouting r;
  r.num_experts = experts;
  r.top_k = top;
  r.num_groups = 8;
  r.topk_groups = 4;
  r.scaling = 2.5f;
  r.bias = bias.data();
  std::vector<int32_t> want_e(static_cast<size_t>(tokens * top));
  std::vector<float> want_w(want_e.size());
  ok(moe_route_ref(r, contiguous<const float>(logits.data(), tokens, experts), want_e.data(), want_w.data()));
  DeviceBuffer dl(logits), db(bias), de(want_e.size() * 4), dw(want_w.size() * 4);
  MoeRouting rd = r;
  rd.bias = db.get<float>();
  ok(cuda::moe_route(rd, contiguous<const float>(dl.get<float>(), tokens, experts), de.get<int32_t>(),
                     dw.get<float>(), nullptr));
  EXPECT_EQ(de.download<int32_t>(want_e.size()), want_e);
  EXPECT_TRUE(testing::all_close(dw.download<float>(want_w.size()), want_w, 1e-6f, 1e-5f));
}

// The routed experts on the device (their logic is also checked on the CPU emulator, CudaEmuMoe):
// route 64 tokens to top 8 of 64 experts on the GPU, align, gate/up-sized and down-sized products of
// the chosen experts in int4 (group 32, Kimi K2's release format) and fp16, combine; every
// assignment's row against linear_ref of its expert.
TEST_F(CudaOps, RoutedExpertsMatchLinearRefForEveryAssignment) {
  Rng rng(504);
  const int64_t tokens = full_or_emulated<int64_t>(64, 16);
  const int32_t E = 64, top = 8;
  std::vector<float> logits = rng.normals(static_cast<size_t>(tokens * E), 1.5f);
  MoeRouting r;
  r.num_experts = E;
  r.top_k = top;
  std::vector<int32_t> experts(static_cast<size_t>(tokens * top));
  std::vector<float> weights(experts.size());
  ok(moe_route_ref(r, contiguous<const float>(logits.data(), tokens, E), experts.data(), weights.data()));
  const int64_t A = tokens * top;
  DeviceBuffer de(experts), dw(weights), order(A * 4), offsets((E + 1) * 4), active(E * 4), nact(4);
  cuda::MoeAlignment al{order.get<int32_t>(), offsets.get<int32_t>(), active.get<int32_t>(),
                        nact.get<int32_t>()};
  ok(cuda::moe_align(de.get<int32_t>(), A, E, al, nullptr));
  for (const WeightLayout& l :
       {WeightLayout{WeightFormat::kInt4Sym, full_or_emulated(512, 128), full_or_emulated(1024, 256), 32},
        WeightLayout{WeightFormat::kF16, full_or_emulated(1024, 256), full_or_emulated(512, 128), 0}}) {
    SCOPED_TRACE(weight_format_name(l.format));
    std::vector<std::unique_ptr<DeviceBuffer>> bufs;
    std::vector<WeightView> host_views, dev_views;
    std::vector<std::vector<uint8_t>> data(E), zeros(E);
    std::vector<std::vector<uint16_t>> scales(E);
    const WeightBytes b = weight_bytes(l);
    for (int32_t e = 0; e < E; ++e) {
      data[e].resize(static_cast<size_t>(b.data));
      scales[e].resize(static_cast<size_t>(b.scales / 2));
      std::vector<float> src = rng.normals(static_cast<size_t>(l.rows * l.cols), 0.05f);
      ok(quantize_weight_ref({src.data(), SourceDtype::kF32, l.rows, l.cols, l.cols}, l,
                             {data[e].data(), scales[e].empty() ? nullptr : scales[e].data(), nullptr}));
      host_views.push_back({l, data[e].data(), scales[e].empty() ? nullptr : scales[e].data(), nullptr});
      bufs.push_back(std::make_unique<DeviceBuffer>(data[e]));
      bufs.push_back(std::make_unique<DeviceBuffer>(scales[e]));
      dev_views.push_back(
          {l, bufs[bufs.size() - 2]->get(), scales[e].empty() ? nullptr : bufs.back()->get(), nullptr});
    }
    DeviceBuffer dviews(dev_views.size() * sizeof(WeightView));
    ASSERT_EQ(cudaMemcpy(dviews.get(), dev_views.data(), dev_views.size() * sizeof(WeightView),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    const cuda::ExpertWeights ew{dviews.get<WeightView>(), E, l};
    const int64_t N = l.rows, K = l.cols;
    for (int32_t x_div : {top, 1}) {
      const int64_t xr = x_div == 1 ? A : tokens;
      std::vector<float> x = rng.normals(static_cast<size_t>(xr * K)), want(static_cast<size_t>(A * N));
      for (int64_t a = 0; a < A; ++a) {
        ok(linear_ref(contiguous<const float>(x.data() + (a / x_div) * K, 1, K), host_views[experts[a]],
                      nullptr, contiguous(want.data() + a * N, 1, N)));
      }
      DeviceBuffer dx(x), dy(want.size() * 4);
      ok(cuda::moe_expert_linear(contiguous<const float>(dx.get<float>(), xr, K), x_div, ew, al,
                                 contiguous(dy.get<float>(), A, N), nullptr));
      const std::vector<float> got = dy.download<float>(want.size());
      EXPECT_TRUE(testing::all_close(got, want, 1e-5f, 1e-4f)) << "x_div " << x_div;
      if (x_div != top) continue;
      DeviceBuffer dout(static_cast<size_t>(tokens * N) * 4);
      ok(cuda::moe_combine(contiguous<const float>(dy.get<float>(), A, N), dw.get<float>(), top,
                           contiguous(dout.get<float>(), tokens, N), false, nullptr));
      std::vector<float> want_out(static_cast<size_t>(tokens * N), 0.0f);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t n = 0; n < N; ++n) {
          for (int32_t k = 0; k < top; ++k)
            want_out[t * N + n] += weights[t * top + k] * got[(t * top + k) * N + n];
        }
      }
      EXPECT_TRUE(testing::all_close(dout.download<float>(want_out.size()), want_out, 1e-6f, 1e-6f));
    }
  }
}

// ---- multi-head latent attention ----

// Absorbed MLA decode on the device (its logic is also checked on the CPU emulator, CudaEmuMla): Kimi
// K2's 576-value rows and its 64 heads, 4 sequences of up to 3000 tokens (split across blocks and
// merged) in every latent dtype, and once more with too small a workspace (one pass).
TEST_F(CudaOps, MlaDecodeMatchesTheReferenceInEveryLatentDtype) {
  Rng rng(503);
  const int32_t page = 64, hq = 64, dim = 576, dv = 512;
  const std::vector<int32_t> kv =
      full_or_emulated(std::vector<int32_t>{3000, 1, 700, 64}, std::vector<int32_t>{300, 1, 70, 64});
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kBF16, KvDtype::kFp8E4M3, KvDtype::kInt8, KvDtype::kInt4}) {
    SCOPED_TRACE(kv_dtype_name(dt));
    const KvPageLayout l = kv_latent_layout(dt, page, dv, dim - dv);
    const int32_t seqs = static_cast<int32_t>(kv.size());
    int32_t max_pages = 1, total = 0;
    for (int32_t n : kv) {
      max_pages = std::max(max_pages, (n + page - 1) / page);
      total += (n + page - 1) / page;
    }
    std::vector<uint8_t> pages(static_cast<size_t>(total * kv_latent_page_bytes(l)), 0xFF);
    const float scale = 0.02f;
    LatentCache host{l, pages.data(), total, &scale};
    std::vector<int32_t> table(static_cast<size_t>(seqs * max_pages), 0), q_start = {0};
    int32_t next = 0;
    for (int32_t s = 0; s < seqs; ++s) {
      std::vector<float> rows = rng.normals(static_cast<size_t>(kv[s]) * dim);
      std::vector<int32_t> pid, slot;
      for (int32_t t = 0; t < kv[s]; ++t) {
        if (t % page == 0) table[s * max_pages + t / page] = next++;
        pid.push_back(table[s * max_pages + t / page]);
        slot.push_back(t % page);
      }
      ok(latent_append_ref(host, contiguous<const float>(rows.data(), kv[s], dim), pid.data(), slot.data()));
      q_start.push_back(s + 1);
    }
    const std::vector<float> q = rng.normals(static_cast<size_t>(seqs) * hq * dim, 0.3f);
    std::vector<int32_t> kv_len = kv;
    AttentionBatch b;
    b.num_seqs = seqs;
    b.num_q_heads = hq;
    b.scale = 1.0f / std::sqrt(static_cast<float>(dim));
    b.q_start = q_start.data();
    b.kv_len = kv_len.data();
    b.block_table = table.data();
    b.max_pages_per_seq = max_pages;
    std::vector<float> want(static_cast<size_t>(seqs) * hq * dv);
    ok(mla_attention_ref(host, b, contiguous<const float>(q.data(), seqs, hq, dim), dv,
                         contiguous(want.data(), seqs, hq, dv)));
    DeviceBuffer dp(pages), ds(std::vector<float>{scale}), dt_(table), dq(q), dqs(q_start), dkv(kv_len);
    DeviceBuffer dout(want.size() * 4);
    LatentCache dev{l, dp.get<uint8_t>(), total, ds.get<float>()};
    AttentionBatch db = b;
    db.q_start = dqs.get<int32_t>();
    db.kv_len = dkv.get<int32_t>();
    db.block_table = dt_.get<int32_t>();
    const size_t ws_bytes = cuda::mla_decode_workspace_bytes(seqs, hq, dv, dim, 3000);
    for (size_t ws_size : {ws_bytes, size_t{0}}) {
      DeviceBuffer ws(ws_size);
      ok(cuda::mla_decode(dev, db, 3000, contiguous<const float>(dq.get<float>(), seqs, hq, dim), dv,
                          contiguous(dout.get<float>(), seqs, hq, dv), ws_size > 0 ? ws.get() : nullptr,
                          ws_size, nullptr));
      EXPECT_TRUE(testing::all_close(dout.download<float>(want.size()), want, 2e-5f, 2e-4f))
          << "workspace " << ws_size;
    }
  }
}

TEST(CudaLayouts, Int4PackingFeedsEveryMmaFragmentItsOwnElements) {
  Rng rng(703);
  SCOPED_TRACE(rng.trace());
  const WeightLayout l{WeightFormat::kInt4Sym, 32, 128, 32, ScaleDtype::kF16};
  const HostWeight w = make_weight(rng, l);
  std::vector<uint8_t> packed(w.data.size());
  ok(cuda::pack_int4_for_mma_host(w.view(), packed.data()));
  // Every element is somewhere, exactly once, where int4_mma_locate says.
  std::vector<int> seen(static_cast<size_t>(l.rows * l.cols), 0);
  for (int64_t rt = 0; rt < l.rows / 16; ++rt) {
    for (int64_t kb = 0; kb < l.cols / 64; ++kb) {
      for (int lane = 0; lane < 32; ++lane) {
        for (int kt = 0; kt < 4; ++kt) {
          for (int p = 0; p < 8; ++p) {
            int64_t r, k, off;
            int nib;
            int4_mma_element(rt, kb, lane, kt, p, &r, &k);
            int4_mma_locate(l.cols, r, k, &off, &nib);
            ASSERT_EQ(off, int4_mma_word_offset(l.cols, rt, kb, lane, kt));
            ASSERT_EQ(nib, p);
            ++seen[static_cast<size_t>(r * l.cols + k)];
          }
        }
      }
    }
  }
  for (int s : seen) ASSERT_EQ(s, 1);
  // Emulate the kernel: per lane, registers j = (nibbles j, j+4) of each k16 tile's word, against
  // x; the emulated D must equal W x for the codes.
  std::vector<float> x = rng.normals(static_cast<size_t>(l.cols));
  for (int64_t rt = 0; rt < l.rows / 16; ++rt) {
    float total[16] = {};
    for (int64_t kb = 0; kb < l.cols / 64; ++kb) {
      for (int kt = 0; kt < 4; ++kt) {
        float a[32][8], b[32][4], d[16][8];
        for (int lane = 0; lane < 32; ++lane) {
          uint32_t word;
          std::memcpy(&word, packed.data() + int4_mma_word_offset(l.cols, rt, kb, lane, kt), 4);
          for (int j = 0; j < 4; ++j) {  // register j holds a_{2j}, a_{2j+1}
            a[lane][2 * j] = static_cast<float>((word >> (4 * j)) & 0xF);
            a[lane][2 * j + 1] = static_cast<float>((word >> (4 * j + 16)) & 0xF);
          }
          const int g = lane / 4, c = lane % 4;  // B column g: x (batch 1 in column 0)
          const int64_t k0 = kb * 64 + kt * 16;
          b[lane][0] = g == 0 ? x[k0 + 2 * c] : 0.0f;
          b[lane][1] = g == 0 ? x[k0 + 2 * c + 1] : 0.0f;
          b[lane][2] = g == 0 ? x[k0 + 2 * c + 8] : 0.0f;
          b[lane][3] = g == 0 ? x[k0 + 2 * c + 9] : 0.0f;
        }
        emulate_mma(a, b, d);
        for (int r = 0; r < 16; ++r) total[r] += d[r][0];
      }
    }
    for (int r = 0; r < 16; ++r) {
      double want = 0;
      const int64_t n = rt * 16 + r;
      for (int64_t k = 0; k < l.cols; ++k) want += int4_get(w.data.data() + n * (l.cols / 2), k) * x[k];
      ASSERT_NEAR(total[r], want, 1e-3 * (1 + std::fabs(want))) << "row " << n;
    }
  }
}

TEST_F(CudaOps, PackingOnTheDeviceEqualsPackingOnTheHost) {
  Rng rng(704);
  const WeightLayout l{WeightFormat::kInt4Asym, 48, 192, 64, ScaleDtype::kF16};
  const HostWeight h = make_weight(rng, l);
  std::vector<uint8_t> want(h.data.size());
  ok(cuda::pack_int4_for_mma_host(h.view(), want.data()));
  DeviceWeight d(h);
  DeviceBuffer packed(want.size());
  ok(cuda::pack_int4_for_mma(d.view(), packed.get(), nullptr));
  EXPECT_EQ(packed.download<uint8_t>(want.size()), want);
}

// ---- linear ----

// |y - ref| <= tol * sum_k |x_k w_k| + 1e-6 for every output, and nothing non-finite.
::testing::AssertionResult linear_close(const HostWeight& w, const std::vector<float>& x, int64_t m,
                                        const std::vector<float>& got, const std::vector<float>& want,
                                        double tol) {
  const int64_t n_out = w.layout.rows, k_in = w.layout.cols;
  std::vector<float> dq(static_cast<size_t>(n_out * k_in));
  if (!dequantize_weight_ref(w.view(), contiguous(dq.data(), n_out, k_in)).ok())
    return ::testing::AssertionFailure();
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

TEST_F(CudaOps, LinearMatchesTheReferenceOnEveryPath) {
  Rng rng(705);
  SCOPED_TRACE(rng.trace());
  const WeightLayout layouts[] = {{WeightFormat::kF16, 40, 136},
                                  {WeightFormat::kBF16, 33, 64},
                                  {WeightFormat::kInt8, 64, 512, 0, ScaleDtype::kF16},
                                  {WeightFormat::kInt8, 9, 35},
                                  {WeightFormat::kInt4Sym, 64, 512, 128, ScaleDtype::kF16},
                                  {WeightFormat::kInt4Asym, 48, 256, 32, ScaleDtype::kBF16},
                                  {WeightFormat::kInt4Asym, 5, 70, 64, ScaleDtype::kF16}};
  for (const WeightLayout& l : layouts) {
    const HostWeight h = make_weight(rng, l);
    DeviceWeight d(h);
    std::vector<uint8_t> packed_host(h.data.size());
    const bool mma = cuda::int4_mma_eligible(l);
    if (mma) ok(cuda::pack_int4_for_mma_host(h.view(), packed_host.data()));
    DeviceBuffer packed(packed_host);
    const std::vector<float> bias = rng.normals(static_cast<size_t>(l.rows));
    DeviceBuffer dbias(bias);
    for (int64_t m : {1, 2, 3, 5, 8, 9, 33}) {
      for (bool use_packed : {false, true}) {
        if (use_packed && !mma) continue;
        SCOPED_TRACE(::testing::Message() << weight_format_name(l.format) << " " << l.rows << "x" << l.cols
                                          << " M" << m << (use_packed ? " packed" : ""));
        const std::vector<float> x = rng.normals(static_cast<size_t>(m * l.cols));
        std::vector<float> want(static_cast<size_t>(m * l.rows));
        ok(linear_ref(contiguous<const float>(x.data(), m, l.cols), h.view(), bias.data(),
                      contiguous(want.data(), m, l.rows)));
        DeviceBuffer dx(x), dy(want.size() * 4);
        ok(cuda::linear(contiguous<const float>(dx.get<float>(), m, l.cols), d.view(),
                        use_packed ? packed.get() : nullptr, dbias.get<float>(),
                        contiguous(dy.get<float>(), m, l.rows), nullptr));
        const std::vector<float> got = dy.download<float>(want.size());
        // CUDA-core GEMV: fp32. Tensor-core paths round their inputs (fp16 x for int4 mma, TF32 for M > 8).
        const double tol = (m > 8 || use_packed) ? 3e-3 : 1e-5;
        EXPECT_TRUE(linear_close(h, x, m, got, want, tol));
      }
    }
  }
}

// The packed int4 GEMV in every variant of the streaming kernel and in the older kernel: several row
// tiles per block (8192 rows), K not a multiple of the group, fewer k blocks than warps, scales and
// zeros off 16-byte alignment (copied element by element), x rows off 16-byte alignment.
TEST_F(CudaOps, PackedInt4LinearMatchesTheReferenceInEveryKernelVariant) {
  Rng rng(712);
  SCOPED_TRACE(rng.trace());
  const WeightLayout layouts[] = {
      {WeightFormat::kInt4Sym, full_or_emulated(8192, 1024), 512, 64, ScaleDtype::kF16},
      {WeightFormat::kInt4Asym, 48, 192, 128, ScaleDtype::kBF16},
      {WeightFormat::kInt4Asym, 32, 64, 32, ScaleDtype::kF16},
      {WeightFormat::kInt4Sym, 256, 2048, 128, ScaleDtype::kF16}};
  const cuda::Tuning saved = cuda::tuning();
  for (const WeightLayout& l : layouts) {
    const HostWeight h = make_weight(rng, l);
    std::vector<uint8_t> packed_host(h.data.size());
    ok(cuda::pack_int4_for_mma_host(h.view(), packed_host.data()));
    DeviceBuffer data(h.data), packed(packed_host);
    // Scales 2 bytes and zeros 1 byte past the start of their buffers, and at the start.
    DeviceBuffer scales(h.scales.size() * 2 + 16), zeros(h.zeros.size() + 16);
    const std::vector<float> bias = rng.normals(static_cast<size_t>(l.rows));
    DeviceBuffer dbias(bias);
    for (bool aligned : {true, false}) {
      uint8_t* sp = scales.get<uint8_t>() + (aligned ? 0 : 2);
      uint8_t* zp = zeros.get<uint8_t>() + (aligned ? 0 : 1);
      ASSERT_EQ(cudaMemcpy(sp, h.scales.data(), h.scales.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      if (!h.zeros.empty()) {
        ASSERT_EQ(cudaMemcpy(zp, h.zeros.data(), h.zeros.size(), cudaMemcpyHostToDevice), cudaSuccess);
      }
      const WeightView dv{l, data.get(), sp, h.zeros.empty() ? nullptr : zp};
      for (int variant : {0, 1, 2, 3, 4, -1}) {
        cuda::tuning() = saved;
        if (variant >= 0) cuda::tuning().gemv_variant = variant;
        cuda::tuning().gemv_legacy_mma = variant < 0;
        for (int64_t m : {1, 3, 8}) {
          SCOPED_TRACE(::testing::Message() << weight_format_name(l.format) << " " << l.rows << "x" << l.cols
                                            << " G" << l.group_size << " M" << m << " variant " << variant
                                            << (aligned ? "" : " unaligned"));
          const int64_t stride = l.cols + (aligned ? 0 : 1);
          std::vector<float> x(static_cast<size_t>(m * stride)), xc(static_cast<size_t>(m * l.cols));
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t k = 0; k < l.cols; ++k) x[i * stride + k] = xc[i * l.cols + k] = rng.normal();
          }
          std::vector<float> want(static_cast<size_t>(m * l.rows));
          ok(linear_ref(contiguous<const float>(xc.data(), m, l.cols), h.view(), bias.data(),
                        contiguous(want.data(), m, l.rows)));
          DeviceBuffer dx(x), dy(want.size() * 4);
          ok(cuda::linear({dx.get<float>(), m, l.cols, stride}, dv, packed.get(), dbias.get<float>(),
                          contiguous(dy.get<float>(), m, l.rows), nullptr));
          EXPECT_TRUE(linear_close(h, xc, m, dy.download<float>(want.size()), want, 3e-3));
        }
      }
    }
  }
  cuda::tuning() = saved;
}

// ---- KV cache ----

constexpr KvDtype kAllDtypes[] = {KvDtype::kF16,  KvDtype::kBF16, KvDtype::kFp8E4M3,
                                  KvDtype::kInt8, KvDtype::kInt4, KvDtype::kInt4Kivi};

TEST_F(CudaOps, KvAppendWritesTheReferencesBytesAndReadsBackBitIdentically) {
  Rng rng(706);
  SCOPED_TRACE(rng.trace());
  for (KvDtype dt : kAllDtypes) {
    for (int32_t d : {8, 33, 128}) {
      SCOPED_TRACE(::testing::Message() << kv_dtype_name(dt) << " head_dim " << d);
      const KvPageLayout l{dt, 4, 3, d};
      const int64_t pages = 6, wins = 2;
      std::vector<uint8_t> host_pages(static_cast<size_t>(pages * kv_page_bytes(l)), 0);
      std::vector<uint8_t> host_stage(static_cast<size_t>(std::max<int64_t>(16, wins * kv_staging_bytes(l))),
                                      0);
      const std::vector<float> ks = {0.5f, 1.0f, 2.0f}, vs = {0.25f, 1.0f, 3.0f};
      KvCache hc{l, host_pages.data(), pages, host_stage.data(), wins, ks.data(), vs.data()};
      DeviceBuffer dpages(host_pages), dstage(host_stage), dks(ks), dvs(vs);
      KvCache dc{l,    dpages.get<uint8_t>(), pages,           dstage.get<uint8_t>(),
                 wins, dks.get<float>(),      dvs.get<float>()};
      // Two calls: 3 tokens into page 4, then 9 more (finishing page 4, all of page 1, half of page 5).
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
        ok(kv_append_ref(
            hc, {contiguous<const float>(k.data(), n, 3, d), contiguous<const float>(v.data(), n, 3, d),
                 ids.data(), slots.data(), wid.data()}));
        DeviceBuffer dk(k), dv(v), di(ids), dsl(slots), dw(wid);
        ok(cuda::kv_append(dc,
                           {contiguous<const float>(dk.get<float>(), n, 3, d),
                            contiguous<const float>(dv.get<float>(), n, 3, d), di.get<int32_t>(),
                            dsl.get<int32_t>(), dw.get<int32_t>()},
                           nullptr));
      }
      EXPECT_EQ(dpages.download<uint8_t>(host_pages.size()), host_pages);
      EXPECT_EQ(dstage.download<uint8_t>(host_stage.size()), host_stage);
      for (auto [page, filled] : {std::pair{4, 4}, std::pair{1, 4}, std::pair{5, 2}}) {
        const size_t n = static_cast<size_t>(3 * filled * d);
        std::vector<float> rk(n), rv(n);
        ok(kv_read_page_ref(hc, page, filled, 1, contiguous(rk.data(), 3, filled, d),
                            contiguous(rv.data(), 3, filled, d)));
        DeviceBuffer gk(n * 4), gv(n * 4);
        ok(cuda::kv_read_page(dc, page, filled, 1, contiguous(gk.get<float>(), 3, filled, d),
                              contiguous(gv.get<float>(), 3, filled, d), nullptr));
        EXPECT_TRUE(testing::bit_equal(gk.download<float>(n).data(), rk.data(), n)) << "K page " << page;
        EXPECT_TRUE(testing::bit_equal(gv.download<float>(n).data(), rv.data(), n)) << "V page " << page;
      }
    }
  }
}

// Every 16-bit pattern stored in an f16 or bf16 page, and every byte in an fp8 page, reads back with the
// reference's bits: NaN payloads and signs included (docs/quant-formats.md: fp16 NaN -> quiet NaN with
// its payload, as vcvtph2ps).
TEST_F(CudaOps, KvReadPageGivesTheReferencesBitsForEveryStoredPattern) {
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kBF16, KvDtype::kFp8E4M3}) {
    SCOPED_TRACE(kv_dtype_name(dt));
    const KvPageLayout l{dt, 16, 16, 128};  // 16 x 16 x 128 = 32768 elements per side
    const KvPageRegions r = kv_page_regions(l);
    std::vector<uint8_t> page(static_cast<size_t>(kv_page_bytes(l)), 0);
    const int64_t n = int64_t{l.num_kv_heads} * l.page_size * l.head_dim;
    for (int64_t i = 0; i < n; ++i) {
      if (dt == KvDtype::kFp8E4M3) {
        page[static_cast<size_t>(r.k_data + i)] = static_cast<uint8_t>(i);
        page[static_cast<size_t>(r.v_data + i)] = static_cast<uint8_t>(255 - i);
      } else {
        const uint16_t kb = static_cast<uint16_t>(i), vb = static_cast<uint16_t>(i + 32768);
        std::memcpy(page.data() + r.k_data + 2 * i, &kb, 2);
        std::memcpy(page.data() + r.v_data + 2 * i, &vb, 2);
      }
    }
    if (dt == KvDtype::kFp8E4M3) {
      for (int h = 0; h < l.num_kv_heads; ++h) {
        const float s = 0.5f + 0.25f * h;
        std::memcpy(page.data() + kv_fp8_param_offset(r.k_params, h), &s, 4);
        std::memcpy(page.data() + kv_fp8_param_offset(r.v_params, h), &s, 4);
      }
    }
    std::vector<uint8_t> stage(16);
    KvCache hc{l, page.data(), 1, stage.data(), 1, nullptr, nullptr};
    DeviceBuffer dpage(page), dstage(stage);
    KvCache dc{l, dpage.get<uint8_t>(), 1, dstage.get<uint8_t>(), 1, nullptr, nullptr};
    std::vector<float> rk(static_cast<size_t>(n)), rv(rk.size());
    ok(kv_read_page_ref(hc, 0, 16, 0, contiguous(rk.data(), 16, 16, 128),
                        contiguous(rv.data(), 16, 16, 128)));
    DeviceBuffer gk(rk.size() * 4), gv(rv.size() * 4);
    ok(cuda::kv_read_page(dc, 0, 16, 0, contiguous(gk.get<float>(), 16, 16, 128),
                          contiguous(gv.get<float>(), 16, 16, 128), nullptr));
    EXPECT_TRUE(testing::bit_equal(gk.download<float>(rk.size()).data(), rk.data(), rk.size())) << "K";
    EXPECT_TRUE(testing::bit_equal(gv.download<float>(rv.size()).data(), rv.data(), rv.size())) << "V";
  }
}

// ---- attention ----

struct AttnCase {
  KvDtype dtype;
  int32_t page, hk, hq, dim;
  std::vector<int32_t> kv, q;
  int32_t split;
};

void run_attention_case(Rng& rng, const AttnCase& a, bool with_workspace) {
  SCOPED_TRACE(::testing::Message() << kv_dtype_name(a.dtype) << " page " << a.page << " heads " << a.hq
                                    << "/" << a.hk << " dim " << a.dim << " split " << a.split
                                    << (with_workspace ? " +ws" : ""));
  const KvPageLayout l{a.dtype, a.page, a.hk, a.dim};
  const int32_t seqs = static_cast<int32_t>(a.kv.size());
  int32_t max_pages = 1, total_pages = 2, max_kv = 1, max_q = 1;
  for (int32_t s = 0; s < seqs; ++s) {
    const int32_t p = (a.kv[s] + a.page - 1) / a.page;
    max_pages = std::max(max_pages, p);
    total_pages += p;
    max_kv = std::max(max_kv, a.kv[s]);
    max_q = std::max(max_q, a.q[s]);
  }
  // Bytes no token wrote are NaN in every format (0xFF): a kernel that lets them into a sum fails.
  std::vector<uint8_t> pages(static_cast<size_t>(total_pages * kv_page_bytes(l)), 0xFF);
  std::vector<uint8_t> stage(static_cast<size_t>(std::max<int64_t>(16, seqs * kv_staging_bytes(l))), 0xFF);
  std::vector<float> ks, vs;
  for (int h = 0; h < a.hk; ++h) {
    ks.push_back(0.01f);
    vs.push_back(0.01f);
  }
  KvCache hc{l, pages.data(), total_pages, stage.data(), std::max(1, seqs), ks.data(), vs.data()};
  std::vector<int32_t> ids(static_cast<size_t>(total_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng.engine());
  std::vector<int32_t> table(static_cast<size_t>(seqs * max_pages), 0), q_start = {0}, staging_ids;
  size_t next = 0;
  for (int32_t s = 0; s < seqs; ++s) {
    staging_ids.push_back(s);
    for (int32_t p = 0; p * a.page < a.kv[s]; ++p) table[s * max_pages + p] = ids[next++];
    const int64_t row = int64_t{a.hk} * a.dim;
    std::vector<float> k = rng.normals(static_cast<size_t>(a.kv[s] * row), 1.0f), v = rng.normals(k.size());
    std::vector<int32_t> pid, slot, win;
    for (int32_t t = 0; t < a.kv[s]; ++t) {
      pid.push_back(table[s * max_pages + t / a.page]);
      slot.push_back(t % a.page);
      win.push_back(s);
    }
    ok(kv_append_ref(
        hc, {contiguous<const float>(k.data(), a.kv[s], a.hk, a.dim),
             contiguous<const float>(v.data(), a.kv[s], a.hk, a.dim), pid.data(), slot.data(), win.data()}));
    q_start.push_back(q_start.back() + a.q[s]);
  }
  const int64_t tokens = q_start.back();
  const std::vector<float> q = rng.normals(static_cast<size_t>(tokens * a.hq * a.dim));
  AttentionBatch hb;
  hb.num_seqs = seqs;
  hb.num_q_heads = a.hq;
  hb.scale = 1.0f / std::sqrt(static_cast<float>(a.dim));
  hb.q_start = q_start.data();
  hb.kv_len = a.kv.data();
  hb.block_table = table.data();
  hb.max_pages_per_seq = max_pages;
  hb.staging_ids = staging_ids.data();
  hb.split_tokens = a.split;
  std::vector<float> want(q.size());
  ok(attention_ref(hc, hb, contiguous<const float>(q.data(), tokens, a.hq, a.dim),
                   contiguous(want.data(), tokens, a.hq, a.dim)));

  DeviceBuffer dpages(pages), dstage(stage), dks(ks), dvs(vs), dq(q), dout(q.size() * 4), dqs(q_start),
      dkv(a.kv), dtable(table), dsid(staging_ids);
  KvCache dc{l,
             dpages.get<uint8_t>(),
             total_pages,
             dstage.get<uint8_t>(),
             std::max(1, seqs),
             dks.get<float>(),
             dvs.get<float>()};
  AttentionBatch db = hb;
  db.q_start = dqs.get<int32_t>();
  db.kv_len = dkv.get<int32_t>();
  db.block_table = dtable.get<int32_t>();
  db.staging_ids = dsid.get<int32_t>();
  const size_t ws_bytes =
      with_workspace ? std::max<size_t>(
                           cuda::attention_workspace_bytes(seqs, a.hq, a.hk, a.dim, max_q, max_kv), 64u << 20)
                     : 0;
  DeviceBuffer ws(ws_bytes);
  ok(cuda::attention(dc, db, max_q, max_kv, contiguous<const float>(dq.get<float>(), tokens, a.hq, a.dim),
                     contiguous(dout.get<float>(), tokens, a.hq, a.dim), with_workspace ? ws.get() : nullptr,
                     ws_bytes, nullptr));
  const std::vector<float> got = dout.download<float>(q.size());
  EXPECT_TRUE(testing::all_finite(got));
  // fp16 (bf16) mma inputs: q, P and dequantized K/V rounded to 11 (8) significant bits.
  const float rtol = a.dtype == KvDtype::kBF16 ? 3e-2f : 1e-2f;
  EXPECT_TRUE(testing::all_close(got, want, rtol / 2, rtol));
}

TEST_F(CudaOps, AttentionMatchesTheReferenceForEveryKvDtype) {
  Rng rng(707);
  SCOPED_TRACE(rng.trace());
  for (KvDtype dt : kAllDtypes) {
    run_attention_case(rng, {dt, 16, 8, 32, 128, {1, 17, 300, 1000}, {1, 1, 1, 1}, 0},
                       false);                                                     // decode, GQA 4
    run_attention_case(rng, {dt, 16, 2, 32, 64, {513}, {1}, 0}, true);             // GLM-like GQA 16
    run_attention_case(rng, {dt, 4, 2, 6, 64, {40, 23}, {40, 5}, 0}, false);       // prefill, tiny pages
    run_attention_case(rng, {dt, 16, 2, 8, 128, {2000, 700}, {1, 3}, 128}, true);  // forced split
    run_attention_case(rng, {dt, 8, 2, 4, 40, {50, 9}, {2, 9}, 0}, false);         // simple kernel (dim 40)
  }
}

TEST_F(CudaOps, AttentionSplitsAutomaticallyWithAWorkspaceAndMatchesTheUnsplitResult) {
  Rng rng(708);
  for (KvDtype dt : {KvDtype::kInt8, KvDtype::kFp8E4M3})
    run_attention_case(rng, {dt, 16, 8, 32, 128, {4096}, {1}, 0}, true);
}

// The decode kernel (attention_decode.cuh: one query token per sequence, pages of a multiple of 16
// tokens) against the reference for each dtype it takes, with its automatic splits and without a
// workspace, GQA groups of 1 to 12 (two row tiles), both head dims, 32-token pages, short and partial
// last chunks, and every pipeline depth; and the general kernel on the same decode batches.
TEST_F(CudaOps, DecodeAttentionMatchesTheReferenceForEveryShapeAndPipelineDepth) {
  Rng rng(710);
  SCOPED_TRACE(rng.trace());
  const cuda::Tuning saved = cuda::tuning();
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kBF16, KvDtype::kFp8E4M3, KvDtype::kInt8, KvDtype::kInt4}) {
    run_attention_case(rng, {dt, 16, 8, 32, 128, {1, 15, 16, 17, 300, 1000, 2049}, {1, 1, 1, 1, 1, 1, 1}, 0},
                       true);
    run_attention_case(rng, {dt, 32, 2, 24, 64, {700, 33}, {1, 1}, 0}, true);      // GQA 12: two row tiles
    run_attention_case(rng, {dt, 16, 4, 4, 128, {5000, 64}, {1, 1}, 0}, true);     // no GQA
    run_attention_case(rng, {dt, 16, 2, 14, 64, {3000, 129}, {1, 1}, 192}, true);  // forced split, GQA 7
  }
  for (int stages : {2, 3, 4, 6, 8}) {
    cuda::tuning().attention_stages = stages;
    SCOPED_TRACE(::testing::Message() << stages << " stages");
    run_attention_case(rng, {KvDtype::kInt8, 16, 8, 32, 128, {4100, 77}, {1, 1}, 0}, true);
    run_attention_case(rng, {KvDtype::kF16, 16, 8, 32, 128, {999}, {1}, 0}, true);
  }
  cuda::tuning() = saved;
  cuda::tuning().attention_decode = false;  // the general kernel on decode batches
  for (KvDtype dt : {KvDtype::kInt8, KvDtype::kFp8E4M3})
    run_attention_case(rng, {dt, 16, 8, 32, 128, {4096, 100}, {1, 1}, 0}, true);
  cuda::tuning() = saved;
}

// The same results with programmatic dependent launch off (plain launches).
TEST_F(CudaOps, StreamingKernelsGiveTheSameResultsWithoutProgrammaticLaunch) {
  Rng rng(711);
  const cuda::Tuning saved = cuda::tuning();
  cuda::tuning().pdl = false;
  run_attention_case(rng, {KvDtype::kInt8, 16, 8, 32, 128, {3000}, {1}, 0}, true);
  cuda::tuning() = saved;
}

// ---- element-wise ----

TEST_F(CudaOps, ElementwiseOpsMatchTheReferences) {
  Rng rng(709);
  SCOPED_TRACE(rng.trace());
  const int64_t t = 5, h = 300;
  std::vector<float> x = rng.normals(static_cast<size_t>(t * h), 2.0f),
                     w = rng.normals(static_cast<size_t>(h)), u = rng.normals(static_cast<size_t>(t * h));
  DeviceBuffer dx(x), dw(w), du(u), dy(x.size() * 4);
  std::vector<float> want(x.size());
  ok(rmsnorm_ref(contiguous<const float>(x.data(), t, h), w.data(), 1e-5f, contiguous(want.data(), t, h)));
  ok(cuda::rmsnorm(contiguous<const float>(dx.get<float>(), t, h), dw.get<float>(), 1e-5f,
                   contiguous(dy.get<float>(), t, h), nullptr));
  EXPECT_TRUE(testing::all_close(dy.download<float>(x.size()), want, 1e-5f, 1e-5f)) << "rmsnorm";
  ok(silu_mul_ref(contiguous<const float>(x.data(), t, h), contiguous<const float>(u.data(), t, h),
                  contiguous(want.data(), t, h)));
  ok(cuda::silu_mul(contiguous<const float>(dx.get<float>(), t, h),
                    contiguous<const float>(du.get<float>(), t, h), contiguous(dy.get<float>(), t, h),
                    nullptr));
  EXPECT_TRUE(testing::all_close(dy.download<float>(x.size()), want, 1e-6f, 1e-5f)) << "silu_mul";
  ok(add_ref(contiguous<const float>(x.data(), t, h), contiguous<const float>(u.data(), t, h),
             contiguous(want.data(), t, h)));
  ok(cuda::add(contiguous<const float>(dx.get<float>(), t, h), contiguous<const float>(du.get<float>(), t, h),
               contiguous(dy.get<float>(), t, h), nullptr));
  EXPECT_TRUE(testing::bit_equal(dy.download<float>(x.size()).data(), want.data(), want.size())) << "add";
  ok(bias_add_ref(contiguous(want.data(), t, h), w.data()));
  ok(cuda::bias_add(contiguous(dy.get<float>(), t, h), dw.get<float>(), nullptr));
  EXPECT_TRUE(testing::bit_equal(dy.download<float>(x.size()).data(), want.data(), want.size()))
      << "bias_add";

  for (RopeStyle st : {RopeStyle::kHalfSplit, RopeStyle::kInterleaved}) {
    const RopeConfig c{
        st, 128, st == RopeStyle::kInterleaved ? 64 : 128, 500000.0f, {true, 8.0f, 1.0f, 4.0f, 8192}, {}};
    std::vector<float> inv;
    ok(rope_inv_freq(c, &inv));
    const std::vector<int32_t> pos = {0, 5, 1000, 8191, 100000};
    std::vector<float> q = rng.normals(5 * 4 * 128), k = rng.normals(5 * 2 * 128);
    DeviceBuffer dinv(inv), dpos(pos), dq(q), dk(k);
    ok(rope_ref(c, inv.data(), pos.data(), contiguous(q.data(), 5, 4, 128), contiguous(k.data(), 5, 2, 128)));
    ok(cuda::rope(c, dinv.get<float>(), dpos.get<int32_t>(), contiguous(dq.get<float>(), 5, 4, 128),
                  contiguous(dk.get<float>(), 5, 2, 128), nullptr));
    EXPECT_TRUE(testing::all_close(dq.download<float>(q.size()), q, 1e-4f, 1e-4f)) << "rope q";
    EXPECT_TRUE(testing::all_close(dk.download<float>(k.size()), k, 1e-4f, 1e-4f)) << "rope k";
  }

  std::vector<uint16_t> table(11 * 37);
  for (auto& e : table) e = bf16_from_float(rng.normal());
  const std::vector<int32_t> ids = {3, 0, 10, 3, 99};  // 99: out of range -> zeros on the device
  DeviceBuffer dtab(table), dids(ids), demb(5 * 37 * 4);
  ok(cuda::embedding({dtab.get(), SourceDtype::kBF16, 11, 37, 37}, dids.get<int32_t>(), 5,
                     contiguous(demb.get<float>(), 5, 37), nullptr));
  std::vector<float> wemb(4 * 37);
  ok(embedding_ref({table.data(), SourceDtype::kBF16, 11, 37, 37}, ids.data(), 4,
                   contiguous(wemb.data(), 4, 37)));
  const std::vector<float> gemb = demb.download<float>(5 * 37);
  EXPECT_TRUE(testing::bit_equal(gemb.data(), wemb.data(), wemb.size()));
  for (int c = 0; c < 37; ++c) EXPECT_EQ(gemb[4 * 37 + c], 0.0f);
}

TEST(CudaDevice, ReportsWhetherAGpuIsPresentWithoutFailing) {
  const int n = cuda::device_count();
  EXPECT_GE(n, 0);
  EXPECT_FALSE(cuda::device_description().empty());
  EXPECT_EQ(cuda::require_device().ok(), n > 0);
  if (n == 0) {
    EXPECT_EQ(cuda::require_device().code(), StatusCode::kNoDevice);
  }
}

}  // namespace
}  // namespace infergate::kernels
