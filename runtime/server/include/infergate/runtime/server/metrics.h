// The runtime's Prometheus metrics (prometheus-cpp), with the names docs/metrics.md lists: latency
// histograms, token and request counters, running/waiting and KV-block gauges, weight bytes,
// preemptions, errors by reason and a model-info gauge. Rendered as Prometheus text for GET /metrics.
// Thread-safe (prometheus-cpp's metrics are atomic; the error-reason family is guarded).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace infergate::runtime::server {

// The latency buckets (seconds) every latency histogram uses.
const std::vector<double>& latency_buckets();

struct ModelInfo {
  std::string model;
  std::string weight_format;
  std::string kv_cache_dtype;
  std::string release_digest;  // sha256 of SHA256SUMS when verified, else ""
  bool verified = false;
};

class Metrics {
 public:
  Metrics();

  void set_model_info(const ModelInfo& info);
  void observe_ttft(double seconds) { ttft_->Observe(seconds); }
  void observe_tpot(double seconds) { tpot_->Observe(seconds); }
  void observe_e2e(double seconds) { e2e_->Observe(seconds); }
  void observe_queue_time(double seconds) { queue_->Observe(seconds); }
  // Every finished request, successful or not.
  void request_finished() { requests_->Increment(); }
  // An error by reason (also counted in requests_total by the caller's request_finished()).
  void request_error(std::string_view reason);
  void add_prompt_tokens(double n) { prompt_tokens_->Increment(n); }
  void add_generation_tokens(double n) { generation_tokens_->Increment(n); }
  void set_running(double n) { running_->Set(n); }
  void set_waiting(double n) { waiting_->Set(n); }
  void set_kv_blocks(double used, double total) {
    blocks_used_->Set(used);
    blocks_capacity_->Set(total);
  }
  void set_weight_bytes(double n) { weight_bytes_->Set(n); }
  void add_preemptions(double n) { preemptions_->Increment(n); }

  // The Prometheus text exposition (version 0.0.4).
  std::string render() const;

  // Read-backs for tests and the scheduler's own accounting.
  double requests_total() const { return requests_->Value(); }
  double preemptions_total() const { return preemptions_->Value(); }
  double errors_total(std::string_view reason) const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* tpot_;
  prometheus::Histogram* e2e_;
  prometheus::Histogram* queue_;
  prometheus::Counter* requests_;
  prometheus::Family<prometheus::Counter>* errors_;
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* generation_tokens_;
  prometheus::Gauge* running_;
  prometheus::Gauge* waiting_;
  prometheus::Gauge* blocks_used_;
  prometheus::Gauge* blocks_capacity_;
  prometheus::Gauge* weight_bytes_;
  prometheus::Counter* preemptions_;
  prometheus::Family<prometheus::Gauge>* model_info_;
  mutable std::mutex mu_;
};

}  // namespace infergate::runtime::server
