// operator_bench: N InferenceModels (default 1,000) created at once against the fake API server, with
// the simulated cluster making their pods verify and become ready; the infergate-operator binary runs
// as its own process so that its memory can be measured. Prints: time until every model is at steady
// state (Ready, stable release recorded), reconciles per second, API requests per model, the operator's
// resident memory per cached object, and the ratio of the operator's time to a baseline measured in the
// same run: the same API writes (apply Deployment, apply Service, write status) issued directly by
// plain clients, with no cache, queue or planning.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <regex>
#include <thread>

#include "fixtures/cluster_simulator.h"
#include "fixtures/fake_apiserver.h"
#include "fixtures/http_server.h"
#include "infergate/common/fs.h"
#include "infergate/common/subprocess.h"
#include "infergate/operator/api/yaml.h"
#include "infergate/operator/client/rest_client.h"

namespace {

using namespace std::chrono_literals;
using infergate::Json;
using infergate::testing::FakeApiServer;
using Clock = std::chrono::steady_clock;

double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

long rss_kib(pid_t pid) {
  auto text = infergate::read_file("/proc/" + std::to_string(pid) + "/status", 1 << 20);
  if (!text.ok()) return -1;
  std::smatch m;
  static const std::regex re("VmRSS:\\s+(\\d+) kB");
  if (!std::regex_search(*text, m, re)) return -1;
  return std::stol(m[1]);
}

Json model(int i) {
  Json m = Json::parse(R"({"apiVersion": "serving.infergate.dev/v1alpha1", "kind": "InferenceModel",
    "metadata": {"namespace": "bench"},
    "spec": {"replicas": 1,
             "artifact": {"volume": {"persistentVolumeClaim": {"claimName": "verified-model-artifacts"}},
                          "path": "m/r1", "trust": {"publicKeySecretRef": {"name": "model-signing-key"}}},
             "serving": {"weightFormat": "int8", "kvCacheDtype": "int8", "maxContextLength": 8192, "maxConcurrency": 8}}})");
  m["metadata"]["name"] = "m" + std::to_string(i);
  return m;
}

