// Gate verdicts (quality from the eval result, performance from metrics or Prometheus) and decisions.
#include "infergate/operator/rollout/gates.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <cmath>

namespace infergate::op::rollout {
namespace {

using infergate::testing::refused;

const WallTime kNow = WallTime{} + std::chrono::hours(24 * 365 * 56);

api::QualityGateSpec quality_spec() {
  api::QualityGateSpec q;
  q.suite = "default";
  q.min_top1_agreement = 0.9;
  q.max_mean_kl = 0.01;
  return q;
}

std::string eval_json(double top1, double kl, bool passed = true, const std::string& suite = "default") {
  return Json{{"suite", suite},
              {"passed", passed},
              {"metrics",
               {{"top1_agreement", top1},
                {"mean_kl", kl},
                {"perplexity_change", 0.01},
                {"retrieval_accuracy", 1.0},
                {"format_following", 1.0}}},
              {"noise_floor", {{"top1_agreement", 1.0}, {"mean_kl", 0.0}}},
              {"failed", Json::array()}}
      .dump();
}

TEST(QualityGate, PassesWhenEveryThresholdHoldsAndShowsTheNumbers) {
  GateVerdict v = evaluate_quality_result(quality_spec(), 0, eval_json(0.97, 0.004));
  EXPECT_EQ(v.outcome, Outcome::kPassed) << v.message;
  EXPECT_DOUBLE_EQ(v.measurements.at("top1_agreement"), 0.97);
  EXPECT_DOUBLE_EQ(v.thresholds.at("mean_kl"), 0.01);
}

TEST(QualityGate, RechecksThresholdsItselfEvenWhenEvalExitedZero) {
  GateVerdict v = evaluate_quality_result(quality_spec(), 0, eval_json(0.97, 0.05));
  EXPECT_EQ(v.outcome, Outcome::kFailed);
  EXPECT_EQ(v.reason, "QualityThresholdFailed");
  EXPECT_NE(v.message.find("mean_kl 0.05 > 0.01"), std::string::npos) << v.message;
}

TEST(QualityGate, EvalsOwnFailureIsAFailureToo) {
  EXPECT_EQ(evaluate_quality_result(quality_spec(), 1, eval_json(0.97, 0.004, false)).outcome,
            Outcome::kFailed);
}

TEST(QualityGate, AnythingUnreadableIsInconclusiveNeverPassed) {
  auto spec = quality_spec();
  EXPECT_EQ(evaluate_quality_result(spec, 0, "").outcome, Outcome::kInconclusive);
  EXPECT_EQ(evaluate_quality_result(spec, 0, "{not json").outcome, Outcome::kInconclusive);
  EXPECT_EQ(evaluate_quality_result(spec, 0, R"({"passed":true})").outcome, Outcome::kInconclusive);
  EXPECT_EQ(evaluate_quality_result(spec, 3, eval_json(1, 0)).outcome, Outcome::kInconclusive);
  EXPECT_EQ(evaluate_quality_result(spec, 2, eval_json(1, 0)).outcome, Outcome::kInconclusive);
  EXPECT_EQ(evaluate_quality_result(spec, 137, eval_json(1, 0)).outcome, Outcome::kInconclusive);
  EXPECT_EQ(evaluate_quality_result(spec, 0, eval_json(1, 0, true, "other")).outcome, Outcome::kInconclusive);
  // A metric a threshold needs is missing.
  Json j = Json::parse(eval_json(1, 0));
  j["metrics"].erase("mean_kl");
  GateVerdict v = evaluate_quality_result(spec, 0, j.dump());
  EXPECT_EQ(v.outcome, Outcome::kInconclusive);
  EXPECT_EQ(v.reason, "EvalMetricMissing");
}

TEST(QualityGate, AJobThatCannotRunFailsTheGateAtOnce) {
  platform::JobState job;
  job.exists = true;
  job.reason = "ImagePullBackOff";
  GateVerdict v = evaluate_quality_job(quality_spec(), job, kNow);
  EXPECT_EQ(v.outcome, Outcome::kInconclusive);
  EXPECT_TRUE(v.blocks());
  job.reason = "";
  EXPECT_EQ(evaluate_quality_job(quality_spec(), job, kNow).outcome, Outcome::kPending);
  job.phase = platform::JobState::Phase::kFailed;
  job.reason = "DeadlineExceeded";
  v = evaluate_quality_job(quality_spec(), job, kNow);
  EXPECT_EQ(v.outcome, Outcome::kInconclusive);
  EXPECT_NE(v.message.find("DeadlineExceeded"), std::string::npos);
}

TEST(QualityGate, AJobSeenFailedBeforeItsPodWaitsForThePodsResult) {
  // The Job's Failed condition and its pod's termination come through separate watches: the gate can
  // see the first without the second, though the result (the termination message) exists.
  platform::JobState job;
  job.exists = true;
  job.phase = platform::JobState::Phase::kFailed;
  job.reason = "BackoffLimitExceeded";
  job.failed_at = kNow - std::chrono::seconds(1);
  GateVerdict v = evaluate_quality_job(quality_spec(), job, kNow);
  EXPECT_EQ(v.outcome, Outcome::kPending);
  EXPECT_EQ(v.reason, "EvalResultPending");
  // The pod's end arrives: judged by its result, not by the Job's failure.
  job.terminated = true;
  job.exit_code = 1;
  job.termination_message = eval_json(0.5, 0.001, false);
  v = evaluate_quality_job(quality_spec(), job, kNow);
  EXPECT_EQ(v.outcome, Outcome::kFailed);
  EXPECT_EQ(v.reason, "QualityThresholdFailed");
  // It never arrives: after the grace the failure is the verdict.
  job.terminated = false;
  job.termination_message.clear();
  job.failed_at = kNow - kEvalResultGrace;
  v = evaluate_quality_job(quality_spec(), job, kNow);
  EXPECT_EQ(v.outcome, Outcome::kInconclusive);
  EXPECT_EQ(v.reason, "EvalJobFailed");
  // No time from the platform, or a deadline (its pod is deleted): no wait.
  job.failed_at.reset();
  EXPECT_EQ(evaluate_quality_job(quality_spec(), job, kNow).reason, "EvalJobFailed");
  job.failed_at = kNow;
  job.reason = "DeadlineExceeded";
  EXPECT_EQ(evaluate_quality_job(quality_spec(), job, kNow).reason, "EvalJobFailed");
}

TEST(QualityGate, AFinishedJobIsJudgedByItsResult) {
  platform::JobState job;
  job.exists = true;
  job.phase = platform::JobState::Phase::kSucceeded;
  job.terminated = true;
  job.termination_message = eval_json(0.95, 0.001);
  EXPECT_EQ(evaluate_quality_job(quality_spec(), job, kNow).outcome, Outcome::kPassed);
  job.phase = platform::JobState::Phase::kFailed;
  job.exit_code = 1;
  job.termination_message = eval_json(0.5, 0.001, false);
  EXPECT_EQ(evaluate_quality_job(quality_spec(), job, kNow).outcome, Outcome::kFailed);
}

TEST(QualityGate, EvalCommandCarriesTheThresholdsAndTheContractFlags) {
  auto c = eval_command(quality_spec(), "http://m-stable", "http://m-canary", "rt:1", "/dev/termination-log");
  const std::vector<std::string> want = {"eval",
                                         "--baseline",
                                         "http://m-stable",
                                         "--candidate",
                                         "http://m-canary",
                                         "--suite",
                                         "default",
                                         "--json",
                                         "--termination-message-path",
                                         "/dev/termination-log",
                                         "--min-top1-agreement",
                                         "0.9",
                                         "--max-mean-kl",
                                         "0.01"};
  EXPECT_EQ(c.args, want);
  EXPECT_EQ(c.command, std::vector<std::string>{"infergate-runtime"});
  EXPECT_FALSE(quality_configured(api::QualityGateSpec{}));
}

Histogram latency(double fast, double slow) {
  // `fast` observations at 0.05 s and `slow` at 0.4 s.
  return Histogram{{{0.05, fast}, {0.1, fast}, {0.5, fast + slow}, {INFINITY, fast + slow}},
                   0.05 * fast + 0.4 * slow,
                   fast + slow};
}

TrackMetrics track(double fast, double slow, double requests, double errors) {
  TrackMetrics t;
  t.ttft = latency(fast, slow);
  t.tpot = latency(fast, slow);
  t.requests = requests;
  t.errors = errors;
  t.complete = true;
  return t;
}

api::PerformanceGateSpec perf_spec() {
  api::PerformanceGateSpec p;
  p.max_ttft_p95_ratio = 1.5;
  p.max_tpot_p95_ratio = 1.5;
  p.max_error_rate = 0.05;
  return p;
}

TEST(PerformanceGate, PassesWhenTheCanaryIsAsFast) {
  GateVerdict v = evaluate_performance(perf_spec(), track(100, 0, 100, 0), track(100, 0, 100, 1));
  EXPECT_EQ(v.outcome, Outcome::kPassed) << v.message;
  EXPECT_DOUBLE_EQ(v.measurements.at("ttft_p95_ratio"), 1.0);
  EXPECT_DOUBLE_EQ(v.measurements.at("error_rate"), 0.01);
}

TEST(PerformanceGate, FailsASlowCanaryWithTheRatioInTheMessage) {
  GateVerdict v = evaluate_performance(perf_spec(), track(100, 0, 100, 0), track(0, 100, 100, 0));
  EXPECT_EQ(v.outcome, Outcome::kFailed);
  EXPECT_EQ(v.reason, "PerformanceThresholdFailed");
  EXPECT_GT(v.measurements.at("ttft_p95_ratio"), 1.5);
  EXPECT_NE(v.message.find("ttft p95"), std::string::npos) << v.message;
}

TEST(PerformanceGate, FailsACanaryThatErrs) {
  GateVerdict v = evaluate_performance(perf_spec(), track(100, 0, 100, 0), track(100, 0, 100, 20));
  EXPECT_EQ(v.outcome, Outcome::kFailed);
  EXPECT_NE(v.message.find("error rate 0.2 > 0.05"), std::string::npos) << v.message;
}

TEST(PerformanceGate, NoTrafficOrNoMetricsIsInconclusive) {
  EXPECT_EQ(evaluate_performance(perf_spec(), track(100, 0, 100, 0), track(0, 0, 0, 0)).outcome,
            Outcome::kInconclusive);
  TrackMetrics missing;
  EXPECT_EQ(evaluate_performance(perf_spec(), track(100, 0, 100, 0), missing).reason, "MetricsMissing");
}

TEST(PerformanceGate, ScrapedTextBecomesTrackMetrics) {
  auto s = parse_prometheus_text(
      "infergate_time_to_first_token_seconds_bucket{le=\"0.1\"} 3\n"
      "infergate_time_to_first_token_seconds_bucket{le=\"+Inf\"} 4\n"
      "infergate_time_to_first_token_seconds_count 4\ninfergate_time_to_first_token_seconds_sum 1\n"
      "infergate_time_per_output_token_seconds_bucket{le=\"+Inf\"} 40\n"
      "infergate_requests_total 4\n");
  ASSERT_TRUE(s.ok());
  TrackMetrics t = track_metrics(*s);
  EXPECT_TRUE(t.complete);
  EXPECT_EQ(t.requests, 4);
  EXPECT_EQ(t.errors, 0);
  EXPECT_FALSE(track_metrics({}).complete);
}

TEST(PrometheusPath, QueriesSelectTheTrackAndTheWindow) {
  PromQueries q = prometheus_queries("models", "glm", api::Track::kCanary, 120);
  EXPECT_EQ(q.ttft_p95,
            "histogram_quantile(0.95, sum by (le) (increase(infergate_time_to_first_token_seconds_bucket{"
            "namespace=\"models\",model=\"glm\",track=\"canary\"}[120s])))");
  EXPECT_EQ(prometheus_query_url("http://p:9090/", "up{a=\"b\"}"),
            "http://p:9090/api/v1/query?query=up%7Ba%3D%22b%22%7D");
}

TEST(PrometheusPath, ParsesVectorAndScalarAnswersAndRefusesErrors) {
  auto v = parse_prometheus_value(
      R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1.5,"0.25"]}]}})");
  ASSERT_TRUE(v.ok());
  EXPECT_DOUBLE_EQ(**v, 0.25);
  auto empty = parse_prometheus_value(R"({"status":"success","data":{"resultType":"vector","result":[]}})");
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->has_value());
  auto nan =
      parse_prometheus_value(R"({"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}})");
  ASSERT_TRUE(nan.ok());
  EXPECT_FALSE(nan->has_value());
  EXPECT_FALSE(
      parse_prometheus_value(R"({"status":"error","errorType":"bad_data","error":"parse error"})").ok());
  EXPECT_TRUE(refused(parse_prometheus_value("<html>"), "MalformedPrometheusAnswer", {"not JSON"}));
}

