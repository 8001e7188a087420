// Staged rollouts end to end: the operator (in-process) against the fake API server, with a simulated
// cluster whose kubelet runs the REAL infergate-agent on signed releases made by the real agent
// (keygen, manifest, sign). RolloutE2E: analysis windows a second long, no gates, pods that verify but
// serve nothing. ServingRolloutE2E: pods run the real `infergate-runtime serve` on a generated model,
// the quality gate's Job runs the real `infergate-runtime eval`, the performance gate scrapes the pods.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <fstream>
#include <optional>
#include <set>
#include <thread>

#include "fixtures/process_kubelet.h"
#include "infergate/common/fs.h"
#include "infergate/common/subprocess.h"
#include "integration/operator_fixture.h"

namespace infergate::op::testing {
namespace {

using namespace std::chrono_literals;
const std::string kAgent = INFERGATE_AGENT_BIN;
const std::string kOperator = INFERGATE_OPERATOR_BIN;

class RolloutE2E : public OperatorFixture {
 protected:
  void SetUp() override {
    OperatorFixture::SetUp();
    prepare();
    release("glm/fp16", "fp16", 3);
    release("glm/int8", "int8", 4);
    start_kubelet(infergate::testing::ProcessKubeletOptions());
  }
  void TearDown() override {
    if (kubelet_) kubelet_->stop();  // no check or runtime outlives the test
    OperatorFixture::TearDown();
  }

  void prepare() {
    auto d = TempDir::create("rollout-e2e");
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<TempDir>(std::move(*d));
    root_ = dir_->path() / "volume";
    trust_ = dir_->path() / "trust";
    std::filesystem::create_directories(trust_);
    std::filesystem::create_directories(dir_->path() / "work");
    agent({"keygen", "--out", (dir_->path() / "release").string()});
    std::filesystem::copy_file(dir_->path() / "release.pub.pem", trust_ / "release.pub.pem");
  }
  void start_kubelet(infergate::testing::ProcessKubeletOptions o) {
    o.agent_bin = kAgent;
    o.volume_root = root_;
    o.trust_dir = trust_;
    o.work_dir = dir_->path() / "work";
    kubelet_ = std::make_unique<infergate::testing::ProcessKubelet>(std::move(o));
    kubelet_->attach(*sim_, *server_);
  }

  void agent(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {kAgent};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_command(argv, 60s);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    ASSERT_TRUE(r->status.success()) << args[0] << ": " << r->err;
  }
  // A signed release: a few "weight" bytes, a config, the manifest and the signed statement.
  void release(const std::string& path, const std::string& format, int version) {
    const auto d = root_ / path;
    std::filesystem::create_directories(d);
    if (format == "fp16") {
      ASSERT_TRUE(write_file_atomic(d / "config.json", R"({"model_type":"llama"})").ok());
      ASSERT_TRUE(write_file_atomic(d / "model.safetensors", safetensors(static_cast<char>(version))).ok());
    } else {
      // A compressed release as `infergate-runtime quantize` writes one (its int8 shape: one linear).
      ASSERT_EQ(format, "int8");
      ASSERT_TRUE(
          write_file_atomic(d / "config.json",
                            R"({"model_type":"llama","quantization_config":{"quant_method":"infergate",)"
                            R"("weight_format":"int8","bits":8,"group_size":0,"symmetric":true,)"
                            R"("scale_dtype":"float16"}})")
              .ok());
      ASSERT_TRUE(write_file_atomic(d / "quantization.json",
                                    R"({"format_version":1,"weight_format":"int8","quantized":)"
                                    R"({"model.layers.0.mlp.up_proj.weight":{"shape":[16,128]}}})")
                      .ok());
      ASSERT_TRUE(
          write_file_atomic(d / "model.safetensors", int8_safetensors(static_cast<char>(version))).ok());
    }
    agent({"manifest", d.string()});
    agent({"sign", d.string(), "--key", (dir_->path() / "release.key").string(), "--name", "glm", "--version",
           std::to_string(version), "--weight-format", format, "--expires", "1d"});
  }

