// Wiring infergate-operator together.
#include "infergate/operator/app/operator_app.h"
#include "infergate/operator/app/prometheus_rollout_metrics.h"

#include <openssl/crypto.h>
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <random>
#include <thread>

#include "infergate/common/log.h"
#include "infergate/http/client.h"
#include "infergate/operator/api/crd_check.h"
#include "infergate/operator/capacity/planner_capacity.h"

namespace infergate::op::app {
namespace {

// The InferenceModel that controls an owned object, as a queue key ("" when none).
std::string owner_key(const Json& obj) {
  auto m = obj.find("metadata");
  if (m == obj.end() || !m->is_object()) return "";
  auto refs = m->find("ownerReferences");
  if (refs == m->end() || !refs->is_array()) return "";
  for (const auto& r : *refs) {
    if (!r.is_object() || !r.value("controller", false)) continue;
    if (r.value("kind", "") != api::kKind) continue;
    std::string av = r.value("apiVersion", "");
    if (av.rfind(std::string(api::kGroup) + "/", 0) != 0) continue;
    std::string ns = client::object_namespace(obj);
    std::string name = r.value("name", "");
    return ns.empty() ? name : ns + "/" + name;
  }
  return "";
}

std::string model_label_key(const Json& obj) {
  std::string model = client::object_label(obj, api::labels::kModel);
  if (model.empty()) return "";
  std::string ns = client::object_namespace(obj);
  return ns.empty() ? model : ns + "/" + model;
}

// True when an update changed nothing but status (and the bookkeeping that comes with any write).
// A resync (same resourceVersion) is not such an update: it always reconciles.
bool only_status_changed(const Json& a, const Json& b) {
  if (client::object_resource_version(a) == client::object_resource_version(b)) return false;
  auto strip = [](Json o) {
    o.erase("status");
    if (auto m = o.find("metadata"); m != o.end() && m->is_object()) {
      m->erase("resourceVersion");
      m->erase("managedFields");
    }
    return o;
  };
  return strip(a) == strip(b);
}

cache::EventHandler enqueue_by(manager::Controller& c,
                               const std::function<std::string(const Json&)>& key_of) {
  auto add = [&c, key_of](const Json& o) {
    std::string k = key_of(o);
    if (!k.empty()) c.enqueue(k);
  };
  return cache::EventHandler{add,
                             [add](const Json& old_obj, const Json& new_obj) {
                               add(old_obj);  // an owner or label that changed reaches both models
                               add(new_obj);
                             },
                             add};
}

}  // namespace

std::string default_identity() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == 0)
    (void)std::snprintf(host, sizeof host, "operator");
  std::random_device rd;
  char suffix[16];
  (void)std::snprintf(suffix, sizeof suffix, "%08x", rd());
  return std::string(host) + "_" + suffix;
}

