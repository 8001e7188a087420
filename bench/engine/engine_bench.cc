// engine_bench: decode speed of the CPU engine on a generated model of >= 100M parameters.
//  1. decode tokens/s for fp16/int8/int4 weights x fp16/int8/int4 KV at batch 1 and 8, as ratios to
//     fp16/fp16 at the same batch, with KV bytes per token beside each;
//  2. decode at a long context (default 4096) per KV dtype, as ratios to fp16 KV;
//  3. hash-while-load: load + first token with --verified-manifest against the same without.
// --moe instead: GLM-4.5-style routed experts against a dense model with the same parameters active
// per token (same attention; the dense MLP as wide as the chosen plus shared experts), decode at
// batch 1 and 8 in fp16/int8/int4, as the MoE's tokens/s over the dense model's.
// Everything is measured in the same run; the generated models are deleted at the end.
// Usage: engine_bench [--dir PARENT] [--small] [--context N] [--skip-long] [--threads N] [--quick] [--moe]
// --quick: only part 1's batch-1 fp16-KV column (the weight formats' GEMV speed), best of 5 rounds, with
// tokens per CPU-second of the process beside it (with --threads 1 the work per token, which a loaded
// machine disturbs far less than the wall clock).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "infergate/common/fs.h"
#include "infergate/common/manifest.h"
#include "infergate/common/sha256.h"
#include "infergate/engine/engine.h"
#include "infergate/runtime/model/config.h"
#include "infergate/runtime/model/model.h"
#include "infergate/runtime/model/quantize.h"
#include "infergate/runtime/model/test_model.h"
#include "synthetic_prompt.h"

namespace fs = std::filesystem;
namespace m = infergate::runtime::model;
namespace e = infergate::runtime::engine;

namespace {

// CPU seconds of the whole process (all threads): on a shared machine, work done rather than time
// waited for a core.
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "engine_bench: %s\n", what.c_str());
  std::exit(1);
}

template <class T>
T check(infergate::Result<T> r, const char* what) {
  if (!r.ok()) die(std::string(what) + ": " + r.error().to_string());
  return std::move(*r);
}
void check(const infergate::Status& s, const char* what) {
  if (!s.ok()) die(std::string(what) + ": " + s.error().to_string());
}

struct Options {
  fs::path parent;
  bool small = false;
  int64_t context = 4096;
  bool skip_long = false;
  int threads = 0;
  bool quick = false;
  bool moe = false;
};

std::unique_ptr<e::Engine> make_engine(const fs::path& dir, e::WeightFormat w, e::KvCacheDtype kv,
                                       int32_t seqs, int64_t context, int threads) {
  e::EngineConfig c;
  c.model_dir = dir;
  c.weight_format = w;
  c.kv_dtype = kv;
  c.max_sequences = seqs;
  c.max_context = context;
  c.threads = threads;
  return std::move(check(e::load_engine(c), "load").engine);
}

// Prefills `batch` sequences of `prompt_len` tokens (chunks of at most `chunk`), then times `steps`
// decode steps of the whole batch after `warmup` untimed ones. Returns decode tokens/s.
struct DecodeResult {
  double tokens_per_s = 0;
  double prefill_tokens_per_s = 0;
  double tokens_per_cpu_s = 0;  // decode tokens per CPU-second of the process
};
DecodeResult decode(e::Engine& eng, int32_t batch, int64_t prompt_len, int32_t warmup, int32_t steps,
                    int32_t chunk = 0) {
  e::SamplingParams p;
  p.max_tokens = warmup + steps + 2;
  p.ignore_eos = true;
  std::vector<e::SeqId> ids;
  for (int32_t b = 0; b < batch; ++b) {
    ids.push_back(check(
        eng.add_sequence(
            infergate::bench::synthetic_prompt(prompt_len, eng.vocab(), static_cast<uint64_t>(b + 1)), p),
        "add_sequence"));
  }
  std::vector<e::StepRequest> reqs;
  for (auto id : ids) reqs.push_back({id, chunk});
  DecodeResult r;
  const double t0 = now();
  for (;;) {
    check(eng.step(reqs), "prefill");
    bool done = true;
    for (auto id : ids) done = done && eng.sequence(id)->computed >= prompt_len;
    if (done) break;
  }
  r.prefill_tokens_per_s = static_cast<double>(batch * prompt_len) / (now() - t0);
  for (auto& q : reqs) q.max_tokens = 0;
  for (int i = 0; i < warmup; ++i) check(eng.step(reqs), "warmup");
  const double t1 = now(), c1 = cpu_now();
  for (int i = 0; i < steps; ++i) check(eng.step(reqs), "decode");
  r.tokens_per_s = static_cast<double>(batch) * steps / (now() - t1);
  r.tokens_per_cpu_s = static_cast<double>(batch) * steps / (cpu_now() - c1);
  for (auto id : ids) eng.release(id);
  return r;
}

