// `infergate-operator local run|get`: wiring and tables.
#include "infergate/operator/local/local_app.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <condition_variable>
#include <csignal>
#include <fstream>
#include <iomanip>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "infergate/common/fs.h"
#include "infergate/common/log.h"
#include "infergate/operator/api/inference_model.h"
#include "infergate/operator/api/yaml.h"
#include "infergate/operator/capacity/planner_capacity.h"
#include "infergate/operator/controllers/inference_model_controller.h"
#include "infergate/operator/manager/controller.h"

namespace infergate::op::local {
namespace fs = std::filesystem;

struct LocalOperator::Impl {
  UniqueFd lock;
  std::unique_ptr<LocalEventSink> events;
  std::unique_ptr<controllers::CapacityChecker> capacity;
  std::unique_ptr<controllers::InferenceModelReconciler> reconciler;
  std::unique_ptr<manager::Controller> controller;
  std::unique_ptr<Router> front;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  Clock* clock = nullptr;
};

namespace {

Status write_json_file(const fs::path& path, const Json& j) {
  return write_file_atomic(path, dump_json(j, 2) + "\n");
}

Json pods_json(const std::vector<PodRow>& rows) {
  Json out = Json::array();
  for (const auto& r : rows) {
    out.push_back({{"model", r.model},
                   {"name", r.name},
                   {"workload", r.workload},
                   {"track", r.track},
                   {"revision", r.revision},
                   {"status", r.status},
                   {"ready", r.ready},
                   {"restarts", r.restarts},
                   {"pid", r.pid},
                   {"address", r.address},
                   {"log", r.log},
                   {"started", r.started == WallTime{} ? "" : format_rfc3339(r.started)}});
  }
  return out;
}

}  // namespace

void add_run_flags(CLI::App& app, RunOptions& o) {
  app.add_option("--manifests", o.manifests_dir, "directory of InferenceModel YAML files to serve")
      ->required();
  app.add_option("--state", o.state_dir, "state directory: status, pods' logs, records")
      ->capture_default_str();
  app.add_option(
      "--volumes", o.volumes_dir,
      "where artifact volumes are: persistentVolumeClaim X is <volumes>/X (default <state>/volumes)");
  app.add_option("--keys", o.keys_dir,
                 "where trust Secrets are: publicKeySecretRef S is <keys>/S/*.pem (default <state>/keys)");
  app.add_option("--bin-dir", o.bin_dir,
                 "where infergate-agent and infergate-runtime are (default: beside this binary, then PATH)");
  app.add_option("--router-address", o.router_address,
                 "host:port of the router's front door (OpenAI API by model)")
      ->capture_default_str();
  app.add_option("--workers", o.workers, "concurrent reconciles")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option_function<double>(
         "--grace-period",
         [&o](double s) { o.grace = std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); },
         "seconds between SIGTERM and SIGKILL when a pod stops (10)")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option_function<double>(
         "--backoff-initial",
         [&o](double s) { o.backoff.initial = std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); },
         "seconds before a crashed pod's first restart; doubles up to --backoff-max (1)")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option_function<double>(
         "--backoff-max",
         [&o](double s) { o.backoff.max = std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); },
         "the longest restart delay in seconds (30)")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option_function<std::vector<std::string>>(
         "--env",
         [&o](const std::vector<std::string>& kvs) {
           for (const auto& kv : kvs) {
             auto eq = kv.find('=');
             if (eq == std::string::npos || eq == 0)
               throw CLI::ValidationError("--env", "want KEY=VALUE, got " + kv);
             o.env[kv.substr(0, eq)] = kv.substr(eq + 1);
           }
         },
         "KEY=VALUE set in every pod and job (repeatable)")
      ->type_name("KEY=VALUE");
}

void add_get_flags(CLI::App& app, GetOptions& o) {
  app.add_option("what", o.what, "models (default), pods, events, errors or endpoints; or a model's name");
  app.add_option("name", o.name, "one model");
  app.add_option("--state", o.state_dir, "the state directory `local run` uses")->capture_default_str();
  app.add_option("-o,--output", o.output, "wide, yaml or json")
      ->check(CLI::IsMember({"", "wide", "yaml", "json"}));
}

