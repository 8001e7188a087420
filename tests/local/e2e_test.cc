// The local platform end to end, with the real binaries: `infergate-operator local run` as a process,
// pods that are the real agent exec'ing the real runtime on a generated model, signed releases, the
// router, and the rollout's stages and gates. Bounded: tiny models, short analysis windows.
// The suite never skips: a runtime that cannot serve or evaluate fails it, with the runtime's output.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "common/eventually.h"
#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/common/subprocess.h"
#include "infergate/operator/api/yaml.h"
#include "infergate/operator/local/supervisor.h"

namespace infergate::op::local {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kAgent = INFERGATE_AGENT_BIN;
const std::string kRuntime = INFERGATE_RUNTIME_BIN;
const std::string kOperator = INFERGATE_OPERATOR_BIN;

using infergate::testing::eventually;

// The eval tests' small suite: a few prompts of each kind, short generations, a 60-word needle.
constexpr const char* kSuite = R"({
  "name": "local-e2e-small", "top_logprobs": 20, "seed": 0, "max_tokens": 16,
  "perplexity_text": "The river valley below the old mill was quiet in the early morning. Mist lay over the fields.",
  "tasks": [
    {"id": "text-1", "kind": "summarisation", "prompt": "Document: The authority repaired leaks and cut losses. Summary:"},
    {"id": "code-1", "kind": "code", "prompt": "def add(a, b):\n    return"},
    {"id": "chat-1", "kind": "chat", "messages": [{"role": "user", "content": "Hello there."},
      {"role": "assistant", "content": "Hi! How can I help?"}, {"role": "user", "content": "Name a colour."}]},
    {"id": "needle", "kind": "needle", "max_tokens": 6, "haystack": "The bus came at seven. The baker lit the oven.",
     "needle": "The gate code is 7341.", "question": "What is the gate code?", "answer": "7341",
     "context_words": [60], "depths": [0.2, 0.8]},
    {"id": "json-1", "kind": "json", "required_keys": ["name"], "prompt": "Give a JSON object with a name.\nJSON: {"}
  ]})";

// The runtime command the suite needs answers `--help`: a runtime that cannot even do that (a broken
// build, a missing shared library, a command renamed) fails the suite with its output; it never skips.
void expect_runtime_command(const std::string& command) {
  auto r = run_command({kRuntime, command, "--help"}, 30s);
  ASSERT_TRUE(r.ok()) << kRuntime << " " << command << " --help: " << r.error().to_string();
  ASSERT_TRUE(r->status.success()) << kRuntime << " " << command << " --help exited with "
                                   << r->status.describe() << ": " << r->err << r->out;
}

void must(const std::vector<std::string>& argv) {
  auto r = run_command(argv, 5min);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_TRUE(r->status.success()) << argv[0] << " " << (argv.size() > 1 ? argv[1] : "") << ": " << r->err
                                   << r->out;
}

// Processes whose environment carries the local platform's owner marker for `state`.
std::vector<pid_t> marked_processes(const fs::path& state) {
  const std::string marker = std::string(kOwnerEnv) + "=" + fs::absolute(state).string();
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& de : fs::directory_iterator("/proc", ec)) {
    const std::string n = de.path().filename().string();
    if (n.find_first_not_of("0123456789") != std::string::npos) continue;
    auto env = read_file(de.path() / "environ", 1u << 20);
    if (!env.ok()) continue;
    std::ifstream stat(de.path() / "stat");
    std::string line;
    std::getline(stat, line);
    auto close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z')
      continue;  // a zombie
    const bool last =
        env->size() >= marker.size() && env->compare(env->size() - marker.size(), marker.size(), marker) == 0;
    if (env->find(marker + '\0') != std::string::npos || last) {
      out.push_back(static_cast<pid_t>(std::stol(n)));
    }
  }
  return out;
}

