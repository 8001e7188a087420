// Rollout metrics in Prometheus.
#include "infergate/operator/app/prometheus_rollout_metrics.h"

namespace infergate::op::app {

PrometheusRolloutMetrics::PrometheusRolloutMetrics(prometheus::Registry& registry)
    : stages_(prometheus::BuildCounter()
                  .Name("infergate_rollout_stages_total")
                  .Help("Rollout stages finished, by stage and outcome (Promoted, RolledBack, Aborted, "
                        "Superseded).")
                  .Register(registry)),
      rollouts_(prometheus::BuildCounter()
                    .Name("infergate_rollouts_total")
                    .Help("Rollouts finished, by outcome (Completed, RolledBack, Aborted, Superseded).")
                    .Register(registry)),
      rollback_seconds_(
          prometheus::BuildHistogram()
              .Name("infergate_rollback_duration_seconds")
              .Help("From the failed gate (or abort) to the canary gone.")
              .Register(registry)
              .Add({}, prometheus::Histogram::BucketBoundaries{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600})),
      verification_failures_(prometheus::BuildCounter()
                                 .Name("infergate_verification_failures_total")
                                 .Help("Release verifications refused by the agent, by reason word.")
                                 .Register(registry)),
      drift_(
          prometheus::BuildGauge()
              .Name("infergate_model_version_drift")
              .Help(
                  "Stable pods whose verified release digest is not the one the model's status says serves.")
              .Register(registry)) {}

void PrometheusRolloutMetrics::record(const platform::ModelRef&, const controllers::RolloutEvent& e) {
  using K = controllers::RolloutEvent::Kind;
  switch (e.kind) {
    case K::kStageFinished: stages_.Add({{"stage", e.stage}, {"outcome", e.outcome}}).Increment(); break;
    case K::kRolloutFinished: rollouts_.Add({{"outcome", e.outcome}}).Increment(); break;
    case K::kRollbackDuration: rollback_seconds_.Observe(e.seconds); break;
    case K::kVerificationFailure: verification_failures_.Add({{"reason", e.reason}}).Increment(); break;
  }
}

void PrometheusRolloutMetrics::set_version_drift(const platform::ModelRef& model, int pods) {
  drift_.Add({{"namespace", model.namespace_}, {"model", model.name}}).Set(pods);
}

void PrometheusRolloutMetrics::forget(const platform::ModelRef& model) {
  auto& g = drift_.Add({{"namespace", model.namespace_}, {"model", model.name}});
  drift_.Remove(&g);
}

}  // namespace infergate::op::app