std::string format_age(std::chrono::seconds age) {
  long long s = std::max<long long>(0, age.count());
  if (s < 120) return std::to_string(s) + "s";
  if (s < 3600 * 2) return std::to_string(s / 60) + "m";
  if (s < 86400 * 2) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

Result<std::unique_ptr<LocalOperator>> LocalOperator::create(RunOptions options, Clock& clock) {
  if (options.manifests_dir.empty()) return invalid_argument("--manifests is required");
  std::error_code ec;
  if (!fs::is_directory(options.manifests_dir, ec)) {
    return invalid_argument("--manifests " + options.manifests_dir.string() + " is not a directory");
  }
  if (options.volumes_dir.empty()) options.volumes_dir = options.state_dir / "volumes";
  if (options.keys_dir.empty()) options.keys_dir = options.state_dir / "keys";
  for (const auto& d : {options.state_dir, options.state_dir / "status"}) {
    fs::create_directories(d, ec);
    if (ec) return io_error("creating " + d.string() + ": " + ec.message());
  }
  std::unique_ptr<LocalOperator> op(new LocalOperator());
  op->impl_ = std::make_unique<Impl>();
  op->impl_->clock = &clock;
  // One operator per state directory: two would start every pod twice.
  const fs::path lock_path = options.state_dir / "lock";
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock.valid()) return errno_error("opening " + lock_path.string(), errno);
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    return failed_precondition("another `infergate-operator local run` uses " + options.state_dir.string() +
                               " (it holds " + lock_path.string() + ")");
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  (void)::ftruncate(lock.get(), 0);
  (void)write_all(lock.get(), pid, lock_path.string());
  op->impl_->lock = std::move(lock);

  op->options_ = options;
  op->models_ = std::make_unique<LocalModelStore>(options.manifests_dir, options.state_dir, clock);
  INFERGATE_RETURN_IF_ERROR(op->models_->load_state());

  LocalOptions lo;
  lo.state_dir = options.state_dir;
  lo.volumes_dir = options.volumes_dir;
  lo.keys_dir = options.keys_dir;
  lo.bin_dir = options.bin_dir;
  lo.backoff = options.backoff;
  lo.grace = options.grace;
  lo.env = options.env;
  INFERGATE_ASSIGN_OR_RETURN(op->platform_, LocalPlatform::create(lo, clock));

  Impl& im = *op->impl_;
  im.events = std::make_unique<LocalEventSink>(options.state_dir / "events.log", clock);
  // The planner checks capacity as in a cluster; here the operator can also read the artifact's own
  // config.json (persistentVolumeClaim X is <volumes>/X) when spec.capacityPlanning.modelConfig is unset.
  capacity::PlannerCapacityOptions po;
  po.artifact_dir = [volumes = options.volumes_dir](const api::ArtifactSpec& a) -> std::optional<fs::path> {
    if (a.volume.kind != api::VolumeSource::Kind::kPersistentVolumeClaim || a.volume.claim_name.empty())
      return std::nullopt;
    return volumes / a.volume.claim_name / a.path;
  };
  im.capacity = std::make_unique<capacity::PlannerCapacityChecker>(std::move(po));
  controllers::ControllerOptions co;
  im.reconciler = std::make_unique<controllers::InferenceModelReconciler>(
      *op->models_, *op->platform_, *im.events, *im.capacity, clock, co);
  manager::ControllerOptions mo;
  mo.name = "inferencemodel";
  mo.workers = options.workers;
  mo.retry_max = std::chrono::seconds(30);
  im.controller = std::make_unique<manager::Controller>(*im.reconciler, clock, mo, nullptr);
  manager::Controller* controller = im.controller.get();
  op->platform_->set_notify([controller](const std::string& key) { controller->enqueue(key); });

  LocalPlatform* platform = op->platform_.get();
  auto front = Router::front_door(
      options.router_address, [platform](const std::string& name) { return platform->resolve(name); },
      [platform] { return platform->model_endpoints(); });
  if (!front.ok()) return std::move(front).error().context("the router's front door");
  im.front = std::move(*front);
  return op;
}

LocalOperator::~LocalOperator() {
  stop();
  if (impl_ && impl_->controller) impl_->controller->stop();
  if (platform_) platform_->shutdown();
  if (impl_) impl_->front.reset();
}

std::string LocalOperator::router_url() const { return impl_->front ? impl_->front->url() : ""; }