class LocalE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(expect_runtime_command("serve"));
    artifacts_ = state() / "volumes" / "model-artifacts";
    fs::create_directories(manifests());
    fs::create_directories(artifacts_);
    fs::create_directories(state() / "keys" / "model-signing-key");
    const fs::path pub = root_.path() / "publisher";
    fs::create_directories(pub);
    // The eval tests' model: outlier key channels that per-token int4 keys cannot hold.
    std::vector<std::string> make = {kRuntime,
                                     "make-test-model",
                                     "--out",
                                     (pub / "fp16").string(),
                                     "--arch",
                                     arch(),
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
                                     "1024"};
    must(make);
    // A small quality suite (spec.rollout.gates.quality.suite takes a name or a file), so that a
    // stage's check takes seconds.
    // (The rollout checks that eval ran the suite the spec names: eval reports a file suite by the
    // path it was given.)
    ASSERT_TRUE(write_file_atomic(suite(), kSuite).ok());
    must({kAgent, "keygen", "--out", (pub / "release").string()});
    fs::copy_file(pub / "release.pub.pem", state() / "keys" / "model-signing-key" / "release.pub.pem");
    fs::copy(pub / "fp16", artifacts_ / "fp16", fs::copy_options::recursive);
    publish("fp16", 1);
  }
  void TearDown() override { stop_operator(SIGTERM); }
  // The model family under test (make-test-model --arch).
  virtual std::string arch() const { return "llama"; }

  fs::path manifests() const { return root_.path() / "manifests"; }
  fs::path state() const { return root_.path() / "state"; }
  fs::path suite() const { return root_.path() / "suite.json"; }

  void publish(const std::string& dir, int version) {
    must({kAgent, "manifest", (artifacts_ / dir).string()});
    must({kAgent, "sign", (artifacts_ / dir).string(), "--key",
          (root_.path() / "publisher" / "release.key").string(), "--name", "tiny", "--version",
          std::to_string(version)});
  }
  void quantize(const std::string& from, const std::string& to, const std::string& format, int version) {
    must({kRuntime, "quantize", "--model", (artifacts_ / from).string(), "--out", (artifacts_ / to).string(),
          "--weight-format", format});
    std::error_code ec;
    fs::remove(artifacts_ / to / "SHA256SUMS", ec);
    fs::remove(artifacts_ / to / "release.dsse.json", ec);
    publish(to, version);
  }

  void write_model(const std::string& name, const std::string& path, const std::string& weights,
                   const std::string& kv, int replicas = 1, const std::string& file = "",
                   const std::string& max_mean_kl = "0.015") {
    std::string y =
        "apiVersion: serving.infergate.dev/v1alpha1\nkind: InferenceModel\nmetadata: {name: " + name +
        "}\nspec:\n  replicas: " + std::to_string(replicas) +
        "\n  artifact:\n    volume: {persistentVolumeClaim: {claimName: model-artifacts}}\n    path: " +
        path +
        "\n    trust: {publicKeySecretRef: {name: model-signing-key}, expectName: tiny}\n"
        "  serving: {weightFormat: " +
        weights + ", kvCacheDtype: " + kv +
        ", maxContextLength: 1024, maxConcurrency: 4}\n"
        "  rollout:\n    canary: {replicas: 1, analysisSeconds: 5}\n"
        "    gates:\n      quality: {suite: " +
        suite().string() + ", maxMeanKL: " + max_mean_kl + ", timeoutSeconds: 240}\n";
    ASSERT_TRUE(write_file_atomic(manifests() / (file.empty() ? name + ".yaml" : file), y).ok());
  }

  void start_operator() {
    SpawnOptions o;
    o.argv = {kOperator,
              "local",
              "run",
              "--manifests",
              manifests().string(),
              "--state",
              state().string(),
              "--router-address",
              "127.0.0.1:0",
              "--grace-period",
              "3",
              "--backoff-initial",
              "0.5",
              "--backoff-max",
              "2"};
    o.stdout_file = root_.path() / "operator.log";
    o.stderr_file = root_.path() / "operator.log";
    o.append_output = true;
    o.die_with_parent = true;  // a killed test binary leaves no operator behind
    auto p = Subprocess::spawn(o);
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    op_ = std::make_unique<Subprocess>(std::move(*p));
    ASSERT_TRUE(eventually([&] { return fs::exists(state() / "router.json"); }, 30s)) << log();
  }
  void stop_operator(int sig) {
    if (!op_) return;
    op_->signal(sig);
    auto st = op_->wait_for(60s);
    if (!st) op_->terminate(0ms);
    op_.reset();
  }
  std::string log() const { return read_file(root_.path() / "operator.log").value_or(""); }

  Json object(const std::string& name) const {
    auto text = read_file(state() / "status" / ("default_" + name + ".yaml"));
    if (!text.ok()) return Json::object();
    auto j = api::parse_yaml(*text, "status");
    return j.ok() ? *j : Json::object();
  }
  Json status(const std::string& name) const { return object(name).value("status", Json::object()); }
  bool ready(const std::string& name) const {
    for (const auto& c : status(name).value("conditions", Json::array())) {
      if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
    }
    return false;
  }
  std::string stable_summary(const std::string& name) const {
    return status(name).value("stable", Json::object()).value("summary", "");
  }
  bool history_has(const std::string& name, const std::string& stage, const std::string& outcome) const {
    for (const auto& h : status(name).value("history", Json::array())) {
      if (h.value("stage", "") == stage && h.value("outcome", "") == outcome) return true;
    }
    return false;
  }
  std::string router() const {
    auto text = read_file(state() / "router.json");
    auto j = parse_json(text.value_or("{}"), "router.json");
    return j.ok() ? j->value("url", "") : "";
  }
  Json pods() const {
    auto text = read_file(state() / "pods.json");
    auto j = parse_json(text.value_or("{}"), "pods.json");
    return j.ok() ? j->value("pods", Json::array()) : Json::array();
  }
  // POST through the router's front door with curl (a client that is not ours).
  std::string complete(const std::string& model) const {
    auto r =
        run_command({"curl", "-s", "--max-time", "60", router() + "/v1/completions", "-H",
                     "Content-Type: application/json", "-d",
                     "{\"model\":\"" + model + "\",\"prompt\":\"hello\",\"max_tokens\":4,\"temperature\":0}"},
                    90s);
    return r.ok() ? r->out : "";
  }

  TempDir root_ = std::move(*TempDir::create("local-e2e"));
  fs::path artifacts_;
  std::unique_ptr<Subprocess> op_;
};

