// The operator end to end against the fake API server and the simulated cluster: create, verify,
// spec changes, deletion, conflicts, broken watches, invalid specs, idempotence, API outages.
#include <gtest/gtest.h>

#include "integration/operator_fixture.h"

namespace infergate::op::testing {
namespace {

using namespace std::chrono_literals;
using infergate::testing::PodOutcome;

class Reconcile : public OperatorFixture {};

TEST_F(Reconcile, CreatesADeploymentAndServiceOwnedByTheModel) {
  start_operator();
  Json created = server_->create(kModels, model_json("glm")).body;
  ASSERT_TRUE(eventually(
      [&] { return server_->get(kDeploys + "/glm").ok() && server_->get(kServices + "/glm").ok(); }));
  for (const std::string& path : {kDeploys + "/glm", kServices + "/glm"}) {
    Json obj = server_->get(path).body;
    ASSERT_EQ(obj["metadata"]["ownerReferences"].size(), 1u) << path;
    const Json& ref = obj["metadata"]["ownerReferences"][0];
    EXPECT_EQ(ref["uid"], created["metadata"]["uid"]) << path;
    EXPECT_EQ(ref["kind"], "InferenceModel");
    EXPECT_EQ(ref["controller"], true);
    EXPECT_EQ(ref["blockOwnerDeletion"], true);
    EXPECT_EQ(obj["metadata"]["labels"]["app.kubernetes.io/managed-by"], "infergate-operator");
  }
  Json d = server_->get(kDeploys + "/glm").body;
  EXPECT_EQ(d["spec"]["replicas"], 2);
  const Json& verify = d["spec"]["template"]["spec"]["initContainers"][0];
  EXPECT_EQ(verify["name"], "verify");
  EXPECT_EQ(verify["args"][1], "/models/glm-4-9b/r3");
  // The simulated pods verify and become ready: the model is Ready, Verified, with the digest.
  ASSERT_TRUE(wait_condition("glm", "Ready", "True", "Serving"));
  ASSERT_TRUE(wait_condition("glm", "Verified", "True", "Verified"));
  ASSERT_TRUE(eventually([&] { return get_model("glm")["status"].contains("stable"); }));
  Json st = get_model("glm")["status"];
  EXPECT_EQ(st["stable"]["releaseDigest"], "sha256:" + std::string(64, 'a'));
  EXPECT_EQ(st["stable"]["summary"], "int8/int8 ctx=32768 x16");
  EXPECT_EQ(st["observedGeneration"], 1);
  EXPECT_EQ(st["readyReplicas"], 2);
  for (const char* reason : {"Deploying", "Verified", "RolledOut"}) {
    EXPECT_TRUE(eventually([&] { return !events_for("glm", reason).empty(); })) << reason;
  }
}

TEST_F(Reconcile, ReconcilingAnUnchangedModelAHundredTimesWritesNothing) {
  start_operator();
  server_->create(kModels, model_json("glm"));
  ASSERT_TRUE(wait_condition("glm", "Ready", "True"));
  ASSERT_TRUE(
      eventually([&] { return app_->manager().ready() && get_model("glm")["status"].contains("stable"); }));
  // Let the last reactions to our own writes settle (no operator write for 300 ms), then count.
  ASSERT_TRUE(eventually(
      [&] {
        size_t mark = server_->request_count();
        std::this_thread::sleep_for(300ms);
        return operator_writes_since(mark) == 0;
      },
      10s));
  app_->events().flush();
  size_t before = server_->request_count();
  for (int i = 0; i < 100; ++i) {
    auto r = app_->reconciler().reconcile({kNs, "glm"});
    ASSERT_TRUE(r.ok()) << r.error().to_string();
  }
  app_->events().flush();
  EXPECT_EQ(operator_writes_since(before), 0u) << [&] {
    std::string out;
    auto reqs = server_->requests();
    for (size_t i = before; i < reqs.size(); ++i) {
      if (reqs[i].method != "GET")
        out += reqs[i].method + " " + reqs[i].path + " " + reqs[i].user_agent + "\n";
    }
    return out;
  }();
}

// A spec change reaches stable through a canary stage (the rollout's own tests cover the gates).
TEST_F(Reconcile, ASpecChangeRollsTheWorkloadAndMovesStable) {
  start_operator();
  server_->create(kModels, model_json("glm"));
  ASSERT_TRUE(wait_condition("glm", "Ready", "True"));
  ASSERT_TRUE(eventually([&] { return get_model("glm")["status"].contains("stable"); }));
  std::string old_rev = get_model("glm")["status"]["stable"]["revision"];
  Json m = get_model("glm");
  m["spec"]["serving"]["kvCacheDtype"] = "fp8";
  m["spec"]["rollout"]["canary"]["analysisSeconds"] = 0;  // a KV stage with no gates: promote once ready
  ASSERT_EQ(server_->update(kModels + "/glm", m).status, 200);
  ASSERT_TRUE(eventually([&] {
    Json st = get_model("glm")["status"];
    return st.value("observedGeneration", 0) == 2 && st["stable"].value("kvCacheDtype", "") == "fp8";
  }));
  Json st = get_model("glm")["status"];
  EXPECT_NE(st["stable"]["revision"], old_rev);
  ASSERT_EQ(st["history"].size(), 2u);
  EXPECT_EQ(st["history"][1]["outcome"], "Promoted");
  EXPECT_EQ(st["history"][1]["stage"], "kvCache");
  EXPECT_EQ(server_->get(kDeploys + "/glm-canary").status, 404);
  Json d = server_->get(kDeploys + "/glm").body;
  const Json& args = d["spec"]["template"]["spec"]["containers"][0]["args"];
  EXPECT_NE(std::find(args.begin(), args.end(), "fp8"), args.end());
}

TEST_F(Reconcile, DeletingTheModelRemovesWhatItOwned) {
  sim_.reset();
  server_.reset();
  FakeApiServerOptions o;
  o.garbage_collection = false;  // envtest has no garbage collector either: the operator cleans up itself
  boot(o);
  start_operator();
  server_->create(kModels, model_json("glm"));
  const std::string budget = "/apis/policy/v1/namespaces/models/poddisruptionbudgets/glm";
  ASSERT_TRUE(eventually([&] {
    return server_->get(kDeploys + "/glm").ok() && server_->get(kServices + "/glm").ok() &&
           server_->get(budget).ok();
  }));
  ASSERT_EQ(server_->remove(kModels + "/glm").status, 200);
  ASSERT_TRUE(eventually([&] {
    return server_->get(kDeploys + "/glm").status == 404 && server_->get(kServices + "/glm").status == 404 &&
           server_->get(budget).status == 404;
  }));
}

TEST_F(Reconcile, AStatusConflictIsReReadAndRetriedWithoutLosingUpdates) {
  start_operator();
  // The first status write loses a race; a label another client writes meanwhile must survive.
  server_->add_fault(Fault{
      "PUT", "/inferencemodels/glm/status", "", Fault::Watch::kNever, Fault::Kind::kStatus, 409, -1, {}, 1});
  server_->create(kModels, model_json("glm"));
  ASSERT_TRUE(eventually([&] { return get_model("glm").contains("status"); }));
  Json m = get_model("glm");
  m["metadata"]["labels"]["team"] = "serving";
  ASSERT_EQ(server_->update(kModels + "/glm", m).status, 200);
  ASSERT_TRUE(wait_condition("glm", "Ready", "True"));
  Json now = get_model("glm");
  EXPECT_EQ(now["metadata"]["labels"]["team"], "serving");
  EXPECT_EQ(now["status"]["observedGeneration"], 1);
}

TEST_F(Reconcile, ARestartedOperatorAdoptsWhatExistsInsteadOfDuplicatingIt) {
  start_operator();
  server_->create(kModels, model_json("glm"));
  ASSERT_TRUE(wait_condition("glm", "Ready", "True"));
  ASSERT_TRUE(eventually([&] { return get_model("glm")["status"].contains("stable"); }));
  stop_operator();
  const std::string uid = server_->get(kDeploys + "/glm").body["metadata"]["uid"];
  // As if the operator had died after creating its workload but before writing any status.
  Json m = get_model("glm");
  m["status"] = Json::object();
  ASSERT_EQ(server_->update_status(kModels + "/glm", m).status, 200);
  size_t mark = server_->request_count();
  start_operator();
  ASSERT_TRUE(wait_condition("glm", "Ready", "True"));
  ASSERT_TRUE(eventually([&] { return get_model("glm")["status"].contains("stable"); }));
  EXPECT_EQ(server_->get(kDeploys + "/glm").body["metadata"]["uid"], uid);  // the same Deployment, adopted
  EXPECT_EQ(operator_writes_since(mark, "/deployments"), 0u);               // not even re-applied
  EXPECT_EQ(server_->list(kDeploys).size(), 1u);
}

TEST_F(Reconcile, ABrokenWatchLosesNoEvent) {
  start_operator();
  server_->create(kModels, model_json("a"));
  server_->create(kModels, model_json("b"));
  ASSERT_TRUE(
      eventually([&] { return server_->get(kDeploys + "/a").ok() && server_->get(kDeploys + "/b").ok(); }));
  // While every watch is down and the history is gone: b is deleted and c is created.
  server_->add_fault(Fault{
      "GET", "watch=true", "infergate-operator", Fault::Watch::kOnly, Fault::Kind::kStatus, 503, -1, {}, 6});
  server_->drop_watches();
  server_->remove(kModels + "/b");
  server_->create(kModels, model_json("c"));
  server_->compact();
  ASSERT_TRUE(eventually(
      [&] { return server_->get(kDeploys + "/c").ok() && server_->get(kDeploys + "/b").status == 404; },
      20s));
  EXPECT_TRUE(server_->get(kDeploys + "/a").ok());
}

TEST_F(Reconcile, AnInvalidSpecGetsAConditionAndAnEventAndNothingIsDeployed) {
  start_operator();
  // The API server's schema refuses what it describes (422, the field named) ...
  auto refused = server_->create(kModels, model_json("bad", "fp9"));
  ASSERT_EQ(refused.status, 422) << refused.body.dump();
  EXPECT_NE(refused.body["message"].get<std::string>().find("spec.serving.kvCacheDtype"), std::string::npos);
  // ... and so do its CEL rules, on the field they concern (a rule spanning fields: no ".." segment) ...
  Json cel = model_json("bad");
  cel["spec"]["artifact"]["path"] = "glm/../secrets";
  auto refused_by_rule = server_->create(kModels, cel);
  ASSERT_EQ(refused_by_rule.status, 422) << refused_by_rule.body.dump();
  EXPECT_NE(refused_by_rule.body["message"].get<std::string>().find(
                "spec.artifact.path: Invalid value: \"string\": path must not contain '.' or '..' segments"),
            std::string::npos)
      << refused_by_rule.body.dump();
  Json vllm = model_json("vllm-int8", "int8");
  vllm["spec"]["engine"] = {{"kind", "vllm"}, {"image", "vllm/vllm-openai:v0.9.2"}};
  auto refused_engine = server_->create(kModels, vllm);
  ASSERT_EQ(refused_engine.status, 422) << refused_engine.body.dump();
  EXPECT_NE(refused_engine.body["message"].get<std::string>().find("vLLM and SGLang run kvCacheDtype fp16"),
            std::string::npos);
  // ... and the operator refuses what only it knows (a model file for an engine that reads none).
  Json bad = model_json("bad");
  bad["spec"]["engine"] = {{"modelFile", "model.gguf"}};
  ASSERT_EQ(server_->create(kModels, bad).status, 201);
  ASSERT_TRUE(wait_condition("bad", "Ready", "False", "InvalidSpec"));
  Json c = condition_of(get_model("bad"), "Ready");
  EXPECT_NE(c["message"].get<std::string>().find("spec.engine.modelFile"), std::string::npos) << c.dump();
  EXPECT_TRUE(eventually([&] { return !events_for("bad", "InvalidSpec").empty(); }));
  EXPECT_EQ(server_->get(kDeploys + "/bad").status, 404);
}

TEST_F(Reconcile, AMissingTrustSecretBlocksUntilItAppears) {
  sim_.reset();
  server_.reset();
  boot({}, /*secret=*/false);
  start_operator();
  server_->create(kModels, model_json("glm"));
  ASSERT_TRUE(wait_condition("glm", "Ready", "False", "TrustKeyMissing"));
  EXPECT_TRUE(eventually([&] { return !events_for("glm", "TrustKeyMissing").empty(); }));
  EXPECT_EQ(server_->get(kDeploys + "/glm").status, 404);
  ASSERT_EQ(server_->create("/api/v1/namespaces/models/secrets", secret_json()).status, 201);
  ASSERT_TRUE(wait_condition("glm", "Ready", "True"));
}

TEST_F(Reconcile, AVerificationFailureIsShownWithReasonAndFile) {
  sim_->set_policy([](const Json&, const Json&) {
    PodOutcome o;
    o.verify_exit_code = 5;
    o.verify_message =
        R"({"reason":"DigestMismatch","message":"sha256 of the file differs from SHA256SUMS","file":"model-00002-of-00004.safetensors","expected":"ab12","actual":"cd34","exitCode":5})";
    return o;
  });
  start_operator();
  server_->create(kModels, model_json("glm"));
  ASSERT_TRUE(wait_condition("glm", "Verified", "False", "DigestMismatch"));
  Json v = condition_of(get_model("glm"), "Verified");
  EXPECT_NE(v["message"].get<std::string>().find("model-00002-of-00004.safetensors"), std::string::npos)
      << v.dump();
  ASSERT_TRUE(eventually([&] { return !events_for("glm", "DigestMismatch").empty(); }));
  auto evs = events_for("glm", "DigestMismatch");
  EXPECT_EQ(evs[0]["type"], "Warning");
  EXPECT_FALSE(get_model("glm")["status"].contains("stable"));
  Json r = condition_of(get_model("glm"), "Ready");
  EXPECT_EQ(r["reason"], "VerificationFailed");
}

TEST_F(Reconcile, ApiErrorsAreRetriedWithBackoffWithoutFlappingConditions) {
  auto o = options();
  o.metrics_bind_address = "127.0.0.1:0";
  o.metrics_secure = false;  // read below without a token (ChartRbac tests the secure endpoint)
  start_operator(o);
  server_->create(kModels, model_json("glm"));
  ASSERT_TRUE(wait_condition("glm", "Ready", "True"));
  ASSERT_TRUE(eventually([&] { return get_model("glm")["status"].contains("stable"); }));
  app_->events().flush();
  Json ready = condition_of(get_model("glm"), "Ready");
  // Someone deletes the Service while the API server refuses the operator's writes to it.
  size_t mark = server_->request_count();
  server_->add_fault(Fault{"PATCH",
                           "/services/glm",
                           "infergate-operator",
                           Fault::Watch::kNever,
                           Fault::Kind::kStatus,
                           500,
                           -1,
                           {},
                           12});
  auto outage = std::chrono::steady_clock::now();
  ASSERT_EQ(server_->remove(kServices + "/glm").status, 200);
  ASSERT_TRUE(eventually([&] { return server_->get(kServices + "/glm").ok(); }, 60s));
  auto recovered = std::chrono::steady_clock::now();
  size_t failed = 0;
  auto reqs = server_->requests();
  for (size_t i = mark; i < reqs.size(); ++i) failed += reqs[i].status == 500;
  EXPECT_EQ(failed, 12u);
  // Backoff, not a hot loop: 12 tries need at least the client's waits of 0.2 + 0.4 + 0.8 + 1.6 s
  // between its first five, and the work queue's per-key backoff after that.
  EXPECT_GE(recovered - outage, std::chrono::seconds(3));
  // The conditions never flipped: the model kept serving throughout.
  Json after = condition_of(get_model("glm"), "Ready");
  EXPECT_EQ(after["status"], "True");
  EXPECT_EQ(after["lastTransitionTime"], ready["lastTransitionTime"]);
  auto body = http_get(app_->manager().metrics_port(), "/metrics").second;
  EXPECT_NE(body.find("infergate_operator_api_requests_total{code=\"500\""), std::string::npos);
  EXPECT_NE(body.find("infergate_operator_reconcile_errors_total"), std::string::npos);
}

TEST_F(Reconcile, ServesProbesAndPlainMetricsWhenSecureServingIsOff) {
  auto o = options();
  o.metrics_bind_address = "127.0.0.1:0";
  o.metrics_secure = false;
  o.health_probe_bind_address = "127.0.0.1:0";
  start_operator(o);
  server_->create(kModels, model_json("glm"));
  ASSERT_TRUE(wait_condition("glm", "Ready", "True"));
  int hp = app_->manager().health_port(), mp = app_->manager().metrics_port();
  ASSERT_GT(hp, 0);
  ASSERT_GT(mp, 0);
  EXPECT_EQ(http_get(hp, "/healthz").first, 200);
  EXPECT_EQ(http_get(hp, "/readyz").first, 200);
  EXPECT_EQ(http_get(hp, "/nope").first, 404);
  auto [code, body] = http_get(mp, "/metrics");
  EXPECT_EQ(code, 200);
  for (const char* name :
       {"infergate_operator_reconcile_total", "infergate_operator_reconcile_duration_seconds_bucket",
        "infergate_operator_workqueue_depth", "infergate_operator_workqueue_queue_duration_seconds",
        "infergate_operator_api_requests_total", "infergate_operator_informer_relists_total",
        "infergate_operator_leader 1"}) {
    EXPECT_NE(body.find(name), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace infergate::op::testing
