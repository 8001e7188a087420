// The performance gate's measurements: scrapes of the stable and canary pods' /metrics at the start
// and the end of the analysis window (per-pod bucket deltas, summed per track), or, with
// spec.rollout.analysis.prometheusURL, instant queries over the window to that Prometheus server.
//
// Guarantees: a verdict is returned only once a whole window has been measured; a pod that could not
// be scraped at the start is left out rather than counted from zero; a pod started during the window
// counts from zero (all it did is inside the window); a restarted operator (no start scrape in memory)
// takes a new start scrape and measures a whole window from there: slower, never wrong.
// Thread-safe; keyed by model.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "infergate/common/clock.h"
#include "infergate/operator/api/inference_model.h"
#include "infergate/operator/platform/platform.h"
#include "infergate/operator/rollout/gates.h"

namespace infergate::op::controllers {

class PerformanceAnalyzer {
 public:
  PerformanceAnalyzer(platform::Platform& platform, Clock& clock,
                      std::chrono::milliseconds timeout = std::chrono::seconds(3));

  // Called at every reconcile of a running stage: takes the start scrape when there is none for this
  // stage, and returns the verdict once the window (from status.stage.analysisStartedAt, or from this
  // process's start scrape if later) is over; nullopt while measuring.
  std::optional<rollout::GateVerdict> measure(const platform::ModelRef& model,
                                              const api::InferenceModelSpec& spec,
                                              const api::StageStatus& stage,
                                              const platform::WorkloadState& stable,
                                              const platform::WorkloadState& canary);
  void forget(const std::string& model_key);

 private:
  struct Baseline {
    std::string revision;
    WallTime at{};
    std::map<std::string, rollout::TrackMetrics> pods;  // pod name -> its counters at the start
    std::set<std::string> unreadable;                   // pods that could not be scraped at the start
    std::optional<rollout::GateVerdict> verdict;        // once measured
  };
  std::optional<rollout::TrackMetrics> scrape(const platform::ModelRef& model, const platform::PodState& pod,
                                              const api::EngineMetrics& metrics);
  rollout::GateVerdict from_prometheus(const platform::ModelRef& model, const api::InferenceModelSpec& spec);

  platform::Platform& platform_;
  Clock& clock_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::map<std::string, Baseline> baselines_;
};

}  // namespace infergate::op::controllers