  // One int8 linear [16, 128] filled with `fill`, and its fp16 scales (1.0).
  static std::string int8_safetensors(char fill) {
    std::string header =
        R"({"model.layers.0.mlp.up_proj.scales":{"dtype":"F16","shape":[16],"data_offsets":[0,32]},)"
        R"("model.layers.0.mlp.up_proj.qweight":{"dtype":"I8","shape":[16,128],"data_offsets":[32,2080]}})";
    while (header.size() % 8) header += ' ';
    std::string out(8, '\0');
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    std::string scales;
    for (int i = 0; i < 16; ++i) scales += std::string("\x00\x3c", 2);
    return out + header + scales + std::string(2048, fill);
  }
  // A valid safetensors file: one f16 tensor of 2048 elements filled with `fill`.
  static std::string safetensors(char fill) {
    std::string header = R"({"w":{"dtype":"F16","shape":[2048],"data_offsets":[0,4096]}})";
    while (header.size() % 8) header += ' ';
    std::string out(8, '\0');
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return out + header + std::string(4096, fill);
  }

  Json model() {
    Json m = model_json("glm", "fp16", 2);
    m["spec"]["artifact"]["path"] = "glm/fp16";
    m["spec"]["artifact"]["trust"] = {{"publicKeySecretRef", {{"name", "model-signing-key"}}},
                                      {"expectName", "glm"}};
    m["spec"]["serving"]["weightFormat"] = "fp16";
    m["spec"]["serving"]["maxContextLength"] = 4096;
    m["spec"]["resources"] = Json::object();
    m["spec"]["rollout"] = {{"canary", {{"replicas", 1}, {"analysisSeconds", 1}}}};
    return m;
  }
  void deploy() {
    ASSERT_EQ(server_->create(kModels, model()).status, 201);
    ASSERT_TRUE(eventually(
        [&] { return status().contains("stable") && status()["stable"].contains("releaseDigest"); }, 20s))
        << status().dump(2);
  }
  void change(const std::function<void(Json&)>& edit) {
    for (int i = 0; i < 5; ++i) {
      Json m = get_model("glm");
      edit(m);
      if (server_->update(kModels + "/glm", m).status == 200) return;
    }
    FAIL() << "could not update the model";
  }
  Json status() { return get_model("glm").value("status", Json::object()); }
  std::string phase() {
    Json s = status();
    return s.contains("stage") ? s["stage"].value("phase", "") : "";
  }
  bool history_has(const std::string& outcome, const std::string& stage = "") {
    Json h = status().value("history", Json::array());
    for (const auto& e : h) {
      if (e["outcome"] == outcome && (stage.empty() || e["stage"] == stage)) return true;
    }
    return false;
  }
  static void to_int8(Json& m) {
    m["spec"]["serving"]["weightFormat"] = "int8";
    m["spec"]["serving"]["kvCacheDtype"] = "int8";
    m["spec"]["artifact"]["path"] = "glm/int8";
  }

  // infergate-operator as a process against the fake API server; its log is work/<identity>.log.
  Result<Subprocess> spawn_operator(const std::string& identity) {
    const auto kubeconfig = dir_->path() / "kubeconfig";
    INFERGATE_RETURN_IF_ERROR(write_file_atomic(kubeconfig, server_->kubeconfig()));
    SpawnOptions o;
    o.argv = {kOperator,
              "--kubeconfig",
              kubeconfig.string(),
              "--identity",
              identity,
              "--workers",
              "2",
              "--metrics-bind-address",
              "0",
              "--health-probe-bind-address",
              "0"};
    o.stdout_file = dir_->path() / "work" / (identity + ".log");
    o.stderr_file = o.stdout_file;
    o.die_with_parent = true;
    return Subprocess::spawn(o);
  }
  std::string log_of(const std::string& identity) const {
    return "\n--- " + identity + "\n" + read_file(dir_->path() / "work" / (identity + ".log")).value_or("");
  }