void LocalOperator::stop() {
  if (!impl_) return;
  {
    std::lock_guard lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
}

Status LocalOperator::run() {
  Impl& im = *impl_;
  Clock& clock = *im.clock;
  log::info("infergate-operator local starting", {{"manifests", options_.manifests_dir.string()},
                                                  {"state", options_.state_dir.string()},
                                                  {"volumes", options_.volumes_dir.string()},
                                                  {"keys", options_.keys_dir.string()},
                                                  {"router", router_url()}});
  (void)write_json_file(options_.state_dir / "router.json", {{"url", router_url()}, {"pid", ::getpid()}});
  // Models known from an earlier run, and whatever the platform restored, are reconciled first. The
  // directory is read BEFORE any reconcile: a model restored from its status file is "not present"
  // until its manifest is seen, and a reconcile of a model that is not present cleans up everything
  // it owns (a restarted operator would otherwise tear down and recreate every workload, and lose a
  // running stage's check, whenever a worker won the race against the first scan).
  for (const auto& k : models_->scan()) im.controller->enqueue(k);
  MonoTime last_scan = clock.mono_now();
  for (const auto& k : models_->keys()) im.controller->enqueue(k);
  for (const auto& k : platform_->model_keys()) im.controller->enqueue(k);
  im.controller->start();

  MonoTime last_resync = clock.mono_now();
  std::string last_errors, last_pods;
  // The directory is scanned every scan_period; the tables' sources are refreshed more often, so
  // that `local get pods` is never more than a moment behind the pods.
  const auto tick = std::min<std::chrono::milliseconds>(options_.scan_period, std::chrono::milliseconds(200));
  for (;;) {
    const MonoTime now = clock.mono_now();
    if (last_scan == MonoTime{} || now - last_scan >= options_.scan_period) {
      last_scan = now;
      for (const auto& k : models_->scan()) im.controller->enqueue(k);
    }
    if (now - last_resync >= options_.resync_period) {
      last_resync = now;
      for (const auto& k : models_->keys()) im.controller->enqueue(k);
    }
    // A deleted model's status file goes once the platform holds nothing of it any more.
    std::set<std::string> owned;
    for (const auto& k : platform_->model_keys()) owned.insert(k);
    for (const auto& k : models_->keys()) {
      auto ns = k.substr(0, k.find('/')), name = k.substr(k.find('/') + 1);
      auto o = models_->get(ns, name);
      if (o.ok() && !o->has_value() && !owned.count(k)) models_->forget(k);
    }
    // The sources of `local get`.
    Json errors = Json::array();
    for (const auto& e : models_->errors()) {
      errors.push_back({{"file", e.file}, {"reason", e.reason}, {"message", e.message}});
    }
    std::string etext = dump_json(errors, 2);
    if (etext != last_errors) {
      (void)write_json_file(options_.state_dir / "errors.json", errors);
      last_errors = etext;
    }
    Json pods = pods_json(platform_->pods());
    Json endpoints = Json::object();
    for (const auto& [k, url] : platform_->endpoint_urls()) endpoints[k] = url;
    Json snapshot = {{"pods", pods}, {"endpoints", endpoints}, {"router", router_url()}};
    std::string ptext = dump_json(snapshot, 2);
    if (ptext != last_pods) {
      (void)write_json_file(options_.state_dir / "pods.json", snapshot);
      last_pods = ptext;
    }
    std::unique_lock lock(im.mu);
    if (im.cv.wait_for(lock, tick, [&] { return im.stop; })) break;
  }
  log::info("stopping: every pod gets SIGTERM, then SIGKILL after the grace period",
            {{"grace_seconds", static_cast<double>(options_.grace.count()) / 1000.0}});
  im.controller->stop();
  platform_->shutdown();
  im.front.reset();
  log::info("stopped cleanly");
  return ok_status();
}

int run_local(const RunOptions& options) {
  std::signal(SIGPIPE, SIG_IGN);  // NOLINT(concurrency-mt-unsafe): before any thread starts
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);  // our own wake-up for the waiter at exit
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto op = LocalOperator::create(options);
  if (!op.ok()) {
    log::error("cannot start", {{"error", op.error().to_string()}});
    return kExitError;
  }
  LocalOperator* raw = op->get();
  std::thread waiter([raw, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig == SIGUSR1) return;
    log::info("signal received: stopping", {{"signal", sig}});
    raw->stop();
  });
  Status st = raw->run();
  (void)pthread_kill(waiter.native_handle(), SIGUSR1);
  waiter.join();
  op->reset();
  if (!st.ok()) {
    log::error("stopped", {{"error", st.error().to_string()}});
    return kExitError;
  }
  return kExitOk;
}

// ---- get ----