TEST_F(LocalE2E, TwoModelsServeAtOnceOnPortsOfTheirOwnThroughTheRouter) {
  write_model("alpha", "fp16", "fp16", "fp16");
  write_model("beta", "fp16", "fp16", "int8", 2);
  start_operator();
  ASSERT_TRUE(eventually([&] { return ready("alpha") && ready("beta"); }, 180s)) << log();
  // Every pod on a port of its own (pods.json trails the status by a moment).
  std::set<std::string> addresses;
  EXPECT_TRUE(eventually(
      [&] {
        addresses.clear();
        for (const auto& p : pods()) {
          if (!p.value("address", "").empty()) addresses.insert(p.value("address", ""));
        }
        return addresses.size() == 3u;
      },
      10s))
      << pods().dump(2);
  EXPECT_NE(complete("alpha").find("\"choices\""), std::string::npos);
  EXPECT_NE(complete("beta").find("\"choices\""), std::string::npos);
  EXPECT_NE(complete("gamma").find("does not exist"), std::string::npos);
  EXPECT_EQ(status("alpha")["stable"]["releaseDigest"].get<std::string>().substr(0, 7), "sha256:");
}

TEST_F(LocalE2E, AMalformedManifestGetsAClearErrorAndTheOtherModelServes) {
  write_model("good", "fp16", "fp16", "fp16");
  ASSERT_TRUE(
      write_file_atomic(manifests() / "broken.yaml", "apiVersion: serving.infergate.dev/v1alpha1\nkind: [\n")
          .ok());
  write_model("bad", "fp16", "fp16", "int3", 1, "bad.yaml");
  start_operator();
  ASSERT_TRUE(eventually([&] { return ready("good"); }, 180s)) << log();
  auto get = run_command({kOperator, "local", "get", "--state", state().string()}, 30s);
  ASSERT_TRUE(get.ok());
  EXPECT_NE(get->out.find("good"), std::string::npos) << get->out;
  EXPECT_NE(get->out.find("broken.yaml"), std::string::npos) << get->out;
  EXPECT_NE(get->out.find("bad.yaml"), std::string::npos) << get->out;
  EXPECT_NE(get->out.find("kvCacheDtype"), std::string::npos) << get->out;
  EXPECT_NE(complete("good").find("\"choices\""), std::string::npos);
}

