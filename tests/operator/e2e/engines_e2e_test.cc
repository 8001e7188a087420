// Third-party engines end to end: the operator (in-process) against the fake API server, a kubelet
// that runs the REAL agent (init container and the serving container's `infergate-agent exec`
// wrapper) and, after the wrapper's "--", the stand-in engine (tests/fixtures/stand_in_engine.h) with
// the command line the adapter rendered for vLLM, SGLang or llama.cpp. The performance gate scrapes
// each engine's own /metrics exposition; traffic goes to both tracks' pods as users would send it.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <optional>
#include <thread>

#include "fixtures/process_kubelet.h"
#include "infergate/common/fs.h"
#include "infergate/common/subprocess.h"
#include "integration/operator_fixture.h"

namespace infergate::op::testing {
namespace {

using namespace std::chrono_literals;
const std::string kAgent = INFERGATE_AGENT_BIN;
const std::string kStandIn = INFERGATE_STAND_IN_ENGINE_BIN;
const std::string kRuntime = INFERGATE_RUNTIME_BIN;
const std::string kName = "qwen";

// POST a completion to a serving pod ("http://127.0.0.1:PORT"); the HTTP status (0: no answer).
int complete(const std::string& url, int max_tokens) {
  auto r = run_command({"curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20",
                        url + "/v1/completions", "-H", "Content-Type: application/json", "-d",
                        "{\"prompt\":\"The river valley below the old mill\",\"max_tokens\":" +
                            std::to_string(max_tokens) + ",\"temperature\":0}"},
                       30s);
  return r.ok() ? std::atoi(r->out.c_str()) : 0;
}

// The number after `after` in a gate message ("tpot p95 0.16s vs stable 0.02s (ratio 7.9 > 2)"):
// NaN when absent.
double number_after(const std::string& message, const std::string& what, const std::string& after) {
  size_t at = message.find(what);
  if (at == std::string::npos) return std::nan("");
  at = message.find(after, at);
  if (at == std::string::npos) return std::nan("");
  return std::strtod(message.c_str() + at + after.size(), nullptr);
}

bool is_canary(const Json& pod) {
  return pod["metadata"].value("labels", Json::object()).value(std::string(api::labels::kTrack), "") ==
         "canary";
}

class EnginesE2E : public OperatorFixture {
 protected:
  void SetUp() override {
    OperatorFixture::SetUp();
    auto d = TempDir::create("engines-e2e");
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<TempDir>(std::move(*d));
    root_ = dir_->path() / "volume";
    trust_ = dir_->path() / "trust";
    std::filesystem::create_directories(trust_);
    std::filesystem::create_directories(dir_->path() / "work");
    agent({"keygen", "--out", (dir_->path() / "release").string()});
    std::filesystem::copy_file(dir_->path() / "release.pub.pem", trust_ / "release.pub.pem");
  }
  void TearDown() override {
    if (kubelet_) kubelet_->stop();  // no engine outlives the test
    OperatorFixture::TearDown();
  }