  std::unique_ptr<TempDir> dir_;
  std::filesystem::path root_, trust_;
  std::unique_ptr<infergate::testing::ProcessKubelet> kubelet_;
};

// ---- Gates on pods that really serve ----
// The kubelet runs the real `infergate-runtime serve` in every pod (a generated model with outlier key
// channels), the quality gate's Job runs the real `infergate-runtime eval` against the stable and
// canary Services, and the performance gate scrapes the pods' real /metrics.

const std::string kRuntime = INFERGATE_RUNTIME_BIN;

// A small quality suite (seconds per check). The spec names it by its path, and eval reports it by
// that path, which the rollout checks.
constexpr const char* kSuite = R"({
  "name": "rollout-e2e-small", "top_logprobs": 20, "seed": 0, "max_tokens": 16,
  "perplexity_text": "The river valley below the old mill was quiet in the early morning. Mist lay over the fields.",
  "tasks": [
    {"id": "text-1", "kind": "summarisation", "prompt": "Document: The authority repaired leaks and cut losses. Summary:"},
    {"id": "code-1", "kind": "code", "prompt": "def add(a, b):\n    return"},
    {"id": "json-1", "kind": "json", "required_keys": ["name"], "prompt": "Give a JSON object with a name.\nJSON: {"}
  ]})";

// POST a completion to a serving pod ("http://127.0.0.1:PORT"); the HTTP status (0: no answer).
int complete(const std::string& url, int max_tokens) {
  auto r = run_command({"curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "30",
                        url + "/v1/completions", "-H", "Content-Type: application/json", "-d",
                        "{\"prompt\":\"The river valley below the old mill\",\"max_tokens\":" +
                            std::to_string(max_tokens) + ",\"temperature\":0}"},
                       40s);
  return r.ok() ? std::atoi(r->out.c_str()) : 0;
}

class ServingRolloutE2E : public RolloutE2E {
 protected:
  void SetUp() override {
    OperatorFixture::SetUp();
    prepare();
    const auto dir = root_ / "glm/fp16";
    std::filesystem::create_directories(root_ / "glm");
    auto r = run_command({kRuntime,
                          "make-test-model",
                          "--out",
                          dir.string(),
                          "--arch",
                          "llama",
                          "--layers",
                          "2",
                          "--hidden",
                          "128",
                          "--heads",
                          "4",
                          "--kv-heads",
                          "2",
                          "--vocab",
                          "512",
                          "--outlier-channels",
                          "4",
                          "--seed",
                          "11",
                          "--max-position",
                          "1024"},
                         120s);
    ASSERT_TRUE(r.ok() && r->status.success()) << (r.ok() ? r->err : r.error().to_string());
    agent({"manifest", dir.string()});
    agent({"sign", dir.string(), "--key", (dir_->path() / "release.key").string(), "--name", "glm",
           "--version", "3", "--weight-format", "fp16", "--expires", "1d"});
    ASSERT_TRUE(write_file_atomic(suite(), kSuite).ok());
  }
  std::filesystem::path suite() const { return dir_->path() / "suite.json"; }
  // The kubelet's logs (runtime and eval), for failure messages.
  std::string work_logs() const {
    std::string out;
    for (const auto& e : std::filesystem::directory_iterator(dir_->path() / "work")) {
      if (e.path().extension() != ".log") continue;
      std::string text = read_file(e.path()).value_or("");
      if (text.size() > 1500) text = text.substr(text.size() - 1500);
      out += "--- " + e.path().filename().string() + "\n" + text + "\n";
    }
    return out;
  }

  // One stable pod, one canary pod, a context the generated model has.
  Json serving_model(const Json& gates, int analysis_seconds) {
    Json m = model();
    m["spec"]["replicas"] = 1;
    m["spec"]["serving"]["maxContextLength"] = 1024;
    m["spec"]["serving"]["maxConcurrency"] = 4;
    m["spec"]["rollout"] = {{"canary", {{"replicas", 1}, {"analysisSeconds", analysis_seconds}}},
                            {"gates", gates}};
    return m;
  }
  void deploy_serving(const Json& m) {
    ASSERT_EQ(server_->create(kModels, m).status, 201);
    ASSERT_TRUE(eventually(
        [&] { return status().contains("stable") && status()["stable"].contains("releaseDigest"); }, 120s))
        << status().dump(2);
    ASSERT_TRUE(wait_condition("glm", "Ready", "True", "", 60s)) << status().dump(2);
  }
  // The URL of the stable pod's serving process.
  std::string stable_url() {
    for (const auto& [pod, url] : kubelet_->serving()) {
      if (pod.rfind("glm-canary", 0) != 0) return url;
    }
    return "";
  }
};

