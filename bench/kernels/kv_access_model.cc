// kv_access_model: the memory side of CPU decode attention, alone. It reads the cache lines that
// decode attention reads from paged KV (the real page layout of formats.h: 8 sequences x 4096 tokens,
// 8 KV heads, head_dim 128, 16-token pages of all sequences interleaved as the block manager hands
// them out, copies of the pool filling at least 2x the LLC), with a fixed stand-in for the compute
// per cache line (a chain of dependent integer adds), spent after every line (--grain line) or after
// every run of a head's rows or scales (--grain run: the kernel loads a tile, then computes on it), and
// optionally a prefetch of the same line one 32-token chunk ahead into L2 (--prefetch 1), in the two
// orders attn_vnni.cc has used:
//   per-head   one unit per (sequence, KV head): per page, the head's K rows and scales, then its V
//              rows and scales (a 1 KiB run per region and page at int4);
//   all-heads  one unit per sequence: per page, the K side of every head, then the V side of every
//              head (each region of the page front to back).
// It prints ms per step for each order with and without the stand-in compute, the compute alone, and
// all-heads / per-head measured in the same run. Where memory and compute add up instead of
// overlapping, neither the hardware prefetcher nor the software prefetches are ahead of the reads.
//
//   kv_access_model [--dtype int4|int8|f16] [--spin N] [--grain line|run] [--prefetch 0|1]
//                   [--threads T] [--reps R]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "infergate/kernels/formats.h"
#include "llc.h"

