// The capacity plan: will a model, in a weight format and KV dtype, at a context length and a
// concurrency, fit a GPU (or T GPUs with tensor parallelism), and by how much. This is the library
// call the operator makes before each rollout stage (PlanInput -> Plan, with a reason word and a
// message with the numbers for a condition), and what `infergate-runtime plan` prints.
//
// Guarantees: pure and thread-safe; every byte comes from memory_model.h, so it is what the runtime
// allocates for the same settings. Bad input gets an error with reason "InvalidPlanInput" and a
// detail "field" naming what was wrong (or model::parse_model_config's "InvalidConfig").
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "infergate/common/json.h"
#include "infergate/common/result.h"
#include "infergate/runtime/planner/gpu_catalog.h"
#include "infergate/runtime/planner/memory_model.h"

namespace infergate::runtime::planner {

struct PlanInput {
  model::ModelConfig config;
  std::string model_name;  // shown in messages (a directory, a file, a model name)
  // The GPU: a catalogue name (gpu_catalog.h), or its usable memory in bytes. Exactly one.
  std::string gpu;
  std::optional<int64_t> gpu_memory_bytes;
  WeightOptions weights;
  kernels::KvDtype kv_cache_dtype = kernels::KvDtype::kF16;
  int64_t max_context_length = 0;
  int64_t max_concurrency = 0;
  int64_t tensor_parallel = 1;
  WorkspaceOptions workspace;
  ReserveOptions reserves;
};

// The formula as it is usually quoted: layers x 2 x tokens x kv_heads x head_dim x bytes per value
// x concurrency, over all GPUs, with the config's own numbers. It does not apply to MLA caches.
struct TextbookEstimate {
  int64_t layers = 0, kv_heads = 0, head_dim = 0, tokens = 0, concurrency = 0;
  double bytes_per_value = 0;
  double bytes = 0;
  bool applies = true;
  std::string line;  // "textbook KV estimate: 80 layers x 2 x ... = 85.90 GB (80.0 GiB)"
};

// Reason words (CamelCase, stable: the operator puts them in the CapacityFits condition).
inline constexpr const char* kReasonFits = "Fits";
inline constexpr const char* kReasonWeightsTooLarge = "WeightsTooLarge";  // no room left for any KV
inline constexpr const char* kReasonKvCacheTooLarge = "KvCacheTooLarge";
inline constexpr const char* kReasonContextTooLong = "ContextTooLong";  // beyond max_position_embeddings

struct Plan {
  PlanInput input;
  GpuSpec gpu;  // from the catalogue, or {"custom", ..., usable_bytes} for --gpu-memory
  int64_t model_max_context = 0;
  int64_t model_parameters = 0;  // the whole model (all GPUs)
  TextbookEstimate textbook;
  // Per GPU (the one that holds the most under tensor parallelism):
  KvModel kv;
  int64_t kv_blocks_per_sequence = 0;
  int64_t kv_blocks = 0;
  int64_t kv_bytes = 0;
  WeightBreakdown weights;
  Workspace workspace;
  Reserves reserves;
  int64_t total_bytes = 0;
  int64_t available_bytes = 0;
  int64_t margin_bytes = 0;  // available - total; negative when it does not fit
  bool fits = false;
  std::string reason;                      // kReason*
  std::string message;                     // one line with the numbers, for a condition message or a log
  int64_t max_concurrency_at_context = 0;  // at max_context_length
  int64_t max_context_at_concurrency = 0;  // at max_concurrency, in whole blocks, capped by the model
  bool max_context_capped_by_model = false;
  std::vector<std::string> notes;
};

Result<Plan> plan(const PlanInput& input);

// The plan as one JSON object (shape in docs/capacity-planning.md) and as the text `plan` prints;
// the text's first line is the textbook estimate.
Json plan_json(const Plan& p);
std::string plan_text(const Plan& p);

// A model read for planning: a config.json file, or a model directory holding one. A directory
// compressed by `quantize` fixes the weight options (weights is set).
struct LoadedModel {
  model::ModelConfig config;
  std::optional<WeightOptions> weights;
  std::string name;
};
Result<LoadedModel> load_model(const std::filesystem::path& path);

// The docs' "what fits where" table: for every model, weight format (fp16, int8, int4) and KV dtype
// (fp16, fp8, int8, int4), the smallest tensor-parallel degree (1, 2, 4, 8) at which `concurrency`
// sequences of `context` tokens (or the model's max_position_embeddings when shorter) fit each
// catalogue GPU, with the most sequences that fit there. Markdown, deterministic.
Result<std::string> fit_table_markdown(const std::vector<LoadedModel>& models, int64_t context,
                                       int64_t concurrency);

}  // namespace infergate::runtime::planner