void add_flags(CLI::App& app, OperatorOptions& o) {
  app.add_option("--kubeconfig", o.kubeconfig,
                 "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)");
  app.add_option("--context", o.context, "kubeconfig context (default: current-context)");
  app.add_option("--namespace", o.namespaces,
                 "watch InferenceModels in these namespaces only (repeat, or comma-separated; default: all)")
      ->delimiter(',');
  app.add_option("--check-crd", o.check_crd,
                 "refuse to start when the installed CRD lacks the status fields this operator writes")
      ->capture_default_str();
  app.add_flag("--leader-elect", o.leader_elect,
               "elect one active replica through a coordination.k8s.io Lease");
  app.add_option("--leader-elect-namespace", o.leader_elect_namespace,
                 "namespace of the leader Lease (default: the configuration's namespace)");
  app.add_option("--leader-elect-id", o.leader_elect_id, "name of the leader Lease");
  app.add_option("--identity", o.identity, "this replica's identity in the Lease (default: hostname_random)");
  auto duration = [&app](const char* name, std::chrono::milliseconds& out, const char* help) {
    app.add_option_function<std::string>(
           name,
           [&out, name](const std::string& text) {
             // "500ms" or a Go-like duration ("15s", "1m")
             if (text.size() > 2 && text.compare(text.size() - 2, 2, "ms") == 0) {
               out = std::chrono::milliseconds(std::stoll(text.substr(0, text.size() - 2)));
               return;
             }
             auto d = parse_duration(text);
             if (!d.ok()) throw CLI::ValidationError(name, d.error().message());
             out = *d;
           },
           help)
        ->type_name("DURATION");
  };
  duration("--leader-elect-lease-duration", o.lease_duration, "how long a lease lasts without renewal (15s)");
  duration("--leader-elect-renew-deadline", o.renew_deadline,
           "how long the leader keeps trying to renew (10s)");
  duration("--leader-elect-retry-period", o.retry_period, "how often candidates try and leaders renew (2s)");
  app.add_option("--metrics-bind-address", o.metrics_bind_address, "[host]:port for /metrics; 0 disables")
      ->capture_default_str();
  app.add_option("--metrics-secure", o.metrics_secure,
                 "serve /metrics over TLS to callers whose bearer token the API server authenticates "
                 "(TokenReview) and allows to get /metrics (SubjectAccessReview); false: plain HTTP, no "
                 "authentication")
      ->capture_default_str();
  app.add_option("--metrics-cert-dir", o.metrics_cert_dir,
                 "directory with tls.crt and tls.key for /metrics (re-read when renewed); default: a "
                 "self-signed certificate made at start");
  app.add_option("--health-probe-bind-address", o.health_probe_bind_address,
                 "[host]:port for /healthz and /readyz; 0 disables")
      ->capture_default_str();
  app.add_option("--workers", o.workers, "concurrent reconciles")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--agent-image", o.images.agent, "default infergate-agent image")->capture_default_str();
  app.add_option("--runtime-image", o.images.runtime, "default infergate-runtime image (CPU)")
      ->capture_default_str();
  app.add_option("--runtime-cuda-image", o.images.runtime_cuda,
                 "default infergate-runtime image for GPU pods")
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--resync-period",
         [&o](const std::string& text) {
           auto d = parse_duration(text);
           if (!d.ok()) throw CLI::ValidationError("--resync-period", d.error().message());
           o.resync_period = *d;
         },
         "re-check every model this often even without changes (10m)")
      ->type_name("DURATION");
}