TEST_F(ServingRolloutE2E, AQualityGateFailureFromARealEvalJobRollsBackAndLeavesStableServing) {
  infergate::testing::ProcessKubeletOptions o;
  o.runtime_bin = kRuntime;
  start_kubelet(std::move(o));
  start_operator();
  // Per-token int4 keys cannot hold the model's outlier key channels: mean KL ~3e-3 on this model and
  // suite, above the 0.001 that KV quantization should stay under (int8 KV measures ~2e-5).
  deploy_serving(serving_model(
      {{"quality", {{"suite", suite().string()}, {"maxMeanKL", 0.001}, {"timeoutSeconds", 240}}}}, 1));
  const Json stable_before = status()["stable"];
  const Json stable_deploy = server_->get(kDeploys + "/glm").body;
  change([](Json& m) { m["spec"]["serving"]["kvCacheDtype"] = "int4"; });
  ASSERT_TRUE(eventually([&] { return history_has("RolledBack", "kvCache"); }, 240s)) << status().dump(2);
  Json rb = condition_of(get_model("glm"), "RolledBack");
  EXPECT_EQ(rb["status"], "True");
  EXPECT_EQ(rb["reason"], "QualityThresholdFailed") << rb << "\n" << work_logs();
  const std::string msg = rb["message"];
  EXPECT_NE(msg.find("quality gate"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mean_kl"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0.001"), std::string::npos) << "the threshold is named: " << msg;
  // The verdict came from the eval Job's own termination message (the Job itself is gone with the
  // canary; the kubelet keeps what its check container wrote).
  std::optional<std::string> result;
  for (const auto& e : std::filesystem::directory_iterator(dir_->path() / "work")) {
    const std::string n = e.path().filename().string();
    if (n.rfind("glm-q-", 0) == 0 && e.path().extension() == ".termination-log")
      result = read_file(e.path()).value_or("");
  }
  ASSERT_TRUE(result) << "the eval Job wrote no result\n" << work_logs();
  EXPECT_NE(result->find("\"passed\":false"), std::string::npos) << *result;
  EXPECT_NE(result->find("mean_kl"), std::string::npos) << *result;
  // Stable untouched, and serving.
  EXPECT_EQ(status()["stable"]["revision"], stable_before["revision"]);
  EXPECT_EQ(status()["stable"]["summary"], "fp16/fp16 ctx=1024 x4");
  EXPECT_TRUE(eventually([&] { return server_->get(kDeploys + "/glm-canary").status == 404; }, 20s));
  EXPECT_EQ(server_->get(kDeploys + "/glm").body["metadata"]["generation"],
            stable_deploy["metadata"]["generation"]);
  EXPECT_EQ(status()["failedRevisions"].size(), 1u);
  EXPECT_FALSE(events_for("glm", "RolledBack").empty());
  EXPECT_EQ(complete(stable_url(), 4), 200) << "the stable pod stopped serving";
}