bool steady(const Json& im) {
  if (!im.contains("status") || !im["status"].contains("stable")) return false;
  if (im["status"].value("observedGeneration", 0) != im["metadata"].value("generation", 0)) return false;
  for (const auto& c : im["status"].value("conditions", Json::array())) {
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

// utime + stime of a process, in seconds.
double cpu_seconds(pid_t pid) {
  auto text = infergate::read_file("/proc/" + std::to_string(pid) + "/stat", 1 << 16);
  if (!text.ok()) return -1;
  size_t close = text->rfind(')');
  std::vector<std::string> f;
  size_t pos = close + 2;
  while (pos < text->size()) {
    size_t sp = text->find(' ', pos);
    if (sp == std::string::npos) sp = text->size();
    f.push_back(text->substr(pos, sp - pos));
    pos = sp + 1;
  }
  if (f.size() < 13) return -1;
  return (std::stod(f[11]) + std::stod(f[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double metric_sum(const std::string& text, const std::string& name) {
  double sum = 0;
  size_t pos = 0;
  while ((pos = text.find("\n" + name, pos)) != std::string::npos) {
    pos += 1;
    size_t sp = text.find(' ', pos);
    size_t nl = text.find('\n', sp);
    if (text.compare(pos, name.size(), name) == 0 &&
        (text[pos + name.size()] == '{' || text[pos + name.size()] == ' ')) {
      sum += std::stod(text.substr(sp + 1, nl - sp - 1));
    }
  }
  return sum;
}

std::string http_get(int port, const std::string& path) {
  return infergate::testing::loopback_get(port, path).second;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"operator_bench: N InferenceModels to steady state against the fake API server"};
  int models = 1000, workers = 4, baseline_threads = 4;
  bool trace = false;
  app.add_option("--models", models, "how many InferenceModels")->check(CLI::Range(1, 100000));
  app.add_option("--workers", workers, "operator workers")->check(CLI::Range(1, 256));
  app.add_flag("--trace", trace, "print progress every poll (models with status, Deployments, steady)");
  CLI11_PARSE(app, argc, argv);

  infergate::testing::FakeApiServerOptions so;
  so.bookmark_interval = 5s;
  auto server_r = FakeApiServer::start(so);
  if (!server_r.ok()) {
    std::fprintf(stderr, "fake API server: %s\n", server_r.error().to_string().c_str());
    return 1;
  }
  FakeApiServer& server = **server_r;
  auto crd = infergate::op::api::parse_yaml(
      *infergate::read_file(std::string(INFERGATE_CRD_DIR) + "/inferencemodels.serving.infergate.dev.yaml"),
      "crd");
  server.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", *crd);
  for (const char* ns : {"bench", "baseline"}) {
    server.create("/api/v1/namespaces",
                  {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
  }
  server.create("/api/v1/namespaces/bench/secrets", {{"apiVersion", "v1"},
                                                     {"kind", "Secret"},
                                                     {"metadata", {{"name", "model-signing-key"}}},
                                                     {"data", Json::object()}});

  // Baseline: the writes the operator must make per model, issued directly (same server, same run).
  auto baseline_start = Clock::now();
  {
    std::vector<std::thread> threads;
    std::atomic<int> next{0}, failures{0};
    for (int t = 0; t < baseline_threads; ++t) {
      threads.emplace_back([&] {
        infergate::op::client::RestConfig c;
        c.server = server.url();
        c.user_agent = "baseline";
        auto client = infergate::op::client::RestClient::create(c);
        for (int i = next++; i < models; i = next++) {
          std::string name = "b" + std::to_string(i);
          Json d = Json::parse(
              R"({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"namespace": "baseline"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "b"}},
                     "template": {"metadata": {"labels": {"app": "b"}},
                                  "spec": {"containers": [{"name": "runtime", "image": "infergate/runtime:0.1.0"}]}}}})");
          d["metadata"]["name"] = name;
          Json s = {{"apiVersion", "v1"},
                    {"kind", "Service"},
                    {"metadata", {{"name", name}, {"namespace", "baseline"}}},
                    {"spec", {{"selector", {{"app", "b"}}}, {"ports", {{{"port", 80}}}}}}};
          Json cm = {{"apiVersion", "v1"},
                     {"kind", "ConfigMap"},
                     {"metadata", {{"name", name}, {"namespace", "baseline"}}},
                     {"data", {{"status", infergate::op::api::to_yaml(model(i))}}}};
          infergate::op::client::PatchOptions po{"baseline", true, ""};
          namespace k = infergate::op::client::kinds;
          bool ok =
              (*client)
                  ->patch(k::deployment(), "baseline", name, infergate::op::client::PatchType::kApply, d, po)
                  .ok() &&
              (*client)
                  ->patch(k::service(), "baseline", name, infergate::op::client::PatchType::kApply, s, po)
                  .ok();
          infergate::op::client::ResourceKind cmk{"", "v1", "configmaps", "ConfigMap", true};
          ok = ok && (*client)->create(cmk, cm).ok();
          if (!ok) ++failures;
        }
      });
    }
    for (auto& t : threads) t.join();
    if (failures) std::fprintf(stderr, "baseline: %d failures\n", failures.load());
  }
  const double baseline_s = secs(Clock::now() - baseline_start);

  infergate::testing::ClusterSimulator sim(server);
  auto dir = infergate::TempDir::create("operator-bench");
  const auto kubeconfig = dir->path() / "kubeconfig";
  (void)infergate::write_file_atomic(kubeconfig, server.kubeconfig());
  infergate::SpawnOptions sp;
  sp.argv = {INFERGATE_OPERATOR_BIN,
             "--kubeconfig",
             kubeconfig.string(),
             "--namespace",
             "bench",
             "--workers",
             std::to_string(workers),
             "--metrics-bind-address",
             "127.0.0.1:0",
             "--metrics-secure=false",  // this measures reconciling, not scrape authorisation
             "--health-probe-bind-address",
             "0",
             "--log-level",
             "info"};
  sp.stdout_file = dir->path() / "operator.log";
  sp.stderr_file = sp.stdout_file;
  sp.die_with_parent = true;
  auto op = infergate::Subprocess::spawn(sp);
  if (!op.ok()) {
    std::fprintf(stderr, "spawn: %s\n", op.error().to_string().c_str());
    return 1;
  }
  // The operator logs the ports it bound at start.
  int metrics_port = 0;
  for (int i = 0; i < 200 && metrics_port == 0; ++i) {
    std::this_thread::sleep_for(50ms);
    auto log = infergate::read_file(dir->path() / "operator.log");
    std::smatch m;
    static const std::regex re("metrics_port=(\\d+)");
    if (log.ok() && std::regex_search(*log, m, re)) metrics_port = std::stoi(m[1]);
  }
  std::this_thread::sleep_for(500ms);  // caches synced, idle
  const long rss_idle = rss_kib(op->pid());
  const size_t requests_before = server.request_count();

  auto start = Clock::now();
  for (int i = 0; i < models; ++i)
    server.create("/apis/serving.infergate.dev/v1alpha1/namespaces/bench/inferencemodels", model(i));
  const double create_s = secs(Clock::now() - start);
  int done = 0;
  auto deadline = start + std::chrono::minutes(3);
  while (Clock::now() < deadline) {
    done = 0;
    for (const auto& im :
         server.list("/apis/serving.infergate.dev/v1alpha1/namespaces/bench/inferencemodels"))
      done += steady(im);
    if (trace) {
      size_t deployments = server.list("/apis/apps/v1/namespaces/bench/deployments").size();
      size_t pods = server.list("/api/v1/namespaces/bench/pods").size();
      std::printf("  t=%6.2f s  Deployments %zu  Pods %zu  steady %d  requests %zu\n",
                  secs(Clock::now() - start), deployments, pods, done,
                  server.request_count() - requests_before);
    }
    if (done == models) break;
    std::this_thread::sleep_for(250ms);  // the poll itself loads the server: measure to +-0.25 s
  }
  const double steady_s = secs(Clock::now() - start);
  std::this_thread::sleep_for(1s);  // let the last reactions to our own writes settle before measuring
  const long rss_loaded = rss_kib(op->pid());
  const double op_cpu = cpu_seconds(op->pid());
  std::string metrics = metrics_port ? http_get(metrics_port, "/metrics") : "";
  const double reconciles = metric_sum(metrics, "infergate_operator_reconcile_total");
  const double cached = metric_sum(metrics, "infergate_operator_cached_objects");
  const size_t operator_requests = [&] {
    size_t n = 0;
    auto reqs = server.requests();
    for (size_t i = requests_before; i < reqs.size(); ++i)
      n += reqs[i].user_agent.find("infergate-operator") != std::string::npos;
    return n;
  }();
  op->signal(SIGTERM);
  auto exit = op->wait_for(20s);

  std::printf("operator_bench: %d InferenceModels (1 replica each), %d workers, fake API server in-process\n",
              models, workers);
  std::printf("  models created in                 %8.2f s\n", create_s);
  std::printf("  steady state (all Ready+stable)   %8.2f s   (%d/%d models)%s\n", steady_s, done, models,
              done == models && steady_s <= 10 ? "   target <= 10 s: met" : "   target <= 10 s: NOT met");
  std::printf("  reconciles                        %8.0f     (%.2f per model)\n", reconciles,
              reconciles / models);
  std::printf("  reconciles per second             %8.0f\n", reconciles / steady_s);
  std::printf("  API requests by the operator      %8zu     (%.1f per model, watches included)\n",
              operator_requests, static_cast<double>(operator_requests) / models);
  std::printf("  operator CPU time                  %8.2f s   (user + system, whole run)\n", op_cpu);
  std::printf("  operator RSS idle / loaded        %8.1f / %.1f MiB\n", rss_idle / 1024.0,
              rss_loaded / 1024.0);
  std::printf(
      "  memory per cached object          %8.2f KiB (%0.f objects: models, Deployments, Services, Pods)\n",
      cached > 0 ? (rss_loaded - rss_idle) / cached : 0.0, cached);
  std::printf("  memory per model                  %8.2f KiB\n",
              (rss_loaded - rss_idle) / static_cast<double>(models));
  std::printf(
      "  baseline: the same writes direct  %8.2f s   (%d clients; apply Deployment + apply Service + "
      "write)\n",
      baseline_s, baseline_threads);
  std::printf("  ratio steady state / baseline     %8.2f x\n", steady_s / baseline_s);
  if (!exit || !exit->success())
    std::printf("  operator exit: %s\n", exit ? exit->describe().c_str() : "still running");
  return done == models ? 0 : 1;
}
