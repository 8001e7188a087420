// The rollout's gates, as pure functions from what was observed to a verdict with its numbers:
//   quality      the eval Job's JSON result (docs/eval-and-report.md), re-checked against
//                spec.rollout.gates.quality (the exit code alone is never trusted);
//   performance  TTFT p95, TPOT p95 and error rate of the canary against stable over the analysis
//                window, from /metrics scrapes (bucket deltas) or from a Prometheus server's answers.
// Anything missing, unparsable or without traffic is Inconclusive, and Inconclusive never promotes.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "infergate/common/json.h"
#include "infergate/operator/api/engine.h"
#include "infergate/operator/api/inference_model.h"
#include "infergate/operator/api/verification.h"
#include "infergate/operator/platform/platform.h"
#include "infergate/operator/rollout/metrics_text.h"

namespace infergate::op::rollout {

// Gate names as they appear in status.stage.gateResults[].gate.
inline constexpr std::string_view kVerificationGate = "verification";
inline constexpr std::string_view kQualityGate = "quality";
inline constexpr std::string_view kPerformanceGate = "performance";

enum class Outcome { kPending, kPassed, kFailed, kInconclusive, kSkipped };
std::string_view to_string(Outcome o);

struct GateVerdict {
  Outcome outcome = Outcome::kPending;
  std::string reason;   // CamelCase: QualityThresholdFailed, EvalJobFailed, NoCanaryTraffic, ...
  std::string message;  // with the numbers
  std::map<std::string, double> measurements;
  std::map<std::string, double> thresholds;
  // Passed or Skipped: this gate does not hold a promotion back.
  bool clears() const { return outcome == Outcome::kPassed || outcome == Outcome::kSkipped; }
  // Failed or Inconclusive: the stage must not promote.
  bool blocks() const { return outcome == Outcome::kFailed || outcome == Outcome::kInconclusive; }
};

// ---- Quality ----

// Whether spec.rollout.gates.quality asks for anything (no thresholds: the gate is Skipped).
bool quality_configured(const api::QualityGateSpec& spec);

// `infergate-runtime eval --baseline <stable_url> --candidate <canary_url> --suite S --json
//  --termination-message-path /dev/termination-log [--min-top1-agreement X] ...` in the runtime image.
api::ContainerCommand eval_command(const api::QualityGateSpec& spec, const std::string& stable_url,
                                   const std::string& canary_url, const std::string& image,
                                   const std::string& termination_message_path);

// The verdict from the eval's JSON (the termination message) and its exit code. Exit 3 or 2, a missing
// or malformed result, a suite other than the one asked for, or a metric a threshold needs that is
// absent: Inconclusive. A threshold crossed (by our own check, or eval's exit 1): Failed.
GateVerdict evaluate_quality_result(const api::QualityGateSpec& spec, int exit_code,
                                    const std::string& termination_message);

// The verdict from the job as the platform reports it: Pending while it runs; a job that cannot run
// (image pull failure, a crash without a result, the deadline) is Inconclusive. A Job seen Failed
// before its pod's end (the two come through separate watches) stays Pending for up to
// kEvalResultGrace after the failure, for the pod's result; never after DeadlineExceeded, whose pod
// the Job controller deletes.
inline constexpr std::chrono::seconds kEvalResultGrace{20};
GateVerdict evaluate_quality_job(const api::QualityGateSpec& spec, const platform::JobState& job,
                                 WallTime now);

// ---- Performance ----

// The bundled runtime's metric names (docs/metrics.md, "Runtime"); every engine's names are in
// its profile (api::engine_profile(kind).metrics).
inline constexpr std::string_view kTtftMetric = "infergate_time_to_first_token_seconds";
inline constexpr std::string_view kTpotMetric = "infergate_time_per_output_token_seconds";
inline constexpr std::string_view kRequestsMetric = "infergate_requests_total";
inline constexpr std::string_view kErrorsMetric = "infergate_request_errors_total";

// What one track did (one pod's scrape, a delta, or a sum over pods).
struct TrackMetrics {
  Histogram ttft;
  Histogram tpot;
  double requests = 0;
  double errors = 0;
  bool complete = false;  // every metric the gate needs was there
};

// One pod's scrape, read with the engine's series (the first spelling of each quantity the scrape
// has). `requests` counts failed requests too, whichever way the engine counts them.
TrackMetrics track_metrics(
    const std::vector<Sample>& samples,
    const api::EngineMetrics& metrics = api::engine_profile(api::EngineKind::kBundled).metrics);
// after - before for one pod (a restarted pod counts from zero, and so does a series the pod did not
// export yet at `before`).
TrackMetrics delta(const TrackMetrics& before, const TrackMetrics& after);
TrackMetrics add(const TrackMetrics& a, const TrackMetrics& b);

bool performance_configured(const api::PerformanceGateSpec& spec);

// Canary against stable over the window: TTFT p95 and TPOT p95 as ratios to stable, the canary's
// error rate (errors / requests) as an absolute. Fewer than `min_requests` requests on either track,
// or a stable p95 of zero, is Inconclusive: no traffic, no evidence.
GateVerdict evaluate_performance(const api::PerformanceGateSpec& spec, const TrackMetrics& stable,
                                 const TrackMetrics& canary, double min_requests = 1);

// ---- Performance through Prometheus (spec.rollout.analysis.prometheusURL) ----

// The series of one track carry labels model, track and (in a cluster) namespace: the relabelling in
// docs/rollout.md maps the pods' serving.infergate.dev/{model,track} labels to them.
struct PromQueries {
  std::string ttft_p95;
  std::string tpot_p95;
  std::string requests;
  std::string errors;
};
// Each quantity over the engine's spellings of it, joined with `or` (the first that has data).
PromQueries prometheus_queries(
    const std::string& namespace_, const std::string& model, api::Track track, int64_t window_seconds,
    const api::EngineMetrics& metrics = api::engine_profile(api::EngineKind::kBundled).metrics);
// "<base>/api/v1/query?query=<urlencoded>".
std::string prometheus_query_url(const std::string& base, const std::string& query);
// The single value of an instant-vector or scalar answer; nullopt for an empty vector or NaN.
// A malformed answer or status "error" is an error.
Result<std::optional<double>> parse_prometheus_value(const std::string& body);

// Stable and canary as Prometheus saw them over the window (p95s precomputed by the server).
struct PromTrack {
  std::optional<double> ttft_p95, tpot_p95, requests, errors;
};
GateVerdict evaluate_performance_prometheus(const api::PerformanceGateSpec& spec, const PromTrack& stable,
                                            const PromTrack& canary, double min_requests = 1);

// ---- Admission: thresholds an engine cannot be measured on ----

// A threshold of spec.rollout.gates that cannot be measured on the spec's engine, with why. A stage
// with one is refused before any canary starts (Progressing=False, GateNotMeasurable), rather than
// running to an Inconclusive verdict that can only roll back. The performance gate reads each
// engine's own series (its profile's metrics); a quantity an engine does not export (llama.cpp's
// server has no latency histograms and no request counter) cannot be gated on.
struct UnmeasurableThreshold {
  std::string field;  // "spec.rollout.gates.performance.maxTTFTP95Ratio"
  std::string why;
};
std::vector<UnmeasurableThreshold> unmeasurable_thresholds(const api::InferenceModelSpec& spec);

// ---- Decisions ----

// One gate's verdict, by name ("quality", "performance", or an engine's own gate).
struct NamedVerdict {
  std::string gate;
  GateVerdict verdict;
};

// A canary pod that cannot run and will not heal by waiting (its creation was refused, its image
// name is invalid, its runtime keeps crashing): the stage fails at once rather than at its deadline.
struct PodFailure {
  std::string reason;   // CamelCase, for RolledBack: CanaryNotServing, CanaryNotCreated, ...
  std::string message;  // the pod, the Kubernetes reason and its message
};

// What the stage state machine knows at one reconcile.
struct StageInputs {
  GateVerdict verification;   // the canary pods' agent verdicts
  bool canary_ready = false;  // every canary replica of the revision ready
  std::optional<PodFailure> pod_failure;
  bool deadline_passed = false;  // not verified and ready within progressDeadlineSeconds
  // The analysis gates in order (analysis_gates() in the controller): each must clear to promote,
  // any that blocks rolls back.
  std::vector<NamedVerdict> analysis;
  bool window_elapsed = false;  // the analysis window is over
  bool paused = false;
  bool promote_requested = false;  // the promote annotation names this stage's revision
  bool abort_requested = false;
};

struct Decision {
  enum class Kind { kWait, kPromote, kRollBack };
  Kind kind = Kind::kWait;
  std::string gate;    // the gate that decided (for a rollback): verification, readiness, quality, ...
  std::string reason;  // CamelCase
  std::string message;
  bool aborted = false;  // a person asked for it (not a failed gate: the revision is not remembered)
};

// Safety first: abort, then a failed verification, a canary pod that cannot run, the progress
// deadline, a failed or inconclusive analysis gate (the first in order) roll back; a person's promote skips
// the remaining gates (once the canary is ready); paused holds; everything passed and the window over
// promotes; otherwise wait.
Decision decide(const StageInputs& in);

}  // namespace infergate::op::rollout
