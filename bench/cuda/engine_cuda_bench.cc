// Decode throughput of the CUDA backend on a generated model of about 1B parameters (16 layers,
// hidden 2048, 16 heads, 8 KV heads of 128, intermediate 6912, vocabulary 32000: 1.01B), for
// fp16 / int8 / int4 weights x fp16 / fp8 / int8 KV at batch 1, 8 and 64, each sequence holding a
// 512-token context. A decode step is one Backend::forward of one token per sequence with the last
// logits copied back (what the engine runs per step, host sampling excluded).
//
// Bytes per step = the weights every step reads (every linear layer's packed values, scales and
// zero points, lm_head, one embedding row per sequence) + the KV pages attention reads (every page
// of every sequence's context, all layers). Achieved bandwidth = bytes / step time, printed as a
// fraction of the H200's 4.8 TB/s datasheet peak and of a device-to-device copy measured in the same
// run (the baseline: counting its reads and writes).
//
// Usage: engine_cuda_bench [--small] [--model-dir DIR] [--steps N]
//   --small      a 4-layer, hidden-1024 model (a quick smoke run)
//   --model-dir  where to write the generated model and its int8/int4 copies (default: a temp dir)
// Exit: 0 measured; 1 a step failed; 2 no GPU here (the first line says why).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "infergate/common/fs.h"
#include "infergate/engine/backend.h"
#include "infergate/engine/block_manager.h"
#include "infergate/engine/cuda_backend.h"
#include "infergate/engine/device.h"
#include "infergate/kernels/formats.h"
#include "infergate/runtime/model/model.h"
#include "infergate/runtime/model/quantize.h"
#include "infergate/runtime/model/test_model.h"

namespace e = infergate::runtime::engine;
namespace m = infergate::runtime::model;
namespace k = infergate::kernels;
using infergate::Result;
using infergate::Status;
using infergate::TempDir;

namespace {

constexpr double kPeakBytesPerSecond = 4.8e12;  // H200 HBM3e, datasheet
constexpr int32_t kContext = 512;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "engine_cuda_bench: %s\n", what.c_str());
  std::exit(1);
}

// Device-to-device copy bandwidth (reads + writes) over 1 GiB, best of 5.
double copy_bandwidth() {
  const size_t n = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess)
    die("cudaMalloc for the copy baseline");
  cudaEvent_t s, t;
  cudaEventCreate(&s);
  cudaEventCreate(&t);
  double best = 0;
  for (int i = 0; i < 6; ++i) {
    cudaEventRecord(s);
    cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice);
    cudaEventRecord(t);
    cudaEventSynchronize(t);
    float ms = 0;
    cudaEventElapsedTime(&ms, s, t);
    if (i > 0) best = std::max(best, 2.0 * static_cast<double>(n) / (ms * 1e-3));
  }
  cudaEventDestroy(s);
  cudaEventDestroy(t);
  cudaFree(a);
  cudaFree(b);
  if (cudaGetLastError() != cudaSuccess) die("the copy baseline failed");
  return best;
}

// Bytes of the weights one decode step reads (the checkpoint's layouts: what the backend holds,
// minus the int4 tensor-core copies, which replace the plain codes for the GEMV rather than add).
int64_t step_weight_bytes(const m::Model& model, int64_t batch) {
  const auto& c = model.config();
  int64_t bytes = 0;
  auto add = [&](const std::string& name) {
    auto w = model.weight(name);
    if (!w.ok()) die(w.error().to_string());
    auto v = m::kernel_weight_view(*w);
    if (!v.ok()) die(v.error().to_string());
    bytes += k::weight_bytes(v->layout).total();
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
      add(p + n + ".weight");
    }
    bytes += 2 * c.hidden_size * 4;  // the two norms, fp32
  }
  add("lm_head.weight");
  bytes += c.hidden_size * 4 + batch * c.hidden_size * 2;  // final norm, embedding rows
  return bytes;
}

