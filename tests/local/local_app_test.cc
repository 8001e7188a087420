// The local operator in-process, with stand-in agent and runtime binaries: models from a directory
// reconciled to Ready, a refused manifest reported while the others serve, two models at once,
// the router's front door by model name, `local get` tables, and a restart that adopts what exists.
#include "infergate/operator/local/local_app.h"
#include "common/eventually.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <thread>

#include "infergate/common/fs.h"
#include "infergate/http/client.h"
#include "infergate/operator/api/yaml.h"

namespace infergate::op::local {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

using infergate::testing::eventually;
// Pods here are real processes (the agent, then a runtime on a generated model): they start in seconds.
constexpr auto kStart = 30s;

std::string model_yaml(const std::string& name, const std::string& kv = "fp16", int replicas = 1) {
  return "apiVersion: serving.infergate.dev/v1alpha1\nkind: InferenceModel\nmetadata:\n  name: " + name +
         "\nspec:\n  replicas: " + std::to_string(replicas) +
         "\n  artifact:\n    volume: {persistentVolumeClaim: {claimName: models}}\n    path: tiny/fp16\n"
         "    trust: {publicKeySecretRef: {name: signing-key}}\n"
         "  serving: {weightFormat: fp16, kvCacheDtype: " +
         kv + ", maxContextLength: 256, maxConcurrency: 4}\n";
}

class LocalOperatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(manifests());
    fs::create_directories(root_.path() / "volumes" / "models" / "tiny" / "fp16");
    fs::create_directories(root_.path() / "keys" / "signing-key");
    ASSERT_TRUE(write_file_atomic(root_.path() / "keys" / "signing-key" / "k.pem", "key").ok());
  }
  void TearDown() override { stop(); }
  fs::path manifests() const { return root_.path() / "manifests"; }
  fs::path state() const { return root_.path() / "state"; }
  void write(const std::string& file, const std::string& text) {
    ASSERT_TRUE(write_file_atomic(manifests() / file, text).ok());
  }
  void start() {
    RunOptions o;
    o.manifests_dir = manifests();
    o.state_dir = state();
    o.volumes_dir = root_.path() / "volumes";
    o.keys_dir = root_.path() / "keys";
    o.bin_dir = INFERGATE_LOCAL_FAKE_BIN;
    o.router_address = "127.0.0.1:0";
    o.grace = 2s;
    o.scan_period = 100ms;
    o.backoff = BackoffPolicy{200ms, 400ms, 60000ms};
    auto op = LocalOperator::create(o);
    ASSERT_TRUE(op.ok()) << op.error().to_string();
    op_ = std::move(*op);
    thread_ = std::thread([this] { (void)op_->run(); });
  }
  void stop() {
    if (!op_) return;
    op_->stop();
    thread_.join();
    op_.reset();
  }
  Json status_of(const std::string& name) {
    auto text = read_file(state() / "status" / ("default_" + name + ".yaml"));
    if (!text.ok()) return Json::object();
    auto j = api::parse_yaml(*text, "status");
    return j.ok() ? j->value("status", Json::object()) : Json::object();
  }
  bool ready(const std::string& name) {
    Json st = status_of(name);
    for (const auto& c : st.value("conditions", Json::array())) {
      if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
    }
    return false;
  }
  std::string get(GetOptions g) {
    g.state_dir = state();
    std::ostringstream out, err;
    EXPECT_EQ(get_local(g, out, err), 0) << err.str();
    return out.str();
  }

  TempDir root_ = std::move(*TempDir::create("localop"));
  std::unique_ptr<LocalOperator> op_;
  std::thread thread_;
};

TEST_F(LocalOperatorTest, AModelInTheDirectoryBecomesReadyWithStatusOnDisk) {
  write("m.yaml", model_yaml("m"));
  start();
  ASSERT_TRUE(eventually([&] { return ready("m"); }, kStart)) << status_of("m").dump(2);
  Json st = status_of("m");
  EXPECT_EQ(st["stable"]["summary"], "fp16/fp16 ctx=256 x4");
  EXPECT_EQ(st["stable"]["releaseDigest"].get<std::string>().substr(0, 7), "sha256:");
  std::string table = get({});
  EXPECT_NE(table.find("NAME"), std::string::npos) << table;
  EXPECT_NE(table.find("fp16/fp16 ctx=256 x4"), std::string::npos) << table;
  EXPECT_NE(table.find("True"), std::string::npos) << table;
  // `local get m -o json`, as `kubectl get im m -o json`: the whole object.
  GetOptions one;
  one.what = "m";
  one.output = "json";
  auto obj = parse_json(get(one), "get m");
  ASSERT_TRUE(obj.ok());
  EXPECT_EQ((*obj)["metadata"]["name"], "m");
  EXPECT_EQ((*obj)["status"]["stable"]["summary"], "fp16/fp16 ctx=256 x4");
  GetOptions pods;
  pods.what = "pods";
  EXPECT_TRUE(eventually([&] { return get(pods).find("Running") != std::string::npos; }, kStart))
      << get(pods);
  http::ClientRequest request;
  request.timeout = 5s;
  auto models = http::fetch(op_->router_url() + "/v1/models", request);
  ASSERT_TRUE(models.ok());
  EXPECT_NE(models->body.find("\"m\""), std::string::npos) << models->body;
}