// Writes DENSE-int8 (per row) and DENSE-int4 (asymmetric, groups of 128) beside the dense checkpoint,
// lm_head included, so the whole decode GEMV is in the format under test.
void write_quantized_copies(const fs::path& dense) {
  for (auto [suffix, fmt] :
       {std::pair{"-int8", m::WeightFormat::kInt8}, std::pair{"-int4", m::WeightFormat::kInt4}}) {
    m::QuantizeOptions q;
    q.model = dense;
    q.out = dense.string() + suffix;
    q.scheme.format = fmt;
    q.scheme.symmetric = fmt == m::WeightFormat::kInt8;
    q.scheme.group_size = fmt == m::WeightFormat::kInt4 ? 128 : 0;
    q.quantize_lm_head = true;
    check(m::quantize_model(q), "quantize");
  }
}

// --moe: decode of a routed-expert model against a dense one with the same active parameters.
int run_moe(const Options& o, const fs::path& dir) {
  m::TestModelOptions moe;
  moe.arch = m::Architecture::kGlm4Moe;
  moe.out = dir / "moe";
  moe.layers = o.small ? 4 : 8;
  moe.hidden = o.small ? 256 : 1024;
  moe.heads = o.small ? 4 : 16;
  moe.kv_heads = o.small ? 2 : 4;
  moe.vocab = o.small ? 2048 : 8192;
  moe.seed = 9;
  moe.moe.experts = 32;
  moe.moe.experts_per_token = 4;
  moe.moe.groups = 4;
  moe.moe.topk_groups = 2;
  moe.moe.shared_experts = 1;
  moe.moe.dense_layers = 0;
  moe.moe.intermediate = o.small ? 128 : 512;
  // The dense twin: every layer dense, its MLP as wide as the 4 chosen experts plus the shared one.
  m::TestModelOptions dense = moe;
  dense.out = dir / "dense";
  dense.moe.dense_layers = dense.layers;
  dense.intermediate = (moe.moe.experts_per_token + moe.moe.shared_experts) * moe.moe.intermediate;
  for (const m::TestModelOptions* t : {&moe, &dense}) {
    check(m::make_test_model(*t), "make-test-model");
    write_quantized_copies(t->out);
  }
  auto mc = check(m::Model::open(moe.out), "open").config(),
       dc = check(m::Model::open(dense.out), "open").config();
  // Parameters a token reads: everything but the experts it does not choose.
  const uint64_t per_expert = 3 * static_cast<uint64_t>(moe.hidden * moe.moe.intermediate);
  const uint64_t inactive =
      static_cast<uint64_t>(moe.layers * (moe.moe.experts - moe.moe.experts_per_token)) * per_expert;
  std::printf(
      "MoE: glm4_moe, %lld layers, hidden %lld, %lld experts of width %lld (top %lld, 1 shared), %.1fM "
      "parameters, %.1fM active per token\ndense twin: the same with an MLP of width %lld in every layer, "
      "%.1fM parameters\n",
      static_cast<long long>(moe.layers), static_cast<long long>(moe.hidden),
      static_cast<long long>(moe.moe.experts), static_cast<long long>(moe.moe.intermediate),
      static_cast<long long>(moe.moe.experts_per_token), static_cast<double>(m::parameter_count(mc)) / 1e6,
      static_cast<double>(m::parameter_count(mc) - inactive) / 1e6,
      static_cast<long long>(dense.intermediate), static_cast<double>(m::parameter_count(dc)) / 1e6);
  struct Cell {
    const char* w;
    std::unique_ptr<e::Engine> moe, dense;
    std::vector<double> tps[2][2];  // [moe/dense][batch 1/8], one per round
  };
  std::vector<Cell> cells;
  for (auto [wn, w, suffix] :
       {std::tuple{"fp16", e::WeightFormat::kF16, ""}, std::tuple{"int8", e::WeightFormat::kInt8, "-int8"},
        std::tuple{"int4", e::WeightFormat::kInt4, "-int4"}}) {
    cells.push_back({wn,
                     make_engine(moe.out.string() + suffix, w, e::KvCacheDtype::kF16, 8, 256, o.threads),
                     make_engine(dense.out.string() + suffix, w, e::KvCacheDtype::kF16, 8, 256, o.threads),
                     {}});
  }
  const int rounds = 3, steps = o.small ? 8 : 16;
  for (int round = 0; round < rounds; ++round) {
    for (Cell& c : cells) {
      for (int b = 0; b < 2; ++b) {
        // Alternate which model goes first, so neither always runs on a warmer or cooler machine.
        for (int k = 0; k < 2; ++k) {
          const int which = (k + round) % 2;
          e::Engine& eng = which == 0 ? *c.moe : *c.dense;
          c.tps[which][b].push_back(decode(eng, b == 0 ? 1 : 8, 64, 2, steps).tokens_per_s);
        }
      }
    }
    std::fprintf(stderr, "round %d of %d done\n", round + 1, rounds);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("\ndecode after a 64-token prompt, fp16 KV: %d timed steps, medians of %d interleaved rounds\n",
              steps, rounds);
  std::printf("%-8s %6s %12s %12s %10s\n", "weights", "batch", "MoE tok/s", "dense tok/s", "MoE/dense");
  for (const Cell& c : cells) {
    for (int b = 0; b < 2; ++b) {
      const double a = median(c.tps[0][b]), d = median(c.tps[1][b]);
      std::printf("%-8s %6d %12.1f %12.1f %9.2fx\n", c.w, b == 0 ? 1 : 8, a, d, a / d);
    }
  }
  std::printf(
      "(batch 1 reads the 4 chosen experts of each layer; a batch of 8 tokens chooses up to 32, so reads "
      "more "
      "expert weights per step than the dense twin)\n");
  return 0;
}

void write_manifest(const fs::path& dir) {
  std::vector<infergate::ManifestEntry> entries;
  for (const auto& f : fs::directory_iterator(dir)) {
    const std::string name = f.path().filename().string();
    if (name == infergate::kManifestFileName) continue;
    auto text = check(infergate::read_file(f.path(), size_t{4} << 30), "read");
    entries.push_back({name, check(infergate::sha256(text), "sha256")});
  }
  auto mf = check(infergate::Manifest::from_entries(std::move(entries)), "manifest");
  check(infergate::write_file_atomic(dir / std::string(infergate::kManifestFileName), mf.to_text()), "write");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--dir") {
      o.parent = next();
    } else if (a == "--small") {
      o.small = true;
    } else if (a == "--context") {
      o.context = std::stoll(next());
    } else if (a == "--skip-long") {
      o.skip_long = true;
    } else if (a == "--threads") {
      o.threads = std::stoi(next());
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--moe") {
      o.moe = true;
    } else {
      die("unknown argument " + a +
          " (--dir PARENT, --small, --context N, --skip-long, --threads N, --quick, --moe)");
    }
  }
  auto tmp = check(infergate::TempDir::create("engine-bench", o.parent), "temp dir");
  if (o.moe) return run_moe(o, tmp.path());
  const fs::path dense = tmp.path() / "fp16", int8 = tmp.path() / "fp16-int8",
                 int4 = tmp.path() / "fp16-int4";
  m::TestModelOptions mo;
  mo.out = dense;
  mo.arch = m::Architecture::kLlama;
  mo.layers = o.small ? 4 : 16;
  mo.hidden = o.small ? 256 : 768;
  mo.heads = o.small ? 4 : 12;
  mo.kv_heads = o.small ? 2 : 4;
  mo.intermediate = o.small ? 704 : 2048;
  mo.vocab = o.small ? 2048 : 8192;
  mo.max_position = std::max<int64_t>(4096, o.context + 64);
  mo.seed = 5;
  double t = now();
  check(m::make_test_model(mo), "make-test-model");
  auto model = check(m::Model::open(dense), "open");
  const uint64_t params = m::parameter_count(model.config());
  std::printf(
      "model: llama, %lld layers, hidden %lld, %lld heads (%lld KV), head_dim %lld, vocab %lld: %.1fM "
      "parameters, fp16 (generated in %.1f s)\n",
      static_cast<long long>(mo.layers), static_cast<long long>(mo.hidden), static_cast<long long>(mo.heads),
      static_cast<long long>(mo.kv_heads), static_cast<long long>(model.config().head_dim),
      static_cast<long long>(mo.vocab), static_cast<double>(params) / 1e6, now() - t);
  write_quantized_copies(dense);
  std::printf("quantized: int8 per row, int4 asymmetric groups of 128 (lm_head included); threads: %s\n\n",
              o.threads > 0 ? std::to_string(o.threads).c_str() : "all cores");

  // ---- 1. decode matrix ----
  const std::pair<const char*, e::WeightFormat> wfs[] = {
      {"fp16", e::WeightFormat::kF16}, {"int8", e::WeightFormat::kInt8}, {"int4", e::WeightFormat::kInt4}};
  const std::pair<const char*, e::KvCacheDtype> kvs[] = {
      {"fp16", e::KvCacheDtype::kF16}, {"int8", e::KvCacheDtype::kInt8}, {"int4", e::KvCacheDtype::kInt4}};
  auto dir_of = [&](e::WeightFormat w) {
    return w == e::WeightFormat::kInt8 ? int8 : w == e::WeightFormat::kInt4 ? int4 : dense;
  };
  const int32_t warmup = 2, steps = o.small ? 8 : 16;
  const int64_t prompt = 64;
  // Every configuration's engine stays loaded and the rounds interleave them, so that a burst of load
  // on a shared machine hits all of them alike; each cell is the best of the rounds.
  struct Cell {
    const char* w;
    const char* kv;
    std::unique_ptr<e::Engine> eng;
    double bpt = 0;
    double tps[2] = {0, 0};
    double cpu_tps = 0;  // --quick: batch 1 per CPU-second
  };
  std::vector<Cell> cells;
  for (auto [wn, w] : wfs) {
    for (auto [kn, kv] : kvs) {
      if (o.quick && kv != e::KvCacheDtype::kF16) continue;
      Cell c{wn, kn, make_engine(dir_of(w), w, kv, 8, 256, o.threads)};
      c.bpt = c.eng->blocks().bytes().bytes_per_token();
      cells.push_back(std::move(c));
    }
  }
  const int rounds = o.quick ? 5 : 3;
  for (int round = 0; round < rounds; ++round) {
    for (Cell& c : cells) {
      for (int b = 0; b < (o.quick ? 1 : 2); ++b) {
        const DecodeResult r = decode(*c.eng, b == 0 ? 1 : 8, prompt, warmup, steps);
        c.tps[b] = std::max(c.tps[b], r.tokens_per_s);
        if (b == 0) c.cpu_tps = std::max(c.cpu_tps, r.tokens_per_cpu_s);
      }
    }
    std::fprintf(stderr, "round %d of %d done\n", round + 1, rounds);
  }
  std::printf(
      "decode after a %lld-token prompt: %d timed steps after %d warm-up, best of %d interleaved rounds\n",
      static_cast<long long>(prompt), steps, warmup, rounds);
  std::printf("%-8s %-6s %8s %12s %10s %12s %10s\n", "weights", "KV", "KV B/tok", "b1 tok/s", "b1 ratio",
              "b8 tok/s", "b8 ratio");
  for (const Cell& c : cells) {
    std::printf("%-8s %-6s %8.0f %12.1f %9.2fx", c.w, c.kv, c.bpt, c.tps[0], c.tps[0] / cells[0].tps[0]);
    if (!o.quick) std::printf(" %12.1f %9.2fx", c.tps[1], c.tps[1] / cells[0].tps[1]);
    if (o.quick) std::printf("   b1 %.1f tok/CPU-s %.2fx", c.cpu_tps, c.cpu_tps / cells[0].cpu_tps);
    std::printf("\n");
  }
  std::fflush(stdout);
  cells.clear();
  if (o.quick) return 0;

  // ---- 2. long context ----
  // Decode cost per layer is (weights of the layer + KV of the layer), so the ratio between KV dtypes
  // does not depend on depth: a 2-layer model of the same width makes the 4k prefill 8x cheaper.
  if (!o.skip_long) {
    m::TestModelOptions lo = mo;
    lo.out = tmp.path() / "long-fp16";
    lo.layers = 2;
    check(m::make_test_model(lo), "make-test-model (long)");
    const fs::path long4 = tmp.path() / "long-int4";
    m::QuantizeOptions q;
    q.model = lo.out;
    q.out = long4;
    q.scheme.format = m::WeightFormat::kInt4;
    q.scheme.symmetric = false;
    q.scheme.group_size = 128;
    q.quantize_lm_head = true;
    check(m::quantize_model(q), "quantize (long)");
    std::printf(
        "\ndecode at a %lld-token context, batch 1: the same width with 2 layers (prefill in chunks of "
        "512), 8 timed steps\n",
        static_cast<long long>(o.context));
    std::printf("%-8s %-6s %12s %12s %10s\n", "weights", "KV", "prefill t/s", "decode t/s", "vs fp16 KV");
    for (auto [wn, w] : {wfs[0], wfs[2]}) {
      double f16 = 0;
      for (auto [kn, kv] : kvs) {
        auto eng =
            make_engine(w == e::WeightFormat::kInt4 ? long4 : lo.out, w, kv, 1, o.context + 16, o.threads);
        DecodeResult r = decode(*eng, 1, o.context, 1, 8, 512);
        if (kv == e::KvCacheDtype::kF16) f16 = r.tokens_per_s;
        std::printf("%-8s %-6s %12.1f %12.2f %9.2fx\n", wn, kn, r.prefill_tokens_per_s, r.tokens_per_s,
                    r.tokens_per_s / f16);
        std::fflush(stdout);
      }
    }
  }

  // ---- 3. hash while loading ----
  write_manifest(dense);
  auto load_and_first_token = [&](bool verified) {
    e::EngineConfig c;
    c.model_dir = dense;
    c.max_sequences = 1;
    c.max_context = 64;
    c.threads = o.threads;
    if (verified) c.verified_manifest = dense / std::string(infergate::kManifestFileName);
    const double s = now();
    auto le = check(e::load_engine(c), "load");
    check(le.engine->score(std::vector<int32_t>{1, 2, 3}), "first token");  // touches every weight
    return std::pair{now() - s, le.report};
  };
  std::vector<double> plain, hashed;
  e::LoadReport rep;
  for (int i = 0; i < 3; ++i) {
    plain.push_back(load_and_first_token(false).first);
    auto [s, r] = load_and_first_token(true);
    hashed.push_back(s);
    rep = r;
  }
  std::sort(plain.begin(), plain.end());
  std::sort(hashed.begin(), hashed.end());
  const uint64_t bytes = static_cast<uint64_t>(rep.bytes_hashed);
  std::printf(
      "\nload + first token (page cache warm, median of 3): unverified (mmap) %.3f s, hash-while-load %.3f s "
      "(%.2fx); %.0f MB hashed in %.3f s of hashing (%.2f GB/s, overlapping the reads)\n",
      plain[1], hashed[1], hashed[1] / plain[1], static_cast<double>(bytes) / 1e6, rep.hash_seconds,
      static_cast<double>(bytes) / 1e9 / std::max(rep.hash_seconds, 1e-9));
  return 0;
}
