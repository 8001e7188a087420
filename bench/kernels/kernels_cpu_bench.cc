// CPU benchmarks of the kernels/ ops. Every op reports bytes/s (the bytes it must read: weights with
// their scales, KV pages with theirs); the summary at the end divides them by the bandwidth of a
// STREAM-like triad measured in the same run with the same threads, and compares quantized-KV
// attention with fp16-KV attention. Working sets are larger than the last-level cache.
// It also measures the fp32 FMA peak of the same threads (independent multiply-adds in registers, at
// the instruction set the ops use) and prints decode attention's multiply-adds as a fraction of it:
// the exact path does the same fp32 multiply-adds for every KV format, so there a quantized format is
// faster only by its bytes where fp16 attention is bound by memory. Decode attention over 8 sequences
// x 4096 tokens, 32/8 heads, head_dim 128 runs for every KV dtype; int8 / int4 / int4-kivi run twice
// where the CPU has AVX-512 VNNI: the integer path (8-bit q and weights, the default) and the exact one.
//
//   kernels_cpu_bench [--benchmark_filter=...]     INFERGATE_KERNELS_THREADS / _ISA apply
#include <benchmark/benchmark.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "infergate/kernels/cpu.h"
#include "infergate/kernels/ref.h"
#include "llc.h"

