// CUDA benchmarks of the kernels/ ops: each op's achieved HBM bandwidth - the bytes it must read
// (weights with their scales and zeros, KV pages with their scales, the activations) over its time - as
// a fraction of the device's peak (4.8 TB/s for an H200 by datasheet; --peak-tbps to change) and of a
// device-to-device copy measured in the same run (bytes read + written).
//
// Two times per op, both from CUDA events, medians over repeats:
//   stream  back-to-back launches as a decode step issues them: a CUDA graph of R launches that cycle
//           through C copies of the op's inputs, C x bytes >= 4 x the L2 size, so no launch finds its
//           inputs in L2; time per launch = graph time / R. Kernels that use programmatic dependent
//           launch overlap their start with the previous launch's end here, as they do in the engine;
//           the "no PDL" rows show the same kernels launched plainly.
//   cold    one launch after the L2 was overwritten (4 x L2 bytes of memset), its start latency and
//           ramp-up included.
// The fraction of peak uses the stream time. Inputs are real quantized data (random normal weights and
// K/V through the library's quantizers), and every output is checked to be finite.
//
//   kernels_cuda_bench [--peak-tbps 4.8] [--quick] [--filter TEXT]
// --filter runs only the rows whose "op shape" (e.g. "attention int8 KV batch 64 x 16384") holds TEXT.
// Exit status: 0 ran, 2 no GPU, 1 an op failed. The last lines are the table scripts/gpu-check.sh prints;
// the "target" column shows the goal where the project set one (informational).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda/tuning.h"
#include "infergate/kernels/cuda.h"

