// Prometheus metrics of the runtime server.
#include "infergate/runtime/server/metrics.h"

#include <prometheus/text_serializer.h>

namespace infergate::runtime::server {

const std::vector<double>& latency_buckets() {
  static const std::vector<double> b = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
                                        1,     1.5,  2,     3,    5,     7.5, 10,   20,  30,  60};
  return b;
}

namespace {

prometheus::Histogram* histogram(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return &prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add({}, latency_buckets());
}
prometheus::Counter* counter(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}
prometheus::Gauge* gauge(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  ttft_ = histogram(r, "infergate_time_to_first_token_seconds",
                    "Time from a request's arrival to its first generated token.");
  tpot_ = histogram(r, "infergate_time_per_output_token_seconds",
                    "Time between consecutive generated tokens of a request (decode steps).");
  e2e_ = histogram(r, "infergate_e2e_request_latency_seconds",
                   "Time from a request's arrival to its last token.");
  queue_ = histogram(r, "infergate_request_queue_time_seconds",
                     "Time a request waited before the scheduler first admitted it.");
  requests_ = counter(r, "infergate_requests_total", "Finished requests, successful or not.");
  errors_ = &prometheus::BuildCounter()
                 .Name("infergate_request_errors_total")
                 .Help("Requests that ended in an error, by reason.")
                 .Register(r);
  prompt_tokens_ = counter(r, "infergate_prompt_tokens_total", "Prompt tokens of admitted requests.");
  generation_tokens_ = counter(r, "infergate_generation_tokens_total", "Generated tokens.");
  running_ = gauge(r, "infergate_num_requests_running", "Requests in the running batch.");
  waiting_ =
      gauge(r, "infergate_num_requests_waiting", "Requests waiting for admission (queued or preempted).");
  blocks_used_ = gauge(r, "infergate_kv_cache_blocks_used", "KV-cache blocks allocated to sequences.");
  blocks_capacity_ =
      gauge(r, "infergate_kv_cache_blocks_capacity", "KV-cache blocks the memory budget holds.");
  weight_bytes_ = gauge(r, "infergate_weight_bytes", "Bytes of the loaded weights, as held for serving.");
  preemptions_ = counter(r, "infergate_preemptions_total",
                         "Sequences preempted (KV blocks freed, recomputed later) for lack of KV blocks.");
  model_info_ = &prometheus::BuildGauge()
                     .Name("infergate_model_info")
                     .Help("The served model and its serving configuration (value 1).")
                     .Register(r);
}

void Metrics::set_model_info(const ModelInfo& info) {
  std::lock_guard<std::mutex> lock(mu_);
  model_info_
      ->Add({{"model", info.model},
             {"weight_format", info.weight_format},
             {"kv_cache_dtype", info.kv_cache_dtype},
             {"release_digest", info.release_digest},
             {"verified", info.verified ? "true" : "false"}})
      .Set(1);
}

void Metrics::request_error(std::string_view reason) {
  std::lock_guard<std::mutex> lock(mu_);
  errors_->Add({{"reason", std::string(reason)}}).Increment();
}

double Metrics::errors_total(std::string_view reason) const {
  std::lock_guard<std::mutex> lock(mu_);
  return errors_->Has({{"reason", std::string(reason)}})
             ? errors_->Add({{"reason", std::string(reason)}}).Value()
             : 0.0;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace infergate::runtime::server
