// Where the rollout's numbers go: stages and rollouts by outcome, rollback duration, verification
// failures by reason, and version drift per model. The app records them in Prometheus; tests count
// them. Implementations are thread-safe (several workers reconcile different models at once).
#pragma once

#include "infergate/operator/controllers/steady_state.h"

namespace infergate::op::controllers {

class RolloutMetrics {
 public:
  virtual ~RolloutMetrics() = default;
  virtual void record(const platform::ModelRef& model, const RolloutEvent& event) = 0;
  // Stable pods of the model whose verified release digest is not status.stable's.
  virtual void set_version_drift(const platform::ModelRef& model, int pods) = 0;
  // The model is gone: drop its series.
  virtual void forget(const platform::ModelRef& model) = 0;
};

}  // namespace infergate::op::controllers