namespace infergate::kernels {
namespace {

std::string err_str(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

struct Row {
  std::string op, shape;
  double bytes = 0;
  double stream_s = 0, cold_s = 0;
  double target = 0;  // fraction of peak, 0 when none
  std::string note;   // "graph" or "launches" (how the stream time was taken)
  std::string error;
};

// Device memory that frees itself.
struct Dev {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Dev(size_t n) : bytes(std::max<size_t>(n, 16)) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      p = nullptr;
    }
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

template <class T>
std::unique_ptr<Dev> upload(const std::vector<T>& v) {
  auto d = std::make_unique<Dev>(v.size() * sizeof(T));
  if (d->p != nullptr && !v.empty()) cudaMemcpy(d->p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

// Fills dst[0, total) by repeating its first `have` bytes (device-to-device doubling copies).
void replicate(void* dst, size_t have, size_t total) {
  auto* p = static_cast<uint8_t*>(dst);
  while (have < total) {
    const size_t n = std::min(have, total - have);
    cudaMemcpy(p + have, p, n, cudaMemcpyDeviceToDevice);
    have += n;
  }
}

std::vector<float> normals(std::mt19937_64& g, size_t n, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

bool all_finite_device(const float* p, size_t n) {
  std::vector<float> h(n);
  if (cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  return std::all_of(h.begin(), h.end(), [](float x) { return std::isfinite(x); });
}

class Bench {
 public:
  Bench(bool quick) : quick_(quick) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&l2_, cudaDevAttrL2CacheSize, dev);
    flush_ = std::make_unique<Dev>(flush_bytes());
    cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~Bench() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudaStreamDestroy(stream_);
  }
  cudaStream_t stream() const { return stream_; }
  size_t flush_bytes() const { return std::max<size_t>(static_cast<size_t>(l2_) * 4, size_t{256} << 20); }
  // Copies of an input of `bytes` that together exceed 4 x L2 (at most 16).
  int copies_for(double bytes) const {
    const double want = 4.0 * l2_;
    return static_cast<int>(std::clamp(std::ceil(want / std::max(bytes, 1.0)), 1.0, 16.0));
  }

  // Device-to-device copy bandwidth (read + write bytes), median of repeats.
  double copy_bandwidth() {
    const size_t n = size_t{1} << 30;
    Dev a(n), b(n);
    if (a.p == nullptr || b.p == nullptr) return 0;
    cudaMemsetAsync(a.p, 1, n, stream_);
    std::vector<float> ms;
    for (int i = 0; i < 7; ++i) {
      cudaEventRecord(start_, stream_);
      cudaMemcpyAsync(b.p, a.p, n, cudaMemcpyDeviceToDevice, stream_);
      cudaEventRecord(stop_, stream_);
      cudaEventSynchronize(stop_);
      float t = 0;
      cudaEventElapsedTime(&t, start_, stop_);
      if (i > 0) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return 2.0 * static_cast<double>(n) / (ms[ms.size() / 2] / 1e3);
  }

  // Times op(i) (i = which copy of the inputs) as described at the top of the file.
  void time(Row& r, int copies, const std::function<Status(int)>& op) {
    auto fail = [&](const std::string& what) {
      if (r.error.empty()) r.error = what;
    };
    // Warm-up: first-call set-up (occupancy queries, attributes) stays out of the numbers.
    for (int i = 0; i < std::max(2, copies); ++i) {
      const Status s = op(i % copies);
      if (!s.ok()) return fail(s.to_string());
    }
    cudaError_t e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) return fail("warm-up: " + err_str(e));
    // Cold.
    const int reps = quick_ ? 5 : 11;
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
      cudaMemsetAsync(flush_->p, i & 0xFF, flush_->bytes, stream_);
      cudaEventRecord(start_, stream_);
      const Status s = op(i % copies);
      cudaEventRecord(stop_, stream_);
      if (!s.ok()) return fail(s.to_string());
      e = cudaEventSynchronize(stop_);
      if (e != cudaSuccess) return fail("cold: " + err_str(e));
      float t = 0;
      cudaEventElapsedTime(&t, start_, stop_);
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    r.cold_s = ms[ms.size() / 2] / 1e3;
    // Stream: a graph of R launches cycling through the copies.
    const int launches = std::max(copies * ((16 + copies - 1) / copies), copies);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    bool graph_ok = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed) == cudaSuccess;
    if (graph_ok) {
      for (int i = 0; i < launches && graph_ok; ++i) graph_ok = op(i % copies).ok();
      graph_ok = cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph_ok;
      graph_ok = graph_ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    }
    if (!graph_ok) (void)cudaGetLastError();
    r.note = graph_ok ? "graph" : "launches";
    ms.clear();
    for (int rep = 0; rep < reps + 2; ++rep) {
      cudaEventRecord(start_, stream_);
      if (graph_ok) {
        cudaGraphLaunch(exec, stream_);
      } else {
        for (int i = 0; i < launches; ++i) {
          const Status s = op(i % copies);
          if (!s.ok()) return fail(s.to_string());
        }
      }
      cudaEventRecord(stop_, stream_);
      e = cudaEventSynchronize(stop_);
      if (e != cudaSuccess) return fail("stream: " + err_str(e));
      float t = 0;
      cudaEventElapsedTime(&t, start_, stop_);
      if (rep >= 2) ms.push_back(t);
    }
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    std::sort(ms.begin(), ms.end());
    r.stream_s = ms[ms.size() / 2] / 1e3 / launches;
  }

 private:
  bool quick_;
  int l2_ = 0;
  std::unique_ptr<Dev> flush_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_{}, stop_{};
};

std::mt19937_64& rng() {
  static std::mt19937_64 g(4242);
  return g;
}

// ---- linear ----

struct LinearCase {
  WeightFormat format;
  int64_t n, k, m;
  bool packed;
  double target;
  std::string label;           // variant note ("" = defaults)
  std::function<void()> tune;  // sets cuda::tuning() for this row (defaults restored after)
};

Row bench_linear(Bench& b, const LinearCase& c) {
  const WeightLayout l{c.format, c.n, c.k, is_int4(c.format) ? 128 : 0, ScaleDtype::kF16};
  const WeightBytes wb = weight_bytes(l);
  Row r;
  r.op = std::string("linear ") + weight_format_name(c.format) + (c.packed ? " (mma)" : "") + c.label;
  r.shape = std::to_string(c.n) + "x" + std::to_string(c.k) + " M=" + std::to_string(c.m);
  r.bytes = static_cast<double>(wb.total() + c.m * c.k * 4);
  r.target = c.target;
  const int copies = b.copies_for(static_cast<double>(wb.total()));
  // Quantize 64 random rows once and repeat them down the matrix, per copy.
  const int64_t rows = std::min<int64_t>(64, c.n);
  const std::vector<float> src = normals(rng(), static_cast<size_t>(rows * c.k), 0.02f);
  auto dsrc = upload(src);
  WeightLayout small = l;
  small.rows = rows;
  const WeightBytes sb = weight_bytes(small);
  std::vector<std::unique_ptr<Dev>> data, scales, zeros, packed;
  std::vector<WeightView> views;
  for (int i = 0; i < copies; ++i) {
    data.push_back(std::make_unique<Dev>(static_cast<size_t>(wb.data)));
    scales.push_back(std::make_unique<Dev>(static_cast<size_t>(std::max<int64_t>(wb.scales, 16))));
    zeros.push_back(std::make_unique<Dev>(static_cast<size_t>(std::max<int64_t>(wb.zeros, 16))));
    if (data.back()->p == nullptr || scales.back()->p == nullptr) {
      r.error = "out of device memory";
      return r;
    }
    const Status s = cuda::quantize_weight(
        {dsrc->p, SourceDtype::kF32, rows, c.k, c.k}, small,
        {data.back()->p, scales.back()->p, wb.zeros ? zeros.back()->as<uint8_t>() : nullptr}, b.stream());
    if (!s.ok()) {
      r.error = s.to_string();
      return r;
    }
    replicate(data.back()->p, static_cast<size_t>(sb.data), static_cast<size_t>(wb.data));
    if (wb.scales)
      replicate(scales.back()->p, static_cast<size_t>(sb.scales), static_cast<size_t>(wb.scales));
    if (wb.zeros) replicate(zeros.back()->p, static_cast<size_t>(sb.zeros), static_cast<size_t>(wb.zeros));
    views.push_back({l, data.back()->p, wb.scales ? scales.back()->p : nullptr,
                     wb.zeros ? zeros.back()->as<uint8_t>() : nullptr});
    packed.push_back(std::make_unique<Dev>(c.packed ? static_cast<size_t>(wb.data) : 16));
    if (c.packed) {
      const Status ps = cuda::pack_int4_for_mma(views.back(), packed.back()->p, b.stream());
      if (!ps.ok()) {
        r.error = ps.to_string();
        return r;
      }
    }
  }
  auto x = upload(normals(rng(), static_cast<size_t>(c.m * c.k), 1.0f));
  Dev y(static_cast<size_t>(c.m * c.n * 4));
  cudaDeviceSynchronize();
  const cuda::Tuning saved = cuda::tuning();
  if (c.tune) c.tune();
  b.time(r, copies, [&](int i) {
    return cuda::linear({x->as<const float>(), c.m, c.k, c.k}, views[static_cast<size_t>(i)],
                        c.packed ? packed[static_cast<size_t>(i)]->p : nullptr, nullptr,
                        {y.as<float>(), c.m, c.n, c.n}, b.stream());
  });
  cuda::tuning() = saved;
  if (r.error.empty() && !all_finite_device(y.as<float>(), static_cast<size_t>(c.m * c.n)))
    r.error = "non-finite output";
  return r;
}

// ---- decode attention ----

struct AttnCase {
  KvDtype dtype;
  int32_t batch, ctx;
  double target;
  std::string label;
  std::function<void()> tune;
};

// Decode attention: `batch` sequences of `ctx` tokens, 32 query / 8 KV heads, head_dim 128, 16-token
// pages, every sequence's pages interleaved with the others' (as a block manager hands them out).
Row bench_attention(Bench& b, const AttnCase& c) {
  const int32_t hq = 32, hk = 8, d = 128, page = 16;
  const KvPageLayout l{c.dtype, page, hk, d};
  const int64_t pages_per_seq = c.ctx / page, pages = int64_t{c.batch} * pages_per_seq;
  const size_t pool_bytes = static_cast<size_t>(pages * kv_page_bytes(l));
  Row r;
  r.op = std::string("attention ") + kv_dtype_name(c.dtype) + " KV" + c.label;
  r.shape = "batch " + std::to_string(c.batch) + " x " + std::to_string(c.ctx) + " tok, 32/8 heads, d128";
  r.bytes = static_cast<double>(pool_bytes) + static_cast<double>(c.batch) * hq * d * 4;
  r.target = c.target;
  const int copies = b.copies_for(static_cast<double>(pool_bytes));
  // 64 pages of real K/V (random normal, an outlier channel in K) through kv_append, repeated.
  const int32_t tmpl_pages = static_cast<int32_t>(std::min<int64_t>(64, pages)), tmpl_tok = tmpl_pages * page;
  std::vector<float> k = normals(rng(), static_cast<size_t>(tmpl_tok) * hk * d, 1.0f),
                     v = normals(rng(), k.size(), 1.0f);
  for (int64_t t = 0; t < tmpl_tok * hk; ++t) k[static_cast<size_t>(t * d)] += 4.0f;
  std::vector<int32_t> ids(static_cast<size_t>(tmpl_tok)), slots(ids.size()), wins(ids.size(), 0);
  for (int32_t t = 0; t < tmpl_tok; ++t) {
    ids[static_cast<size_t>(t)] = t / page;
    slots[static_cast<size_t>(t)] = t % page;
  }
  auto dk = upload(k), dv = upload(v), dids = upload(ids), dslots = upload(slots), dwins = upload(wins);
  // int4-kivi: one staging window per sequence (every page here is full, so attention never reads them).
  Dev staging(static_cast<size_t>(std::max<int64_t>(16, c.batch * kv_staging_bytes(l))));
  std::vector<std::unique_ptr<Dev>> pools;
  std::vector<KvCache> caches;
  for (int i = 0; i < copies; ++i) {
    pools.push_back(std::make_unique<Dev>(pool_bytes));
    if (pools.back()->p == nullptr) {
      r.error = "out of device memory";
      return r;
    }
    KvCache cache{l, pools.back()->as<uint8_t>(), pages, staging.as<uint8_t>(), c.batch, nullptr, nullptr};
    const Status s = cuda::kv_append(cache,
                                     {{dk->as<const float>(), tmpl_tok, hk, d, hk * d, d},
                                      {dv->as<const float>(), tmpl_tok, hk, d, hk * d, d},
                                      dids->as<const int32_t>(),
                                      dslots->as<const int32_t>(),
                                      dwins->as<const int32_t>()},
                                     b.stream());
    if (!s.ok()) {
      r.error = s.to_string();
      return r;
    }
    cudaStreamSynchronize(b.stream());
    replicate(pools.back()->p, static_cast<size_t>(tmpl_pages * kv_page_bytes(l)), pool_bytes);
    caches.push_back(cache);
  }
  std::vector<int32_t> table(static_cast<size_t>(pages)), q_start,
      kv_len(static_cast<size_t>(c.batch), c.ctx);
  for (int64_t s = 0; s < c.batch; ++s) {
    for (int64_t p = 0; p < pages_per_seq; ++p)
      table[static_cast<size_t>(s * pages_per_seq + p)] = static_cast<int32_t>(p * c.batch + s);
  }
  for (int32_t s = 0; s <= c.batch; ++s) q_start.push_back(s);
  std::vector<int32_t> sids(static_cast<size_t>(c.batch));
  for (int32_t s = 0; s < c.batch; ++s) sids[static_cast<size_t>(s)] = s;
  auto dtable = upload(table), dqs = upload(q_start), dkv = upload(kv_len), dsids = upload(sids);
  auto q = upload(normals(rng(), static_cast<size_t>(c.batch) * hq * d, 1.0f));
  Dev out(static_cast<size_t>(c.batch) * hq * d * 4);
  AttentionBatch ab;
  ab.num_seqs = c.batch;
  ab.num_q_heads = hq;
  ab.scale = 0.08838834764831845f;
  ab.q_start = dqs->as<int32_t>();
  ab.kv_len = dkv->as<int32_t>();
  ab.block_table = dtable->as<int32_t>();
  ab.max_pages_per_seq = static_cast<int32_t>(pages_per_seq);
  ab.staging_ids = dsids->as<int32_t>();
  const size_t ws_bytes = cuda::attention_workspace_bytes(c.batch, hq, hk, d, 1, c.ctx);
  Dev ws(ws_bytes);
  cudaDeviceSynchronize();
  const cuda::Tuning saved = cuda::tuning();
  if (c.tune) c.tune();
  b.time(r, copies, [&](int i) {
    return cuda::attention(caches[static_cast<size_t>(i)], ab, 1, c.ctx,
                           {q->as<const float>(), c.batch, hq, d, hq * d, d},
                           {out.as<float>(), c.batch, hq, d, hq * d, d}, ws.p, ws_bytes, b.stream());
  });
  cuda::tuning() = saved;
  if (r.error.empty() && !all_finite_device(out.as<float>(), static_cast<size_t>(c.batch) * hq * d))
    r.error = "non-finite output";
  return r;
}

}  // namespace
}  // namespace infergate::kernels

int main(int argc, char** argv) {
  using namespace infergate::kernels;
  double peak_tbps = 4.8;
  bool quick = false;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--peak-tbps") == 0 && i + 1 < argc) {
      peak_tbps = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
      filter = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--peak-tbps TB/s] [--quick] [--filter TEXT]\n", argv[0]);
      return 64;
    }
  }
  if (!(peak_tbps > 0)) {
    std::fprintf(stderr, "--peak-tbps must be a positive number of TB/s\n");
    return 64;
  }
  auto wanted = [&](const std::string& name) {
    return filter.empty() || name.find(filter) != std::string::npos;
  };
  if (cuda::device_count() == 0) {
    std::printf("no GPU: %s\n", cuda::device_description().c_str());
    return 2;
  }
  std::vector<Row> rows;
  double copy_bw = 0;
  {
    Bench b(quick);
    copy_bw = b.copy_bandwidth();
    std::printf("device: %s; peak %.2f TB/s; device-to-device copy %.2f TB/s (read + write)\n",
                cuda::device_description().c_str(), peak_tbps, copy_bw / 1e12);
    std::fflush(stdout);
    using F = WeightFormat;
    auto variant = [](int v) { return [v] { cuda::tuning().gemv_variant = v; }; };
    auto no_pdl = [] { cuda::tuning().pdl = false; };
    const std::vector<LinearCase> linear_cases = {
        {F::kInt4Sym, 8192, 8192, 1, true, 0.70, "", nullptr},
        {F::kInt4Sym, 8192, 8192, 1, true, 0, " no PDL", no_pdl},
        {F::kInt4Sym, 8192, 8192, 1, true, 0, " smem ring", variant(2)},
        {F::kInt4Sym, 8192, 8192, 1, true, 0, " 16 warps", variant(3)},
        {F::kInt4Sym, 8192, 8192, 1, true, 0, " 6 deep", variant(4)},
        {F::kInt4Sym, 8192, 8192, 1, true, 0, " old", [] { cuda::tuning().gemv_legacy_mma = true; }},
        {F::kInt4Asym, 8192, 8192, 1, true, 0, "", nullptr},
        {F::kInt4Sym, 4096, 4096, 1, true, 0, "", nullptr},
        {F::kInt4Sym, 14336, 4096, 1, true, 0, "", nullptr},
        {F::kInt4Sym, 4096, 14336, 1, true, 0, "", nullptr},
        {F::kInt4Sym, 8192, 8192, 4, true, 0, "", nullptr},
        {F::kInt4Sym, 8192, 8192, 8, true, 0, "", nullptr},
        {F::kInt4Sym, 8192, 8192, 1, false, 0, "", nullptr},
        {F::kInt8, 8192, 8192, 1, false, 0, "", nullptr},
        {F::kF16, 8192, 8192, 1, false, 0, "", nullptr},
    };
    for (const LinearCase& c : linear_cases) {
      if (!wanted(std::string("linear ") + weight_format_name(c.format) + (c.packed ? " (mma)" : "") +
                  c.label + " " + std::to_string(c.n) + "x" + std::to_string(c.k) +
                  " M=" + std::to_string(c.m)))
        continue;
      rows.push_back(bench_linear(b, c));
      std::fprintf(stderr, "done: %s %s\n", rows.back().op.c_str(), rows.back().shape.c_str());
    }
    auto stages = [](int s) { return [s] { cuda::tuning().attention_stages = s; }; };
    auto legacy = [] { cuda::tuning().attention_decode = false; };
    const std::vector<AttnCase> attn_cases = {
        {KvDtype::kInt8, 1, 16384, 0.80, "", nullptr},
        {KvDtype::kFp8E4M3, 1, 16384, 0.80, "", nullptr},
        {KvDtype::kInt8, 8, 16384, 0.80, "", nullptr},
        {KvDtype::kFp8E4M3, 8, 16384, 0.80, "", nullptr},
        {KvDtype::kInt8, 64, 16384, 0.80, "", nullptr},
        {KvDtype::kFp8E4M3, 64, 16384, 0.80, "", nullptr},
        {KvDtype::kInt8, 1, 16384, 0, " no PDL", no_pdl},
        {KvDtype::kInt8, 1, 16384, 0, " splits >= 4 chunks",
         [] { cuda::tuning().attention_min_split_chunks = 4; }},
        {KvDtype::kInt8, 8, 16384, 0, " 3 stages", stages(3)},
        {KvDtype::kInt8, 1, 16384, 0, " old", legacy},
        {KvDtype::kInt8, 64, 16384, 0, " old", legacy},
        {KvDtype::kF16, 8, 16384, 0, "", nullptr},
        {KvDtype::kBF16, 8, 16384, 0, "", nullptr},
        {KvDtype::kInt4, 8, 16384, 0, "", nullptr},
        {KvDtype::kInt4Kivi, 8, 16384, 0, "", nullptr},
        {KvDtype::kInt8, 64, 4096, 0, "", nullptr},
    };
    for (const AttnCase& c : attn_cases) {
      if (!wanted(std::string("attention ") + kv_dtype_name(c.dtype) + " KV" + c.label + " batch " +
                  std::to_string(c.batch) + " x " + std::to_string(c.ctx)))
        continue;
      rows.push_back(bench_attention(b, c));
      std::fprintf(stderr, "done: %s %s\n", rows.back().op.c_str(), rows.back().shape.c_str());
    }
  }
  const cudaError_t e = cudaDeviceSynchronize();
  bool failed = e != cudaSuccess;
  std::printf(
      "\nstream: graph of back-to-back launches over inputs 4x the L2; cold: one launch, L2 flushed\n");
  std::printf("%-30s %-37s %9s %8s %8s %7s %8s %10s\n", "op", "shape", "stream us", "GB/s", "of peak",
              "of copy", "cold us", "target");
  for (const Row& r : rows) {
    if (!r.error.empty()) {
      std::printf("%-30s %-37s FAILED: %s\n", r.op.c_str(), r.shape.c_str(), r.error.c_str());
      failed = true;
      continue;
    }
    const double bw = r.bytes / r.stream_s;
    const double frac = bw / (peak_tbps * 1e12);
    char target[32] = "-";
    if (r.target > 0)
      std::snprintf(target, sizeof target, "%.0f%% %s", r.target * 100, frac >= r.target ? "met" : "MISSED");
    std::printf("%-30s %-37s %9.1f %8.1f %7.1f%% %6.1f%% %8.1f %10s%s\n", r.op.c_str(), r.shape.c_str(),
                r.stream_s * 1e6, bw / 1e9, frac * 100, copy_bw > 0 ? 100.0 * bw / copy_bw : 0.0,
                r.cold_s * 1e6, target, r.note == "graph" ? "" : " (no graph)");
  }
  if (e != cudaSuccess) std::printf("device error: %s\n", cudaGetErrorString(e));
  return failed ? 1 : 0;
}
