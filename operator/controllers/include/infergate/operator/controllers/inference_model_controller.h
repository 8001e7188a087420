// The InferenceModel reconciler: reads the model, observes the platform (stable, canary, the eval job,
// the performance measurements of a running stage), asks the pure plan (plan_model: the staged
// rollout around the steady state) what to do, does it, writes status only when it changed, and
// records the events and rollout metrics the plan names. It remembers, per pod, when serving containers
// restarted (RestartHistory), so a crash loop is judged on restarts within a window.
//
// Guarantees: reconciling an unchanged model writes nothing (no workload, endpoint or status write,
// no event); a status write that loses a race (409) re-reads the model and re-plans against the fresh
// version, up to max_conflict_retries times; transient platform errors are returned (the manager
// retries with backoff) without touching status, so an unreachable API server never flaps
// conditions; a refusal by the platform (an invalid or forbidden object) is shown as Ready=False,
// reason DeployFailed, with the platform's message. A reconcile that threw (record_failure) is shown
// as Ready=False and Progressing=False, reason ReconcileError, with the exception's words, announced by
// one Warning Event; the rest of the status is kept as it was.
// Assumptions: the manager never runs two reconciles of one model at once.
#pragma once

#include "infergate/common/clock.h"
#include "infergate/operator/controllers/capacity.h"
#include "infergate/operator/controllers/performance_analyzer.h"
#include "infergate/operator/controllers/restart_history.h"
#include "infergate/operator/controllers/rollout_metrics.h"
#include "infergate/operator/controllers/rollout_plan.h"
#include "infergate/operator/controllers/steady_state.h"
#include "infergate/operator/platform/platform.h"
#include "infergate/operator/reconcile/reconciler.h"

namespace infergate::op::controllers {

struct ControllerOptions {
  api::Images images;
  int max_conflict_retries = 3;
  std::chrono::nanoseconds trust_recheck = kTrustRecheck;
  RolloutMetrics* rollout_metrics = nullptr;       // where rollout outcomes are counted
  std::chrono::milliseconds scrape_timeout{3000};  // one /metrics or Prometheus request
};

class InferenceModelReconciler final : public reconcile::Reconciler {
 public:
  InferenceModelReconciler(platform::ModelStore& models, platform::Platform& platform,
                           platform::EventSink& events, CapacityChecker& capacity, Clock& clock,
                           ControllerOptions options = {});

  Result<reconcile::Action> reconcile(const reconcile::Request& request) override;
  void record_failure(const reconcile::Request& request, const std::string& what) override;

  // What one reconcile of an object would observe and plan, without doing it (tests, dry runs).
  Result<Plan> plan(const Json& object);

 private:
  Result<Observed> observe(const ModelInput& in);
  Status execute(const platform::ModelRef& ref, const Plan& plan);
  Status mark_failed(const reconcile::Request& request, const std::string& what);

  platform::ModelStore& models_;
  platform::Platform& platform_;
  platform::EventSink& events_;
  CapacityChecker& capacity_;
  Clock& clock_;
  ControllerOptions options_;
  PerformanceAnalyzer analyzer_;
  RestartHistory restarts_;  // crash loops are judged on restarts within a window
};

}  // namespace infergate::op::controllers