TEST_F(ServingRolloutE2E, APerformanceGateFailureOnADeliberatelySlowCanaryRollsBack) {
  // The kubelet slows every canary pod on purpose: 250 ms per step that produces tokens.
  infergate::testing::ProcessKubeletOptions o;
  o.runtime_bin = kRuntime;
  o.extra_runtime_args = [](const Json& pod) -> std::vector<std::string> {
    const Json labels = pod["metadata"].value("labels", Json::object());
    if (labels.value(std::string(api::labels::kTrack), "") != "canary") return {};
    return {"--debug-token-delay-ms", "250"};
  };
  start_kubelet(std::move(o));
  start_operator();
  deploy_serving(serving_model({{"performance", {{"maxTPOTP95Ratio", 3.0}, {"maxErrorRate", 0.5}}}}, 6));
  const Json stable_before = status()["stable"];
  change([](Json& m) { m["spec"]["serving"]["kvCacheDtype"] = "int8"; });
  // Traffic on both tracks while the stage runs, as users would send it.
  std::atomic<bool> done{false};
  std::atomic<int> ok{0};
  std::thread traffic([&] {
    while (!done) {
      for (const auto& [pod, url] : kubelet_->serving()) ok += complete(url, 6) == 200;
      std::this_thread::sleep_for(100ms);
    }
  });
  const bool rolled_back = eventually([&] { return history_has("RolledBack", "kvCache"); }, 180s);
  done = true;
  traffic.join();
  ASSERT_TRUE(rolled_back) << status().dump(2);
  EXPECT_GT(ok.load(), 0);
  Json rb = condition_of(get_model("glm"), "RolledBack");
  EXPECT_EQ(rb["reason"], "PerformanceThresholdFailed") << rb << "\n" << work_logs();
  const std::string msg = rb["message"];
  EXPECT_NE(msg.find("performance gate"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tpot p95"), std::string::npos) << msg;
  EXPECT_NE(msg.find("> 3"), std::string::npos) << "the threshold is named: " << msg;
  EXPECT_EQ(status()["stable"]["revision"], stable_before["revision"]);
  EXPECT_EQ(status()["stable"]["summary"], "fp16/fp16 ctx=1024 x4");
  EXPECT_TRUE(eventually([&] { return server_->get(kDeploys + "/glm-canary").status == 404; }, 20s));
  EXPECT_EQ(complete(stable_url(), 4), 200) << "the stable pod stopped serving";
}

TEST_F(RolloutE2E, HappyPathThroughTheWeightsAndKvStagesWithTheRealAgent) {
  start_operator();
  deploy();
  const std::string fp16_digest = status()["stable"]["releaseDigest"];
  change(to_int8);
  ASSERT_TRUE(eventually([&] { return history_has("Promoted", "weights"); }, 30s)) << status().dump(2);
  ASSERT_TRUE(
      eventually([&] { return history_has("Promoted", "kvCache") && !status().contains("stage"); }, 30s))
      << status().dump(2);
  Json st = status();
  EXPECT_EQ(st["stable"]["summary"], "int8/int8 ctx=4096 x16");
  EXPECT_NE(st["stable"]["releaseDigest"], fp16_digest) << "the int8 release, as the agent verified it";
  EXPECT_EQ(condition_of(get_model("glm"), "Progressing")["reason"], "Deployed");
  EXPECT_EQ(server_->get(kDeploys + "/glm-canary").status, 404);
  EXPECT_TRUE(eventually([&] { return !events_for("glm", "RolloutComplete").empty(); }, 5s));
}

TEST_F(RolloutE2E, ATamperedReleaseIsRefusedByTheAgentAndRolledBack) {
  start_operator();
  deploy();
  // One byte flipped after signing.
  {
    std::fstream f(root_ / "glm/int8/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('X');
  }
  change(to_int8);
  ASSERT_TRUE(eventually([&] { return history_has("RolledBack", "weights"); }, 30s)) << status().dump(2);
  Json rb = condition_of(get_model("glm"), "RolledBack");
  EXPECT_EQ(rb["status"], "True");
  EXPECT_EQ(rb["reason"], "DigestMismatch");
  EXPECT_NE(rb["message"].get<std::string>().find("model.safetensors"), std::string::npos) << rb;
  EXPECT_EQ(server_->get(kDeploys + "/glm-canary").status, 404);
  EXPECT_EQ(status()["stable"]["summary"], "fp16/fp16 ctx=4096 x16");
  EXPECT_EQ(server_->get(kDeploys + "/glm").body["spec"]["replicas"], 2);
  EXPECT_FALSE(events_for("glm", "RolledBack").empty());
  EXPECT_EQ(status()["failedRevisions"].size(), 1u);
}

// The operator runs as its own process here, so that it dies as a node kills it: SIGKILL, mid-stage,
// with nothing flushed and no lease released. The one started after it must carry on from status: the
// same canary Deployment, the same analysis window (not a new one), one stage, one promotion.
TEST_F(RolloutE2E, AnOperatorKilledMidStageResumesWithoutASecondCanary) {
  auto op = spawn_operator("op-first");
  ASSERT_TRUE(op.ok()) << op.error().to_string();
  deploy();
  static constexpr int kWindow = 6;
  change([](Json& m) {
    m["spec"]["serving"]["kvCacheDtype"] = "int8";
    m["spec"]["rollout"]["canary"]["analysisSeconds"] = kWindow;
  });
  ASSERT_TRUE(eventually([&] { return phase() == "Analyzing"; }, 20s))
      << status().dump(2) << log_of("op-first");
  const std::string canary_uid = server_->get(kDeploys + "/glm-canary").body["metadata"]["uid"];
  const std::string window_start = status()["stage"]["analysisStartedAt"];

  op->signal(SIGKILL);
  const ExitStatus killed = op->wait();
  ASSERT_EQ(killed.signal, SIGKILL) << killed.describe();
  ASSERT_EQ(phase(), "Analyzing") << "the stage outlived its operator: " << status().dump(2);
  const size_t mark = server_->request_count();
  auto next = spawn_operator("op-second");
  ASSERT_TRUE(next.ok()) << next.error().to_string();

  // Every state seen until the promotion has the first operator's canary and analysis window.
  std::set<std::string> uids, windows;
  ASSERT_TRUE(eventually(
      [&] {
        auto d = server_->get(kDeploys + "/glm-canary");
        if (d.status == 200) uids.insert(d.body["metadata"]["uid"].get<std::string>());
        const Json s = status();
        if (s.contains("stage") && s["stage"].contains("analysisStartedAt"))
          windows.insert(s["stage"]["analysisStartedAt"].get<std::string>());
        return history_has("Promoted", "kvCache");
      },
      30s))
      << status().dump(2) << log_of("op-second");
  EXPECT_EQ(uids, std::set<std::string>{canary_uid}) << "the canary was recreated";
  EXPECT_EQ(windows, std::set<std::string>{window_start}) << "the analysis window started over";
  EXPECT_GT(server_->writes_since(mark, "(op-second)"), 0u) << "the promotion was the new operator's";
  size_t created = 0;
  for (const auto& r : server_->requests()) {
    if (r.method == "POST" && r.path == kDeploys && r.user_agent.find("(op-second)") != std::string::npos)
      ++created;
  }
  EXPECT_EQ(created, 0u) << "the new operator created a Deployment: the canary existed";
  int started = 0;
  for (const auto& e : events_for("glm", "StageStarted")) started += e.value("count", 1);
  EXPECT_EQ(started, 1) << "one stage, one canary";
  next->terminate(10s);
}

TEST_F(RolloutE2E, ASpecChangedMidStageSupersedesTheOldRevisionCleanly) {
  start_operator();
  deploy();
  change([](Json& m) {
    m["spec"]["serving"]["kvCacheDtype"] = "int8";
    m["spec"]["rollout"]["canary"]["analysisSeconds"] = 600;
  });
  ASSERT_TRUE(eventually([&] { return phase() == "Analyzing"; }, 20s));
  const std::string old_rev = status()["stage"]["revision"];
  change([](Json& m) {
    m["spec"]["serving"]["kvCacheDtype"] = "fp8";
    m["spec"]["rollout"]["canary"]["analysisSeconds"] = 1;
  });
  ASSERT_TRUE(eventually([&] { return history_has("Promoted", "kvCache"); }, 30s)) << status().dump(2);
  EXPECT_TRUE(history_has("Superseded", "kvCache"));
  EXPECT_EQ(status()["stable"]["kvCacheDtype"], "fp8");
  EXPECT_NE(status()["stable"]["revision"], old_rev);
  EXPECT_EQ(server_->get(kDeploys + "/glm-canary").status, 404);
}

TEST_F(RolloutE2E, AbortThenRetryStartsTheStageOver) {
  start_operator();
  deploy();
  change([](Json& m) {
    m["spec"]["serving"]["kvCacheDtype"] = "int8";
    m["spec"]["rollout"]["canary"]["analysisSeconds"] = 600;
  });
  ASSERT_TRUE(eventually([&] { return phase() == "Analyzing"; }, 20s));
  change([](Json& m) { m["metadata"]["annotations"]["serving.infergate.dev/abort"] = "1"; });
  ASSERT_TRUE(eventually([&] { return history_has("Aborted") && !status().contains("stage"); }, 20s))
      << status().dump(2);
  EXPECT_EQ(server_->get(kDeploys + "/glm-canary").status, 404);
  EXPECT_EQ(condition_of(get_model("glm"), "Progressing")["reason"], "Aborted");
  change([](Json& m) {
    m["metadata"]["annotations"]["serving.infergate.dev/retry"] = "1";
    m["metadata"]["annotations"]["serving.infergate.dev/promote"] = m["status"]["history"].back()["revision"];
  });
  ASSERT_TRUE(eventually([&] { return history_has("Promoted", "kvCache"); }, 30s)) << status().dump(2);
  EXPECT_EQ(status()["stable"]["kvCacheDtype"], "int8");
}

}  // namespace
}  // namespace infergate::op::testing