namespace {

std::string cell(const Json& j, std::initializer_list<const char*> path) {
  const Json* cur = &j;
  for (const char* p : path) {
    if (!cur->is_object()) return "";
    auto it = cur->find(p);
    if (it == cur->end()) return "";
    cur = &*it;
  }
  if (cur->is_string()) return cur->get<std::string>();
  if (cur->is_number_integer()) return std::to_string(cur->get<long long>());
  return "";
}

void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 3, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

std::string condition_status(const Json& status, const std::string& type, std::string* reason = nullptr) {
  if (!status.is_object() || !status.contains("conditions") || !status["conditions"].is_array()) return "";
  for (const auto& c : status["conditions"]) {
    if (c.is_object() && c.value("type", "") == type) {
      if (reason) *reason = c.value("reason", "");
      return c.value("status", "");
    }
  }
  return "";
}

Result<std::vector<Json>> load_models(const fs::path& state) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& de : fs::directory_iterator(state / "status", ec)) {
    if (de.path().extension() == ".yaml") files.push_back(de.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<Json> out;
  for (const auto& f : files) {
    auto text = read_file(f);
    if (!text.ok()) return std::move(text).error();
    auto o = api::parse_yaml(*text, f.string());
    if (!o.ok()) return std::move(o).error();
    out.push_back(std::move(*o));
  }
  return out;
}

Json read_json_or(const fs::path& p, Json fallback) {
  auto text = read_file(p);
  if (!text.ok()) return fallback;
  auto j = parse_json(*text, p.string());
  return j.ok() ? *j : fallback;
}

}  // namespace