TEST_F(LocalE2E, NoPodOutlivesAnOperatorKilledWithSigkillAndARestartResumes) {
  write_model("m", "fp16", "fp16", "fp16", 2);
  start_operator();
  ASSERT_TRUE(eventually([&] { return ready("m"); }, 180s)) << log();
  ASSERT_EQ(marked_processes(state()).size(), 2u);
  const Json before = status("m");
  const std::string uid = object("m")["metadata"]["uid"];
  stop_operator(SIGKILL);
  EXPECT_TRUE(eventually([&] { return marked_processes(state()).empty(); }, 10s))
      << marked_processes(state()).size() << " pod processes outlived the operator";
  start_operator();
  ASSERT_TRUE(eventually([&] { return ready("m") && pods().size() == 2; }, 180s)) << log();
  EXPECT_EQ(status("m")["stable"]["revision"], before["stable"]["revision"]);
  EXPECT_EQ(object("m")["metadata"]["uid"], uid);
  stop_operator(SIGTERM);
  EXPECT_TRUE(marked_processes(state()).empty()) << "a clean stop left pods running";
}

// ---- Rollouts (need the staged rollout, `serve` and `eval`) ----

TEST_F(LocalE2E, TheDemosStagesPassFailAndRollBack) {
  ASSERT_NO_FATAL_FAILURE(expect_runtime_command("eval"));
  quantize("fp16", "int8", "int8", 2);
  write_model("m", "fp16", "fp16", "fp16");
  start_operator();
  ASSERT_TRUE(eventually([&] { return ready("m"); }, 180s)) << log();
  // int8 weights and int8 KV: two stages, weights first, both promoted.
  write_model("m", "int8", "int8", "int8");
  ASSERT_TRUE(eventually([&] { return history_has("m", "kvCache", "Promoted"); }, 240s))
      << status("m").dump(2);
  EXPECT_TRUE(history_has("m", "weights", "Promoted"));
  EXPECT_EQ(stable_summary("m").substr(0, 9), "int8/int8");
  // A tampered release: refused by verification, rolled back, stable untouched.
  fs::copy(artifacts_ / "int8", artifacts_ / "int8-r3", fs::copy_options::recursive);
  fs::remove(artifacts_ / "int8-r3" / "release.dsse.json");
  must({kAgent, "sign", (artifacts_ / "int8-r3").string(), "--key",
        (root_.path() / "publisher" / "release.key").string(), "--name", "tiny", "--version", "3"});
  std::string shard;
  for (const auto& de : fs::directory_iterator(artifacts_ / "int8-r3")) {
    if (de.path().extension() == ".safetensors") shard = de.path().string();
  }
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c;
    f.get(c);
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  const std::string stable_revision = status("m")["stable"]["revision"];
  write_model("m", "int8-r3", "int8", "int8");
  ASSERT_TRUE(eventually([&] { return history_has("m", "artifact", "RolledBack"); }, 180s))
      << status("m").dump(2);
  EXPECT_NE(status("m").dump().find("DigestMismatch"), std::string::npos) << status("m").dump(2);
  EXPECT_EQ(status("m")["stable"]["revision"], stable_revision);
  EXPECT_NE(complete("m").find("\"choices\""), std::string::npos) << "the stable model stopped serving";
  // int4 KV with per-token keys: the quality gate fails, rolled back. The KV stage is gated as KV
  // quantization should be, nearly free: int8 KV measures a mean KL of ~2e-5 on this model and suite,
  // per-token int4 ~3e-3 (in process and, since the server's top-logprob keys match, served).
  write_model("m", "int8", "int8", "int4", 1, "", "0.001");
  ASSERT_TRUE(eventually([&] { return history_has("m", "kvCache", "RolledBack"); }, 240s))
      << status("m").dump(2);
  EXPECT_NE(status("m").dump().find("quality"), std::string::npos) << status("m").dump(2);
  EXPECT_EQ(status("m")["stable"]["revision"], stable_revision);
  EXPECT_NE(complete("m").find("\"choices\""), std::string::npos);
}

