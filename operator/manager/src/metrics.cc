// Prometheus metrics for the operator.
#include "infergate/operator/manager/metrics.h"

#include <prometheus/text_serializer.h>

namespace infergate::op::manager {
namespace {

const prometheus::Histogram::BucketBoundaries& latency_buckets() {
  static const prometheus::Histogram::BucketBoundaries b{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                         0.25,  0.5,    1,     2.5,  5,     10,   30};
  return b;
}

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

class OperatorMetrics::QueueMetrics final : public workqueue::QueueObserver {
 public:
  QueueMetrics(OperatorMetrics& m, const std::string& name)
      : depth_(m.queue_depth_.Add({{"name", name}})),
        adds_(m.queue_adds_.Add({{"name", name}})),
        wait_(m.queue_wait_.Add({{"name", name}}, latency_buckets())),
        work_(m.queue_work_.Add({{"name", name}}, latency_buckets())),
        retries_(m.queue_retries_.Add({{"name", name}})) {}
  void on_add() override { adds_.Increment(); }
  void on_depth(size_t depth) override { depth_.Set(static_cast<double>(depth)); }
  void on_wait(std::chrono::nanoseconds d) override { wait_.Observe(seconds(d)); }
  void on_work(std::chrono::nanoseconds d) override { work_.Observe(seconds(d)); }
  void on_retry() override { retries_.Increment(); }

 private:
  prometheus::Gauge& depth_;
  prometheus::Counter& adds_;
  prometheus::Histogram& wait_;
  prometheus::Histogram& work_;
  prometheus::Counter& retries_;
};

OperatorMetrics::OperatorMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      reconciles_(prometheus::BuildCounter()
                      .Name("infergate_operator_reconcile_total")
                      .Help("Reconciles by controller and result (success, requeue, error).")
                      .Register(*registry_)),
      reconcile_errors_(prometheus::BuildCounter()
                            .Name("infergate_operator_reconcile_errors_total")
                            .Help("Reconciles that returned an error.")
                            .Register(*registry_)),
      reconcile_seconds_(prometheus::BuildHistogram()
                             .Name("infergate_operator_reconcile_duration_seconds")
                             .Help("How long one reconcile took.")
                             .Register(*registry_)),
      queue_depth_(prometheus::BuildGauge()
                       .Name("infergate_operator_workqueue_depth")
                       .Help("Keys ready in the work queue.")
                       .Register(*registry_)),
      queue_adds_(prometheus::BuildCounter()
                      .Name("infergate_operator_workqueue_adds_total")
                      .Help("Keys added to the work queue.")
                      .Register(*registry_)),
      queue_wait_(prometheus::BuildHistogram()
                      .Name("infergate_operator_workqueue_queue_duration_seconds")
                      .Help("How long a key waited in the queue before a worker took it.")
                      .Register(*registry_)),
      queue_work_(prometheus::BuildHistogram()
                      .Name("infergate_operator_workqueue_work_duration_seconds")
                      .Help("How long a worker held a key.")
                      .Register(*registry_)),
      queue_retries_(prometheus::BuildCounter()
                         .Name("infergate_operator_workqueue_retries_total")
                         .Help("Keys re-queued with backoff after an error.")
                         .Register(*registry_)),
      api_requests_(prometheus::BuildCounter()
                        .Name("infergate_operator_api_requests_total")
                        .Help("Requests to the Kubernetes API server by verb and HTTP code (0: no answer).")
                        .Register(*registry_)),
      api_seconds_(prometheus::BuildHistogram()
                       .Name("infergate_operator_api_request_duration_seconds")
                       .Help("Latency of requests to the Kubernetes API server.")
                       .Register(*registry_)),
      leader_(prometheus::BuildGauge()
                  .Name("infergate_operator_leader")
                  .Help("1 while this replica holds the leader lease.")
                  .Register(*registry_)
                  .Add({})) {}

OperatorMetrics::~OperatorMetrics() = default;

workqueue::QueueObserver& OperatorMetrics::queue_observer(const std::string& controller) {
  std::lock_guard lock(mu_);
  queues_.push_back(std::make_unique<QueueMetrics>(*this, controller));
  return *queues_.back();
}

void OperatorMetrics::reconcile_done(const std::string& controller, const std::string& result,
                                     std::chrono::nanoseconds took) {
  reconciles_.Add({{"controller", controller}, {"result", result}}).Increment();
  if (result == "error") reconcile_errors_.Add({{"controller", controller}}).Increment();
  reconcile_seconds_.Add({{"controller", controller}}, latency_buckets()).Observe(seconds(took));
}

void OperatorMetrics::set_leader(bool leading) { leader_.Set(leading ? 1 : 0); }

void OperatorMetrics::watch_informers(std::function<std::vector<const cache::Informer*>()> informers) {
  std::lock_guard lock(mu_);
  informers_ = std::move(informers);
}

void OperatorMetrics::on_request(std::string_view verb, int http_status, std::chrono::nanoseconds latency) {
  api_requests_.Add({{"verb", std::string(verb)}, {"code", std::to_string(http_status)}}).Increment();
  api_seconds_.Add({{"verb", std::string(verb)}}, latency_buckets()).Observe(seconds(latency));
}

std::string OperatorMetrics::scrape() const {
  auto families = registry_->Collect();
  std::function<std::vector<const cache::Informer*>()> informers;
  {
    std::lock_guard lock(mu_);
    informers = informers_;
  }
  if (informers) {
    struct Def {
      const char* name;
      const char* help;
      uint64_t cache::InformerStats::*field;
    };
    const Def defs[] = {
        {"infergate_operator_informer_relists_total", "Full re-lists by resource.",
         &cache::InformerStats::relists},
        {"infergate_operator_informer_watch_restarts_total", "Watches (re)opened by resource.",
         &cache::InformerStats::watch_restarts},
        {"infergate_operator_informer_expired_total", "Watches that ended in 410 Gone by resource.",
         &cache::InformerStats::expired},
        {"infergate_operator_informer_errors_total", "List or watch failures by resource.",
         &cache::InformerStats::errors},
        {"infergate_operator_informer_events_total", "Watch events applied to the cache by resource.",
         &cache::InformerStats::events},
    };
    auto list = informers();
    for (const auto& d : defs) {
      prometheus::MetricFamily f{d.name, d.help, prometheus::MetricType::Counter, {}};
      for (const auto* inf : list) {
        prometheus::ClientMetric m;
        m.label.push_back({"resource", inf->kind().resource()});
        if (!inf->watched_namespace().empty()) m.label.push_back({"namespace", inf->watched_namespace()});
        m.counter.value = static_cast<double>(inf->stats().*d.field);
        f.metric.push_back(std::move(m));
      }
      families.push_back(std::move(f));
    }
    prometheus::MetricFamily objects{"infergate_operator_cached_objects",
                                     "Objects held in the informer cache.",
                                     prometheus::MetricType::Gauge,
                                     {}};
    for (const auto* inf : list) {
      prometheus::ClientMetric m;
      m.label.push_back({"resource", inf->kind().resource()});
      if (!inf->watched_namespace().empty()) m.label.push_back({"namespace", inf->watched_namespace()});
      m.gauge.value = static_cast<double>(inf->store().size());
      objects.metric.push_back(std::move(m));
    }
    families.push_back(std::move(objects));
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace infergate::op::manager
