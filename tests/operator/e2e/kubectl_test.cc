// One reconcile end to end with kubectl alone: the real kubectl applies the CRD, a Secret and the GLM
// example to the fake API server; the infergate-operator binary reconciles it; kubectl shows the
// printer columns, the Deployment, the events, and deletes the model. The simulated cluster plays the
// kubelet (pods verify and become ready).
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>

#include "fixtures/cluster_simulator.h"
#include "infergate/common/fs.h"
#include "infergate/common/subprocess.h"
#include "testing.h"

namespace infergate::op::testing {
namespace {

using namespace std::chrono_literals;

class KubectlEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(INFERGATE_KUBECTL))
        << INFERGATE_KUBECTL
        << " is missing: run scripts/install-deps.sh (it fetches kubectl into .tools/bin)";
    server_ = start_server();
    sim_ = std::make_unique<infergate::testing::ClusterSimulator>(*server_);
    auto d = TempDir::create("kubectl-e2e");
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<TempDir>(std::move(*d));
    kubeconfig_ = (dir_->path() / "kubeconfig").string();
    ASSERT_TRUE(write_file_atomic(kubeconfig_, server_->kubeconfig()).ok());
  }

  void TearDown() override {
    if (op_) op_->terminate(5s);
    sim_.reset();
    server_.reset();
  }

  CommandResult kubectl(std::vector<std::string> args) {
    std::vector<std::string> argv{INFERGATE_KUBECTL, "--kubeconfig", kubeconfig_, "--cache-dir",
                                  (dir_->path() / "cache").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_command(argv, 60s, {{"HOME", dir_->path().string()}});
    EXPECT_TRUE(r.ok()) << r.error().to_string();
    return r.ok() ? *r : CommandResult{};
  }

  std::string operator_log() {
    auto t = read_file(dir_->path() / "operator.log");
    return t.ok() ? *t : "";
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<infergate::testing::ClusterSimulator> sim_;
  std::unique_ptr<TempDir> dir_;
  std::string kubeconfig_;
  std::optional<Subprocess> op_;
};

TEST_F(KubectlEndToEnd, AppliesAModelAndWatchesItBecomeReady) {
  auto crd = kubectl({"apply", "--server-side", "--validate=false", "-f", INFERGATE_CRD_DIR});
  ASSERT_TRUE(crd.status.success()) << crd.err;
  auto secret =
      kubectl({"create", "secret", "generic", "model-signing-key", "--from-literal=release.pub.pem=PUBLIC"});
  ASSERT_TRUE(secret.status.success()) << secret.err;

  SpawnOptions so;
  so.argv = {INFERGATE_OPERATOR_BIN,
             "--kubeconfig",
             kubeconfig_,
             "--metrics-bind-address",
             "0",
             "--health-probe-bind-address",
             "0",
             "--identity",
             "e2e"};
  so.stdout_file = dir_->path() / "operator.log";
  so.stderr_file = so.stdout_file;
  so.die_with_parent = true;
  auto op = Subprocess::spawn(so);
  ASSERT_TRUE(op.ok()) << op.error().to_string();
  op_.emplace(std::move(*op));

  auto apply = kubectl({"apply", "--server-side", "--validate=false", "-f",
                        std::string(INFERGATE_CRD_DIR) + "/examples/glm-4-9b-int8.yaml"});
  ASSERT_TRUE(apply.status.success()) << apply.err;
  ASSERT_TRUE(eventually(
      [&] {
        auto r = kubectl(
            {"get", "im", "glm-4-9b", "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"});
        return r.out == "True";
      },
      30s))
      << operator_log();

  auto table = kubectl({"get", "im"});
  ASSERT_TRUE(table.status.success()) << table.err;
  EXPECT_NE(table.out.find("STABLE"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("int8/int8 ctx=32768 x16"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("True"), std::string::npos) << table.out;

  auto deploy = kubectl({"get", "deploy", "glm-4-9b", "-o", "yaml"});
  ASSERT_TRUE(deploy.status.success()) << deploy.err;
  for (const char* s :
       {"infergate-agent", "--expect-weight-format", "infergate-runtime", "--kv-cache-dtype",
        "readOnlyRootFilesystem: true", "runAsNonRoot: true", "claimName: verified-model-artifacts",
        "kind: InferenceModel", "terminationMessagePath: /dev/termination-log"}) {
    EXPECT_NE(deploy.out.find(s), std::string::npos) << s;
  }

  auto describe = kubectl({"describe", "im", "glm-4-9b"});
  ASSERT_TRUE(describe.status.success()) << describe.err;
  for (const char* s : {"Deploying", "Verified", "infergate-operator", "Release Digest:"}) {
    EXPECT_NE(describe.out.find(s), std::string::npos) << s << " missing from\n" << describe.out;
  }

  auto del = kubectl({"delete", "im", "glm-4-9b", "--timeout=30s"});
  ASSERT_TRUE(del.status.success()) << del.err;
  ASSERT_TRUE(eventually([&] { return !kubectl({"get", "deploy", "glm-4-9b"}).status.success(); }, 20s));
  auto gone = kubectl({"get", "deploy", "glm-4-9b"});
  EXPECT_NE(gone.err.find("NotFound"), std::string::npos) << gone.err;

  op_->signal(SIGTERM);
  auto exit = op_->wait_for(20s);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success()) << exit->describe() << "\n" << operator_log();
  op_.reset();
}

}  // namespace
}  // namespace infergate::op::testing