// The mission's model families through the same pipeline: a generated GLM-4.5 (glm4_moe: one dense
// layer, one with 8 experts in 2 groups, top 2, a shared expert, q/k norms) and a DeepSeek-V3
// (deepseek_v3: latent attention over the same experts, YaRN) are verified, served, and rolled out
// in two stages, int8 weights first, then an int8 KV (latent) cache, each gated on quality against
// the stable version and promoted. The gate is looser than the Llama's: routing makes small errors
// swap experts (docs/quant-formats.md: fp16 weights + int8 KV, mean KL ~6e-3 on both).
class LocalE2EMoe : public LocalE2E {
 protected:
  std::string arch() const override { return "glm4_moe"; }
  void rolls_out_weights_then_kv() {
    ASSERT_NO_FATAL_FAILURE(expect_runtime_command("eval"));
    quantize("fp16", "int8", "int8", 2);
    write_model("m", "fp16", "fp16", "fp16");
    start_operator();
    ASSERT_TRUE(eventually([&] { return ready("m"); }, 180s)) << log();
    EXPECT_NE(complete("m").find("\"choices\""), std::string::npos);
    write_model("m", "int8", "int8", "int8", 1, "", "0.05");
    ASSERT_TRUE(eventually([&] { return history_has("m", "kvCache", "Promoted"); }, 240s))
        << status("m").dump(2);
    EXPECT_TRUE(history_has("m", "weights", "Promoted"));
    EXPECT_EQ(stable_summary("m").substr(0, 9), "int8/int8");
    EXPECT_NE(complete("m").find("\"choices\""), std::string::npos) << "the promoted model serves";
  }
};
class LocalE2EMla : public LocalE2EMoe {
 protected:
  std::string arch() const override { return "deepseek_v3"; }
};

TEST_F(LocalE2EMoe, AGlm45MoeModelRollsOutItsWeightsThenItsKvCache) { rolls_out_weights_then_kv(); }
TEST_F(LocalE2EMla, ADeepseekV3ModelRollsOutItsWeightsThenItsLatentCache) { rolls_out_weights_then_kv(); }

TEST_F(LocalE2E, ACanaryPodCrashingDuringAnalysisFailsTheStage) {
  ASSERT_NO_FATAL_FAILURE(expect_runtime_command("eval"));
  write_model("m", "fp16", "fp16", "fp16");
  start_operator();
  ASSERT_TRUE(eventually([&] { return ready("m"); }, 180s)) << log();
  write_model("m", "fp16", "fp16", "int8");
  // Kill the canary's process whenever it runs while the stage analyzes.
  ASSERT_TRUE(eventually(
      [&] {
        for (const auto& p : pods()) {
          if (p.value("track", "") == "canary" && p.value("pid", 0) > 0 && p.value("ready", false)) {
            ::kill(p.value("pid", 0), SIGKILL);
          }
        }
        return history_has("m", "kvCache", "RolledBack");
      },
      240s))
      << status("m").dump(2);
  EXPECT_EQ(stable_summary("m").substr(0, 9), "fp16/fp16");
}

TEST_F(LocalE2E, AnOperatorKilledMidStageResumesWithoutASecondCanary) {
  ASSERT_NO_FATAL_FAILURE(expect_runtime_command("eval"));
  write_model("m", "fp16", "fp16", "fp16");
  start_operator();
  ASSERT_TRUE(eventually([&] { return ready("m"); }, 180s)) << log();
  write_model("m", "fp16", "fp16", "int8");
  ASSERT_TRUE(eventually(
      [&] { return status("m").value("stage", Json::object()).value("phase", "") == "Analyzing"; }, 180s))
      << status("m").dump(2);
  stop_operator(SIGKILL);
  EXPECT_TRUE(eventually([&] { return marked_processes(state()).empty(); }, 10s));
  start_operator();
  ASSERT_TRUE(eventually([&] { return history_has("m", "kvCache", "Promoted"); }, 240s))
      << status("m").dump(2);
  // The promoted canary's pod goes away (SIGTERM, then its drain) a moment after the promotion.
  EXPECT_TRUE(eventually(
      [&] {
        int canaries = 0;
        for (const auto& p : pods()) canaries += p.value("track", "") == "canary";
        return canaries == 0;
      },
      20s))
      << pods().dump(2);
  int promoted = 0;
  for (const auto& h : status("m").value("history", Json::array()))
    promoted += h.value("outcome", "") == "Promoted";
  EXPECT_EQ(promoted, 1) << status("m").dump(2);
}

}  // namespace
}  // namespace infergate::op::local
