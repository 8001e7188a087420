// Server benchmark. Part 1: throughput (generated tokens per second) of the real server over HTTP on
// loopback with C closed-loop clients (C = 1, 4, 16), for fp16 and int8 KV, printed as ratios to fp16
// at the same concurrency and to concurrency 1. Part 2: with the same KV memory budget, how many
// sequences the scheduler actually runs at once for each KV dtype (its own count, not arithmetic),
// as ratios to fp16; targets: int8 >= 1.9x, int4 >= 3.5x.
//
// Usage: server_bench [--seconds S] [--budget-mib M] [--json FILE]
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/common/log.h"
#include "infergate/http/client.h"
#include "infergate/runtime/model/test_model.h"
#include "infergate/runtime/server/scheduler.h"
#include "infergate/runtime/server/server.h"

namespace srv = infergate::runtime::server;
namespace eng = infergate::runtime::engine;
namespace mdl = infergate::runtime::model;
using infergate::Json;

namespace {

struct Throughput {
  double tokens_per_second = 0;
  int64_t requests = 0;
  int64_t errors = 0;
};

Throughput measure_throughput(const srv::Server& s, int clients, double seconds) {
  std::atomic<int64_t> tokens{0}, requests{0}, errors{0};
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(seconds));
  std::vector<std::thread> pool;
  infergate::http::ClientOptions options;
  options.base_url = s.url();
  options.timeout = std::chrono::seconds(120);
  options.user_agent = "server_bench";
  auto client = *infergate::http::Client::create(options);
  for (int c = 0; c < clients; ++c) {
    pool.emplace_back([&, c] {
      for (int i = 0; std::chrono::steady_clock::now() < end; ++i) {
        infergate::http::ClientRequest r;
        r.method = "POST";
        r.target = "/v1/completions";
        r.content_type = "application/json";
        r.body = infergate::dump_json(
            {{"prompt", "Benchmark client " + std::to_string(c) + " request " + std::to_string(i) +
                            ": write a short story about a lighthouse."},
             {"max_tokens", 64},
             {"temperature", 0},
             {"ignore_eos", true}});
        auto resp = client->call(r);
        if (!resp.ok() || resp->status != 200) {
          ++errors;
          continue;
        }
        Json j = Json::parse(resp->body, nullptr, false);
        tokens += j["usage"]["completion_tokens"].get<int64_t>();
        ++requests;
      }
    });
  }
  for (auto& t : pool) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {static_cast<double>(tokens.load()) / wall, requests.load(), errors.load()};
}

