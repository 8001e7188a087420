// The planner behind the operator's CapacityFits condition: spec -> PlanInput -> Plan -> verdict.
#include "infergate/operator/capacity/planner_capacity.h"

#include <algorithm>

#include "infergate/common/fs.h"
#include "infergate/common/log.h"
#include "infergate/operator/api/enums.h"

namespace infergate::op::capacity {
namespace {

constexpr const char* kPlanning = "spec.capacityPlanning";
// A config.json read from an artifact directory: the largest published ones are a few KiB.
constexpr size_t kMaxConfigFileBytes = 1u << 20;

// The planner names its own fields ("max_concurrency"); say which spec field the user writes.
std::string spec_field(std::string_view field) {
  static const std::pair<std::string_view, std::string_view> map[] = {
      {"max_context_length", "spec.serving.maxContextLength"},
      {"max_concurrency", "spec.serving.maxConcurrency"},
      {"weight_format", "spec.serving.weightFormat"},
      {"kv_cache_dtype", "spec.serving.kvCacheDtype"},
      {"tensor_parallel", "spec.resources (its GPU count is the tensor-parallel degree)"},
      {"gpu", "spec.capacityPlanning.gpu"},
      {"gpu_memory", "spec.capacityPlanning.gpuMemory"},
  };
  for (const auto& [k, v] : map) {
    if (k == field) return std::string(v);
  }
  return std::string(kPlanning) + "." + std::string(field);
}

Error name_the_field(const Error& e) {
  const std::string field(e.detail("field"));
  if (field.empty() || e.reason() != "InvalidPlanInput" || field.rfind("spec.", 0) == 0) return e;
  const std::string where = spec_field(field);
  std::string message = e.message();
  if (message.rfind(field + ": ", 0) == 0) message = message.substr(field.size() + 2);
  Error out(e.code(), where + ": " + message, e.reason());
  for (const auto& [k, v] : e.details()) out.with_detail(k, k == "field" ? where : v);
  return out;
}

// Kubernetes quantities ("80Gi", "141G") in the planner's spelling ("80GiB", "141GB").
std::string planner_memory_text(std::string s) {
  if (!s.empty() && (s.back() == 'i' || s.back() == 'k' || s.back() == 'K' || s.back() == 'M' ||
                     s.back() == 'G' || s.back() == 'T' || s.back() == 'P')) {
    s += 'B';
  }
  return s;
}

controllers::CapacityVerdict unchecked(std::string reason, std::string message) {
  controllers::CapacityVerdict v;
  v.checked = false;
  v.fits = false;
  v.reason = std::move(reason);
  v.message = std::move(message);
  return v;
}

}  // namespace

Result<planner::PlanInput> plan_input(const api::PodConfig& config, const api::CapacityPlanningSpec& planning,
                                      const Json& model_config) {
  planner::PlanInput in;
  if (!planning.gpu.empty() && !planning.gpu_memory.empty()) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string(kPlanning) + ".gpu: give gpu or gpuMemory, not both", "InvalidPlanInput")
        .with_detail("field", std::string(kPlanning) + ".gpu");
  }
  if (!planning.gpu.empty()) {
    auto g = planner::find_gpu(planning.gpu);
    if (!g.ok()) {
      // The catalogue speaks in flags ("gpu: unknown GPU ...; or give --gpu-memory SIZE"): say the fields.
      std::string m = g.error().message();
      if (m.rfind("gpu: ", 0) == 0) m = m.substr(5);
      if (auto at = m.find("--gpu-memory SIZE"); at != std::string::npos) m.replace(at, 17, "gpuMemory");
      return Error(g.error().code(), std::string(kPlanning) + ".gpu: " + m, "InvalidPlanInput")
          .with_detail("field", std::string(kPlanning) + ".gpu");
    }
    in.gpu = g->name;
  } else if (!planning.gpu_memory.empty()) {
    INFERGATE_ASSIGN_OR_RETURN(in.gpu_memory_bytes,
                               planner::parse_memory_size(planner_memory_text(planning.gpu_memory),
                                                          std::string(kPlanning) + ".gpuMemory"));
  } else {
    return Error(ErrorCode::kInvalidArgument, std::string(kPlanning) + ": give gpu or gpuMemory",
                 "InvalidPlanInput")
        .with_detail("field", std::string(kPlanning) + ".gpu");
  }
  auto parsed = runtime::model::model_config_from_json(model_config, std::string(kPlanning) + ".modelConfig");
  if (!parsed.ok()) return std::move(parsed).error();
  in.config = std::move(*parsed);
  in.model_name = config.artifact.path;  // names the configuration in the message

  INFERGATE_ASSIGN_OR_RETURN(planner::WeightFormat wf,
                             planner::parse_weight_format(api::to_string(config.serving.weight_format)));
  // A config.json written by `quantize` fixes the scheme of the weights it describes; for another
  // format the planner's defaults are `quantize`'s defaults.
  auto own = planner::weight_options_from_config(in.config);
  if (own.ok() && *own && (*own)->format == wf) {
    in.weights = **own;
  } else {
    in.weights.format = wf;
  }
  INFERGATE_ASSIGN_OR_RETURN(in.kv_cache_dtype,
                             planner::parse_kv_dtype(api::to_string(config.serving.kv_cache_dtype)));
  in.max_context_length = config.serving.max_context_length;
  in.max_concurrency = config.serving.max_concurrency;
  in.tensor_parallel = std::max<int64_t>(1, config.resources.gpus());
  return in;
}