namespace infergate::kernels {
namespace {

constexpr int64_t kSeqs = 8, kCtx = 4096, kHeads = 8, kDim = 128, kPage = 16, kPagesPerSeq = kCtx / kPage;

struct Options {
  KvDtype dtype = KvDtype::kInt4;
  int64_t spin = 6;       // dependent-add steps (4 adds each) per cache line: about int4's compute at 4k
  bool per_line = false;  // --grain line: the compute after every line, else after every run
  bool prefetch = true;
  int threads = 2;
  int reps = 20;
};

enum class Order { kPerHead, kAllHeads };

// A run of bytes of one head in one page, and the same run `ahead` pages later in its sequence.
struct Model {
  KvPageLayout layout;
  KvPageRegions regions;
  int64_t row_bytes = 0, param_bytes = 0;  // per token of one head
  int64_t pool_bytes = 0, copies = 1;
  std::vector<uint8_t> memory;
};

inline void burn(int64_t steps) {
  uint64_t a = 1, b = 2, c = 3, d = 4;
  for (int64_t i = 0; i < steps; ++i) {
#if defined(__x86_64__)
    asm volatile("add %0, %1\n\tadd %1, %2\n\tadd %2, %3\n\tadd %3, %0" : "+r"(a), "+r"(b), "+r"(c), "+r"(d));
#else
    a += b;
    b += c;
    c += d;
    d += a;
    asm volatile("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d));
#endif
  }
}

// Reads one word of every line of [p, p + bytes), prefetching the same line of `next` (when set),
// with `spin` steps of stand-in compute per line, after each line or after the run.
inline uint64_t walk(const uint8_t* p, const uint8_t* next, int64_t bytes, int64_t spin, bool per_line) {
  uint64_t sum = 0;
  int64_t lines = 0;
  for (int64_t off = 0; off < bytes; off += 64, ++lines) {
    uint64_t v;
    std::memcpy(&v, p + off, sizeof v);
    sum += v;
    if (next != nullptr) __builtin_prefetch(next + off, 0, 2);
    if (per_line) burn(spin);
  }
  if (!per_line) burn(spin * lines);
  return sum;
}

// Runs work() on `threads` threads (this one included); returns the wall time in ms.
template <class F>
double timed_on_threads(int threads, F&& work) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> others;
  for (int t = 1; t < threads; ++t) others.emplace_back(work);
  work();
  for (std::thread& t : others) t.join();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One step (every sequence over all its tokens) in `order` over pool copy `copy`; returns ms.
double step(const Model& m, const Options& o, Order order, int64_t copy, int64_t spin, uint64_t* sink) {
  const uint8_t* pool = m.memory.data() + copy * m.pool_bytes;
  const int64_t page_bytes = m.regions.bytes, psize = m.layout.page_size;
  auto page = [&](int64_t seq, int64_t i) { return pool + (i * kSeqs + seq) * page_bytes; };
  const int64_t rows = psize * m.row_bytes, params = psize * m.param_bytes;
  constexpr int64_t kAhead = 2;  // pages: one 32-token chunk
  // The K side (or V side) of head h in page i of seq: rows, then scales.
  auto side = [&](int64_t seq, int64_t i, int64_t h, bool key, int64_t s) {
    const uint8_t* pg = page(seq, i);
    const uint8_t* nx = o.prefetch && i + kAhead < kPagesPerSeq ? page(seq, i + kAhead) : nullptr;
    const int64_t data = (key ? m.regions.k_data : m.regions.v_data) + h * rows;
    const int64_t prm = (key ? m.regions.k_params : m.regions.v_params) + h * params;
    uint64_t sum = walk(pg + data, nx != nullptr ? nx + data : nullptr, rows, s, o.per_line);
    if (params > 0) sum += walk(pg + prm, nx != nullptr ? nx + prm : nullptr, params, s, o.per_line);
    return sum;
  };
  const int64_t units = order == Order::kPerHead ? kSeqs * kHeads : kSeqs;
  std::atomic<int64_t> next{0};
  std::atomic<uint64_t> total{0};
  auto work = [&] {
    uint64_t sum = 0;
    for (int64_t u; (u = next.fetch_add(1)) < units;) {
      if (order == Order::kPerHead) {
        const int64_t seq = u / kHeads, h = u % kHeads;
        for (int64_t i = 0; i < kPagesPerSeq; ++i)
          sum += side(seq, i, h, true, spin) + side(seq, i, h, false, spin);
      } else {
        for (int64_t i = 0; i < kPagesPerSeq; ++i) {
          for (int64_t h = 0; h < kHeads; ++h) sum += side(u, i, h, true, spin);
          for (int64_t h = 0; h < kHeads; ++h) sum += side(u, i, h, false, spin);
        }
      }
    }
    total += sum;
  };
  const double ms = timed_on_threads(o.threads, work);
  *sink += total.load();
  return ms;
}

// The compute stand-in alone for one step: the same number of lines, no reads.
double compute_only(const Model& m, int64_t spin, int threads) {
  const int64_t lines_per_unit =
      kPagesPerSeq * 2 * ((kPage * m.row_bytes + 63) / 64 + (kPage * m.param_bytes + 63) / 64);
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t u; (u = next.fetch_add(1)) < kSeqs * kHeads;) {
      for (int64_t l = 0; l < lines_per_unit; ++l) burn(spin);
    }
  };
  return timed_on_threads(threads, work);
}

int usage(const char* why) {
  std::fprintf(stderr,
               "kv_access_model: %s (--dtype int4|int8|f16, --spin N, --grain line|run, --prefetch 0|1, "
               "--threads T, --reps R)\n",
               why);
  return 2;
}

int run(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage(("missing value for " + a).c_str());
    const std::string v = argv[++i];
    char* end = nullptr;
    if (a == "--dtype") {
      if (v == "int4") {
        o.dtype = KvDtype::kInt4;
      } else if (v == "int8") {
        o.dtype = KvDtype::kInt8;
      } else if (v == "f16") {
        o.dtype = KvDtype::kF16;
      } else {
        return usage(("unknown --dtype " + v).c_str());
      }
      continue;
    }
    if (a == "--grain") {
      if (v != "line" && v != "run") return usage(("unknown --grain " + v).c_str());
      o.per_line = v == "line";
      continue;
    }
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || n < 0 || n > 1000000) return usage(("bad number " + v).c_str());
    if (a == "--spin") {
      o.spin = n;
    } else if (a == "--prefetch" && n <= 1) {
      o.prefetch = n == 1;
    } else if (a == "--threads" && n >= 1 && n <= 256) {
      o.threads = static_cast<int>(n);
    } else if (a == "--reps" && n >= 1) {
      o.reps = static_cast<int>(n);
    } else {
      return usage(("unknown or out-of-range argument " + a + " " + v).c_str());
    }
  }

  Model m;
  m.layout = {o.dtype, kPage, kHeads, kDim};
  m.regions = kv_page_regions(m.layout);
  m.row_bytes = kv_row_bytes(o.dtype, kDim);
  m.param_bytes = o.dtype == KvDtype::kInt8 ? 2 : (o.dtype == KvDtype::kInt4 ? kv_int4_groups(kDim) * 4 : 0);
  m.pool_bytes = kSeqs * kPagesPerSeq * m.regions.bytes;
  m.copies = std::max<int64_t>(1, (twice_llc() + m.pool_bytes - 1) / m.pool_bytes);
  m.memory.assign(static_cast<size_t>(m.copies * m.pool_bytes), 1);

  uint64_t sink = 0;
  int64_t copy = 0;
  // Minimum over repetitions, the orders alternating (single runs on a shared VM move by 10-30%).
  auto best = [&](Order order, int64_t spin) {
    double b = 1e30;
    for (int r = 0; r < o.reps; ++r) {
      b = std::min(b, step(m, o, order, copy, spin, &sink));
      copy = (copy + 1) % m.copies;
    }
    return b;
  };
  double t[2][2] = {};  // [order][with compute]
  for (int round = 0; round < 2; ++round) {
    for (int c = 0; c < 2; ++c) {
      for (Order order : {Order::kPerHead, Order::kAllHeads}) {
        const double ms = best(order, c == 1 ? o.spin : 0);
        double& slot = t[order == Order::kAllHeads][c];
        slot = round == 0 ? ms : std::min(slot, ms);
      }
    }
  }
  double alone = 1e30;
  for (int r = 0; r < o.reps; ++r) alone = std::min(alone, compute_only(m, o.spin, o.threads));

  const double mb = static_cast<double>(m.pool_bytes) / 1e6;
  std::printf(
      "%s KV, %lld sequences x %lld tokens, %lld KV heads, head_dim %lld, %lld-token pages: "
      "%.1f MB per step, %lld pool copies, %d threads, compute stand-in %lld steps per line (after "
      "every %s), prefetch %s\n",
      kv_dtype_name(o.dtype), static_cast<long long>(kSeqs), static_cast<long long>(kCtx),
      static_cast<long long>(kHeads), static_cast<long long>(kDim), static_cast<long long>(kPage), mb,
      static_cast<long long>(m.copies), o.threads, static_cast<long long>(o.spin),
      o.per_line ? "line" : "run", o.prefetch ? "one chunk ahead into L2" : "none");
  std::printf("%-34s %10s %10s\n", "", "ms/step", "GB/s");
  std::printf("%-34s %10.2f %10.1f\n", "per-head, memory only", t[0][0], mb / t[0][0]);
  std::printf("%-34s %10.2f %10.1f\n", "all-heads, memory only", t[1][0], mb / t[1][0]);
  std::printf("%-34s %10.2f\n", "compute stand-in only", alone);
  std::printf("%-34s %10.2f %10.1f\n", "per-head, memory + compute", t[0][1], mb / t[0][1]);
  std::printf("%-34s %10.2f %10.1f\n", "all-heads, memory + compute", t[1][1], mb / t[1][1]);
  std::printf("all-heads / per-head (same run): memory only %.2fx, with compute %.2fx faster\n",
              t[0][0] / t[1][0], t[0][1] / t[1][1]);
  std::printf("(checksum %llu)\n", static_cast<unsigned long long>(sink % 1000));
  return 0;
}

}  // namespace
}  // namespace infergate::kernels

int main(int argc, char** argv) { return infergate::kernels::run(argc, argv); }
