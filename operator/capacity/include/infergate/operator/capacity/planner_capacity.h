// The operator's capacity check: the runtime's planner (runtime/planner, the same memory model the
// runtime allocates with) run on a pod configuration, before the first deployment and before every
// rollout stage (KV dtype, context and concurrency change what fits).
//
// Inputs: spec.capacityPlanning's gpu or gpuMemory and modelConfig (the model's config.json), the
// pod configuration's weight format, KV dtype, context and concurrency, and tensor parallelism = the
// GPUs of resources (nvidia.com/gpu: what the engine adapters pass as their tensor-parallel size).
// When modelConfig is not given and the operator can read the artifact's own config.json (the local
// platform, `artifact_dir`), that is used instead.
//
// Guarantees: never blocks on missing information. Without a GPU or a model config, or when the
// planner refuses its input, the verdict is unchecked (CapacityFits Unknown, with the reason and
// the field to fix); only a plan that was made and does not fit refuses. Thread-safe; verdicts are
// memoised by their inputs (planning a mixture-of-experts model walks every expert tensor).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "infergate/common/json.h"
#include "infergate/common/result.h"
#include "infergate/operator/controllers/capacity.h"
#include "infergate/runtime/planner/plan.h"

namespace infergate::op::capacity {

namespace planner = infergate::runtime::planner;

// Reason words of an unchecked verdict (CapacityFits=Unknown). The checked ones are the planner's:
// Fits, WeightsTooLarge, KvCacheTooLarge, ContextTooLong.
inline constexpr const char* kReasonNotConfigured = "CapacityPlanningNotConfigured";
inline constexpr const char* kReasonGpuUnknown = "GpuNotSpecified";
inline constexpr const char* kReasonModelConfigUnknown = "ModelConfigNotSpecified";
inline constexpr const char* kReasonInvalidInput = "InvalidCapacityPlanningInput";

// The planner's input for a pod configuration. `model_config` is the config.json to plan with.
// Errors carry reason "InvalidPlanInput" (or the model parser's "InvalidConfig") and a message that
// names the spec field ("spec.capacityPlanning.gpuMemory: ...").
Result<planner::PlanInput> plan_input(const api::PodConfig& config, const api::CapacityPlanningSpec& planning,
                                      const Json& model_config);

// A plan as a verdict: the planner's reason word and message, and its numbers (bytes per GPU:
// needed_bytes, available_bytes, margin_bytes, weight_bytes, kv_bytes, workspace_bytes,
// reserve_bytes; max_concurrency_at_context, max_context_at_concurrency, tensor_parallel).
controllers::CapacityVerdict verdict_of(const planner::Plan& plan);

struct PlannerCapacityOptions {
  // Where the operator itself can read an artifact directory (the local platform); nullopt or an
  // empty function: it cannot (a cluster's volumes are mounted by the pods, not the operator).
  std::function<std::optional<std::filesystem::path>(const api::ArtifactSpec&)> artifact_dir;
  size_t max_memoised = 256;
};

class PlannerCapacityChecker final : public controllers::CapacityChecker {
 public:
  explicit PlannerCapacityChecker(PlannerCapacityOptions options = {});
  std::optional<controllers::CapacityVerdict> check(const api::PodConfig& config,
                                                    const api::CapacityPlanningSpec& planning,
                                                    int32_t replicas) override;

 private:
  // The config.json to plan with, or (config empty) an unchecked verdict saying why there is none.
  struct ModelConfig {
    std::optional<Json> config;
    controllers::CapacityVerdict why_not;
  };
  ModelConfig model_config(const api::PodConfig& config, const api::CapacityPlanningSpec& planning);

  PlannerCapacityOptions options_;
  std::mutex mu_;
  std::map<std::string, controllers::CapacityVerdict> memo_;
};

}  // namespace infergate::op::capacity
