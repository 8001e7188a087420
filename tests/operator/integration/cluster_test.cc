// The operator on a cluster that behaves like a real GPU cluster: nodes with a fixed number of GPUs
// and a scheduler, Deployments that roll within maxSurge/maxUnavailable, Pod Security admission, RBAC
// from the chart's own rendered Roles, and a CRD that may be older than the operator.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>

#include "fixtures/tls_certs.h"
#include "infergate/common/fs.h"
#include "infergate/common/subprocess.h"
#include "infergate/http/client.h"
#include "integration/operator_fixture.h"

namespace infergate::op::testing {
namespace {

using namespace std::chrono_literals;

// Watches every pod of the namespace as the API server commits them: the most that ever existed at
// once (each holds its GPUs until it is gone), and whether any was ever left unschedulable.
class PodLedger {
 public:
  explicit PodLedger(FakeApiServer& server) : server_(server) {
    id_ = server_.subscribe([this](const infergate::testing::ChangeRecord& rec) {
      if (rec.resource != "v1/pods") return;
      std::lock_guard lock(mu_);
      const std::string name = rec.object["metadata"].value("name", "");
      if (rec.type == "DELETED") {
        live_.erase(name);
      } else {
        live_.insert(name);
      }
      peak_ = std::max(peak_, live_.size());
      for (const auto& c : rec.object.value("status", Json::object()).value("conditions", Json::array())) {
        if (c.value("reason", "") == "Unschedulable") unschedulable_ = true;
      }
    });
  }
  ~PodLedger() { server_.unsubscribe(id_); }
  size_t peak() const {
    std::lock_guard lock(mu_);
    return peak_;
  }
  bool ever_unschedulable() const {
    std::lock_guard lock(mu_);
    return unschedulable_;
  }