TEST(PrometheusPath, VerdictFromPrometheusNumbers) {
  PromTrack stable{0.2, 0.02, 100, 0};
  PromTrack canary{0.5, 0.02, 100, 0};
  GateVerdict v = evaluate_performance_prometheus(perf_spec(), stable, canary);
  EXPECT_EQ(v.outcome, Outcome::kFailed);
  EXPECT_DOUBLE_EQ(v.measurements.at("ttft_p95_ratio"), 2.5);
  canary.ttft_p95 = 0.21;
  EXPECT_EQ(evaluate_performance_prometheus(perf_spec(), stable, canary).outcome, Outcome::kPassed);
  canary.requests.reset();
  EXPECT_EQ(evaluate_performance_prometheus(perf_spec(), stable, canary).outcome, Outcome::kInconclusive);
}

GateVerdict passed() {
  GateVerdict v;
  v.outcome = Outcome::kPassed;
  return v;
}

StageInputs all_passed() {
  StageInputs in;
  in.verification = passed();
  in.analysis = {{"quality", passed()}, {"performance", passed()}};
  in.canary_ready = true;
  in.window_elapsed = true;
  return in;
}

TEST(GateAdmission, ThresholdsAreMeasurableWhereTheEngineExportsTheSeries) {
  api::InferenceModelSpec spec;
  spec.rollout.performance.max_ttft_p95_ratio = 1.5;
  spec.rollout.performance.max_error_rate = 0.01;
  EXPECT_TRUE(unmeasurable_thresholds(spec).empty());
  for (auto kind : {api::EngineKind::kVllm, api::EngineKind::kSglang}) {
    spec.engine.kind = kind;
    EXPECT_TRUE(unmeasurable_thresholds(spec).empty()) << api::to_string(kind);
  }
  // llama-server's /metrics has counters and gauges of tokens, no latency histograms, no request count.
  spec.engine.kind = api::EngineKind::kLlamacpp;
  spec.engine.image = "ghcr.io/ggml-org/llama.cpp:server-b6500";
  auto u = unmeasurable_thresholds(spec);
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0].field, "spec.rollout.gates.performance.maxTTFTP95Ratio");
  EXPECT_NE(u[0].why.find("llama.cpp"), std::string::npos) << u[0].why;
  EXPECT_NE(u[0].why.find("time-to-first-token histogram"), std::string::npos) << u[0].why;
  EXPECT_EQ(u[1].field, "spec.rollout.gates.performance.maxErrorRate");
  spec.rollout.performance = {};
  spec.rollout.quality.max_mean_kl = 0.01;  // not judged here: the eval Job talks to the OpenAI API
  EXPECT_TRUE(unmeasurable_thresholds(spec).empty());
}