  void agent(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {kAgent};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_command(argv, 60s);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    ASSERT_TRUE(r->status.success()) << args[0] << ": " << r->err;
  }
  void sign(const std::filesystem::path& d, const std::string& format) {
    agent({"manifest", d.string()});
    agent({"sign", d.string(), "--key", (dir_->path() / "release.key").string(), "--name", kName, "--version",
           "3", "--weight-format", format, "--expires", "1d"});
  }
  // A Hugging Face release as vLLM and SGLang load it: config.json and one bf16 safetensors file.
  void hf_release(const std::string& path) {
    const auto d = root_ / path;
    std::filesystem::create_directories(d);
    ASSERT_TRUE(write_file_atomic(d / "config.json",
                                  R"({"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2",)"
                                  R"("torch_dtype":"bfloat16","hidden_size":128,"num_attention_heads":4,)"
                                  R"("num_key_value_heads":2,"num_hidden_layers":2,"vocab_size":512,)"
                                  R"("max_position_embeddings":4096})")
                    .ok());
    std::string header = R"({"w":{"dtype":"BF16","shape":[2048],"data_offsets":[0,4096]}})";
    while (header.size() % 8) header += ' ';
    std::string st(8, '\0');
    for (int i = 0; i < 8; ++i) st[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    ASSERT_TRUE(write_file_atomic(d / "model.safetensors", st + header + std::string(4096, '\x3c')).ok());
    sign(d, "bf16");
  }
  // A llama.cpp release: one GGUF file (the magic and version are all the stand-in reads).
  void gguf_release(const std::string& path) {
    const auto d = root_ / path;
    std::filesystem::create_directories(d);
    std::string gguf = std::string("GGUF") + std::string("\x03\0\0\0", 4) + std::string(4096, '\x11');
    ASSERT_TRUE(write_file_atomic(d / "model-f16.gguf", gguf).ok());
    sign(d, "fp16");
  }

  // A kubelet that runs engines through the stand-in; `env` per pod sets its test knobs.
  void start_kubelet(std::function<std::map<std::string, std::string>(const Json&)> env) {
    infergate::testing::ProcessKubeletOptions o;
    o.agent_bin = kAgent;
    o.volume_root = root_;
    o.trust_dir = trust_;
    o.work_dir = dir_->path() / "work";
    o.runtime_bin = kRuntime;
    o.stand_in_engine_bin = kStandIn;
    o.serving_env = std::move(env);
    o.start_timeout = 30s;
    kubelet_ = std::make_unique<infergate::testing::ProcessKubelet>(std::move(o));
    kubelet_->attach(*sim_, *server_);
  }

  // One stable pod, one canary pod; `engine` and `serving` as the test says.
  Json engine_model(const std::string& path, const Json& engine, const std::string& weights,
                    const Json& gates) {
    Json m = model_json(kName, "fp16", 1);
    m["spec"]["artifact"]["path"] = path;
    m["spec"]["artifact"]["trust"] = {{"publicKeySecretRef", {{"name", "model-signing-key"}}},
                                      {"expectName", kName}};
    m["spec"]["serving"]["weightFormat"] = weights;
    m["spec"]["serving"]["maxContextLength"] = 1024;
    m["spec"]["serving"]["maxConcurrency"] = 4;
    m["spec"]["resources"] = Json::object();
    m["spec"]["engine"] = engine;
    m["spec"]["rollout"] = {{"canary", {{"replicas", 1}, {"analysisSeconds", 5}}}, {"gates", gates}};
    return m;
  }
  void deploy(const Json& m) {
    ASSERT_EQ(server_->create(kModels, m).status, 201);
    ASSERT_TRUE(eventually(
        [&] { return status().contains("stable") && status()["stable"].contains("releaseDigest"); }, 30s))
        << status().dump(2) << work_logs();
    ASSERT_TRUE(wait_condition(kName, "Ready", "True", "", 30s)) << status().dump(2) << work_logs();
  }
  void change(const std::function<void(Json&)>& edit) {
    for (int i = 0; i < 5; ++i) {
      Json m = get_model(kName);
      edit(m);
      if (server_->update(kModels + "/" + kName, m).status == 200) return;
    }
    FAIL() << "could not update the model";
  }
  Json status() { return get_model(kName).value("status", Json::object()); }
  bool history_has(const std::string& outcome, const std::string& stage = "") {
    for (const auto& e : status().value("history", Json::array())) {
      if (e["outcome"] == outcome && (stage.empty() || e["stage"] == stage)) return true;
    }
    return false;
  }
  // The kubelet's logs (agent wrapper and engine), for failure messages.
  std::string work_logs() const {
    std::string out;
    for (const auto& e : std::filesystem::directory_iterator(dir_->path() / "work")) {
      if (e.path().extension() != ".log") continue;
      std::string text = read_file(e.path()).value_or("");
      if (text.size() > 1200) text = text.substr(text.size() - 1200);
      out += "\n--- " + e.path().filename().string() + "\n" + text;
    }
    return out;
  }

  // Runs the stage with traffic on both tracks until `done` holds (or `limit` passes); returns whether
  // it held, with the performance gate's last result seen in status.stage (measurements included).
  struct StageRun {
    bool done = false;
    int ok = 0, failed = 0;  // answered 200, answered 5xx (a pod going away answers neither)
    Json gate;               // status.stage.gateResults[gate=performance], the last seen
  };
  StageRun run_stage(const std::function<bool()>& done, std::chrono::seconds limit) {
    std::atomic<bool> stop{false};
    std::atomic<int> ok{0}, failed{0};
    std::thread traffic([&] {
      while (!stop) {
        for (const auto& [pod, url] : kubelet_->serving()) {
          const int code = complete(url, 4);
          if (code == 200) ++ok;
          if (code >= 500) ++failed;
        }
        std::this_thread::sleep_for(20ms);
      }
    });
    StageRun r;
    r.done = eventually(
        [&] {
          Json st = status();
          if (st.contains("stage")) {
            for (const auto& g : st["stage"].value("gateResults", Json::array())) {
              if (g.value("gate", "") == "performance" && g.contains("measurements")) r.gate = g;
            }
          }
          return done();
        },
        limit);
    stop = true;
    traffic.join();
    r.ok = ok;
    r.failed = failed;
    return r;
  }

  std::unique_ptr<TempDir> dir_;
  std::filesystem::path root_, trust_;
  std::unique_ptr<infergate::testing::ProcessKubelet> kubelet_;
};

const Json kVllm = {{"kind", "vllm"}, {"image", "vllm/vllm-openai:v0.11.0"}};
const Json kSglang = {{"kind", "sglang"}, {"image", "lmsysorg/sglang:v0.5.3-cu126"}};
const Json kThresholds = {
    {"performance", {{"maxTTFTP95Ratio", 2.0}, {"maxTPOTP95Ratio", 2.0}, {"maxErrorRate", 0.05}}}};

// The same per-token delay on every pod: canary and stable equally fast.
std::map<std::string, std::string> equal_speed(const Json&) {
  return {{"INFERGATE_STANDIN_TOKEN_DELAY_MS", "20"}};
}
// The canary's engine 8x slower per token.
std::map<std::string, std::string> slow_canary(const Json& pod) {
  return {{"INFERGATE_STANDIN_TOKEN_DELAY_MS", is_canary(pod) ? "160" : "20"}};
}
// The canary's engine fails every third completion (HTTP 500).
std::map<std::string, std::string> failing_canary(const Json& pod) {
  std::map<std::string, std::string> env = {{"INFERGATE_STANDIN_TOKEN_DELAY_MS", "20"}};
  if (is_canary(pod)) env["INFERGATE_STANDIN_FAIL_EVERY"] = "3";
  return env;
}

void to_fp8(Json& m) { m["spec"]["serving"]["kvCacheDtype"] = "fp8"; }

TEST_F(EnginesE2E, AVllmFp8KvStagePromotesWhenTheCanaryIsAsFastAsStable) {
  hf_release("qwen/bf16");
  start_kubelet(equal_speed);
  start_operator();
  deploy(engine_model("qwen/bf16", kVllm, "bf16", kThresholds));
  change(to_fp8);
  StageRun r =
      run_stage([&] { return history_has("Promoted", "kvCache") && !status().contains("stage"); }, 50s);
  ASSERT_TRUE(r.done) << status().dump(2) << work_logs();
  EXPECT_GT(r.ok, 0);
  EXPECT_EQ(r.failed, 0);
  EXPECT_EQ(status()["stable"]["kvCacheDtype"], "fp8");
  EXPECT_EQ(server_->get(kDeploys + "/" + kName + "-canary").status, 404);
  ASSERT_TRUE(r.gate.is_object()) << "no performance gate result was seen in status";
  EXPECT_EQ(r.gate["outcome"], "Passed") << r.gate;
  const Json& m = r.gate["measurements"];
  EXPECT_GT(m.value("requests_canary", 0.0), 0) << r.gate;
  EXPECT_GT(m.value("requests_stable", 0.0), 0) << r.gate;
  EXPECT_EQ(m.value("error_rate", -1.0), 0.0) << r.gate;
  EXPECT_TRUE(m.contains("ttft_p95_ratio") && m.contains("tpot_p95_ratio")) << r.gate;
  // The new stable pods serve fp8 KV as vLLM spells it.
  const Json d = server_->get(kDeploys + "/" + kName).body;
  const std::string args = d["spec"]["template"]["spec"]["containers"][0]["args"].dump();
  EXPECT_NE(args.find(R"("--kv-cache-dtype","fp8")"), std::string::npos) << args;
}

TEST_F(EnginesE2E, AVllmCanaryMadeSlowByItsEngineRollsBackWithTheLatencyInStatus) {
  hf_release("qwen/bf16");
  start_kubelet(slow_canary);
  start_operator();
  deploy(engine_model("qwen/bf16", kVllm, "bf16", kThresholds));
  const Json stable_before = status()["stable"];
  change(to_fp8);
  StageRun r = run_stage([&] { return history_has("RolledBack", "kvCache"); }, 50s);
  ASSERT_TRUE(r.done) << status().dump(2) << work_logs();
  Json rb = condition_of(get_model(kName), "RolledBack");
  EXPECT_EQ(rb["reason"], "PerformanceThresholdFailed") << rb;
  const std::string msg = rb["message"];
  EXPECT_NE(msg.find("performance gate failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tpot p95"), std::string::npos) << msg;
  EXPECT_NE(msg.find("> 2"), std::string::npos) << "the threshold is named: " << msg;
  // The measured numbers are in status: 160 ms per token on the canary, 20 on stable.
  EXPECT_GT(number_after(msg, "tpot p95", "(ratio "), 2.0) << msg;
  EXPECT_GT(number_after(msg, "tpot p95", "tpot p95 "), 0.1) << msg;
  if (r.gate.is_object()) {  // the gate's result, when a status write showed it before the rollback
    EXPECT_EQ(r.gate["outcome"], "Failed") << r.gate;
    EXPECT_GT(r.gate["measurements"].value("tpot_p95_ratio", 0.0), 2.0) << r.gate;
  }
  EXPECT_EQ(status()["stable"]["revision"], stable_before["revision"]);
  EXPECT_EQ(status()["stable"]["kvCacheDtype"], "fp16");
  EXPECT_TRUE(
      eventually([&] { return server_->get(kDeploys + "/" + kName + "-canary").status == 404; }, 20s));
}

TEST_F(EnginesE2E, AVllmCanaryWhoseEngineFailsRequestsRollsBackOnTheErrorRate) {
  hf_release("qwen/bf16");
  start_kubelet(failing_canary);
  start_operator();
  deploy(engine_model("qwen/bf16", kVllm, "bf16", kThresholds));
  change(to_fp8);
  StageRun r = run_stage([&] { return history_has("RolledBack", "kvCache"); }, 50s);
  ASSERT_TRUE(r.done) << status().dump(2) << work_logs();
  EXPECT_GT(r.failed, 0) << "the canary's engine answered 500s";
  Json rb = condition_of(get_model(kName), "RolledBack");
  EXPECT_EQ(rb["reason"], "PerformanceThresholdFailed") << rb;
  const std::string msg = rb["message"];
  EXPECT_NE(msg.find("error rate"), std::string::npos) << msg;
  EXPECT_NE(msg.find("> 0.05"), std::string::npos) << msg;
  // Every third canary completion failed: vLLM counts them under http_requests_total{status="5xx"},
  // not in request_success_total, and the gate divides by both.
  EXPECT_NEAR(number_after(msg, "error rate", "error rate "), 1.0 / 3, 0.15) << msg;
  EXPECT_EQ(status()["stable"]["kvCacheDtype"], "fp16");
}

TEST_F(EnginesE2E, AnSglangFp8KvStagePromotesWhenEquallyFastAndRollsBackWhenTheCanaryIsSlow) {
  // Promotes: both tracks equally fast.
  hf_release("qwen/bf16");
  std::atomic<bool> slow{false};
  // SGLang's counters and histograms are prometheus_client children created at a pod's first
  // request, and its /health probe does not count as one: the start-of-window scrape of an idle pod
  // has none of the series, and the gate counts them from zero (rollout::delta).
  start_kubelet([&](const Json& pod) -> std::map<std::string, std::string> {
    return {{"INFERGATE_STANDIN_TOKEN_DELAY_MS", slow && is_canary(pod) ? "160" : "20"}};
  });
  start_operator();
  deploy(engine_model("qwen/bf16", kSglang, "bf16", kThresholds));
  change(to_fp8);
  StageRun up =
      run_stage([&] { return history_has("Promoted", "kvCache") && !status().contains("stage"); }, 50s);
  ASSERT_TRUE(up.done) << status().dump(2) << work_logs();
  EXPECT_EQ(status()["stable"]["kvCacheDtype"], "fp8");
  ASSERT_TRUE(up.gate.is_object());
  EXPECT_EQ(up.gate["outcome"], "Passed") << up.gate;
  const std::string args =
      server_->get(kDeploys + "/" + kName).body["spec"]["template"]["spec"]["containers"][0]["args"].dump();
  EXPECT_NE(args.find(R"("--kv-cache-dtype","fp8_e4m3")"), std::string::npos)
      << "SGLang's spelling: " << args;
  EXPECT_NE(args.find("--enable-metrics"), std::string::npos) << args;
  // Rolls back: the next stage's canary engine is slow.
  slow = true;
  change([](Json& m) { m["spec"]["serving"]["kvCacheDtype"] = "fp16"; });
  StageRun down = run_stage([&] { return history_has("RolledBack", "kvCache"); }, 50s);
  ASSERT_TRUE(down.done) << status().dump(2) << work_logs();
  Json rb = condition_of(get_model(kName), "RolledBack");
  EXPECT_EQ(rb["reason"], "PerformanceThresholdFailed") << rb;
  EXPECT_GT(number_after(rb["message"], "tpot p95", "(ratio "), 2.0) << rb;
  EXPECT_EQ(status()["stable"]["kvCacheDtype"], "fp8");
}

TEST_F(EnginesE2E, ALlamacppStageWithAPerformanceThresholdIsRefusedBeforeAnyCanary) {
  gguf_release("qwen/gguf");
  start_kubelet(equal_speed);
  start_operator();
  Json m = engine_model("qwen/gguf",
                        {{"kind", "llamacpp"},
                         {"image", "ghcr.io/ggml-org/llama.cpp:server-b6500"},
                         {"modelFile", "model-f16.gguf"}},
                        "fp16", Json::object());
  deploy(m);  // stable serves: llama-server's command line, through the agent wrapper
  {
    auto urls = kubelet_->serving();
    ASSERT_EQ(urls.size(), 1u);
    const int port = std::atoi(urls.begin()->second.substr(urls.begin()->second.rfind(':') + 1).c_str());
    auto [code, body] = infergate::testing::loopback_get(port, "/metrics");
    EXPECT_EQ(code, 200) << "the adapter passes --metrics";
    EXPECT_NE(body.find("llamacpp:tokens_predicted_total"), std::string::npos) << body;
    EXPECT_EQ(body.find("_bucket"), std::string::npos) << "llama-server has no latency histograms";
  }
  change([](Json& edit) {
    edit["spec"]["serving"]["kvCacheDtype"] = "int8";  // q8_0
    edit["spec"]["rollout"]["gates"] = {{"performance", {{"maxTTFTP95Ratio", 2.0}}}};
  });
  ASSERT_TRUE(wait_condition(kName, "Progressing", "False", "GateNotMeasurable", 20s)) << status().dump(2);
  const std::string msg = condition_of(get_model(kName), "Progressing")["message"];
  EXPECT_NE(msg.find("maxTTFTP95Ratio"), std::string::npos) << msg;
  // Refused before a canary cost anything, and it stays so: one more reconcile, run here, starts none.
  auto again = app_->reconciler().reconcile({kNs, kName});
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  EXPECT_EQ(server_->get(kDeploys + "/" + kName + "-canary").status, 404);
  EXPECT_FALSE(status().contains("stage")) << status().dump(2);
  EXPECT_EQ(status()["stable"]["kvCacheDtype"], "fp16");
}

TEST_F(EnginesE2E, TheAgentWrapperRefusesATamperedTreeWhenAVllmContainerRestarts) {
  hf_release("qwen/bf16");
  start_kubelet(equal_speed);
  start_operator();
  deploy(engine_model("qwen/bf16", kVllm, "bf16", Json::object()));
  const auto urls = kubelet_->serving();
  ASSERT_EQ(urls.size(), 1u);
  const std::string pod = urls.begin()->first;
  ASSERT_EQ(complete(urls.begin()->second, 2), 200);
  // A weight byte changed on the volume after the pod verified and started.
  {
    std::fstream f(root_ / "qwen/bf16/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('X');
  }
  ASSERT_TRUE(kubelet_->restart_serving(pod));
  sim_->refresh();
  auto runtime_status = [&]() -> Json {
    Json p = server_->get("/api/v1/namespaces/models/pods/" + pod).body;
    for (const auto& c : p["status"].value("containerStatuses", Json::array())) {
      if (c.value("name", "") == "runtime") return c;
    }
    return Json();
  };
  ASSERT_TRUE(eventually([&] { return runtime_status().value("ready", true) == false; }, 10s))
      << runtime_status().dump(2);
  // The container's last termination message: the agent wrapper's JSON verdict.
  const std::string message = runtime_status()
                                  .value("lastState", Json::object())
                                  .value("terminated", Json::object())
                                  .value("message", "");
  EXPECT_NE(message.find("DigestMismatch"), std::string::npos) << runtime_status().dump(2);
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
  // The engine never started on the tampered tree: nothing serves for the pod, and the container's
  // log holds the agent's refusal and no engine line.
  EXPECT_EQ(kubelet_->serving().count(pod), 0u);
  const std::string log = read_file(dir_->path() / "work" / (pod + ".runtime.log")).value_or("");
  EXPECT_EQ(log.find("listening on"), std::string::npos) << log;
  EXPECT_EQ(log.find("model files sha256"), std::string::npos) << log;
}

}  // namespace
}  // namespace infergate::op::testing