 private:
  FakeApiServer& server_;
  int id_ = 0;
  mutable std::mutex mu_;
  std::set<std::string> live_;
  size_t peak_ = 0;
  bool unschedulable_ = false;
};

class GpuCluster : public OperatorFixture {
 protected:
  // Two replicas of one GPU each, a canary of one, one-second analysis windows.
  Json gpu_model(bool surge) {
    Json m = model_json("glm", "fp16", 2);
    m["spec"]["serving"]["weightFormat"] = "fp16";
    m["spec"]["artifact"]["path"] = "glm/fp16";
    m["spec"]["rollout"] = {{"canary", {{"replicas", 1}, {"analysisSeconds", 1}, {"surge", surge}}}};
    return m;
  }
  void deploy(const Json& m) {
    ASSERT_EQ(server_->create(kModels, m).status, 201);
    ASSERT_TRUE(eventually([&] { return status().contains("stable"); }, 20s)) << status().dump(2);
  }
  void change_to_int8() {
    for (int i = 0; i < 5; ++i) {
      Json m = get_model("glm");
      m["spec"]["serving"]["weightFormat"] = "int8";
      m["spec"]["serving"]["kvCacheDtype"] = "int8";
      m["spec"]["artifact"]["path"] = "glm/int8";
      if (server_->update(kModels + "/glm", m).status == 200) return;
    }
    FAIL() << "could not change the model";
  }
  Json status() { return get_model("glm").value("status", Json::object()); }
  int promoted() {
    int n = 0;
    for (const auto& h : status().value("history", Json::array())) n += h.value("outcome", "") == "Promoted";
    return n;
  }
};

TEST_F(GpuCluster, WithoutSurgeAPoolOfExactlyStablesGpusCompletesAWeightsAndAKvStage) {
  sim_->add_node("gpu-0", {{"nvidia.com/gpu", "2"}});
  PodLedger ledger(*server_);
  start_operator();
  deploy(gpu_model(/*surge=*/false));
  change_to_int8();
  ASSERT_TRUE(eventually([&] { return promoted() == 2 && !status().contains("stage"); }, 60s))
      << status().dump(2);
  EXPECT_EQ(status()["stable"]["summary"], "int8/int8 ctx=32768 x16");
  EXPECT_EQ(condition_of(get_model("glm"), "Ready")["status"], "True");
  EXPECT_LE(ledger.peak(), 2u) << "never more pods than the pool's two GPUs";
  EXPECT_FALSE(ledger.ever_unschedulable()) << "the canary never asked for a GPU stable still held";
  EXPECT_EQ(server_->get(kDeploys + "/glm-canary").status, 404);
  EXPECT_EQ(server_->get(kDeploys + "/glm").body["spec"]["strategy"]["rollingUpdate"]["maxSurge"], 0);
}

TEST_F(GpuCluster, WithSurgeAFullPoolSaysTheCanaryIsUnschedulableAndGoesOnWhenGpusAppear) {
  sim_->add_node("gpu-0", {{"nvidia.com/gpu", "2"}});
  PodLedger ledger(*server_);
  start_operator();
  deploy(gpu_model(/*surge=*/true));
  Json m = get_model("glm");
  m["spec"]["serving"]["weightFormat"] = "int8";
  m["spec"]["artifact"]["path"] = "glm/int8";
  ASSERT_EQ(server_->update(kModels + "/glm", m).status, 200);
  // The canary's pod finds no GPU: said in Progressing with the scheduler's words, and in one Event.
  ASSERT_TRUE(wait_condition("glm", "Progressing", "True", "Unschedulable", 20s)) << status().dump(2);
  const std::string msg = condition_of(get_model("glm"), "Progressing")["message"];
  EXPECT_NE(msg.find("Insufficient nvidia.com/gpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("surge: false"), std::string::npos) << "names the way out: " << msg;
  ASSERT_TRUE(eventually([&] { return events_for("glm", "CanaryUnschedulable").size() == 1; }));
  EXPECT_EQ(condition_of(get_model("glm"), "StableHealthy")["status"], "True") << "stable itself is fine";
  // One more GPU: the canary schedules, passes, and the promotion peaks at stable + canary.
  sim_->add_node("gpu-1", {{"nvidia.com/gpu", "1"}});
  ASSERT_TRUE(eventually([&] { return promoted() == 1 && !status().contains("stage"); }, 60s))
      << status().dump(2);
  EXPECT_EQ(status()["stable"]["weightFormat"], "int8");
  EXPECT_LE(ledger.peak(), 3u) << "stable 2 + canary 1, never a surge pod on top";
  EXPECT_EQ(events_for("glm", "CanaryUnschedulable").size(), 1u) << "no repeated warnings";
}

TEST_F(GpuCluster, NfsInARestrictedNamespaceIsRefusedWithWhatToDoInstead) {
  Json ns = server_->get("/api/v1/namespaces/" + kNs).body;
  ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "restricted";
  ASSERT_EQ(server_->update("/api/v1/namespaces/" + kNs, ns).status, 200);
  start_operator();
  Json m = model_json("glm");
  m["spec"]["artifact"]["volume"] = {{"nfs", {{"server", "nfs.example"}, {"path", "/exports/models"}}}};
  ASSERT_EQ(server_->create(kModels, m).status, 201);
  ASSERT_TRUE(wait_condition("glm", "StableHealthy", "False", "FailedCreate")) << get_model("glm").dump(2);
  const std::string msg = condition_of(get_model("glm"), "StableHealthy")["message"];
  EXPECT_NE(msg.find("violates PodSecurity \"restricted:latest\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("PersistentVolumeClaim bound to an NFS PersistentVolume"), std::string::npos) << msg;
  EXPECT_EQ(condition_of(get_model("glm"), "Ready")["reason"], "PodsNotReady");
  EXPECT_TRUE(eventually([&] { return events_for("glm", "FailedCreate").size() == 1; }));
  // Every pod the operator renders otherwise fits restricted: a PVC-backed model runs there.
  Json ok = model_json("pvc");
  ASSERT_EQ(server_->create(kModels, ok).status, 201);
  EXPECT_TRUE(wait_condition("pvc", "Ready", "True", "Serving"));
}

// The chart, rendered by helm, gives the operator its RBAC; the fake API server enforces it for the
// operator's service account exactly as those Roles say.
class ChartRbac : public OperatorFixture {
 protected:
  static constexpr const char* kRelease = "infergate-system";
  static constexpr const char* kToken = "operator-token";
  static constexpr const char* kScraperToken = "scraper-token";
  static constexpr const char* kStrangerToken = "stranger-token";

  void SetUp() override {
    if (!std::filesystem::exists(INFERGATE_HELM)) GTEST_SKIP() << "no helm (scripts/install-deps.sh)";
    FakeApiServerOptions o;
    o.users = {{kToken, std::string("system:serviceaccount:") + kRelease + ":t-infergate"},
               {kScraperToken, "system:serviceaccount:monitoring:prometheus-k8s"},
               {kStrangerToken, "system:serviceaccount:monitoring:someone-else"}};
    boot(o);
    ASSERT_EQ(server_
                  ->create("/api/v1/namespaces",
                           {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", kRelease}}}})
                  .status,
              201);
  }
  // Renders the chart with `--set` arguments and creates its RBAC objects.
  void install_rbac(const std::vector<std::string>& sets) {
    std::vector<std::string> argv = {INFERGATE_HELM,      "template",    "t",
                                     INFERGATE_CHART_DIR, "--namespace", kRelease};
    for (const auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    auto r = run_command(argv, 60s);
    ASSERT_TRUE(r.ok() && r->status.success()) << (r.ok() ? r->err : r.error().to_string());
    auto docs = api::parse_yaml_documents(r->out, "helm template");
    ASSERT_TRUE(docs.ok()) << docs.error().to_string();
    for (const auto& d : *docs) {
      const std::string kind = d.value("kind", "");
      const std::string plural = kind == "Role"                 ? "roles"
                                 : kind == "RoleBinding"        ? "rolebindings"
                                 : kind == "ClusterRole"        ? "clusterroles"
                                 : kind == "ClusterRoleBinding" ? "clusterrolebindings"
                                                                : "";
      if (plural.empty()) continue;
      const std::string ns = d["metadata"].value("namespace", "");
      const std::string path =
          "/apis/rbac.authorization.k8s.io/v1/" + (ns.empty() ? "" : "namespaces/" + ns + "/") + plural;
      auto c = server_->create(path, d);
      if (c.status == 409) continue;  // rendered again with more values: the rest is the same
      ASSERT_EQ(c.status, 201) << c.body.dump();
    }
  }
  void start_as_the_operator(std::vector<std::string> namespaces) {
    start_as_the_operator(options(), std::move(namespaces));
  }
  void start_as_the_operator(app::OperatorOptions o, std::vector<std::string> namespaces) {
    o.namespaces = std::move(namespaces);
    o.leader_elect = true;
    o.leader_elect_namespace = kRelease;
    auto cfg = config_for(*server_);
    cfg.namespace_ = kRelease;
    cfg.token = client::TokenSource::fixed(kToken);
    start_operator(o, cfg);
  }
  size_t forbidden_requests() {
    size_t n = 0;
    for (const auto& r : server_->requests())
      n += r.status == 403 && r.user_agent.find("infergate-operator") != std::string::npos;
    return n;
  }
};

TEST_F(ChartRbac, WatchingListedNamespacesWorksWithOnlyTheChartsRoles) {
  install_rbac({"watchNamespaces={models}"});
  start_as_the_operator({"models"});
  ASSERT_EQ(server_->create(kModels, model_json("glm")).status, 201);
  ASSERT_TRUE(wait_condition("glm", "Ready", "True", "Serving", 20s)) << get_model("glm").dump(2);
  EXPECT_EQ(forbidden_requests(), 0u) << "every request the operator makes is one the chart grants";
}

TEST_F(ChartRbac, AModelWhoseSecretIsForbiddenSaysWhichValueGrantsIt) {
  install_rbac({});  // every namespace watched; trust Secrets readable in the release namespace only
  start_as_the_operator({});
  ASSERT_EQ(server_->create(kModels, model_json("glm")).status, 201);
  ASSERT_TRUE(wait_condition("glm", "Ready", "False", "TrustKeyForbidden", 20s)) << get_model("glm").dump(2);
  const std::string msg = condition_of(get_model("glm"), "Ready")["message"];
  EXPECT_NE(msg.find("\"get\" on secrets"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rbac.trustSecretNamespaces"), std::string::npos) << msg;
  EXPECT_EQ(server_->get(kDeploys + "/glm").status, 404);
  // The value it names, upgraded: the model deploys on the next look (no restart, no hot loop).
  const size_t before = forbidden_requests();
  install_rbac({"rbac.trustSecretNamespaces={models}"});
  ASSERT_TRUE(wait_condition("glm", "Ready", "True", "Serving", 20s)) << get_model("glm").dump(2);
  EXPECT_LE(forbidden_requests() - before, 3u) << "looked again at the trust-recheck period, not in a loop";
}

TEST_F(ChartRbac, MetricsAnswerOnlyTokensTheMetricsReaderRoleIsBoundTo) {
  // The chart binds its metrics-reader ClusterRole to the scraper's service account (metrics.readers)
  // and lets the operator create the reviews; nothing else is set up by hand.
  install_rbac({"metrics.readers[0].kind=ServiceAccount", "metrics.readers[0].name=prometheus-k8s",
                "metrics.readers[0].namespace=monitoring"});
  auto tls = infergate::testing::make_tls_material();
  ASSERT_TRUE(tls.ok()) << tls.error().to_string();
  auto certs = TempDir::create("metrics-cert");
  ASSERT_TRUE(certs.ok());
  ASSERT_TRUE(write_file_atomic(certs->path() / "tls.crt", tls->server_cert_pem).ok());
  ASSERT_TRUE(write_file_atomic(certs->path() / "tls.key", tls->server_key_pem).ok());
  app::OperatorOptions o = options();
  o.metrics_bind_address = "127.0.0.1:0";
  o.metrics_secure = true;
  o.metrics_cert_dir = certs->path();
  start_as_the_operator(o, {});
  const std::string url = "https://127.0.0.1:" + std::to_string(app_->manager().metrics_port()) + "/metrics";
  auto scrape = [&](const std::string& token) {
    http::ClientRequest r;
    r.timeout = 10s;
    if (!token.empty()) r.headers = {{"Authorization", "Bearer " + token}};
    return http::fetch(url, r, http::ClientTls{tls->ca_pem, "", "", false});
  };
  auto anonymous = scrape("");
  ASSERT_TRUE(anonymous.ok()) << anonymous.error().to_string();
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_EQ(anonymous->header("www-authenticate"), "Bearer");
  auto unknown = scrape("made-up-token");
  ASSERT_TRUE(unknown.ok()) << unknown.error().to_string();
  EXPECT_EQ(unknown->status, 401) << unknown->body;
  auto stranger = scrape(kStrangerToken);
  ASSERT_TRUE(stranger.ok()) << stranger.error().to_string();
  EXPECT_EQ(stranger->status, 403) << stranger->body;
  EXPECT_NE(stranger->body.find("system:serviceaccount:monitoring:someone-else"), std::string::npos)
      << stranger->body;
  EXPECT_EQ(stranger->body.find("infergate_operator"), std::string::npos);
  auto scraper = scrape(kScraperToken);
  ASSERT_TRUE(scraper.ok()) << scraper.error().to_string();
  EXPECT_EQ(scraper->status, 200) << scraper->body;
  EXPECT_NE(scraper->body.find("infergate_operator_leader 1"), std::string::npos) << scraper->body;
  // Plain HTTP to the TLS port gets nothing.
  http::ClientRequest plain;
  plain.timeout = 5s;
  plain.headers = {{"Authorization", std::string("Bearer ") + kScraperToken}};
  auto cleartext =
      http::fetch("http://127.0.0.1:" + std::to_string(app_->manager().metrics_port()) + "/metrics", plain);
  EXPECT_TRUE(!cleartext.ok() || cleartext->status != 200);
  EXPECT_EQ(forbidden_requests(), 0u) << "the chart lets the operator create the token and access reviews";
}

class CrdSkew : public OperatorFixture {};

TEST_F(CrdSkew, TheOperatorRefusesToStartOnACrdOlderThanItself) {
  const std::string path =
      "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/inferencemodels.serving.infergate.dev";
  Json crd = server_->get(path).body;
  crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["stage"]
     ["properties"]
         .erase("failureReason");
  ASSERT_EQ(server_->update(path, crd).status, 200);
  auto cfg = config_for(*server_);
  auto a = app::OperatorApp::create(options(), cfg);
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  Status st = (*a)->run();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().reason(), "CrdOutdated");
  EXPECT_NE(st.error().message().find("status.stage.failureReason"), std::string::npos)
      << st.error().message();
  EXPECT_NE(st.error().message().find("kubectl apply --server-side -f charts/infergate/crds/"),
            std::string::npos);
  EXPECT_EQ(operator_writes_since(0), 0u) << "it wrote nothing";
}

}  // namespace
}  // namespace infergate::op::testing
