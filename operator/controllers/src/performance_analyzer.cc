// Measuring the performance gate through the Platform (pods' /metrics or Prometheus).
#include "infergate/operator/controllers/performance_analyzer.h"

#include "infergate/common/log.h"

namespace infergate::op::controllers {
namespace {

bool measurable(const platform::PodState& p) { return !p.deleting && p.ready && !p.address.empty(); }

// The series the spec's engine exports (its profile at the image's version).
const api::EngineMetrics& engine_metrics(const api::InferenceModelSpec& spec) {
  return api::engine_profile(spec.engine.kind, api::image_engine_version(spec.engine.kind, spec.engine.image))
      .metrics;
}

}  // namespace

PerformanceAnalyzer::PerformanceAnalyzer(platform::Platform& platform, Clock& clock,
                                         std::chrono::milliseconds timeout)
    : platform_(platform), clock_(clock), timeout_(timeout) {}

void PerformanceAnalyzer::forget(const std::string& key) {
  std::lock_guard lock(mu_);
  baselines_.erase(key);
}

std::optional<rollout::TrackMetrics> PerformanceAnalyzer::scrape(const platform::ModelRef& model,
                                                                 const platform::PodState& pod,
                                                                 const api::EngineMetrics& metrics) {
  const std::string url = platform_.pod_url(model, pod);
  if (url.empty()) return std::nullopt;
  auto r = platform_.http_get(model, url + "/metrics", timeout_);
  if (!r.ok() || r->status != 200) {
    log::warn("cannot scrape a pod's metrics",
              {{"model", model.key()},
               {"pod", pod.name},
               {"error", r.ok() ? "HTTP " + std::to_string(r->status) : r.error().to_string()}});
    return std::nullopt;
  }
  auto samples = rollout::parse_prometheus_text(r->body);
  if (!samples.ok()) {
    log::warn("a pod's metrics do not parse",
              {{"model", model.key()}, {"pod", pod.name}, {"error", samples.error().to_string()}});
    return std::nullopt;
  }
  return rollout::track_metrics(*samples, metrics);
}

rollout::GateVerdict PerformanceAnalyzer::from_prometheus(const platform::ModelRef& model,
                                                          const api::InferenceModelSpec& spec) {
  rollout::PromTrack tracks[2];
  const api::Track which[2] = {api::Track::kStable, api::Track::kCanary};
  for (int i = 0; i < 2; ++i) {
    rollout::PromQueries q = rollout::prometheus_queries(
        model.namespace_, model.name, which[i], spec.rollout.canary.analysis_seconds, engine_metrics(spec));
    std::pair<const std::string*, std::optional<double>*> asks[] = {{&q.ttft_p95, &tracks[i].ttft_p95},
                                                                    {&q.tpot_p95, &tracks[i].tpot_p95},
                                                                    {&q.requests, &tracks[i].requests},
                                                                    {&q.errors, &tracks[i].errors}};
    for (auto& [query, out] : asks) {
      auto r = platform_.http_get(model, rollout::prometheus_query_url(spec.rollout.prometheus_url, *query),
                                  timeout_);
      rollout::GateVerdict v;
      v.outcome = rollout::Outcome::kInconclusive;
      v.reason = "PrometheusUnavailable";
      if (!r.ok()) {
        v.message = "performance gate inconclusive: " + r.error().message();
        return v;
      }
      auto value = rollout::parse_prometheus_value(r->body);
      if (!value.ok()) {
        v.message = "performance gate inconclusive: " + value.error().message() + " (HTTP " +
                    std::to_string(r->status) + ")";
        return v;
      }
      *out = *value;
    }
  }
  return rollout::evaluate_performance_prometheus(spec.rollout.performance, tracks[0], tracks[1]);
}

std::optional<rollout::GateVerdict> PerformanceAnalyzer::measure(const platform::ModelRef& model,
                                                                 const api::InferenceModelSpec& spec,
                                                                 const api::StageStatus& stage,
                                                                 const platform::WorkloadState& stable,
                                                                 const platform::WorkloadState& canary) {
  const WallTime now = clock_.wall_now();
  const auto window = std::chrono::seconds(spec.rollout.canary.analysis_seconds);
  if (!spec.rollout.prometheus_url.empty()) {
    if (!stage.analysis_started_at || now - *stage.analysis_started_at < window) return std::nullopt;
    return from_prometheus(model, spec);
  }
  auto canary_pod = [&](const platform::PodState& p) { return p.revision == stage.revision; };
  std::unique_lock lock(mu_);
  auto it = baselines_.find(model.key());
  if (it == baselines_.end() || it->second.revision != stage.revision) {
    // The start scrape: once the canary serves (analysis opens at the same moment).
    bool any_canary = false;
    for (const auto& p : canary.pods) any_canary = any_canary || (measurable(p) && canary_pod(p));
    if (!any_canary) return std::nullopt;
    lock.unlock();
    Baseline b;
    b.revision = stage.revision;
    b.at = now;
    for (const auto* w : {&stable, &canary}) {
      for (const auto& p : w->pods) {
        if (!measurable(p) || (w == &canary && !canary_pod(p))) continue;
        if (auto m = scrape(model, p, engine_metrics(spec))) {
          b.pods[p.name] = *m;
        } else {
          b.unreadable.insert(p.name);
        }
      }
    }
    lock.lock();
    baselines_[model.key()] = std::move(b);
    return std::nullopt;
  }
  if (it->second.verdict) return it->second.verdict;
  const Baseline base = it->second;
  lock.unlock();
  if (!stage.analysis_started_at) return std::nullopt;
  const WallTime start = std::max(*stage.analysis_started_at, base.at);
  if (now - start < window) return std::nullopt;
  rollout::TrackMetrics sum[2];
  int measured[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const platform::WorkloadState& w = i == 0 ? stable : canary;
    for (const auto& p : w.pods) {
      if (!measurable(p) || (i == 1 && !canary_pod(p)) || base.unreadable.count(p.name)) continue;
      auto m = scrape(model, p, engine_metrics(spec));
      if (!m) continue;
      auto b = base.pods.find(p.name);
      rollout::TrackMetrics d = b == base.pods.end() ? *m : rollout::delta(b->second, *m);
      sum[i] = measured[i] == 0 ? d : rollout::add(sum[i], d);
      ++measured[i];
    }
  }
  rollout::GateVerdict v = rollout::evaluate_performance(spec.rollout.performance, sum[0], sum[1]);
  v.measurements["pods_stable"] = measured[0];
  v.measurements["pods_canary"] = measured[1];
  v.measurements["window_seconds"] = std::chrono::duration<double>(now - start).count();
  lock.lock();
  // Kept until the stage changes: a verdict is measured once, not again at every reconcile.
  if (auto again = baselines_.find(model.key());
      again != baselines_.end() && again->second.revision == stage.revision)
    again->second.verdict = v;
  return v;
}

}  // namespace infergate::op::controllers