controllers::CapacityVerdict verdict_of(const planner::Plan& p) {
  controllers::CapacityVerdict v;
  v.checked = true;
  v.fits = p.fits;
  v.reason = p.reason;
  v.message = p.message;
  auto d = [](int64_t x) { return static_cast<double>(x); };
  v.numbers = {{"needed_bytes", d(p.total_bytes)},
               {"available_bytes", d(p.available_bytes)},
               {"margin_bytes", d(p.margin_bytes)},
               {"weight_bytes", d(p.weights.total())},
               {"kv_bytes", d(p.kv_bytes)},
               {"workspace_bytes", d(p.workspace.total())},
               {"reserve_bytes", d(p.reserves.total())},
               {"max_concurrency_at_context", d(p.max_concurrency_at_context)},
               {"max_context_at_concurrency", d(p.max_context_at_concurrency)},
               {"tensor_parallel", d(p.input.tensor_parallel)}};
  return v;
}

PlannerCapacityChecker::PlannerCapacityChecker(PlannerCapacityOptions options)
    : options_(std::move(options)) {}

PlannerCapacityChecker::ModelConfig PlannerCapacityChecker::model_config(
    const api::PodConfig& config, const api::CapacityPlanningSpec& planning) {
  if (!planning.model_config.is_null()) return {planning.model_config, {}};
  std::optional<std::filesystem::path> dir;
  if (options_.artifact_dir) dir = options_.artifact_dir(config.artifact);
  if (!dir) {
    return {
        std::nullopt,
        unchecked(kReasonModelConfigUnknown,
                  std::string(kPlanning) +
                      ".modelConfig is not set (the model's config.json values: hidden_size, "
                      "num_hidden_layers, num_attention_heads, num_key_value_heads, ...) and the operator "
                      "cannot read the artifact; capacity is not checked, nothing is blocked")};
  }
  const std::filesystem::path file = *dir / "config.json";
  auto text = read_file(file, kMaxConfigFileBytes);
  if (!text.ok()) {
    return {std::nullopt, unchecked(kReasonModelConfigUnknown,
                                    std::string(kPlanning) + ".modelConfig is not set and " + file.string() +
                                        " cannot be read (" + text.error().message() +
                                        "); capacity is not checked, nothing is blocked")};
  }
  auto j = parse_json(*text, file.string());
  if (!j.ok()) {
    return {std::nullopt, unchecked(kReasonInvalidInput,
                                    j.error().message() + "; capacity is not checked, nothing is blocked")};
  }
  return {std::move(*j), {}};
}

std::optional<controllers::CapacityVerdict> PlannerCapacityChecker::check(
    const api::PodConfig& config, const api::CapacityPlanningSpec& planning, int32_t /*replicas*/) {
  // Capacity is per pod (per GPU under tensor parallelism): replicas add pods, not memory per pod.
  if (!planning.configured() && !options_.artifact_dir) {
    return unchecked(kReasonNotConfigured,
                     std::string(kPlanning) +
                         " is not set: give gpu (or gpuMemory) and modelConfig to have the first deployment "
                         "and every rollout stage checked against GPU memory; nothing is blocked");
  }
  if (planning.gpu.empty() && planning.gpu_memory.empty()) {
    return unchecked(kReasonGpuUnknown, std::string(kPlanning) +
                                            ".gpu (or gpuMemory) is not set: the planner needs the GPU's "
                                            "memory; capacity is not checked, nothing is blocked");
  }
  ModelConfig mc = model_config(config, planning);
  if (!mc.config) return mc.why_not;
  const Json& model = *mc.config;

  // The verdict is a pure function of these: memoise it (reconciles repeat it on every resync).
  const std::string key = dump_json(api::canonical_json(config)) + "\n" + planning.gpu + "\n" +
                          planning.gpu_memory + "\n" + dump_json(model);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  }
  controllers::CapacityVerdict verdict;
  auto in = plan_input(config, planning, model);
  if (!in.ok()) {
    verdict = unchecked(kReasonInvalidInput, name_the_field(in.error()).message() +
                                                 "; capacity is not checked, nothing is blocked");
  } else if (auto p = planner::plan(*in); !p.ok()) {
    verdict = unchecked(kReasonInvalidInput, name_the_field(p.error()).message() +
                                                 "; capacity is not checked, nothing is blocked");
  } else {
    verdict = verdict_of(*p);
  }
  if (!verdict.checked) {
    log::warn("capacity not checked",
              {{"artifact", config.artifact.path}, {"reason", verdict.reason}, {"message", verdict.message}});
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (memo_.size() >= options_.max_memoised) memo_.clear();
  memo_.emplace(key, verdict);
  return verdict;
}

}  // namespace infergate::op::capacity
