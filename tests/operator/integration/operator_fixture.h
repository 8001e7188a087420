// An operator running in-process against the fake API server, with the CRD installed, a namespace,
// the trust Secret, and the simulated Deployment controller and kubelet.
#pragma once

#include <thread>

#include "fixtures/cluster_simulator.h"
#include "fixtures/http_server.h"
#include "infergate/operator/api/inference_model.h"
#include "infergate/operator/app/operator_app.h"
#include "testing.h"

namespace infergate::op::testing {

inline const std::string kNs = "models";
inline const std::string kModels = "/apis/serving.infergate.dev/v1alpha1/namespaces/models/inferencemodels";
inline const std::string kDeploys = "/apis/apps/v1/namespaces/models/deployments";
inline const std::string kServices = "/api/v1/namespaces/models/services";
inline const std::string kEvents = "/api/v1/namespaces/models/events";

inline Json model_json(const std::string& name, const std::string& kv = "int8", int replicas = 2) {
  Json m = Json::parse(R"({"apiVersion": "serving.infergate.dev/v1alpha1", "kind": "InferenceModel",
    "metadata": {"namespace": "models"},
    "spec": {"artifact": {"volume": {"persistentVolumeClaim": {"claimName": "verified-model-artifacts"}},
                          "path": "glm-4-9b/r3",
                          "trust": {"publicKeySecretRef": {"name": "model-signing-key"}, "expectName": "glm-4-9b", "minVersion": 3}},
             "serving": {"weightFormat": "int8", "maxContextLength": 32768, "maxConcurrency": 16},
             "resources": {"limits": {"nvidia.com/gpu": "1"}}}})");
  m["metadata"]["name"] = name;
  m["spec"]["serving"]["kvCacheDtype"] = kv;
  m["spec"]["replicas"] = replicas;
  return m;
}

inline Json secret_json() {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", {{"name", "model-signing-key"}, {"namespace", "models"}}},
          {"data", {{"release.pub.pem", "LS0tLS1CRUdJTi0tLS0t"}}}};
}

// The condition of a type in an object's status (null when absent).
inline Json condition_of(const Json& obj, const std::string& type) {
  if (!obj.contains("status") || !obj["status"].contains("conditions")) return Json();
  for (const auto& c : obj["status"]["conditions"]) {
    if (c.value("type", "") == type) return c;
  }
  return Json();
}

// A GET over plain HTTP on loopback: (status code, body).
inline std::pair<int, std::string> http_get(int port, const std::string& path) {
  return infergate::testing::loopback_get(port, path);
}

class OperatorFixture : public ::testing::Test {
 protected:
  void SetUp() override { boot(); }

  void boot(FakeApiServerOptions o = {}, bool secret = true) {
    server_ = start_server(std::move(o));
    ASSERT_TRUE(server_);
    install_crd(*server_);
    ASSERT_EQ(server_
                  ->create("/api/v1/namespaces",
                           {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", kNs}}}})
                  .status,
              201);
    if (secret) {
      ASSERT_EQ(server_->create("/api/v1/namespaces/models/secrets", secret_json()).status, 201);
    }
    sim_ = std::make_unique<infergate::testing::ClusterSimulator>(*server_);
  }

  app::OperatorOptions options() {
    app::OperatorOptions o;
    o.metrics_bind_address = "0";
    o.health_probe_bind_address = "0";
    o.workers = 2;
    o.identity = "test-operator";
    o.api_timeout = std::chrono::seconds(10);
    o.trust_recheck = std::chrono::milliseconds(200);
    return o;
  }

  void start_operator(app::OperatorOptions o) {
    auto cfg = config_for(*server_);
    cfg.namespace_ = "default";
    start_operator(std::move(o), std::move(cfg));
  }
  void start_operator(app::OperatorOptions o, client::RestConfig cfg) {
    auto a = app::OperatorApp::create(o, cfg);
    ASSERT_TRUE(a.ok()) << a.error().to_string();
    app_ = std::move(*a);
    runner_ = std::thread([this] { run_status_ = app_->run(); });
    ASSERT_TRUE(eventually([&] { return app_->manager().ready(); }));
  }
  void start_operator() { start_operator(options()); }

  void stop_operator() {
    if (!app_) return;
    app_->stop();
    if (runner_.joinable()) runner_.join();
    app_.reset();
  }

  void TearDown() override {
    stop_operator();
    sim_.reset();
    server_.reset();
  }

  Json get_model(const std::string& name) { return server_->get(kModels + "/" + name).body; }

  bool wait_condition(const std::string& name, const std::string& type, const std::string& status,
                      const std::string& reason = "",
                      std::chrono::milliseconds limit = std::chrono::seconds(15)) {
    return eventually(
        [&] {
          Json c = condition_of(get_model(name), type);
          return c.is_object() && c.value("status", "") == status &&
                 (reason.empty() || c.value("reason", "") == reason);
        },
        limit);
  }

  // Events recorded about a model, by reason.
  std::vector<Json> events_for(const std::string& name, const std::string& reason = "") {
    if (app_) app_->events().flush();
    std::vector<Json> out;
    for (const auto& e : server_->list(kEvents)) {
      if (e["involvedObject"].value("name", "") == name &&
          (reason.empty() || e.value("reason", "") == reason)) {
        out.push_back(e);
      }
    }
    return out;
  }

  // Writes by this operator (its user agent carries its identity) since request index `since`.
  size_t operator_writes_since(size_t since, const std::string& path = "") {
    return server_->writes_since(since, "infergate-operator", path);
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<infergate::testing::ClusterSimulator> sim_;
  std::unique_ptr<app::OperatorApp> app_;
  std::thread runner_;
  Status run_status_;
};

}  // namespace infergate::op::testing