// Fixtures written from each engine's exposition (names and labels from their sources, see
// operator/api/src/engine_profile.cc): a vLLM v0.11 server, which exports the inter-token latency
// histogram under its new and its deprecated name, the HTTP middleware's request counter beside it.
constexpr const char* kVllm011Metrics =
    R"(# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="glm"} 6.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="glm"} 9.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="glm"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="glm"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="glm"} 1.9
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="glm"} 300.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.05",model_name="glm"} 400.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="glm"} 400.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="glm"} 400.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="glm"} 4.1
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.01",model_name="glm"} 1.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="glm"} 400.0
vllm:time_per_output_token_seconds_count{engine="0",model_name="glm"} 400.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="glm"} 40.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="glm"} 7.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="glm"} 2.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="glm"} 1.0
# TYPE http_requests_total counter
http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 10.0
http_requests_total{handler="/v1/completions",method="POST",status="5xx"} 2.0
http_requests_total{handler="/metrics",method="GET",status="5xx"} 30.0
)";

TEST(EngineMetrics, VllmPrefersInterTokenLatencyAndCountsFailuresBesideSuccesses) {
  auto s = parse_prometheus_text(kVllm011Metrics);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  TrackMetrics t = track_metrics(*s, api::engine_profile(api::EngineKind::kVllm).metrics);
  EXPECT_TRUE(t.complete);
  EXPECT_DOUBLE_EQ(t.tpot.sum, 4.1);  // inter_token_latency, not the deprecated series
  EXPECT_DOUBLE_EQ(t.ttft.count, 10);
  EXPECT_DOUBLE_EQ(t.errors, 2);         // 5xx on the OpenAI routes only, not on /metrics
  EXPECT_DOUBLE_EQ(t.requests, 10 + 2);  // finished requests plus the failed ones
  // A vLLM before v0.11 has only the older name.
  std::string v010 = kVllm011Metrics;
  auto cut = v010.find("# TYPE vllm:inter_token_latency_seconds");
  v010.erase(cut, v010.find("# TYPE vllm:time_per_output_token_seconds") - cut);
  auto old = parse_prometheus_text(v010);
  ASSERT_TRUE(old.ok());
  TrackMetrics o = track_metrics(*old, api::engine_profile(api::EngineKind::kVllm).metrics);
  EXPECT_TRUE(o.complete);
  EXPECT_DOUBLE_EQ(o.tpot.sum, 40.0);
  // The bundled runtime's names read nothing from it.
  EXPECT_FALSE(track_metrics(*s).complete);
}