TEST_F(LocalOperatorTest, AMalformedManifestIsReportedWhileTheOtherModelsServe) {
  write("good.yaml", model_yaml("good"));
  write("bad.yaml", model_yaml("bad", "int3"));
  write("broken.yaml", "apiVersion: [\n");
  start();
  ASSERT_TRUE(eventually([&] { return ready("good"); }, kStart));
  std::string table;
  ASSERT_TRUE(eventually(
      [&] {
        table = get({});
        return table.find("bad.yaml") != std::string::npos && table.find("broken.yaml") != std::string::npos;
      },
      kStart))
      << table;
  EXPECT_NE(table.find("spec.serving.kvCacheDtype"), std::string::npos) << table;
  EXPECT_FALSE(fs::exists(state() / "status" / "default_bad.yaml"));
  GetOptions errors;
  errors.what = "errors";
  EXPECT_NE(get(errors).find("YamlError"), std::string::npos);
  // Fixing the file brings the model up.
  write("bad.yaml", model_yaml("bad", "int8"));
  ASSERT_TRUE(eventually([&] { return ready("bad"); }, kStart));
  EXPECT_EQ(get(errors).find("bad.yaml"), std::string::npos);
}

TEST_F(LocalOperatorTest, TwoModelsServeAtOnceOnPortsOfTheirOwn) {
  write("a.yaml", model_yaml("alpha"));
  write("b.yaml", model_yaml("beta", "int8", 2));
  start();
  ASSERT_TRUE(eventually([&] { return ready("alpha") && ready("beta"); }, kStart));
  auto alpha = op_->platform().resolve("alpha");
  auto beta = op_->platform().resolve("beta");
  ASSERT_TRUE(alpha && beta);
  ASSERT_EQ(alpha->size(), 1u);
  ASSERT_EQ(beta->size(), 2u);
  std::set<std::string> addresses(alpha->begin(), alpha->end());
  addresses.insert(beta->begin(), beta->end());
  EXPECT_EQ(addresses.size(), 3u) << "every pod listens on a port of its own";
}

TEST_F(LocalOperatorTest, ARestartedOperatorResumesFromItsStateWithoutDuplicates) {
  write("m.yaml", model_yaml("m"));
  start();
  ASSERT_TRUE(eventually([&] { return ready("m"); }, kStart));
  const Json before = status_of("m");
  stop();
  EXPECT_TRUE(op_ == nullptr);
  start();
  // The workload is adopted, not created a second time: one pod, the same revision, the same uid.
  ASSERT_TRUE(eventually(
      [&] { return op_->platform().resolve("m") && op_->platform().resolve("m")->size() == 1; }, kStart));
  EXPECT_EQ(op_->platform().pods().size(), 1u);
  EXPECT_EQ(status_of("m")["stable"]["revision"], before["stable"]["revision"]);
  ASSERT_TRUE(eventually([&] { return ready("m"); }, kStart));
}

TEST_F(LocalOperatorTest, RemovingAManifestStopsTheModelsPods) {
  write("m.yaml", model_yaml("m"));
  start();
  ASSERT_TRUE(eventually([&] { return ready("m"); }, kStart));
  fs::remove(manifests() / "m.yaml");
  ASSERT_TRUE(eventually(
      [&] { return op_->platform().pods().empty() && op_->platform().model_keys().empty(); }, kStart));
  EXPECT_TRUE(eventually([&] { return !fs::exists(state() / "status" / "default_m.yaml"); }, kStart));
}

TEST_F(LocalOperatorTest, ASecondOperatorOnTheSameStateDirectoryIsRefused) {
  write("m.yaml", model_yaml("m"));
  start();
  RunOptions o;
  o.manifests_dir = manifests();
  o.state_dir = state();
  o.router_address = "127.0.0.1:0";
  auto second = LocalOperator::create(o);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().message().find("lock"), std::string::npos) << second.error().to_string();
}

TEST(FormatAge, PrintsAgesAsKubectlDoes) {
  EXPECT_EQ(format_age(std::chrono::seconds(42)), "42s");
  EXPECT_EQ(format_age(std::chrono::seconds(300)), "5m");
  EXPECT_EQ(format_age(std::chrono::hours(5)), "5h");
  EXPECT_EQ(format_age(std::chrono::hours(72)), "3d");
}

}  // namespace
}  // namespace infergate::op::local
