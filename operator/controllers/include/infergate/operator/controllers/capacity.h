// The capacity seam: whether a configuration fits the hardware it asks for (weights + KV cache at
// the context and concurrency in the spec). The runtime's planner fills it in a later change; until
// then NoCapacityCheck answers "not checked" and the CapacityFits condition is left unset rather
// than guessed.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "infergate/operator/api/inference_model.h"
#include "infergate/operator/api/names.h"

namespace infergate::op::controllers {

struct CapacityVerdict {
  bool fits = false;
  std::string reason;   // CamelCase, e.g. "Fits", "KvCacheTooLarge"
  std::string message;  // with the numbers: "needs 71.3 GiB of 80 GiB per GPU ..."
  std::map<std::string, double> numbers;
};

class CapacityChecker {
 public:
  virtual ~CapacityChecker() = default;
  // nullopt: the configuration was not checked (no planner, or not enough information).
  virtual std::optional<CapacityVerdict> check(const api::PodConfig& config, int32_t replicas) = 0;
};

class NoCapacityCheck final : public CapacityChecker {
 public:
  std::optional<CapacityVerdict> check(const api::PodConfig&, int32_t) override { return std::nullopt; }
};

}  // namespace infergate::op::controllers
