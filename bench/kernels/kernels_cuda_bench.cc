// CUDA benchmarks of the kernels/ ops: each op's achieved HBM bandwidth (the bytes it must read -
// weights with their scales and zeros, KV pages with their scales - over its median time, with the
// L2 cache flushed before every repeat) as a fraction of the device's peak (4.8 TB/s for an H200 by
// datasheet; --peak-tbps to change). Times come from CUDA events around the launches alone.
//
//   kernels_cuda_bench [--peak-tbps 4.8] [--quick]
// Exit status: 0 ran, 2 no GPU, 1 an op failed. The last lines are a table that scripts/gpu-check.sh
// prints; a "target" column shows the goal where the project set one (informational).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "infergate/kernels/cuda.h"

namespace infergate::kernels {
namespace {

struct Row {
  std::string op, shape;
  double bytes = 0, seconds = 0;
  double target = 0;  // fraction of peak, 0 when none
  std::string error;
};

bool check(cudaError_t e, const char* what, std::string* err) {
  if (e == cudaSuccess) return true;
  *err = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

class Bench {
 public:
  explicit Bench(bool quick) : quick_(quick) {
    int dev = 0, l2 = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
    flush_bytes_ = std::max<size_t>(static_cast<size_t>(l2) * 4, size_t{256} << 20);
    if (cudaMalloc(&flush_, flush_bytes_) != cudaSuccess) flush_ = nullptr;
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~Bench() {
    cudaFree(flush_);
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }

  // Median seconds of `fn` over repeats, L2 flushed (overwritten) before each.
  Row time(const std::string& op, const std::string& shape, double bytes, double target,
           const std::function<Status()>& fn) {
    Row r{op, shape, bytes, 0, target, ""};
    const int warm = 2, reps = quick_ ? 5 : 15;
    std::vector<float> ms;
    for (int i = 0; i < warm + reps; ++i) {
      if (flush_ != nullptr) cudaMemsetAsync(flush_, i & 0xFF, flush_bytes_, nullptr);
      cudaEventRecord(start_, nullptr);
      const Status s = fn();
      cudaEventRecord(stop_, nullptr);
      if (!s.ok()) {
        r.error = s.to_string();
        return r;
      }
      if (!check(cudaEventSynchronize(stop_), "synchronize", &r.error)) return r;
      float t = 0;
      cudaEventElapsedTime(&t, start_, stop_);
      if (i >= warm) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    r.seconds = ms[ms.size() / 2] / 1e3;
    return r;
  }

 private:
  bool quick_;
  void* flush_ = nullptr;
  size_t flush_bytes_ = 0;
  cudaEvent_t start_{}, stop_{};
};

// Device memory that frees itself; filled with a byte pattern (the values do not change the work).
struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes, int pattern = 0x31) {
    if (cudaMalloc(&p, std::max<size_t>(bytes, 16)) == cudaSuccess) cudaMemset(p, pattern, bytes);
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

Row bench_linear(Bench& b, WeightFormat f, int64_t n, int64_t k, int64_t m, bool packed, double target) {
  const WeightLayout l{f, n, k, is_int4(f) ? 128 : 0, ScaleDtype::kF16};
  const WeightBytes wb = weight_bytes(l);
  Dev data(static_cast<size_t>(wb.data), 0x37), scales(static_cast<size_t>(wb.scales), 0x20),
      zeros(static_cast<size_t>(wb.zeros), 0x07);
  Dev x(static_cast<size_t>(m * k * 4), 0x3C), y(static_cast<size_t>(m * n * 4), 0);
  Dev pk(packed ? static_cast<size_t>(wb.data) : 16);
  const WeightView w{l, data.p, wb.scales ? scales.p : nullptr, wb.zeros ? zeros.as<uint8_t>() : nullptr};
  if (packed) (void)cuda::pack_int4_for_mma(w, pk.p, nullptr);
  const std::string name = std::string("linear ") + weight_format_name(f) + (packed ? " (mma)" : "");
  const std::string shape = std::to_string(n) + "x" + std::to_string(k) + " M=" + std::to_string(m);
  const double bytes = static_cast<double>(wb.total() + m * k * 4);
  return b.time(name, shape, bytes, target, [&] {
    return cuda::linear({x.as<const float>(), m, k, k}, w, packed ? pk.p : nullptr, nullptr,
                        {y.as<float>(), m, n, n}, nullptr);
  });
}

// Decode attention: `batch` sequences of `ctx` tokens, 32 query / 8 KV heads, head_dim 128, 16-token pages.
Row bench_attention(Bench& b, KvDtype dt, int32_t batch, int32_t ctx, double target) {
  const int32_t hq = 32, hk = 8, d = 128, page = 16;
  const KvPageLayout l{dt, page, hk, d};
  const int64_t pages_per_seq = ctx / page, pages = int64_t{batch} * pages_per_seq;
  const size_t pool_bytes = static_cast<size_t>(pages * kv_page_bytes(l));
  Dev pool(pool_bytes, 0x31),
      staging(static_cast<size_t>(std::max<int64_t>(16, batch * kv_staging_bytes(l))), 0x31);
  std::vector<int32_t> table(static_cast<size_t>(pages)), q_start, kv_len(static_cast<size_t>(batch), ctx),
      sids;
  for (int64_t s = 0; s < batch; ++s) {
    for (int64_t p = 0; p < pages_per_seq; ++p)
      table[s * pages_per_seq + p] = static_cast<int32_t>(p * batch + s);
    sids.push_back(static_cast<int32_t>(s));
  }
  for (int32_t s = 0; s <= batch; ++s) q_start.push_back(s);
  Dev dtable(table.size() * 4), dqs(q_start.size() * 4), dkv(kv_len.size() * 4), dsid(sids.size() * 4);
  cudaMemcpy(dtable.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dqs.p, q_start.data(), q_start.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dkv.p, kv_len.data(), kv_len.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dsid.p, sids.data(), sids.size() * 4, cudaMemcpyHostToDevice);
  Dev q(static_cast<size_t>(batch) * hq * d * 4, 0x3C), out(static_cast<size_t>(batch) * hq * d * 4, 0);
  const KvCache cache{l, pool.as<uint8_t>(), pages, staging.as<uint8_t>(), batch, nullptr, nullptr};
  AttentionBatch ab;
  ab.num_seqs = batch;
  ab.num_q_heads = hq;
  ab.scale = 0.08838834764831845f;
  ab.q_start = dqs.as<int32_t>();
  ab.kv_len = dkv.as<int32_t>();
  ab.block_table = dtable.as<int32_t>();
  ab.max_pages_per_seq = static_cast<int32_t>(pages_per_seq);
  ab.staging_ids = dsid.as<int32_t>();
  const size_t ws_bytes = cuda::attention_workspace_bytes(batch, hq, hk, d, 1, ctx);
  Dev ws(ws_bytes);
  const double bytes = static_cast<double>(pool_bytes) + static_cast<double>(batch) * hq * d * 4;
  const std::string shape =
      "batch " + std::to_string(batch) + " x " + std::to_string(ctx) + " tok, 32/8 heads, d128";
  return b.time(std::string("attention ") + kv_dtype_name(dt) + " KV", shape, bytes, target, [&] {
    return cuda::attention(cache, ab, 1, ctx, {q.as<const float>(), batch, hq, d, hq * d, d},
                           {out.as<float>(), batch, hq, d, hq * d, d}, ws.p, ws_bytes, nullptr);
  });
}

}  // namespace
}  // namespace infergate::kernels

int main(int argc, char** argv) {
  using namespace infergate::kernels;
  double peak_tbps = 4.8;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--peak-tbps") == 0 && i + 1 < argc) {
      peak_tbps = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--peak-tbps TB/s] [--quick]\n", argv[0]);
      return 64;
    }
  }
  if (cuda::device_count() == 0) {
    std::printf("no GPU: %s\n", cuda::device_description().c_str());
    return 2;
  }
  std::printf("device: %s; peak %.2f TB/s\n", cuda::device_description().c_str(), peak_tbps);
  std::vector<Row> rows;
  {
    Bench b(quick);
    rows.push_back(bench_linear(b, WeightFormat::kInt4Sym, 8192, 8192, 1, true, 0.70));
    rows.push_back(bench_linear(b, WeightFormat::kInt4Asym, 8192, 8192, 1, true, 0));
    rows.push_back(bench_linear(b, WeightFormat::kInt4Sym, 8192, 8192, 1, false, 0));
    rows.push_back(bench_linear(b, WeightFormat::kInt8, 8192, 8192, 1, false, 0));
    rows.push_back(bench_linear(b, WeightFormat::kF16, 8192, 8192, 1, false, 0));
    rows.push_back(bench_linear(b, WeightFormat::kInt4Sym, 8192, 8192, 8, true, 0));
    for (int32_t batch : {1, 8, 64}) {
      rows.push_back(bench_attention(b, KvDtype::kInt8, batch, 16384, 0.80));
      rows.push_back(bench_attention(b, KvDtype::kFp8E4M3, batch, 16384, 0.80));
    }
    rows.push_back(bench_attention(b, KvDtype::kF16, 8, 16384, 0));
    rows.push_back(bench_attention(b, KvDtype::kInt4, 8, 16384, 0));
  }
  const cudaError_t e = cudaDeviceSynchronize();
  bool failed = e != cudaSuccess;
  std::printf("\n%-30s %-38s %10s %10s %8s %8s\n", "op", "shape", "time us", "GB/s", "of peak", "target");
  for (const Row& r : rows) {
    if (!r.error.empty()) {
      std::printf("%-30s %-38s FAILED: %s\n", r.op.c_str(), r.shape.c_str(), r.error.c_str());
      failed = true;
      continue;
    }
    const double bw = r.bytes / r.seconds;
    const double frac = bw / (peak_tbps * 1e12);
    char target[32] = "-";
    if (r.target > 0)
      std::snprintf(target, sizeof target, "%.0f%% %s", r.target * 100, frac >= r.target ? "met" : "MISSED");
    std::printf("%-30s %-38s %10.1f %10.1f %7.1f%% %8s\n", r.op.c_str(), r.shape.c_str(), r.seconds * 1e6,
                bw / 1e9, frac * 100, target);
  }
  if (e != cudaSuccess) std::printf("device error: %s\n", cudaGetErrorString(e));
  return failed ? 1 : 0;
}