struct Options {
  bool small = false;
  std::optional<std::filesystem::path> dir;
  int steps = 20;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--small") {
      o.small = true;
    } else if (a == "--model-dir" && i + 1 < argc) {
      o.dir = argv[++i];
    } else if (a == "--steps" && i + 1 < argc) {
      o.steps = std::atoi(argv[++i]);
      if (o.steps < 1 || o.steps > 1000) die("--steps: 1..1000");
    } else {
      std::fprintf(stderr, "usage: engine_cuda_bench [--small] [--model-dir DIR] [--steps N]\n");
      std::exit(2);
    }
  }
  return o;
}

std::shared_ptr<const m::Model> open(const std::filesystem::path& p) {
  auto mo = m::Model::open(p);
  if (!mo.ok()) die(mo.error().to_string());
  return std::make_shared<const m::Model>(std::move(*mo));
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  if (e::cuda_device_count() == 0) {
    std::printf("no GPU: %s\n", e::cuda_device_description().c_str());
    return 2;
  }
  std::optional<TempDir> tmp;
  std::filesystem::path dir;
  if (opt.dir) {
    dir = *opt.dir;
  } else {
    auto t = TempDir::create("engine-cuda-bench");
    if (!t.ok()) die(t.error().to_string());
    tmp.emplace(std::move(*t));
    dir = tmp->path();
  }
  // ---- the model and its compressed copies ----
  auto t0 = std::chrono::steady_clock::now();
  m::TestModelOptions mo;
  mo.out = dir / "fp16";
  mo.layers = opt.small ? 4 : 16;
  mo.hidden = opt.small ? 1024 : 2048;
  mo.heads = opt.small ? 8 : 16;
  mo.kv_heads = opt.small ? 4 : 8;
  mo.intermediate = opt.small ? 2816 : 6912;
  mo.vocab = 32000;
  mo.seed = 1;
  mo.force = true;
  if (!std::filesystem::exists(mo.out / "config.json")) {
    Status s = m::make_test_model(mo);
    if (!s.ok()) die(s.error().to_string());
  }
  std::vector<std::pair<e::WeightFormat, std::filesystem::path>> formats = {{e::WeightFormat::kF16, mo.out}};
  for (auto f : {m::WeightFormat::kInt8, m::WeightFormat::kInt4}) {
    m::QuantizeOptions q;
    q.model = mo.out;
    q.out = dir / (f == m::WeightFormat::kInt8 ? "int8" : "int4");
    q.scheme.format = f;
    q.scheme.symmetric = f == m::WeightFormat::kInt8;
    q.scheme.group_size = f == m::WeightFormat::kInt4 ? 128 : 0;
    q.threads = 8;
    q.force = true;
    if (!std::filesystem::exists(q.out / "config.json")) {
      auto r = m::quantize_model(q);
      if (!r.ok()) die(r.error().to_string());
    }
    formats.emplace_back(f == m::WeightFormat::kInt8 ? e::WeightFormat::kInt8 : e::WeightFormat::kInt4,
                         q.out);
  }
  const double prepare_s = seconds_since(t0);
  const double copy_bw = copy_bandwidth();
  auto dense = open(mo.out);
  const auto& cfg = dense->config();
  const double params = static_cast<double>(m::parameter_count(cfg));
  std::printf(
      "decode: %.2fB-parameter generated model (%lld layers, hidden %lld, %lld/%lld heads of %lld), "
      "context %d, %d steps; %s; copy baseline %.2f TB/s; model prepared in %.0f s\n",
      params / 1e9, static_cast<long long>(cfg.num_hidden_layers), static_cast<long long>(cfg.hidden_size),
      static_cast<long long>(cfg.num_attention_heads), static_cast<long long>(cfg.num_key_value_heads),
      static_cast<long long>(cfg.head_dim), kContext, opt.steps, e::cuda_device_description().c_str(),
      copy_bw / 1e12, prepare_s);
  std::printf("%-7s %-5s %5s %9s %10s %8s %7s %6s %8s\n", "weights", "kv", "batch", "step_ms", "tokens/s",
              "GB/step", "TB/s", "HBM%", "vs-copy");

  const int32_t max_batch = 64;
  const int32_t steps = opt.steps, warmup = 3;
  const int64_t blocks_per_seq = e::blocks_for_tokens(kContext + warmup + steps);
  int failures = 0;
  for (const auto& [wf, path] : formats) {
    auto model = open(path);
    e::CudaBackendOptions bo;
    bo.weight_format = wf;
    auto backend = e::make_cuda_backend(model, bo);
    if (!backend.ok()) die(backend.error().to_string());
    e::Backend& b = **backend;
    const e::ModelShape& s = b.shape();
    for (auto kv : {e::KvCacheDtype::kF16, e::KvCacheDtype::kFp8, e::KvCacheDtype::kInt8}) {
      e::KvSpec spec{kv, s.num_layers, s.num_kv_heads, s.head_dim, e::kBlockTokens};
      auto bytes = e::kv_bytes(spec);
      if (!bytes.ok()) die(bytes.error().to_string());
      Status st = b.allocate_kv(spec, blocks_per_seq * max_batch, max_batch);
      if (!st.ok()) die(st.error().to_string());
      // Block tables: sequence i owns blocks [i * blocks_per_seq, (i + 1) * blocks_per_seq).
      std::vector<std::vector<int32_t>> tables(max_batch);
      for (int32_t i = 0; i < max_batch; ++i) {
        for (int64_t j = 0; j < blocks_per_seq; ++j)
          tables[i].push_back(static_cast<int32_t>(i * blocks_per_seq + j));
      }
      // Prefill every sequence's context, 8 sequences per forward.
      std::vector<int32_t> prompt(kContext);
      for (int32_t i = 0; i < kContext; ++i) prompt[i] = (i * 7919 + 13) % static_cast<int32_t>(s.vocab);
      for (int32_t first = 0; first < max_batch; first += 8) {
        std::vector<e::SequenceInput> in(8);
        for (int32_t i = 0; i < 8; ++i) {
          in[i].tokens = prompt;
          in[i].start_position = 0;
          in[i].block_table = tables[first + i];
          in[i].slot = first + i;
          in[i].logits = e::LogitsWanted::kNone;
        }
        e::ForwardOutput out;
        st = b.forward(in, &out);
        if (!st.ok()) die("prefill: " + st.error().to_string());
      }
      for (int32_t batch : {1, 8, 64}) {
        std::vector<int32_t> tok(batch, 42);
        double timed = 0;
        int64_t kv_read = 0;
        bool ok = true;
        for (int32_t step = 0; step < warmup + steps && ok; ++step) {
          const int32_t pos = kContext + step;
          std::vector<e::SequenceInput> in(batch);
          for (int32_t i = 0; i < batch; ++i) {
            in[i].tokens = std::span<const int32_t>(&tok[i], 1);
            in[i].start_position = pos;
            in[i].block_table = tables[i];
            in[i].slot = i;
            in[i].logits = e::LogitsWanted::kLast;
          }
          e::ForwardOutput out;
          const auto ts = std::chrono::steady_clock::now();
          st = b.forward(in, &out);
          const double dt = seconds_since(ts);
          if (!st.ok()) {
            std::fprintf(
                stderr, "decode %s/%s batch %d: %s\n", std::string(e::weight_format_name(wf)).c_str(),
                std::string(e::kv_cache_dtype_name(kv)).c_str(), batch, st.error().to_string().c_str());
            ok = false;
            break;
          }
          if (step >= warmup) {
            timed += dt;
            kv_read += batch * e::blocks_for_tokens(pos + 1) * bytes->block_bytes;
          }
        }
        if (!ok) {
          ++failures;
          continue;
        }
        const double step_s = timed / steps;
        const double bytes_step =
            static_cast<double>(step_weight_bytes(*model, batch)) + static_cast<double>(kv_read) / steps;
        const double bw = bytes_step / step_s;
        std::printf("%-7s %-5s %5d %9.3f %10.0f %8.3f %7.2f %5.1f%% %7.1f%%\n",
                    std::string(e::weight_format_name(wf)).c_str(),
                    std::string(e::kv_cache_dtype_name(kv)).c_str(), batch, step_s * 1e3, batch / step_s,
                    bytes_step / 1e9, bw / 1e12, 100.0 * bw / kPeakBytesPerSecond, 100.0 * bw / copy_bw);
        std::fflush(stdout);
      }
    }
  }
  return failures == 0 ? 0 : 1;
}