Result<std::unique_ptr<OperatorApp>> OperatorApp::create(const OperatorOptions& options,
                                                         client::RestConfig config, Clock& clock) {
  std::unique_ptr<OperatorApp> app(new OperatorApp());
  app->identity_ = options.identity.empty() ? default_identity() : options.identity;
  config.timeout = options.api_timeout;
  // The identity in the user agent tells replicas apart in API server audit logs (and in tests).
  config.user_agent = "infergate-operator/0.1.0 (" + app->identity_ + ")";
  const std::string config_ns = config.namespace_.empty() ? "default" : config.namespace_;
  auto rest = client::RestClient::create(std::move(config), client::RetryPolicy{}, &clock);
  if (!rest.ok()) return std::move(rest).error().context("API client");
  app->client_ = std::move(*rest);
  app->client_->set_observer(&app->metrics_);

  manager::ManagerOptions mo;
  mo.leader_elect = options.leader_elect;
  mo.metrics_bind_address = options.metrics_bind_address;
  mo.metrics_secure = options.metrics_secure;
  mo.metrics_cert_dir = options.metrics_cert_dir;
  mo.health_probe_bind_address = options.health_probe_bind_address;
  if (options.leader_elect) {
    mo.election.namespace_ =
        options.leader_elect_namespace.empty() ? config_ns : options.leader_elect_namespace;
    mo.election.name = options.leader_elect_id;
    mo.election.identity = app->identity_;
    mo.election.lease_duration = options.lease_duration;
    mo.election.renew_deadline = options.renew_deadline;
    mo.election.retry_period = options.retry_period;
    INFERGATE_RETURN_IF_ERROR(manager::validate(mo.election));
  }
  app->manager_ = std::make_unique<manager::Manager>(*app->client_, mo, clock, app->metrics_);
  manager::Manager& m = *app->manager_;

  // Informers per watched namespace: InferenceModels, and the objects the operator owns (by its
  // managed-by label).
  std::vector<std::string> namespaces = options.namespaces;
  if (namespaces.empty()) namespaces.push_back("");  // every namespace
  std::vector<cache::Informer*> models, deployments, services, pods, jobs, budgets;
  for (const std::string& ns : namespaces) {
    cache::InformerConfig models_cfg;
    models_cfg.watcher.namespace_ = ns;
    models_cfg.resync_period = options.resync_period;
    models.push_back(&m.cache().add(client::kinds::inference_model(), models_cfg));
    cache::InformerConfig owned_cfg;
    owned_cfg.watcher.namespace_ = ns;
    owned_cfg.watcher.label_selector =
        std::string(api::labels::kManagedBy) + "=" + std::string(api::labels::kManagedByValue);
    owned_cfg.resync_period = std::chrono::seconds(0);  // the models' resync covers their children
    auto owned = [&](const client::ResourceKind& kind, std::function<void(Json&)> trim) {
      cache::InformerConfig c = owned_cfg;
      c.transform = std::move(trim);
      cache::Informer& inf = m.cache().add(kind, c);
      inf.store().add_index(std::string(platform::kModelIndex), platform::model_index_values);
      return &inf;
    };
    deployments.push_back(owned(client::kinds::deployment(), platform::trim_deployment));
    services.push_back(owned(client::kinds::service(), platform::trim_owned));
    pods.push_back(owned(client::kinds::pod(), platform::trim_pod));
    jobs.push_back(owned(client::kinds::job(), platform::trim_owned));
    budgets.push_back(owned(client::kinds::pod_disruption_budget(), platform::trim_owned));
  }

  client::Client& writes = m.write_client();
  app->platform_ = std::make_unique<platform::KubernetesPlatform>(writes, m.cache(), clock);
  app->models_ = std::make_unique<platform::KubernetesModelStore>(writes, m.cache());
  app->events_ = std::make_unique<platform::KubernetesEventRecorder>(writes, clock, app->identity_);
  // The runtime's planner checks the first deployment and every stage (spec.capacityPlanning); the
  // operator cannot read artifact volumes in a cluster, so the model's config comes from the spec.
  app->capacity_ = std::make_unique<capacity::PlannerCapacityChecker>();
  controllers::ControllerOptions co;
  co.images = options.images;
  co.trust_recheck = options.trust_recheck;
  app->rollout_metrics_ = std::make_unique<PrometheusRolloutMetrics>(app->metrics_.registry());
  co.rollout_metrics = app->rollout_metrics_.get();
  app->reconciler_ = std::make_unique<controllers::InferenceModelReconciler>(
      *app->models_, *app->platform_, *app->events_, *app->capacity_, clock, co);
  manager::ControllerOptions ctl;
  ctl.name = "inferencemodel";
  ctl.workers = options.workers;
  manager::Controller& controller = m.add_controller(*app->reconciler_, ctl);

  // Our own status writes come back as updates: they need no reconcile (status is derived from the
  // spec and the world, both of which are watched). Anything else, and every resync, does.
  for (cache::Informer* inf : models) {
    inf->add_handler(
        cache::EventHandler{[&controller](const Json& o) { controller.enqueue(client::object_key(o)); },
                            [&controller](const Json& old_obj, const Json& new_obj) {
                              if (!only_status_changed(old_obj, new_obj))
                                controller.enqueue(client::object_key(new_obj));
                            },
                            [&controller](const Json& o) { controller.enqueue(client::object_key(o)); }});
  }
  for (const auto* kind : {&deployments, &services, &jobs, &budgets}) {
    for (cache::Informer* inf : *kind) inf->add_handler(enqueue_by(controller, owner_key));
  }
  for (cache::Informer* inf : pods) inf->add_handler(enqueue_by(controller, model_label_key));
  app->check_crd_ = options.check_crd;
  return app;
}

