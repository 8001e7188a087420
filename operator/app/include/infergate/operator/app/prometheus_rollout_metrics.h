// The rollout's metrics in the operator's Prometheus registry (docs/rollout.md "Metrics"):
//   infergate_rollout_stages_total{stage,outcome}        Promoted, RolledBack, Aborted, Superseded
//   infergate_rollouts_total{outcome}                    Completed, RolledBack, Aborted, Superseded
//   infergate_rollback_duration_seconds                  from the failed gate to the canary gone
//   infergate_verification_failures_total{reason}        the agent's refusal words
//   infergate_model_version_drift{namespace,model}       stable pods serving another release digest
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "infergate/operator/controllers/rollout_metrics.h"

namespace infergate::op::app {

class PrometheusRolloutMetrics final : public controllers::RolloutMetrics {
 public:
  explicit PrometheusRolloutMetrics(prometheus::Registry& registry);
  void record(const platform::ModelRef& model, const controllers::RolloutEvent& event) override;
  void set_version_drift(const platform::ModelRef& model, int pods) override;
  void forget(const platform::ModelRef& model) override;

 private:
  prometheus::Family<prometheus::Counter>& stages_;
  prometheus::Family<prometheus::Counter>& rollouts_;
  prometheus::Histogram& rollback_seconds_;
  prometheus::Family<prometheus::Counter>& verification_failures_;
  prometheus::Family<prometheus::Gauge>& drift_;
};

}  // namespace infergate::op::app
