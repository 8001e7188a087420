// Gate verdicts and the stage decision.
#include "infergate/operator/rollout/gates.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace infergate::op::rollout {
namespace {

std::string num(double v) {
  char buf[64];
  (void)std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

GateVerdict verdict(Outcome o, std::string reason, std::string message) {
  GateVerdict v;
  v.outcome = o;
  v.reason = std::move(reason);
  v.message = std::move(message);
  return v;
}

std::string url_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      (void)std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

struct QualityCheck {
  const char* metric;  // in the eval JSON
  const char* flag;    // eval's command-line flag
  bool minimum;        // value >= threshold (else value <= threshold)
  const std::optional<double>& threshold;
};

std::vector<QualityCheck> quality_checks(const api::QualityGateSpec& s) {
  return {{"top1_agreement", "--min-top1-agreement", true, s.min_top1_agreement},
          {"mean_kl", "--max-mean-kl", false, s.max_mean_kl},
          {"perplexity_change", "--max-perplexity-change", false, s.max_perplexity_increase},
          {"retrieval_accuracy", "--min-retrieval-accuracy", true, s.min_retrieval_accuracy},
          {"format_following", "--min-format-following", true, s.min_format_following}};
}

}  // namespace

std::string_view to_string(Outcome o) {
  switch (o) {
    case Outcome::kPending: return "Pending";
    case Outcome::kPassed: return "Passed";
    case Outcome::kFailed: return "Failed";
    case Outcome::kInconclusive: return "Inconclusive";
    case Outcome::kSkipped: return "Skipped";
  }
  return "Pending";
}

bool quality_configured(const api::QualityGateSpec& spec) {
  for (const auto& c : quality_checks(spec)) {
    if (c.threshold) return true;
  }
  return false;
}

api::ContainerCommand eval_command(const api::QualityGateSpec& spec, const std::string& stable_url,
                                   const std::string& canary_url, const std::string& image,
                                   const std::string& termination_message_path) {
  api::ContainerCommand c;
  c.image = image;
  c.command = {"infergate-runtime"};
  c.args = {"eval",
            "--baseline",
            stable_url,
            "--candidate",
            canary_url,
            "--suite",
            spec.suite,
            "--json",
            "--termination-message-path",
            termination_message_path};
  for (const auto& q : quality_checks(spec)) {
    if (q.threshold) {
      c.args.push_back(q.flag);
      c.args.push_back(num(*q.threshold));
    }
  }
  return c;
}

GateVerdict evaluate_quality_result(const api::QualityGateSpec& spec, int exit_code,
                                    const std::string& message) {
  if (exit_code == 2 || exit_code == 3) {
    return verdict(
        Outcome::kInconclusive, exit_code == 3 ? "EvalInconclusive" : "EvalUsage",
        "eval exited " + std::to_string(exit_code) + (exit_code == 3 ? " (could not run)" : " (usage)"));
  }
  if (exit_code != 0 && exit_code != 1) {
    return verdict(Outcome::kInconclusive, "EvalCrashed", "eval exited " + std::to_string(exit_code));
  }
  if (message.empty() || message.size() > api::kMaxTerminationMessage) {
    return verdict(Outcome::kInconclusive, "EvalResultMissing",
                   "eval exited " + std::to_string(exit_code) + " without a result");
  }
  auto parsed = parse_json(message, "eval result");
  if (!parsed.ok() || !parsed->is_object() || !parsed->contains("metrics") ||
      !(*parsed)["metrics"].is_object()) {
    return verdict(Outcome::kInconclusive, "EvalResultMalformed",
                   "the eval result is not the expected JSON object");
  }
  const Json& r = *parsed;
  if (r.contains("suite") && r["suite"].is_string() && r["suite"].get<std::string>() != spec.suite) {
    return verdict(Outcome::kInconclusive, "EvalSuiteMismatch",
                   "eval ran suite \"" + r["suite"].get<std::string>() + "\", not \"" + spec.suite + "\"");
  }
  GateVerdict v;
  const Json& metrics = r["metrics"];
  std::string failures;
  for (const auto& q : quality_checks(spec)) {
    if (!q.threshold) continue;
    v.thresholds[q.metric] = *q.threshold;
    auto it = metrics.find(q.metric);
    if (it == metrics.end() || !it->is_number() || std::isnan(it->get<double>())) {
      v.outcome = Outcome::kInconclusive;
      v.reason = "EvalMetricMissing";
      v.message = "the eval result has no " + std::string(q.metric) + ", which a threshold needs";
      return v;
    }
    const double value = it->get<double>();
    v.measurements[q.metric] = value;
    const bool ok = q.minimum ? value >= *q.threshold : value <= *q.threshold;
    if (!ok) {
      failures += (failures.empty() ? "" : ", ") + std::string(q.metric) + " " + num(value) +
                  (q.minimum ? " < " : " > ") + num(*q.threshold);
    }
  }
  for (const auto& [k, val] : metrics.items()) {
    if (val.is_number() && !v.measurements.count(k)) v.measurements[k] = val.get<double>();
  }
  if (!failures.empty()) {
    v.outcome = Outcome::kFailed;
    v.reason = "QualityThresholdFailed";
    v.message = "quality gate failed: " + failures;
    return v;
  }
  const bool eval_passed = r.contains("passed") && r["passed"].is_boolean() && r["passed"].get<bool>();
  if (exit_code == 1 || !eval_passed) {
    v.outcome = Outcome::kFailed;
    v.reason = "QualityThresholdFailed";
    v.message = "eval reported a failed threshold (exit " + std::to_string(exit_code) + ")";
    if (auto f = r.find("failed"); f != r.end() && f->is_array() && !f->empty() && (*f)[0].is_object()) {
      v.message += ": " + (*f)[0].value("metric", std::string("?"));
    }
    return v;
  }
  v.outcome = Outcome::kPassed;
  v.reason = "QualityPassed";
  std::string shown;
  for (const auto& [k, t] : v.thresholds)
    shown += (shown.empty() ? "" : ", ") + k + " " + num(v.measurements[k]);
  v.message = "quality gate passed (suite " + spec.suite + (shown.empty() ? "" : ": " + shown) + ")";
  return v;
}

GateVerdict evaluate_quality_job(const api::QualityGateSpec& spec, const platform::JobState& job,
                                 WallTime now) {
  if (!job.exists) return verdict(Outcome::kPending, "EvalJobStarting", "starting the eval job");
  if (job.terminated && (job.phase != platform::JobState::Phase::kPending)) {
    if (job.phase == platform::JobState::Phase::kSucceeded ||
        job.phase == platform::JobState::Phase::kFailed) {
      return evaluate_quality_result(spec, job.exit_code, job.termination_message);
    }
  }
  if (job.phase == platform::JobState::Phase::kFailed) {
    if (job.reason != "DeadlineExceeded" && job.failed_at && now - *job.failed_at < kEvalResultGrace) {
      return verdict(Outcome::kPending, "EvalResultPending",
                     "the eval job failed; waiting to see its pod's result");
    }
    std::string why = job.reason.empty() ? "Failed" : job.reason;
    return verdict(
        Outcome::kInconclusive, "EvalJobFailed",
        "the eval job did not produce a result: " + why + (job.message.empty() ? "" : ": " + job.message));
  }
  if (job.phase == platform::JobState::Phase::kSucceeded) {
    return evaluate_quality_result(spec, job.exit_code, job.termination_message);
  }
  // Stuck before it could run: waiting will not make an image appear.
  static const char* kCannotRun[] = {"ImagePullBackOff", "ErrImagePull", "InvalidImageName",
                                     "CreateContainerConfigError", "CreateContainerError"};
  for (const char* r : kCannotRun) {
    if (job.reason == r) {
      return verdict(
          Outcome::kInconclusive, "EvalJobCannotRun",
          "the eval job cannot run: " + job.reason + (job.message.empty() ? "" : ": " + job.message));
    }
  }
  return verdict(Outcome::kPending, "EvalRunning", "the eval job is running");
}

namespace {

// The first of `spellings` the scrape has.
std::optional<Histogram> first_histogram(const std::vector<Sample>& samples,
                                         const std::vector<api::SeriesSelector>& spellings) {
  for (const auto& s : spellings) {
    if (auto h = extract_histogram(samples, s.name, s.labels)) return h;
  }
  return std::nullopt;
}

std::optional<double> first_counter(const std::vector<Sample>& samples,
                                    const std::vector<api::SeriesSelector>& spellings) {
  for (const auto& s : spellings) {
    if (auto v = sum_of(samples, s.name, s.labels)) return v;
  }
  return std::nullopt;
}

}  // namespace

TrackMetrics track_metrics(const std::vector<Sample>& samples, const api::EngineMetrics& metrics) {
  TrackMetrics t;
  auto ttft = first_histogram(samples, metrics.ttft);
  auto tpot = first_histogram(samples, metrics.tpot);
  auto req = first_counter(samples, metrics.requests);
  auto err = first_counter(samples, metrics.errors);
  if (ttft) t.ttft = *ttft;
  if (tpot) t.tpot = *tpot;
  t.errors = err.value_or(0);  // a server that never failed may export no error series at all
  t.requests = req.value_or(0) + (metrics.errors_in_requests ? 0 : t.errors);
  t.complete = ttft.has_value() && tpot.has_value() && req.has_value();
  return t;
}

TrackMetrics delta(const TrackMetrics& before, const TrackMetrics& after) {
  TrackMetrics d;
  d.ttft = rollout::delta(before.ttft, after.ttft);
  d.tpot = rollout::delta(before.tpot, after.tpot);
  const bool reset = after.requests < before.requests || after.errors < before.errors;
  d.requests = reset ? after.requests : after.requests - before.requests;
  d.errors = reset ? after.errors : after.errors - before.errors;
  // A series missing at the start counts from zero: engines create labelled series on their first
  // request (SGLang's histograms and counters do not exist before it), so the window's opening
  // scrape of an idle pod has none. What counts is that the closing scrape has them all.
  d.complete = after.complete;
  return d;
}

TrackMetrics add(const TrackMetrics& a, const TrackMetrics& b) {
  TrackMetrics s;
  s.ttft = rollout::add(a.ttft, b.ttft);
  s.tpot = rollout::add(a.tpot, b.tpot);
  s.requests = a.requests + b.requests;
  s.errors = a.errors + b.errors;
  s.complete = a.complete && b.complete;
  return s;
}

bool performance_configured(const api::PerformanceGateSpec& spec) {
  return spec.max_ttft_p95_ratio || spec.max_tpot_p95_ratio || spec.max_error_rate;
}

namespace {

GateVerdict compare(const api::PerformanceGateSpec& spec, std::optional<double> s_ttft,
                    std::optional<double> c_ttft, std::optional<double> s_tpot, std::optional<double> c_tpot,
                    double s_req, double c_req, double c_err, double min_requests) {
  GateVerdict v;
  v.measurements["requests_stable"] = s_req;
  v.measurements["requests_canary"] = c_req;
  if (spec.max_ttft_p95_ratio) v.thresholds["ttft_p95_ratio"] = *spec.max_ttft_p95_ratio;
  if (spec.max_tpot_p95_ratio) v.thresholds["tpot_p95_ratio"] = *spec.max_tpot_p95_ratio;
  if (spec.max_error_rate) v.thresholds["error_rate"] = *spec.max_error_rate;
  if (c_req < min_requests || s_req < min_requests) {
    v.outcome = Outcome::kInconclusive;
    v.reason = "NotEnoughTraffic";
    v.message = "performance gate inconclusive: " + num(c_req) + " canary and " + num(s_req) +
                " stable requests in the window (at least " + num(min_requests) + " each needed)";
    return v;
  }
  std::string failures;
  const double err_rate = c_err / c_req;
  v.measurements["error_rate"] = err_rate;
  if (spec.max_error_rate && err_rate > *spec.max_error_rate) {
    failures += "error rate " + num(err_rate) + " > " + num(*spec.max_error_rate);
  }
  auto ratio = [&](const char* what, const std::optional<double>& limit, std::optional<double> s,
                   std::optional<double> c) -> bool {
    if (s) v.measurements[std::string(what) + "_p95_stable"] = *s;
    if (c) v.measurements[std::string(what) + "_p95_canary"] = *c;
    if (!limit) return true;
    if (!s || !c || !(*s > 0)) {
      v.outcome = Outcome::kInconclusive;
      v.reason = "MetricsMissing";
      v.message = std::string("performance gate inconclusive: no ") + what + " p95 for " +
                  (!c ? "the canary" : "stable");
      return false;
    }
    const double r = *c / *s;
    v.measurements[std::string(what) + "_p95_ratio"] = r;
    if (r > *limit) {
      failures += (failures.empty() ? "" : ", ") + std::string(what) + " p95 " + num(*c) + "s vs stable " +
                  num(*s) + "s (ratio " + num(r) + " > " + num(*limit) + ")";
    }
    return true;
  };
  if (!ratio("ttft", spec.max_ttft_p95_ratio, s_ttft, c_ttft)) return v;
  if (!ratio("tpot", spec.max_tpot_p95_ratio, s_tpot, c_tpot)) return v;
  if (!failures.empty()) {
    v.outcome = Outcome::kFailed;
    v.reason = "PerformanceThresholdFailed";
    v.message = "performance gate failed: " + failures;
    return v;
  }
  v.outcome = Outcome::kPassed;
  v.reason = "PerformancePassed";
  v.message = "performance gate passed over " + num(c_req) + " canary and " + num(s_req) + " stable requests";
  return v;
}

}  // namespace

GateVerdict evaluate_performance(const api::PerformanceGateSpec& spec, const TrackMetrics& stable,
                                 const TrackMetrics& canary, double min_requests) {
  if (!stable.complete || !canary.complete) {
    GateVerdict v = verdict(Outcome::kInconclusive, "MetricsMissing",
                            std::string("performance gate inconclusive: the ") +
                                (!canary.complete ? "canary" : "stable") +
                                " pods export no latency histograms and request counter the gate can read "
                                "(the engine's series, docs/engine-adapters.md)");
    return v;
  }
  return compare(spec, quantile(0.95, stable.ttft), quantile(0.95, canary.ttft), quantile(0.95, stable.tpot),
                 quantile(0.95, canary.tpot), stable.requests, canary.requests, canary.errors, min_requests);
}

namespace {

// A PromQL regular expression matching exactly `value` (inside a double-quoted string).
std::string promql_regex_literal(const std::string& value) {
  std::string out;
  for (char ch : value) {
    if (std::string_view(".+*?^$()[]{}|\\").find(ch) != std::string_view::npos) out += "\\\\";
    if (ch == '"') out += '\\';
    out += ch;
  }
  return out;
}

std::string promql_selector(const std::string& track_selector, const api::SeriesSelector& s) {
  std::string sel = track_selector;
  for (const auto& [key, values] : s.labels) {
    std::string alternatives;
    for (const auto& v : values) alternatives += (alternatives.empty() ? "" : "|") + promql_regex_literal(v);
    sel += "," + key + "=~\"" + alternatives + "\"";
  }
  return "{" + sel + "}";
}

}  // namespace

PromQueries prometheus_queries(const std::string& ns, const std::string& model, api::Track track,
                               int64_t window_seconds, const api::EngineMetrics& metrics) {
  std::string sel = "model=\"" + model + "\",track=\"" + std::string(api::to_string(track)) + "\"";
  if (!ns.empty()) sel = "namespace=\"" + ns + "\"," + sel;
  const std::string w = "[" + std::to_string(std::max<int64_t>(window_seconds, 1)) + "s]";
  auto any_of = [](const std::vector<api::SeriesSelector>& spellings, auto one) {
    std::string q;
    for (const auto& s : spellings) q += (q.empty() ? "" : " or ") + one(s);
    return q;
  };
  auto p95 = [&](const api::SeriesSelector& s) {
    return "histogram_quantile(0.95, sum by (le) (increase(" + s.name + "_bucket" + promql_selector(sel, s) +
           w + ")))";
  };
  auto total = [&](const api::SeriesSelector& s) {
    return "sum(increase(" + s.name + promql_selector(sel, s) + w + "))";
  };
  PromQueries q;
  q.ttft_p95 = any_of(metrics.ttft, p95);
  q.tpot_p95 = any_of(metrics.tpot, p95);
  q.requests = any_of(metrics.requests, total);
  q.errors = any_of(metrics.errors, total);
  q.errors = q.errors.empty() ? "vector(0)" : "(" + q.errors + ") or vector(0)";
  if (!metrics.errors_in_requests && !q.requests.empty())
    q.requests = "(" + q.requests + ") + (" + q.errors + ")";
  return q;
}

std::string prometheus_query_url(const std::string& base, const std::string& query) {
  std::string b = base;
  while (!b.empty() && b.back() == '/') b.pop_back();
  return b + "/api/v1/query?query=" + url_encode(query);
}

Result<std::optional<double>> parse_prometheus_value(const std::string& body) {
  auto j = parse_json(body, "Prometheus answer");
  if (!j.ok() || !j->is_object()) {
    return Error(ErrorCode::kDataLoss, "Prometheus answered something that is not JSON",
                 "MalformedPrometheusAnswer");
  }
  const Json& r = *j;
  if (r.value("status", "") != "success") {
    return Error(ErrorCode::kInvalidArgument,
                 "Prometheus query failed: " + r.value("errorType", std::string("?")) + ": " +
                     r.value("error", std::string("")),
                 "PrometheusQueryFailed");
  }
  auto d = r.find("data");
  if (d == r.end() || !d->is_object()) {
    return Error(ErrorCode::kDataLoss, "Prometheus answer without data", "MalformedPrometheusAnswer");
  }
  const std::string type = d->value("resultType", "");
  const Json& res = d->contains("result") ? (*d)["result"] : Json();
  const Json* pair = nullptr;
  if (type == "scalar") {
    pair = &res;
  } else if (type == "vector") {
    if (!res.is_array())
      return Error(ErrorCode::kDataLoss, "Prometheus vector is not a list", "MalformedPrometheusAnswer");
    if (res.empty()) return std::optional<double>();
    if (res.size() > 1) {
      return Error(ErrorCode::kInvalidArgument,
                   "Prometheus returned " + std::to_string(res.size()) + " series, expected one",
                   "MalformedPrometheusAnswer");
    }
    if (!res[0].is_object() || !res[0].contains("value")) {
      return Error(ErrorCode::kDataLoss, "Prometheus sample without a value", "MalformedPrometheusAnswer");
    }
    pair = &res[0]["value"];
  } else {
    return Error(ErrorCode::kDataLoss, "Prometheus result type \"" + type + "\" is not a vector or scalar",
                 "MalformedPrometheusAnswer");
  }
  if (!pair->is_array() || pair->size() != 2 || !(*pair)[1].is_string()) {
    return Error(ErrorCode::kDataLoss, "Prometheus sample is not [time, \"value\"]",
                 "MalformedPrometheusAnswer");
  }
  const std::string v = (*pair)[1].get<std::string>();
  char* end = nullptr;
  double d_value = std::strtod(v.c_str(), &end);
  if (!end || *end != '\0') {
    return Error(ErrorCode::kDataLoss, "Prometheus value \"" + v + "\" is not a number",
                 "MalformedPrometheusAnswer");
  }
  if (std::isnan(d_value)) return std::optional<double>();
  return std::optional<double>(d_value);
}

GateVerdict evaluate_performance_prometheus(const api::PerformanceGateSpec& spec, const PromTrack& stable,
                                            const PromTrack& canary, double min_requests) {
  if (!stable.requests || !canary.requests) {
    return verdict(Outcome::kInconclusive, "MetricsMissing",
                   std::string("performance gate inconclusive: Prometheus has no request counts for the ") +
                       (!canary.requests ? "canary" : "stable"));
  }
  return compare(spec, stable.ttft_p95, canary.ttft_p95, stable.tpot_p95, canary.tpot_p95, *stable.requests,
                 *canary.requests, canary.errors.value_or(0), min_requests);
}

std::vector<UnmeasurableThreshold> unmeasurable_thresholds(const api::InferenceModelSpec& spec) {
  std::vector<UnmeasurableThreshold> out;
  const api::EngineProfile& engine =
      api::engine_profile(spec.engine.kind, api::image_engine_version(spec.engine.kind, spec.engine.image));
  const auto& m = engine.metrics;
  const auto& p = spec.rollout.performance;
  const std::string base = "spec.rollout.gates.performance.";
  auto add = [&](const std::optional<double>& threshold, const char* field, const char* needs) {
    if (!threshold) return;
    out.push_back({base + field, std::string(engine.name) + " (" + std::string(engine.release) +
                                     ") exports no " + needs + " on /metrics"});
  };
  if (m.requests.empty()) {  // without a request count there is no evidence of traffic for any of them
    add(p.max_ttft_p95_ratio, "maxTTFTP95Ratio", "request counter (and no time-to-first-token histogram)");
    add(p.max_tpot_p95_ratio, "maxTPOTP95Ratio", "request counter (and no inter-token latency histogram)");
    add(p.max_error_rate, "maxErrorRate", "request counter");
    return out;
  }
  if (m.ttft.empty()) add(p.max_ttft_p95_ratio, "maxTTFTP95Ratio", "time-to-first-token histogram");
  if (m.tpot.empty()) add(p.max_tpot_p95_ratio, "maxTPOTP95Ratio", "inter-token latency histogram");
  if (m.errors.empty()) add(p.max_error_rate, "maxErrorRate", "failed-request counter");
  return out;
}

Decision decide(const StageInputs& in) {
  Decision d;
  auto roll_back = [&](std::string gate, std::string reason, std::string message) {
    d.kind = Decision::Kind::kRollBack;
    d.gate = std::move(gate);
    d.reason = std::move(reason);
    d.message = std::move(message);
    return d;
  };
  if (in.abort_requested) {
    d = roll_back("manual", "Aborted", "aborted by the serving.infergate.dev/abort annotation");
    d.aborted = true;
    return d;
  }
  if (in.verification.blocks())
    return roll_back(std::string(kVerificationGate), in.verification.reason, in.verification.message);
  if (in.pod_failure) return roll_back("readiness", in.pod_failure->reason, in.pod_failure->message);
  if (in.deadline_passed && !in.canary_ready)
    return roll_back(
        "readiness", "ProgressDeadlineExceeded",
        "the canary was not verified and ready within spec.rollout.canary.progressDeadlineSeconds");
  for (const auto& g : in.analysis) {
    if (g.verdict.blocks()) return roll_back(g.gate, g.verdict.reason, g.verdict.message);
  }
  if (in.promote_requested && in.canary_ready) {
    d.kind = Decision::Kind::kPromote;
    d.reason = "PromotedManually";
    d.message = "promoted by the serving.infergate.dev/promote annotation (remaining gates skipped)";
    return d;
  }
  if (in.paused) return d;
  const bool gates_clear = std::all_of(in.analysis.begin(), in.analysis.end(),
                                       [](const NamedVerdict& g) { return g.verdict.clears(); });
  if (in.canary_ready && in.verification.clears() && gates_clear && in.window_elapsed) {
    d.kind = Decision::Kind::kPromote;
    d.reason = "GatesPassed";
    d.message = "every gate passed";
  }
  return d;
}

}  // namespace infergate::op::rollout