OperatorApp::~OperatorApp() {
  if (manager_) manager_->stop();
  if (events_) events_->flush();
}

Status OperatorApp::run() {
  if (check_crd_) {
    // Helm never upgrades crds/: a newer operator on an older CRD would have its new status fields
    // pruned by the API server and rewrite status on every reconcile. Refuse that at start.
    auto crd = client_->get(client::kinds::custom_resource_definition(), "", api::kCrdName);
    if (!crd.ok()) {
      if (crd.error().code() == ErrorCode::kPermissionDenied) {
        return Error(ErrorCode::kPermissionDenied,
                     "cannot read CustomResourceDefinition " + std::string(api::kCrdName) +
                         " to check its schema (403): grant \"get\" on "
                         "customresourcedefinitions.apiextensions.k8s.io with resourceNames [" +
                         std::string(api::kCrdName) + "] (the chart does), or start with --check-crd=false",
                     "CrdUnreadable");
      }
      return std::move(crd).error().context("checking the InferenceModel CRD");
    }
    if (auto missing = api::crd_schema_gaps(*crd); !missing.empty()) {
      std::string fields;
      for (const auto& f : missing) fields += (fields.empty() ? "" : ", ") + f;
      return Error(ErrorCode::kFailedPrecondition,
                   "the installed CRD " + std::string(api::kCrdName) +
                       " is older than this operator: its schema lacks " + fields +
                       ", which the API server would prune from every status write. Upgrade it first "
                       "(Helm never upgrades crds/): kubectl apply --server-side -f charts/infergate/crds/",
                   "CrdOutdated");
    }
  }
  Status st = manager_->run();
  events_->flush();
  return st;
}

void OperatorApp::stop() { manager_->stop(); }

int run_operator(const OperatorOptions& options) {
  // cpprestsdk + OpenSSL can hang at exit after a failed TLS handshake when OpenSSL's atexit
  // cleanup races the client's threads; we clean up nothing at exit instead.
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // NOLINT(concurrency-mt-unsafe): before any thread starts
  // SIGINT/SIGTERM are taken by a thread of our own (sigwait), not by an async handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);  // our own wake-up for the waiter at exit
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (Status st = http::configure_client_threads(4); !st.ok()) {
    log::warn("keeping the default HTTP thread pool", {{"error", st.error().to_string()}});
  }
  auto config = client::default_config(options.kubeconfig, options.context);
  if (!config.ok()) {
    log::error("cannot configure the API client", {{"error", config.error().to_string()}});
    return kExitError;
  }
  auto app = OperatorApp::create(options, std::move(*config));
  if (!app.ok()) {
    log::error("cannot start", {{"error", app.error().to_string()}});
    return kExitError;
  }
  OperatorApp* raw = app->get();
  std::thread waiter([raw, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig == SIGUSR1) return;  // our own wake-up at exit
    log::info("signal received: stopping", {{"signal", sig}});
    raw->stop();
  });
  std::string watched;
  for (const auto& ns : options.namespaces) watched += (watched.empty() ? "" : ",") + ns;
  log::info("infergate-operator starting", {{"identity", raw->identity()},
                                            {"namespaces", watched.empty() ? std::string("(all)") : watched},
                                            {"leader_elect", options.leader_elect},
                                            {"workers", options.workers}});
  Status st = raw->run();
  (void)pthread_kill(waiter.native_handle(), SIGUSR1);  // release the waiter if no signal came
  waiter.join();
  if (!st.ok()) {
    log::error("stopped", {{"error", st.error().to_string()}});
    return st.error().reason() == "LeaderElectionLost" ? kExitLostLease : kExitError;
  }
  log::info("stopped cleanly");
  return kExitOk;
}

}  // namespace infergate::op::app