TEST(EngineMetrics, SglangAndLlamacppAsTheirServersExportThem) {
  auto sg = parse_prometheus_text(R"(# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="glm"} 4.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="glm"} 5.0
sglang:time_to_first_token_seconds_sum{model_name="glm"} 0.9
sglang:time_to_first_token_seconds_count{model_name="glm"} 5.0
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{le="0.02",model_name="glm"} 90.0
sglang:inter_token_latency_seconds_bucket{le="+Inf",model_name="glm"} 100.0
sglang:inter_token_latency_seconds_sum{model_name="glm"} 1.5
sglang:inter_token_latency_seconds_count{model_name="glm"} 100.0
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="glm"} 5.0
# TYPE sglang:num_aborted_requests_total counter
sglang:num_aborted_requests_total{model_name="glm"} 1.0
)");
  ASSERT_TRUE(sg.ok());
  TrackMetrics t = track_metrics(*sg, api::engine_profile(api::EngineKind::kSglang).metrics);
  EXPECT_TRUE(t.complete);
  EXPECT_DOUBLE_EQ(t.requests, 6);
  EXPECT_DOUBLE_EQ(t.errors, 1);
  auto ll = parse_prometheus_text(R"(# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 120
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 400
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
)");
  ASSERT_TRUE(ll.ok());
  EXPECT_FALSE(track_metrics(*ll, api::engine_profile(api::EngineKind::kLlamacpp).metrics).complete);
}