int get_local(const GetOptions& o, std::ostream& out, std::ostream& err) {
  std::error_code ec;
  if (!fs::is_directory(o.state_dir / "status", ec)) {
    err << "error: " << o.state_dir.string()
        << " is not a state directory of `infergate-operator local run` (no status/ in it)\n";
    return 1;
  }
  const WallTime now = std::chrono::system_clock::now();
  std::string what = o.what == "model" || o.what == "im" || o.what == "inferencemodels" ? "models"
                     : o.what == "pod"                                                  ? "pods"
                                                                                        : o.what;
  GetOptions named = o;
  if (what != "models" && what != "pods" && what != "events" && what != "errors" && what != "endpoints") {
    // `local get demo`, as `kubectl get im demo` reads: a name where the resource would be.
    if (!o.name.empty()) {
      err << "error: unknown resource \"" << o.what
          << "\" (want models, pods, events, errors or endpoints)\n";
      return 1;
    }
    named.name = o.what;
    what = "models";
  }
  const GetOptions& opts = named;
  if (what == "models") {
    auto models = load_models(opts.state_dir);
    if (!models.ok()) {
      err << "error: " << models.error().to_string() << "\n";
      return 1;
    }
    std::vector<Json> selected;
    for (const auto& m : *models) {
      if (opts.name.empty() || cell(m, {"metadata", "name"}) == opts.name) selected.push_back(m);
    }
    if (!opts.name.empty() && selected.empty()) {
      err << "error: inferencemodels \"" << opts.name << "\" not found\n";
      return 1;
    }
    if (opts.output == "yaml" || opts.output == "json") {
      Json list = selected.size() == 1 && !opts.name.empty()
                      ? selected[0]
                      : Json{{"apiVersion", "v1"}, {"kind", "List"}, {"items", selected}};
      out << (opts.output == "yaml" ? api::to_yaml(list) : dump_json(list, 2) + "\n");
      return 0;
    }
    std::vector<std::vector<std::string>> rows;
    if (opts.output == "wide") {
      rows.push_back({"NAMESPACE", "NAME", "STABLE", "CANARY", "STAGE", "READY", "REASON", "RELEASE", "AGE"});
    } else {
      rows.push_back({"NAME", "STABLE", "CANARY", "STAGE", "READY", "AGE"});
    }
    for (const auto& m : selected) {
      const Json status = m.value("status", Json::object());
      std::string age;
      if (auto t = parse_rfc3339(cell(m, {"metadata", "creationTimestamp"})); t.ok()) {
        age = format_age(std::chrono::duration_cast<std::chrono::seconds>(now - *t));
      }
      std::string canary = cell(status, {"canary", "summary"});
      if (canary.empty()) canary = cell(status, {"canary", "config", "summary"});
      std::string reason;
      std::string ready = condition_status(status, "Ready", &reason);
      if (opts.output == "wide") {
        std::string digest = cell(status, {"stable", "releaseDigest"});
        if (digest.size() > 19) digest = digest.substr(0, 19) + "...";
        rows.push_back({cell(m, {"metadata", "namespace"}), cell(m, {"metadata", "name"}),
                        cell(status, {"stable", "summary"}), canary, cell(status, {"stage", "name"}), ready,
                        reason, digest, age});
      } else {
        rows.push_back({cell(m, {"metadata", "name"}), cell(status, {"stable", "summary"}), canary,
                        cell(status, {"stage", "name"}), ready, age});
      }
    }
    if (rows.size() == 1 && opts.name.empty()) {
      out << "No InferenceModels in " << opts.state_dir.string() << ".\n";
    } else {
      print_table(out, rows);
    }
    // A manifest that was refused is shown under the table, as kubectl apply would have said it.
    Json errors = read_json_or(opts.state_dir / "errors.json", Json::array());
    for (const auto& e : errors) {
      out << "error: " << e.value("file", "") << ": " << e.value("reason", "") << ": "
          << e.value("message", "") << "\n";
    }
    return 0;
  }
  if (what == "errors") {
    Json errors = read_json_or(opts.state_dir / "errors.json", Json::array());
    if (opts.output == "json") {
      out << dump_json(errors, 2) << "\n";
      return 0;
    }
    std::vector<std::vector<std::string>> rows = {{"FILE", "REASON", "MESSAGE"}};
    for (const auto& e : errors)
      rows.push_back({e.value("file", ""), e.value("reason", ""), e.value("message", "")});
    if (rows.size() == 1) {
      out << "No refused manifests.\n";
    } else {
      print_table(out, rows);
    }
    return 0;
  }
  Json snapshot = read_json_or(opts.state_dir / "pods.json", Json::object());
  if (what == "pods") {
    Json pods = snapshot.value("pods", Json::array());
    if (opts.output == "json" || opts.output == "yaml") {
      out << (opts.output == "yaml" ? api::to_yaml(pods) : dump_json(pods, 2) + "\n");
      return 0;
    }
    std::vector<std::vector<std::string>> rows;
    if (opts.output == "wide") {
      rows.push_back({"MODEL", "NAME", "READY", "STATUS", "RESTARTS", "PID", "ADDRESS", "AGE", "LOG"});
    } else {
      rows.push_back({"NAME", "READY", "STATUS", "RESTARTS", "ADDRESS", "AGE"});
    }
    for (const auto& p : pods) {
      const std::string model = p.value("model", "");
      if (!opts.name.empty() && model.substr(model.find('/') + 1) != opts.name) continue;
      std::string age;
      if (auto t = parse_rfc3339(p.value("started", "")); t.ok()) {
        age = format_age(std::chrono::duration_cast<std::chrono::seconds>(now - *t));
      }
      const std::string ready = p.value("ready", false) ? "1/1" : "0/1";
      if (opts.output == "wide") {
        rows.push_back({model, p.value("name", ""), ready, p.value("status", ""),
                        std::to_string(p.value("restarts", 0)), std::to_string(p.value("pid", 0)),
                        p.value("address", ""), age, p.value("log", "")});
      } else {
        rows.push_back({p.value("name", ""), ready, p.value("status", ""),
                        std::to_string(p.value("restarts", 0)), p.value("address", ""), age});
      }
    }
    if (rows.size() == 1) {
      out << "No pods.\n";
    } else {
      print_table(out, rows);
    }
    return 0;
  }
  if (what == "endpoints") {
    std::vector<std::vector<std::string>> rows = {{"ENDPOINT", "URL"}};
    rows.push_back({"(router, by model name)", snapshot.value("router", "")});
    for (const auto& [k, v] : snapshot.value("endpoints", Json::object()).items()) {
      rows.push_back({k, v.is_string() ? v.get<std::string>() : ""});
    }
    print_table(out, rows);
    return 0;
  }
  if (what == "events") {
    auto text = read_file(opts.state_dir / "events.log");
    if (!text.ok()) {
      out << "No events.\n";
      return 0;
    }
    std::istringstream in(*text);
    std::string line;
    while (std::getline(in, line)) {
      if (!opts.name.empty() && line.find("/" + opts.name + " ") == std::string::npos) continue;
      out << line << "\n";
    }
    return 0;
  }
  err << "error: unknown resource " << opts.what << "\n";
  return 1;
}

}  // namespace infergate::op::local
