// planner_bench: the cost of one plan() (weights sharded over 8 GPUs, KV, workspace, reserves, the
// verdict and both limit searches) on each published config, printed as a ratio to one walk over the
// same model's tensor list (model::parameter_count), the baseline, timed in the same run. The
// operator plans before every rollout stage, so this is what a stage start pays.
// Usage: planner_bench [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "infergate/runtime/planner/plan.h"

namespace p = infergate::runtime::planner;
namespace m = infergate::runtime::model;

namespace {

double median_seconds(int reps, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto s = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 9;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
  }
  std::printf("%-18s %12s %14s %12s %8s\n", "model", "tensors", "walk (ms)", "plan (ms)", "ratio");
  for (const char* name :
       {"glm-4-9b-chat-hf", "llama-3-70b", "qwen2.5-72b", "glm-4.5", "deepseek-v3", "kimi-k2"}) {
    auto loaded = p::load_model(std::string(INFERGATE_PLANNER_FIXTURES) + "/" + name + ".json");
    if (!loaded.ok()) {
      std::fprintf(stderr, "planner_bench: %s\n", loaded.error().to_string().c_str());
      return 1;
    }
    p::PlanInput in;
    in.config = loaded->config;
    in.model_name = name;
    in.gpu = "h200";
    in.weights.format = p::WeightFormat::kInt4;
    in.kv_cache_dtype = infergate::kernels::KvDtype::kInt8;
    in.max_context_length = std::min<int64_t>(32768, in.config.max_position_embeddings);
    in.max_concurrency = 16;
    in.tensor_parallel = 8;
    uint64_t sink = 0;
    const double walk = median_seconds(reps, [&] { sink += m::parameter_count(in.config); });
    const double plan = median_seconds(reps, [&] {
      auto r = p::plan(in);
      if (!r.ok()) std::abort();
      sink += static_cast<uint64_t>(r->total_bytes);
    });
    std::printf("%-18s %12zu %14.2f %12.2f %7.2fx\n", name, m::expected_tensors(in.config).size(), walk * 1e3,
                plan * 1e3, plan / walk);
    if (sink == 0) std::printf(" ");
  }
  return 0;
}