// SGLang creates its labelled series at a pod's first request: the window's opening scrape of an idle
// pod has none of them, and the window counts them from zero.
TEST(EngineMetrics, ASeriesMissingAtTheStartOfTheWindowCountsFromZero) {
  const auto& sglang = api::engine_profile(api::EngineKind::kSglang).metrics;
  auto idle = parse_prometheus_text("sglang:num_running_reqs{model_name=\"glm\"} 0\n");
  auto busy = parse_prometheus_text(
      "sglang:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"glm\"} 3\n"
      "sglang:inter_token_latency_seconds_bucket{le=\"+Inf\",model_name=\"glm\"} 30\n"
      "sglang:num_requests_total{model_name=\"glm\"} 3\n");
  ASSERT_TRUE(idle.ok() && busy.ok());
  TrackMetrics before = track_metrics(*idle, sglang);
  EXPECT_FALSE(before.complete);
  TrackMetrics d = delta(before, track_metrics(*busy, sglang));
  EXPECT_TRUE(d.complete);
  EXPECT_DOUBLE_EQ(d.requests, 3);
  EXPECT_FALSE(delta(track_metrics(*busy, sglang), before).complete) << "the closing scrape decides";
}

TEST(PrometheusPath, EngineQueriesTryEverySpellingAndSelectTheFailedRequests) {
  PromQueries q = prometheus_queries("models", "glm", api::Track::kStable, 60,
                                     api::engine_profile(api::EngineKind::kVllm).metrics);
  EXPECT_NE(q.tpot_p95.find("vllm:inter_token_latency_seconds_bucket{"), std::string::npos) << q.tpot_p95;
  EXPECT_NE(q.tpot_p95.find(" or histogram_quantile(0.95, sum by (le) (increase(vllm:time_per_output_token"),
            std::string::npos)
      << q.tpot_p95;
  EXPECT_NE(q.errors.find(R"(http_requests_total{namespace="models",model="glm",track="stable",)"
                          R"(handler=~"/v1/completions|/v1/chat/completions",status=~"5xx"}[60s])"),
            std::string::npos)
      << q.errors;
  // vLLM counts a failed request apart from the finished ones: the denominator adds them.
  EXPECT_EQ(q.requests.rfind("(sum(increase(vllm:request_success_total{", 0), 0u) << q.requests;
  EXPECT_NE(q.requests.find(") + ("), std::string::npos) << q.requests;
}