// Runs `n` identical-length requests through a Scheduler whose engine has `budget` bytes of KV and
// returns the most sequences the scheduler ran in one step.
int64_t admitted(const std::filesystem::path& model, eng::KvCacheDtype kv, int64_t budget, int n,
                 int64_t* blocks, int64_t* preemptions) {
  eng::EngineConfig c;
  c.model_dir = model;
  c.kv_dtype = kv;
  c.max_context = 128;
  c.max_sequences = n;
  c.kv_budget_bytes = budget;
  auto le = eng::load_engine(c);
  if (!le.ok()) {
    std::fprintf(stderr, "load (%s): %s\n", std::string(eng::kv_cache_dtype_name(kv)).c_str(),
                 le.error().to_string().c_str());
    return -1;
  }
  *blocks = le->engine->blocks().total_blocks();
  srv::Metrics metrics;
  srv::SchedulerOptions so;
  so.max_concurrency = n;
  so.max_step_tokens = 1 << 20;
  so.prefill_chunk = 256;
  srv::Scheduler s(std::move(le->engine), so, &metrics);
  std::atomic<int> done{0};
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> prompt;
    for (int k = 0; k < 56; ++k) prompt.push_back(1 + (k * 31 + i * 7) % 250);  // 3.5 blocks
    eng::SamplingParams sp;
    sp.max_tokens = 8;  // 64 tokens in all: the same 4 blocks from admission to the end
    sp.ignore_eos = true;
    auto sub = s.submit(prompt, sp, [&](const srv::RequestEvent& ev) {
      if (ev.final) ++done;
    });
    if (sub.refused) std::fprintf(stderr, "refused: %s\n", sub.refused->error.to_string().c_str());
  }
  s.wait_idle(std::chrono::steady_clock::now() + std::chrono::minutes(10));
  auto st = s.stats();
  *preemptions = st.preemptions;
  return st.max_running_seen;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 4.0;
  int64_t budget_mib = 8;
  std::string json_out;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seconds"))
      seconds = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--budget-mib"))
      budget_mib = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--json"))
      json_out = argv[i + 1];
  }
  infergate::log::set_level(infergate::log::Level::kWarn);
  auto tmp = infergate::TempDir::create("server-bench");
  if (!tmp.ok()) return 1;
  // The CPU test model for serving: 4 layers, hidden 256, head_dim 64.
  mdl::TestModelOptions mo;
  mo.out = tmp->path() / "serve-model";
  mo.layers = 4;
  mo.hidden = 256;
  mo.heads = 4;
  mo.kv_heads = 2;
  mo.seed = 1;
  if (auto s = mdl::make_test_model(mo); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.error().to_string().c_str());
    return 1;
  }
  Json report = {{"throughput", Json::array()}, {"admission", Json::array()}};

  std::printf("== served throughput: %g s per point, closed-loop clients, 64 greedy tokens per request\n",
              seconds);
  std::printf("%-6s %6s %14s %10s %10s %8s\n", "kv", "conc", "tokens/s", "vs fp16", "vs conc 1", "errors");
  std::map<int, double> fp16_at;
  for (const char* kv : {"fp16", "int8"}) {
    srv::ServeOptions o;
    o.model_dir = mo.out;
    o.kv_cache_dtype = kv;
    o.max_context_length = 512;
    o.max_concurrency = 16;
    o.port = 0;
    auto s = srv::Server::start(o);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.error().to_string().c_str());
      return 1;
    }
    double at1 = 0;
    for (int c : {1, 4, 16}) {
      Throughput t = measure_throughput(**s, c, seconds);
      if (c == 1) at1 = t.tokens_per_second;
      if (std::string(kv) == "fp16") fp16_at[c] = t.tokens_per_second;
      std::printf("%-6s %6d %14.1f %9.2fx %9.2fx %8lld\n", kv, c, t.tokens_per_second,
                  t.tokens_per_second / fp16_at[c], t.tokens_per_second / at1,
                  static_cast<long long>(t.errors));
      report["throughput"].push_back({{"kv", kv},
                                      {"concurrency", c},
                                      {"tokens_per_second", t.tokens_per_second},
                                      {"ratio_vs_fp16", t.tokens_per_second / fp16_at[c]},
                                      {"errors", t.errors}});
    }
    (*s)->stop();
  }

  // Admission: head_dim 128 (hidden 512, 4 heads), so the page formats' scale overhead is as in real models.
  mdl::TestModelOptions ao;
  ao.out = tmp->path() / "admission-model";
  ao.layers = 2;
  ao.hidden = 512;
  ao.heads = 4;
  ao.kv_heads = 4;
  ao.seed = 2;
  if (auto s = mdl::make_test_model(ao); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.error().to_string().c_str());
    return 1;
  }
  const int64_t budget = budget_mib << 20;
  const int n = 128;
  std::printf(
      "\n== sequences admitted by the scheduler with one KV budget (%lld MiB), %d requests of 56+8 tokens\n",
      static_cast<long long>(budget_mib), n);
  std::printf("%-10s %8s %12s %12s %10s %8s\n", "kv", "blocks", "admitted", "preemptions", "vs fp16",
              "target");
  int64_t base = 0;
  for (auto kv : {eng::KvCacheDtype::kF16, eng::KvCacheDtype::kFp8, eng::KvCacheDtype::kInt8,
                  eng::KvCacheDtype::kInt4}) {
    int64_t blocks = 0, preemptions = 0;
    const int64_t a = admitted(ao.out, kv, budget, n, &blocks, &preemptions);
    if (kv == eng::KvCacheDtype::kF16) base = a;
    const double ratio = base > 0 ? static_cast<double>(a) / static_cast<double>(base) : 0;
    const char* target = kv == eng::KvCacheDtype::kInt8   ? ">= 1.90x"
                         : kv == eng::KvCacheDtype::kInt4 ? ">= 3.50x"
                                                          : "";
    std::printf("%-10s %8lld %12lld %12lld %9.2fx %8s\n", std::string(eng::kv_cache_dtype_name(kv)).c_str(),
                static_cast<long long>(blocks), static_cast<long long>(a),
                static_cast<long long>(preemptions), ratio, target);
    report["admission"].push_back({{"kv", eng::kv_cache_dtype_name(kv)},
                                   {"blocks", blocks},
                                   {"admitted", a},
                                   {"preemptions", preemptions},
                                   {"ratio_vs_fp16", ratio}});
  }
  if (!json_out.empty()) (void)infergate::write_file_atomic(json_out, infergate::dump_json(report, 2));
  return 0;
}
