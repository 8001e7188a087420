// Staged rollouts end to end: the operator (in-process) against the fake API server, with a simulated
// cluster whose kubelet runs the REAL infergate-agent on signed releases made by the real agent
// (keygen, manifest, sign). Analysis windows are a second long and no gates are configured here: the
// quality and performance gates need `infergate-runtime eval` and `serve` in the pods (see
// docs/rollout.md, "What is tested"); their logic is covered in tests/operator/controllers.
#include <gtest/gtest.h>

#include <fstream>

#include "fixtures/process_kubelet.h"
#include "infergate/common/fs.h"
#include "infergate/common/subprocess.h"
#include "integration/operator_fixture.h"

namespace infergate::op::testing {
namespace {

using namespace std::chrono_literals;
const std::string kAgent = INFERGATE_AGENT_BIN;

class RolloutE2E : public OperatorFixture {
 protected:
  void SetUp() override {
    OperatorFixture::SetUp();
    auto d = TempDir::create("rollout-e2e");
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<TempDir>(std::move(*d));
    root_ = dir_->path() / "volume";
    trust_ = dir_->path() / "trust";
    std::filesystem::create_directories(trust_);
    std::filesystem::create_directories(dir_->path() / "work");
    agent({"keygen", "--out", (dir_->path() / "release").string()});
    std::filesystem::copy_file(dir_->path() / "release.pub.pem", trust_ / "release.pub.pem");
    release("glm/fp16", "fp16", 3);
    release("glm/int8", "int8", 4);
    kubelet_ = std::make_unique<infergate::testing::ProcessKubelet>(
        infergate::testing::ProcessKubeletOptions{kAgent, root_, trust_, dir_->path() / "work"});
    sim_->set_policy(kubelet_->policy());
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
    ASSERT_TRUE(write_file_atomic(d / "config.json", R"({"model_type":"llama"})").ok());
    ASSERT_TRUE(
        write_file_atomic(d / "model.safetensors", safetensors(static_cast<char>(version))).ok());
    if (format != "fp16") {
      // A compressed release names its format (what `infergate-runtime quantize` writes).
      ASSERT_TRUE(write_file_atomic(d / "quantization.json", R"({"format":")" + format + R"("})").ok());
    }
    agent({"manifest", d.string()});
    agent({"sign", d.string(), "--key", (dir_->path() / "release.key").string(), "--name", "glm", "--version",
           std::to_string(version), "--weight-format", format, "--expires", "1d"});
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

  std::unique_ptr<TempDir> dir_;
  std::filesystem::path root_, trust_;
  std::unique_ptr<infergate::testing::ProcessKubelet> kubelet_;
};

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

TEST_F(RolloutE2E, AnOperatorKilledMidStageResumesWithoutASecondCanary) {
  start_operator();
  deploy();
  change([](Json& m) {
    m["spec"]["serving"]["kvCacheDtype"] = "int8";
    m["spec"]["rollout"]["canary"]["analysisSeconds"] = 4;
  });
  ASSERT_TRUE(eventually([&] { return phase() == "Analyzing"; }, 20s)) << status().dump(2);
  const std::string canary_uid = server_->get(kDeploys + "/glm-canary").body["metadata"]["uid"];
  const Json stage = status()["stage"];
  stop_operator();
  start_operator();
  std::this_thread::sleep_for(300ms);
  if (phase() == "Analyzing") {
    EXPECT_EQ(server_->get(kDeploys + "/glm-canary").body["metadata"]["uid"], canary_uid);
    EXPECT_EQ(status()["stage"]["analysisStartedAt"], stage["analysisStartedAt"]);
  }
  ASSERT_TRUE(eventually([&] { return history_has("Promoted", "kvCache"); }, 30s)) << status().dump(2);
  int started = 0;
  for (const auto& e : events_for("glm", "StageStarted")) started += e.value("count", 1);
  EXPECT_EQ(started, 1) << "one stage, one canary";
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