TEST(Decide, PromotesOnlyWhenEveryGatePassedAndTheWindowIsOver) {
  EXPECT_EQ(decide(all_passed()).kind, Decision::Kind::kPromote);
  StageInputs in = all_passed();
  in.window_elapsed = false;
  EXPECT_EQ(decide(in).kind, Decision::Kind::kWait);
  in = all_passed();
  in.analysis[0].verdict.outcome = Outcome::kPending;
  EXPECT_EQ(decide(in).kind, Decision::Kind::kWait);
  in = all_passed();
  in.analysis[1].verdict.outcome = Outcome::kSkipped;
  EXPECT_EQ(decide(in).kind, Decision::Kind::kPromote);
}

TEST(Decide, InconclusiveRollsBackNeverPromotes) {
  StageInputs in = all_passed();
  in.analysis[0].verdict.outcome = Outcome::kInconclusive;
  in.analysis[0].verdict.reason = "EvalJobCannotRun";
  Decision d = decide(in);
  EXPECT_EQ(d.kind, Decision::Kind::kRollBack);
  EXPECT_EQ(d.gate, "quality");
  EXPECT_EQ(d.reason, "EvalJobCannotRun");
}

TEST(Decide, VerificationFailureRollsBackAtOnceEvenWhilePaused) {
  StageInputs in;
  in.paused = true;
  in.verification.outcome = Outcome::kFailed;
  in.verification.reason = "DigestMismatch";
  Decision d = decide(in);
  EXPECT_EQ(d.kind, Decision::Kind::kRollBack);
  EXPECT_EQ(d.gate, "verification");
  EXPECT_EQ(d.reason, "DigestMismatch");
}

TEST(Decide, PauseHoldsAPassingStage) {
  StageInputs in = all_passed();
  in.paused = true;
  EXPECT_EQ(decide(in).kind, Decision::Kind::kWait);
}

TEST(Decide, ManualPromoteSkipsGatesButNeedsAReadyCanary) {
  StageInputs in;
  in.promote_requested = true;
  in.verification = passed();
  EXPECT_EQ(decide(in).kind, Decision::Kind::kWait);
  in.canary_ready = true;
  EXPECT_EQ(decide(in).kind, Decision::Kind::kPromote);
  // A failed gate still wins over a promote: nothing failing is promoted by accident.
  in.analysis.push_back({"performance", GateVerdict{}});
  in.analysis.back().verdict.outcome = Outcome::kFailed;
  EXPECT_EQ(decide(in).kind, Decision::Kind::kRollBack);
}

TEST(Decide, AbortWinsOverEverything) {
  StageInputs in = all_passed();
  in.abort_requested = true;
  Decision d = decide(in);
  EXPECT_EQ(d.kind, Decision::Kind::kRollBack);
  EXPECT_TRUE(d.aborted);
}

TEST(Decide, AnEnginesOwnGateTakesPartLikeTheBuiltInOnes) {
  StageInputs in = all_passed();
  in.analysis.push_back({"engine-kv-usage", GateVerdict{}});  // Pending
  EXPECT_EQ(decide(in).kind, Decision::Kind::kWait);
  in.analysis.back().verdict.outcome = Outcome::kFailed;
  in.analysis.back().verdict.reason = "KvUsageTooHigh";
  Decision d = decide(in);
  EXPECT_EQ(d.kind, Decision::Kind::kRollBack);
  EXPECT_EQ(d.gate, "engine-kv-usage");
  EXPECT_EQ(d.reason, "KvUsageTooHigh");
}

TEST(Decide, DeadlineAndFailingRuntimeRollBack) {
  StageInputs in;
  in.deadline_passed = true;
  EXPECT_EQ(decide(in).reason, "ProgressDeadlineExceeded");
  in = StageInputs{};
  in.pod_failure = PodFailure{"CanaryNotServing", "pod glm-canary-0: CrashLoopBackOff: unsupported kv dtype"};
  EXPECT_EQ(decide(in).reason, "CanaryNotServing");
  EXPECT_EQ(decide(in).gate, "readiness");
}

}  // namespace
}  // namespace infergate::op::rollout
