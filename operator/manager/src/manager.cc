// The manager: caches, controllers, leader election, probes and metrics.
#include "infergate/operator/manager/manager.h"

#include <unistd.h>

#include <thread>

#include "infergate/common/log.h"
#include "infergate/http/tls.h"

namespace infergate::op::manager {
namespace {

constexpr const char* kCertFile = "tls.crt";
constexpr const char* kKeyFile = "tls.key";
// How often the serving certificate's files are checked for a renewal.
constexpr std::chrono::seconds kCertCheckInterval{10};

std::filesystem::file_time_type mtime(const std::filesystem::path& p) {
  std::error_code ec;
  auto t = std::filesystem::last_write_time(p, ec);
  return ec ? std::filesystem::file_time_type{} : t;
}

// The names a self-signed certificate is made for: the pod's hostname and loopback.
std::vector<std::string> self_signed_names() {
  char host[256] = {0};
  std::vector<std::string> names;
  if (gethostname(host, sizeof host - 1) == 0 && host[0] != 0) names.emplace_back(host);
  names.emplace_back("localhost");
  names.emplace_back("127.0.0.1");
  return names;
}

}  // namespace

Manager::Manager(client::Client& api, ManagerOptions options, Clock& clock, OperatorMetrics& metrics)
    : api_(api),
      options_(std::move(options)),
      clock_(clock),
      metrics_(metrics),
      cache_(api, clock),
      guard_(api, [this] { return is_leader(); }) {
  if (options_.leader_elect) elector_ = std::make_unique<LeaderElector>(api_, options_.election, clock_);
  metrics_.watch_informers([this] {
    std::vector<const cache::Informer*> out;
    for (const auto* kind :
         {&client::kinds::inference_model(), &client::kinds::deployment(), &client::kinds::service(),
          &client::kinds::pod(), &client::kinds::job(), &client::kinds::pod_disruption_budget()}) {
      for (const auto* inf : cache_.informers(*kind)) out.push_back(inf);
    }
    return out;
  });
}

Manager::~Manager() {
  stop();
  stop_controllers();
  cache_.stop();
}

Controller& Manager::add_controller(reconcile::Reconciler& reconciler, ControllerOptions options) {
  std::lock_guard lock(controllers_mu_);
  controllers_.push_back(std::make_unique<Controller>(reconciler, clock_, std::move(options), &metrics_));
  return *controllers_.back();
}

bool Manager::is_leader() const {
  if (!options_.leader_elect) return true;
  return leading_ && elector_ && elector_->is_leader();
}

bool Manager::ready() const { return started_ && cache_.has_synced(); }

void Manager::start_controllers() {
  std::lock_guard lock(controllers_mu_);
  for (auto& c : controllers_) c->start();
}

void Manager::stop_controllers() {
  std::lock_guard lock(controllers_mu_);
  for (auto& c : controllers_) c->stop();
}

void Manager::stop() { stop_.stop(); }

Result<std::unique_ptr<HttpEndpoints>> Manager::start_metrics() {
  EndpointOptions eo;
  eo.bind_address = options_.metrics_bind_address;
  if (options_.metrics_secure && eo.bind_address != "0") {
    if (options_.metrics_cert_dir.empty()) {
      INFERGATE_ASSIGN_OR_RETURN(eo.tls, http::make_self_signed_tls(self_signed_names()));
      log::info(
          "serving /metrics with a self-signed certificate made at start (--metrics-cert-dir names a real "
          "one)");
    } else {
      const auto cert = options_.metrics_cert_dir / kCertFile, key = options_.metrics_cert_dir / kKeyFile;
      cert_mtime_ = mtime(cert);
      key_mtime_ = mtime(key);
      INFERGATE_ASSIGN_OR_RETURN(eo.tls, http::load_tls_files(cert, key));
    }
    KubernetesAuthorizerOptions ao;
    ao.ttl = options_.metrics_auth_cache_ttl;
    authorizer_ = std::make_unique<KubernetesAuthorizer>(api_, clock_, ao);
    eo.authorizer = authorizer_.get();
  }
  return HttpEndpoints::start(
      std::move(eo),
      {{"/metrics", [this] {
          return HttpAnswer{200, "text/plain; version=0.0.4; charset=utf-8", metrics_.scrape()};
        }}});
}

void Manager::reload_metrics_certificate(HttpEndpoints& endpoints) {
  if (!endpoints.tls() || options_.metrics_cert_dir.empty()) return;
  const auto cert = options_.metrics_cert_dir / kCertFile, key = options_.metrics_cert_dir / kKeyFile;
  const auto cert_time = mtime(cert), key_time = mtime(key);
  if (cert_time == cert_mtime_ && key_time == key_mtime_) return;
  auto tls = http::load_tls_files(cert, key);
  // A renewal writes two files: a pair that does not match yet is retried at the next check.
  if (!tls.ok() || !endpoints.reload_tls(*tls).ok()) {
    log::warn(
        "the metrics serving certificate changed but cannot be used yet",
        {{"dir", options_.metrics_cert_dir.string()}, {"error", tls.ok() ? "" : tls.error().to_string()}});
    return;
  }
  cert_mtime_ = cert_time;
  key_mtime_ = key_time;
  log::info("reloaded the metrics serving certificate", {{"dir", options_.metrics_cert_dir.string()}});
}

Status Manager::run() {
  if (options_.leader_elect) INFERGATE_RETURN_IF_ERROR(validate(options_.election));
  auto health = HttpEndpoints::start(
      EndpointOptions{options_.health_probe_bind_address, std::nullopt, nullptr},
      {{"/healthz",
        [this] {
          return lost_ ? HttpAnswer{500, "text/plain", "leader election lost\n"}
                       : HttpAnswer{200, "text/plain", "ok\n"};
        }},
       {"/readyz", [this] {
          return ready() ? HttpAnswer{200, "text/plain", "ok\n"}
                         : HttpAnswer{503, "text/plain", "informer caches are not synced yet\n"};
        }}});
  if (!health.ok()) return std::move(health).error().context("--health-probe-bind-address");
  auto metrics = start_metrics();
  if (!metrics.ok()) return std::move(metrics).error().context("--metrics-bind-address");
  health_port_ = *health ? (*health)->port() : 0;
  metrics_port_ = *metrics ? (*metrics)->port() : 0;
  log::info("manager starting", {{"health_port", health_port_.load()},
                                 {"metrics_port", metrics_port_.load()},
                                 {"metrics_secure", *metrics && (*metrics)->tls()},
                                 {"leader_elect", options_.leader_elect}});
  cache_.start();
  started_ = true;
  auto synced_by = std::chrono::steady_clock::now() + options_.cache_sync_timeout;
  while (!cache_.has_synced() && !stop_.stopped()) {
    if (std::chrono::steady_clock::now() > synced_by) {
      cache_.stop();
      return unavailable(
          "informer caches did not sync within " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::seconds>(options_.cache_sync_timeout).count()) +
          " s (is the API server reachable, and the CRD installed?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::thread election;
  if (options_.leader_elect) {
    election = std::thread([this] {
      bool clean = elector_->run(
          stop_,
          [this] {
            leading_ = true;
            metrics_.set_leader(true);
            log::info("leading: starting controllers", {{"identity", options_.election.identity}});
            start_controllers();
          },
          [this] {
            leading_ = false;
            metrics_.set_leader(false);
            stop_controllers();
          });
      if (!clean) {
        lost_ = true;
        stop_.stop();
      }
    });
  } else {
    metrics_.set_leader(true);
    start_controllers();
  }
  while (stop_.wait_for(SystemClock::instance(), kCertCheckInterval)) {
    if (*metrics) reload_metrics_certificate(**metrics);
  }
  log::debug("manager stopping: leader election");
  if (election.joinable()) election.join();
  log::debug("manager stopping: controllers");
  stop_controllers();
  log::debug("manager stopping: informers");
  cache_.stop();
  health->reset();
  metrics->reset();
  log::debug("manager stopped");
  if (lost_) return Error(ErrorCode::kFailedPrecondition, "lost the leader lease", "LeaderElectionLost");
  return ok_status();
}

}  // namespace infergate::op::manager
