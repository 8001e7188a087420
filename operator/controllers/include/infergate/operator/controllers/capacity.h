// The capacity seam: whether a configuration fits the hardware it asks for (weights, KV cache,
// activation workspace and reserves at the context and concurrency in the spec). The operator's
// PlannerCapacityChecker (operator/capacity) answers with the runtime's planner; NoCapacityCheck
// answers "not checked" and the CapacityFits condition is left unset rather than guessed.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "infergate/operator/api/inference_model.h"
#include "infergate/operator/api/names.h"

namespace infergate::op::controllers {

struct CapacityVerdict {
  bool fits = false;
  std::string reason;   // CamelCase, e.g. "Fits", "KvCacheTooLarge", "CapacityPlanningNotConfigured"
  std::string message;  // with the numbers: "needs 71.3 GiB of 79.6 GiB per GPU ..."
  std::map<std::string, double> numbers;
  // false: the configuration could not be checked (the spec lacks the GPU or the model's config, or
  // the planner refused what it was given). CapacityFits is then Unknown with the reason, and nothing
  // is blocked: only a plan that was made and does not fit refuses a deployment or a stage.
  bool checked = true;

  // Whether this verdict refuses the configuration.
  bool blocks() const { return checked && !fits; }
  // The CapacityFits condition's status: "True", "False" or "Unknown".
  std::string condition_status() const { return !checked ? "Unknown" : fits ? "True" : "False"; }
};

class CapacityChecker {
 public:
  virtual ~CapacityChecker() = default;
  // `config` is the pod configuration to check (the desired one, or a stage's), `planning` what the
  // spec says about the hardware and the model, `replicas` the pods that will run it.
  // nullopt: no checker at all (the condition is not set). Must be thread-safe: reconcile workers
  // call it concurrently.
  virtual std::optional<CapacityVerdict> check(const api::PodConfig& config,
                                               const api::CapacityPlanningSpec& planning,
                                               int32_t replicas) = 0;
};

class NoCapacityCheck final : public CapacityChecker {
 public:
  std::optional<CapacityVerdict> check(const api::PodConfig&, const api::CapacityPlanningSpec&,
                                       int32_t) override {
    return std::nullopt;
  }
};

}  // namespace infergate::op::controllers