namespace infergate::kernels {
namespace {

std::mt19937_64& rng() {
  static std::mt19937_64 g(12345);
  return g;
}

std::vector<float> normals(size_t n, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}

// ---- memory bandwidth: a[i] = b[i] + s * c[i] over 3 x 128 MiB, threads as the ops use ----
void BM_Triad(benchmark::State& state) {
  const size_t n = size_t{32} << 20;  // 32 Mi floats = 128 MiB per array
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  // Parallel like the ops: one contiguous block per thread, via the public add op (a = b + c).
  // The STREAM triad's extra multiply costs nothing at these sizes.
  const int64_t rows = 4096, cols = static_cast<int64_t>(n) / rows;
  for (auto _ : state) {
    Status s = add_cpu(contiguous<const float>(b.data(), rows, cols),
                       contiguous<const float>(c.data(), rows, cols), contiguous(a.data(), rows, cols));
    benchmark::DoNotOptimize(s.ok());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(3 * n * sizeof(float)));
}
BENCHMARK(BM_Triad)->Name("triad")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

// ---- fp32 FMA peak: 12 independent accumulators per thread, vector width of the active ISA ----
constexpr int kFmaChains = 12;

#if defined(__x86_64__)
__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t iters) {
  __m512 a[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) a[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-4f);
  for (int64_t k = 0; k < iters; ++k) {
    for (auto& v : a) v = _mm512_fmadd_ps(v, x, y);
  }
  __m512 s = a[0];
  for (int i = 1; i < kFmaChains; ++i) s = _mm512_add_ps(s, a[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0] + out[15];
}
__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t iters) {
  __m256 a[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) a[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-4f);
  for (int64_t k = 0; k < iters; ++k) {
    for (auto& v : a) v = _mm256_fmadd_ps(v, x, y);
  }
  __m256 s = a[0];
  for (int i = 1; i < kFmaChains; ++i) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[7];
}
#endif
float fma_chains_scalar(int64_t iters) {
  float a[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) a[i] = 0.001f * static_cast<float>(i);
  for (int64_t k = 0; k < iters; ++k) {
    for (auto& v : a) v = std::fma(v, 0.999f, 1e-4f);
  }
  float s = 0;
  for (float v : a) s += v;
  return s;
}

// Runs `iters` steps of the chains on every thread; returns the multiply-adds (lanes) done.
int64_t fma_peak_run(int64_t iters) {
  int lanes = 1;
  float (*fn)(int64_t) = fma_chains_scalar;
#if defined(__x86_64__)
  if (cpu_isa() == CpuIsa::kAvx512) {
    fn = fma_chains_avx512;
    lanes = 16;
  } else if (cpu_isa() == CpuIsa::kAvx2) {
    fn = fma_chains_avx2;
    lanes = 8;
  }
#endif
  const int threads = cpu_threads();
  std::vector<float> sink(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back([&, t] { sink[static_cast<size_t>(t)] = fn(iters); });
  sink[0] = fn(iters);
  for (auto& th : pool) th.join();
  benchmark::DoNotOptimize(sink.data());
  return iters * kFmaChains * lanes * threads;
}

void BM_FmaPeak(benchmark::State& state) {
  int64_t lanes = 0;
  for (auto _ : state) lanes += fma_peak_run(int64_t{1} << 22);
  state.SetItemsProcessed(lanes);
}
BENCHMARK(BM_FmaPeak)->Name("fma_peak")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);

// ---- GEMV / small-batch GEMM: a >= 64 MiB weight ----
struct BenchWeight {
  WeightLayout layout;
  std::vector<uint8_t> data, zeros;
  std::vector<uint16_t> scales;
  WeightView view() const {
    return {layout, data.data(), scales.empty() ? nullptr : scales.data(),
            zeros.empty() ? nullptr : zeros.data()};
  }
};

const BenchWeight& weight(WeightFormat f) {
  static std::map<int, BenchWeight> cache;
  auto it = cache.find(static_cast<int>(f));
  if (it != cache.end()) return it->second;
  // int8: 8192 x 8192 = 64 MiB; int4: 16384 x 8192 = 64 MiB of codes; fp16: 4096 x 8192 = 64 MiB.
  const int64_t k = 8192;
  const int64_t n = f == WeightFormat::kInt8 ? 8192 : (is_int4(f) ? 16384 : 4096);
  BenchWeight w;
  w.layout = {f, n, k, is_int4(f) ? 128 : 0, ScaleDtype::kF16};
  const WeightBytes b = weight_bytes(w.layout);
  w.data.resize(static_cast<size_t>(b.data));
  w.scales.resize(static_cast<size_t>(b.scales / 2));
  w.zeros.resize(static_cast<size_t>(b.zeros));
  // Quantize 64 rows and repeat them: realistic codes and scales without minutes of set-up.
  const int64_t rows = 64;
  std::vector<float> src = normals(static_cast<size_t>(rows * k), 0.02f);
  WeightLayout small = w.layout;
  small.rows = rows;
  BenchWeight s;
  const WeightBytes sb = weight_bytes(small);
  s.data.resize(static_cast<size_t>(sb.data));
  s.scales.resize(static_cast<size_t>(sb.scales / 2));
  s.zeros.resize(static_cast<size_t>(sb.zeros));
  if (!quantize_weight_cpu({src.data(), SourceDtype::kF32, rows, k, k}, small,
                           {s.data.data(), s.scales.data(), s.zeros.empty() ? nullptr : s.zeros.data()})
           .ok()) {
    std::abort();
  }
  for (int64_t r = 0; r < n; r += rows) {
    std::copy(s.data.begin(), s.data.end(), w.data.begin() + r * weight_row_bytes(w.layout));
    std::copy(s.scales.begin(), s.scales.end(), w.scales.begin() + r * weight_groups_per_row(w.layout));
    if (!s.zeros.empty())
      std::copy(s.zeros.begin(), s.zeros.end(), w.zeros.begin() + r * weight_groups_per_row(w.layout));
  }
  return cache.emplace(static_cast<int>(f), std::move(w)).first->second;
}

void BM_Linear(benchmark::State& state) {
  const auto f = static_cast<WeightFormat>(state.range(0));
  const int64_t m = state.range(1);
  const BenchWeight& w = weight(f);
  std::vector<float> x = normals(static_cast<size_t>(m * w.layout.cols), 1.0f);
  std::vector<float> y(static_cast<size_t>(m * w.layout.rows));
  for (auto _ : state) {
    Status s = linear_cpu(contiguous<const float>(x.data(), m, w.layout.cols), w.view(), nullptr,
                          contiguous(y.data(), m, w.layout.rows));
    benchmark::DoNotOptimize(s.ok());
    benchmark::ClobberMemory();
  }
  const int64_t bytes = weight_bytes(w.layout).total() + static_cast<int64_t>((x.size() + y.size()) * 4);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
  state.SetLabel(std::string(weight_format_name(f)) + " " + std::to_string(w.layout.rows) + "x" +
                 std::to_string(w.layout.cols) + " M=" + std::to_string(m));
}
BENCHMARK(BM_Linear)
    ->Name("linear")
    ->ArgsProduct({{static_cast<int>(WeightFormat::kF16), static_cast<int>(WeightFormat::kBF16),
                    static_cast<int>(WeightFormat::kInt8), static_cast<int>(WeightFormat::kInt4Sym),
                    static_cast<int>(WeightFormat::kInt4Asym)},
                   {1, 4}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.5);

// ---- the engine's own shapes (the 113M-parameter llama of engine_bench: hidden 768, 4 KV heads of 64,
// intermediate 2048, vocab 8192), weights in the engine's formats (int4: asymmetric, groups of 128).
// A decode step reads every layer's weights once, so here enough copies of the matrix to fill 2x the
// last-level cache are cycled through, one call per copy: each call streams its weights from memory,
// as in the engine, and per-row / per-group overheads of small K show up as a lower share of the triad.
void BM_LinearEngineShape(benchmark::State& state) {
  const auto f = static_cast<WeightFormat>(state.range(0));
  const int64_t n = state.range(1), k = state.range(2), m = state.range(3);
  WeightLayout layout{f, n, k, is_int4(f) ? 128 : 0, ScaleDtype::kF16};
  const WeightBytes b = weight_bytes(layout);
  const int64_t copies = std::max<int64_t>(2, twice_llc() / b.total() + 1);
  std::vector<uint8_t> data(static_cast<size_t>(b.data * copies)),
      zeros(static_cast<size_t>(b.zeros * copies));
  std::vector<uint16_t> scales(static_cast<size_t>(b.scales / 2 * copies));
  std::vector<float> src = normals(static_cast<size_t>(n * k), 0.02f);
  if (!quantize_weight_cpu({src.data(), SourceDtype::kF32, n, k, k}, layout,
                           {data.data(), scales.data(), zeros.empty() ? nullptr : zeros.data()})
           .ok()) {
    std::abort();
  }
  for (int64_t c = 1; c < copies; ++c) {
    std::copy_n(data.begin(), b.data, data.begin() + c * b.data);
    std::copy_n(scales.begin(), b.scales / 2, scales.begin() + c * (b.scales / 2));
    if (b.zeros > 0) std::copy_n(zeros.begin(), b.zeros, zeros.begin() + c * b.zeros);
  }
  std::vector<float> x = normals(static_cast<size_t>(m * k), 1.0f);
  std::vector<float> y(static_cast<size_t>(m * n));
  int64_t c = 0;
  for (auto _ : state) {
    const WeightView w{layout, data.data() + c * b.data, scales.data() + c * (b.scales / 2),
                       b.zeros > 0 ? zeros.data() + c * b.zeros : nullptr};
    Status s = linear_cpu(contiguous<const float>(x.data(), m, k), w, nullptr, contiguous(y.data(), m, n));
    benchmark::DoNotOptimize(s.ok());
    benchmark::ClobberMemory();
    c = c + 1 == copies ? 0 : c + 1;
  }
  const int64_t bytes = b.total() + static_cast<int64_t>((x.size() + y.size()) * 4);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
  state.SetLabel(std::string(weight_format_name(f)) + " " + std::to_string(n) + "x" + std::to_string(k) +
                 " M=" + std::to_string(m) + " (engine)");
}
BENCHMARK(BM_LinearEngineShape)
    ->Name("linear_engine")
    ->ArgsProduct({{static_cast<int>(WeightFormat::kF16), static_cast<int>(WeightFormat::kInt8),
                    static_cast<int>(WeightFormat::kInt4Asym)},
                   {768, 256, 2048, 8192},
                   {768},
                   {1, 8}})
    ->ArgsProduct({{static_cast<int>(WeightFormat::kF16), static_cast<int>(WeightFormat::kInt8),
                    static_cast<int>(WeightFormat::kInt4Asym)},
                   {768},
                   {2048},
                   {1, 8}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(0.3);

// ---- prefill: a 512-token prompt through the 1.1B Llama's gate projection (5632 x 2048), compute bound.
// int4 on the exact loops (int path 0: x in fp32, a multiply-add per weight and row of x) and on the
// integer ones (1: x quantized to int8, vpdpbusd; AVX-512 VNNI only, else skipped), fp16 and int8 as
// the baselines of the same run. Counter GMAC/s: multiply-adds per second.
void BM_LinearPrefill(benchmark::State& state) {
  const auto f = static_cast<WeightFormat>(state.range(0));
  const bool int_path = state.range(1) != 0;
  const int64_t n = 5632, k = 2048, m = 512;
  set_cpu_int_linear(int_path);
  if (int_path && !cpu_int_linear()) {
    set_cpu_int_linear(true);
    state.SkipWithError("no AVX-512 VNNI: the integer path does not run here");
    return;
  }
  const WeightLayout layout{f, n, k, is_int4(f) ? 128 : 0, ScaleDtype::kF16};
  const WeightBytes b = weight_bytes(layout);
  std::vector<uint8_t> data(static_cast<size_t>(b.data)), zeros(static_cast<size_t>(b.zeros));
  std::vector<uint16_t> scales(static_cast<size_t>(b.scales / 2));
  std::vector<float> src = normals(static_cast<size_t>(n * k), 0.02f);
  if (!quantize_weight_cpu({src.data(), SourceDtype::kF32, n, k, k}, layout,
                           {data.data(), scales.data(), zeros.empty() ? nullptr : zeros.data()})
           .ok()) {
    std::abort();
  }
  const WeightView w{layout, data.data(), scales.empty() ? nullptr : scales.data(),
                     zeros.empty() ? nullptr : zeros.data()};
  std::vector<float> x = normals(static_cast<size_t>(m * k), 1.0f);
  std::vector<float> y(static_cast<size_t>(m * n));
  for (auto _ : state) {
    Status s = linear_cpu(contiguous<const float>(x.data(), m, k), w, nullptr, contiguous(y.data(), m, n));
    benchmark::DoNotOptimize(s.ok());
    benchmark::ClobberMemory();
  }
  set_cpu_int_linear(true);
  state.counters["GMAC/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(m * n * k) * 1e-9,
                         benchmark::Counter::kIsRate);
  state.SetLabel(std::string(weight_format_name(f)) + (int_path ? " int8 x" : "") + " 5632x2048 M=512");
}
BENCHMARK(BM_LinearPrefill)
    ->Name("linear_prefill")
    ->Args({static_cast<int>(WeightFormat::kF16), 0})
    ->Args({static_cast<int>(WeightFormat::kInt8), 0})
    ->Args({static_cast<int>(WeightFormat::kInt4Asym), 0})
    ->Args({static_cast<int>(WeightFormat::kInt4Asym), 1})
    ->Args({static_cast<int>(WeightFormat::kInt4Sym), 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

// ---- decode attention: 8 sequences x 4096 tokens, 32 query / 8 KV heads, head_dim 128 ----
// One step's pages are 37.7 MB in int4 (44 MB int4-kivi): less than the 48 MiB LLC of the machine
// this was tuned on, so step after step they could stay cached, which a real decode step (every
// layer's KV between two reads of this layer's) never sees. So `copies` copies of the pool, together
// at least twice the LLC, are cycled through, one step per copy.
struct BenchCache {
  KvPageLayout layout;
  int64_t pool_bytes = 0, copies = 1;
  std::vector<uint8_t> pages, staging;
  std::vector<int32_t> block_table, q_start, kv_len, staging_ids;
  KvCache cache;
  AttentionBatch batch;
};

constexpr int kSeqs = 8, kCtx = 4096, kHq = 32, kHk = 8, kDim = 128, kPage = 16;
// fp32 multiply-adds of one decode step: q.k and p.v for every query head, token and channel.
constexpr double kAttentionMacs = 2.0 * kSeqs * kHq * kCtx * kDim;

const BenchCache& kv_cache(KvDtype dt) {
  static std::map<int, BenchCache> caches;
  auto it = caches.find(static_cast<int>(dt));
  if (it != caches.end()) return it->second;
  BenchCache c;
  c.layout = {dt, kPage, kHk, kDim};
  const int64_t pages_per_seq = kCtx / kPage, pages = kSeqs * pages_per_seq;
  c.pool_bytes = pages * kv_page_bytes(c.layout);
  c.copies = std::max<int64_t>(1, (twice_llc() + c.pool_bytes - 1) / c.pool_bytes);
  c.pages.resize(static_cast<size_t>(c.copies * c.pool_bytes));
  c.staging.resize(static_cast<size_t>(std::max<int64_t>(1, kSeqs * kv_staging_bytes(c.layout))));
  c.cache = {c.layout, c.pages.data(), pages, c.staging.data(), kSeqs, nullptr, nullptr};
  // Pages of all sequences interleaved, as a block manager hands them out.
  for (int64_t s = 0; s < kSeqs; ++s) {
    for (int64_t p = 0; p < pages_per_seq; ++p) c.block_table.push_back(static_cast<int32_t>(p * kSeqs + s));
  }
  // Fill one page's worth of tokens per sequence and copy it everywhere (the contents do not
  // change the work; quantizing 32k tokens would dominate start-up).
  std::vector<float> k = normals(kPage * kHk * kDim, 1.0f), v = normals(kPage * kHk * kDim, 1.0f);
  std::vector<int32_t> ids(kPage, 0), slots(kPage), wins(kPage, 0);
  for (int i = 0; i < kPage; ++i) slots[i] = i;
  KvAppend a{contiguous<const float>(k.data(), kPage, kHk, kDim),
             contiguous<const float>(v.data(), kPage, kHk, kDim), ids.data(), slots.data(), wins.data()};
  if (!kv_append_cpu(c.cache, a).ok()) std::abort();
  for (int64_t p = 1; p < c.copies * pages; ++p) {
    std::copy(c.pages.begin(), c.pages.begin() + kv_page_bytes(c.layout),
              c.pages.begin() + p * kv_page_bytes(c.layout));
  }
  for (int s = 0; s <= kSeqs; ++s) c.q_start.push_back(s);
  c.kv_len.assign(kSeqs, kCtx);
  c.staging_ids.resize(kSeqs);
  for (int s = 0; s < kSeqs; ++s) c.staging_ids[s] = s;
  c.batch.num_seqs = kSeqs;
  c.batch.num_q_heads = kHq;
  c.batch.scale = 0.08838834764831845f;
  c.batch.max_pages_per_seq = static_cast<int32_t>(pages_per_seq);
  BenchCache& stored = caches.emplace(static_cast<int>(dt), std::move(c)).first->second;
  stored.cache.pages = stored.pages.data();
  stored.cache.staging = stored.staging.data();
  stored.batch.q_start = stored.q_start.data();
  stored.batch.kv_len = stored.kv_len.data();
  stored.batch.block_table = stored.block_table.data();
  stored.batch.staging_ids = stored.staging_ids.data();
  return stored;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Arg 1: 0 = the exact fp32 path for int8 / int4 KV even where the integer (VNNI) path exists.
void BM_Attention(benchmark::State& state) {
  const auto dt = static_cast<KvDtype>(state.range(0));
  const bool int_path = state.range(1) != 0;
  const BenchCache& c = kv_cache(dt);
  std::vector<float> q = normals(kSeqs * kHq * kDim, 1.0f), out(q.size());
  set_cpu_int_attention(int_path);
  const bool int_used =
      cpu_int_attention() && (dt == KvDtype::kInt8 || dt == KvDtype::kInt4 || dt == KvDtype::kInt4Kivi);
  // CPU time of the whole process (every pool thread) per step, besides wall time: on a shared
  // machine it does not count the time other processes hold the cores.
  const double cpu0 = process_cpu_seconds();
  KvCache cache = c.cache;
  int64_t copy = 0;
  for (auto _ : state) {
    cache.pages = const_cast<uint8_t*>(c.pages.data()) + copy * c.pool_bytes;
    Status s = attention_cpu(cache, c.batch, contiguous<const float>(q.data(), kSeqs, kHq, kDim),
                             contiguous(out.data(), kSeqs, kHq, kDim));
    benchmark::DoNotOptimize(s.ok());
    benchmark::ClobberMemory();
    copy = copy + 1 == c.copies ? 0 : copy + 1;
  }
  state.counters["cpu_ms"] = 1e3 * (process_cpu_seconds() - cpu0) / static_cast<double>(state.iterations());
  set_cpu_int_attention(true);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * c.pool_bytes);
  state.SetLabel(std::string(kv_dtype_name(dt)) + " KV" +
                 (int_used ? ", int8 q.k + u8 p.v (VNNI)" : ", fp32"));
}
BENCHMARK(BM_Attention)
    ->Name("attention_decode")
    ->ArgsProduct({benchmark::CreateDenseRange(static_cast<int>(KvDtype::kF16),
                                               static_cast<int>(KvDtype::kInt4Kivi), 1),
                   {1}})
    ->Args({static_cast<int>(KvDtype::kInt8), 0})
    ->Args({static_cast<int>(KvDtype::kInt4), 0})
    ->Args({static_cast<int>(KvDtype::kInt4Kivi), 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.5);

// Absorbed MLA decode over latent pages (Kimi K2's widths: 64 heads, a 512-wide latent plus a 64-wide
// rope key per token), 4 sequences of kCtx tokens, one query token each.
constexpr int64_t kMlaHeads = 64, kMlaLatent = 512, kMlaRow = 576, kMlaSeqs = 4;
constexpr double kMlaMacs = static_cast<double>(kMlaSeqs) * kMlaHeads * kCtx * (kMlaRow + kMlaLatent);

struct MlaBench {
  std::vector<uint8_t> pages;
  LatentCache cache;
  std::vector<int32_t> q_start, kv_len, block_table;
  AttentionBatch batch;
  int64_t pool_bytes = 0;
};
const MlaBench& mla_cache(KvDtype dt) {
  static std::map<int, MlaBench> made;
  if (auto it = made.find(static_cast<int>(dt)); it != made.end()) return it->second;
  MlaBench& c = made[static_cast<int>(dt)];
  const int64_t pages_per_seq = kCtx / kPage, pages = pages_per_seq * kMlaSeqs;
  c.cache.layout = kv_latent_layout(dt, static_cast<int32_t>(kPage), static_cast<int32_t>(kMlaLatent),
                                    static_cast<int32_t>(kMlaRow - kMlaLatent));  // the engine's
  c.pool_bytes = kv_latent_page_bytes(c.cache.layout) * pages;
  c.pages.assign(static_cast<size_t>(c.pool_bytes), 0);
  c.cache.pages = c.pages.data();
  c.cache.num_pages = pages;
  // Every row written (latent rows of unit RMS, a rope key twice as large).
  std::vector<float> rows = normals(kPage * kMlaRow, 1.0f);
  for (int64_t t = 0; t < kPage; ++t) {
    for (int64_t x = kMlaLatent; x < kMlaRow; ++x) rows[static_cast<size_t>(t * kMlaRow + x)] *= 2.0f;
  }
  std::vector<int32_t> ids(kPage), slots(kPage);
  for (int64_t p = 0; p < pages; ++p) {
    for (int64_t i = 0; i < kPage; ++i) {
      ids[static_cast<size_t>(i)] = static_cast<int32_t>(p);
      slots[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    }
    if (!latent_append_cpu(c.cache, contiguous<const float>(rows.data(), kPage, kMlaRow), ids.data(),
                           slots.data())
             .ok())
      std::abort();
  }
  for (int64_t sq = 0; sq < kMlaSeqs; ++sq) {
    for (int64_t p = 0; p < pages_per_seq; ++p)
      c.block_table.push_back(static_cast<int32_t>(p * kMlaSeqs + sq));
  }
  for (int s = 0; s <= kMlaSeqs; ++s) c.q_start.push_back(s);
  c.kv_len.assign(kMlaSeqs, static_cast<int32_t>(kCtx));
  c.batch.num_seqs = kMlaSeqs;
  c.batch.num_q_heads = kMlaHeads;
  c.batch.scale = 0.0721687836f;  // 1 / sqrt(192)
  c.batch.max_pages_per_seq = static_cast<int32_t>(pages_per_seq);
  c.batch.q_start = c.q_start.data();
  c.batch.kv_len = c.kv_len.data();
  c.batch.block_table = c.block_table.data();
  return c;
}

// Arg 1: 0 = the exact fp32 path for int8 / int4 latent pages even where the integer path exists.
void BM_MlaDecode(benchmark::State& state) {
  const auto dt = static_cast<KvDtype>(state.range(0));
  const MlaBench& c = mla_cache(dt);
  set_cpu_int_attention(state.range(1) != 0);
  const bool int_used = cpu_int_attention() && (dt == KvDtype::kInt8 || dt == KvDtype::kInt4);
  std::vector<float> q = normals(kMlaSeqs * kMlaHeads * kMlaRow, 1.0f),
                     out(kMlaSeqs * kMlaHeads * kMlaLatent);
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    Status s = mla_attention_cpu(
        c.cache, c.batch, contiguous<const float>(q.data(), kMlaSeqs, kMlaHeads, kMlaRow),
        static_cast<int32_t>(kMlaLatent), contiguous(out.data(), kMlaSeqs, kMlaHeads, kMlaLatent));
    benchmark::DoNotOptimize(s.ok());
    benchmark::ClobberMemory();
  }
  state.counters["cpu_ms"] = 1e3 * (process_cpu_seconds() - cpu0) / static_cast<double>(state.iterations());
  set_cpu_int_attention(true);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * c.pool_bytes);
  state.SetLabel(std::string(kv_dtype_name(dt)) + " latent, " +
                 std::to_string(kv_latent_page_bytes(c.cache.layout) / kPage) + " B/token" +
                 (int_used ? ", VNNI" : ", fp32"));
}
BENCHMARK(BM_MlaDecode)
    ->Name("mla_decode")
    ->ArgsProduct({benchmark::CreateDenseRange(static_cast<int>(KvDtype::kF16),
                                               static_cast<int>(KvDtype::kInt4), 1),
                   {1}})
    ->Args({static_cast<int>(KvDtype::kInt8), 0})
    ->Args({static_cast<int>(KvDtype::kInt4), 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.5);

// Collects every run so the summary can print ratios measured in this same process. With
// --benchmark_repetitions=N the summary uses each benchmark's median (with
// --benchmark_enable_random_interleaving, the steadiest figure on a shared machine), not the
// repetitions one by one nor the other aggregates.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Aggregate ? r.aggregate_name != "median" : r.repetitions > 1) continue;
      if (const auto f = r.counters.find("items_per_second");
          f != r.counters.end() && r.benchmark_name().rfind("fma_peak", 0) == 0) {
        fma_peak_ = static_cast<double>(f->second);
      }
      const auto it = r.counters.find("bytes_per_second");
      if (it == r.counters.end()) continue;
      const auto cpu = r.counters.find("cpu_ms");
      results_.push_back({r.run_name.str(), r.report_label, static_cast<double>(it->second),
                          r.GetAdjustedRealTime(),
                          cpu == r.counters.end() ? 0.0 : static_cast<double>(cpu->second)});
    }
  }
  void print_summary() const {
    double triad = 0, f16_attn = 0, f16_cpu = 0, f16_mla = 0, f16_mla_cpu = 0;
    for (const auto& r : results_) {
      if (r.name.rfind("triad", 0) == 0) triad = r.bytes_per_second;
      if (r.name.rfind("attention_decode", 0) == 0 && r.label.rfind("f16 ", 0) == 0) {
        f16_attn = r.time;
        f16_cpu = r.cpu_ms;
      }
      if (r.name.rfind("mla_decode", 0) == 0 && r.label.rfind("f16 ", 0) == 0) {
        f16_mla = r.time;
        f16_mla_cpu = r.cpu_ms;
      }
    }
    std::printf("\nSummary (%s, %d threads): triad %.2f GB/s, fp32 FMA peak %.1f G multiply-adds/s\n",
                cpu_isa_name(cpu_isa()), cpu_threads(), triad / 1e9, fma_peak_ / 1e9);
    std::printf("%-62s %10s %10s %12s %12s %14s\n", "op", "GB/s", "of triad", "vs f16 KV", "of FMA peak",
                "vs f16 (CPU)");
    for (const auto& r : results_) {
      if (r.name.rfind("triad", 0) == 0) continue;
      std::printf("%-62s %10.2f %9.0f%%", (r.name + " " + r.label).substr(0, 62).c_str(),
                  r.bytes_per_second / 1e9, triad > 0 ? 100.0 * r.bytes_per_second / triad : 0.0);
      if (r.name.rfind("attention_decode", 0) == 0 && f16_attn > 0) {
        std::printf(" %11.2fx", f16_attn / r.time);
        // (The integer path does its multiply-adds in int8, not fp32: no fraction of the fp32 peak.)
        if (fma_peak_ > 0 && r.label.find("VNNI") == std::string::npos) {
          std::printf(" %11.0f%%", 100.0 * kAttentionMacs / (r.time * 1e-3) / fma_peak_);
        } else {
          std::printf(" %12s", "-");
        }
        if (f16_cpu > 0 && r.cpu_ms > 0) std::printf(" %13.2fx", f16_cpu / r.cpu_ms);
      }
      if (r.name.rfind("mla_decode", 0) == 0 && f16_mla > 0) {  // vs the fp16 latent cache
        std::printf(" %11.2fx", f16_mla / r.time);
        if (fma_peak_ > 0 && r.label.find("VNNI") == std::string::npos) {
          std::printf(" %11.0f%%", 100.0 * kMlaMacs / (r.time * 1e-3) / fma_peak_);
        } else {
          std::printf(" %12s", "-");
        }
        if (f16_mla_cpu > 0 && r.cpu_ms > 0) std::printf(" %13.2fx", f16_mla_cpu / r.cpu_ms);
      }
      std::printf("\n");
    }
    // Capacity of the latent cache (Kimi K2 / DeepSeek-V3's 576-value row), scales included: the bytes
    // the engine allocates and the planner predicts (tested equal).
    std::printf("\nlatent cache, 576-value row, 16-token pages: tokens per GiB of cache per layer\n");
    const double f16_page =
        static_cast<double>(kv_latent_page_bytes(kv_latent_layout(KvDtype::kF16, 16, 512, 64)));
    for (KvDtype dt : {KvDtype::kF16, KvDtype::kBF16, KvDtype::kFp8E4M3, KvDtype::kInt8, KvDtype::kInt4}) {
      const double page = static_cast<double>(kv_latent_page_bytes(kv_latent_layout(dt, 16, 512, 64)));
      std::printf("  %-9s %8.1f B/token %12.0f tokens/GiB %6.2fx fp16\n", kv_dtype_name(dt), page / 16,
                  16.0 * 1073741824.0 / page, f16_page / page);
    }
  }

 private:
  struct Result {
    std::string name, label;
    double bytes_per_second, time, cpu_ms;
  };
  std::vector<Result> results_;
  double fma_peak_ = 0;
};

}  // namespace
}  // namespace infergate::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  infergate::kernels::SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_summary();
  benchmark::Shutdown();
  return 0;
}
