// The operator's Prometheus metrics (prefix infergate_operator_): reconciles by result, their
// durations and errors; the work queue's depth, adds, latency, work time and retries; API requests by
// verb and code; informer re-lists, watch restarts and expirations; whether this replica leads.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "infergate/operator/cache/informer.h"
#include "infergate/operator/client/rest_client.h"
#include "infergate/operator/manager/controller.h"
#include "infergate/operator/workqueue/work_queue.h"

namespace infergate::op::manager {

class OperatorMetrics final : public client::RequestObserver, public ControllerObserver {
 public:
  OperatorMetrics();
  ~OperatorMetrics() override;

  // A QueueObserver for the work queue of one controller.
  workqueue::QueueObserver& queue_observer(const std::string& controller) override;
  void reconcile_done(const std::string& controller, const std::string& result,
                      std::chrono::nanoseconds took) override;
  void set_leader(bool leading);
  // Informers whose stats are exported at every scrape.
  void watch_informers(std::function<std::vector<const cache::Informer*>()> informers);

  void on_request(std::string_view verb, int http_status, std::chrono::nanoseconds latency) override;

  // The Prometheus text exposition of everything above.
  std::string scrape() const;
  prometheus::Registry& registry() { return *registry_; }

 private:
  class QueueMetrics;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& reconciles_;
  prometheus::Family<prometheus::Counter>& reconcile_errors_;
  prometheus::Family<prometheus::Histogram>& reconcile_seconds_;
  prometheus::Family<prometheus::Gauge>& queue_depth_;
  prometheus::Family<prometheus::Counter>& queue_adds_;
  prometheus::Family<prometheus::Histogram>& queue_wait_;
  prometheus::Family<prometheus::Histogram>& queue_work_;
  prometheus::Family<prometheus::Counter>& queue_retries_;
  prometheus::Family<prometheus::Counter>& api_requests_;
  prometheus::Family<prometheus::Histogram>& api_seconds_;
  prometheus::Gauge& leader_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<QueueMetrics>> queues_;
  std::function<std::vector<const cache::Informer*>()> informers_;
};

}  // namespace infergate::op::manager
