// Two infergate-operator processes with leader election: one acts; kill it, the other takes over and
// resumes from status; a clean stop hands the lease over.
#include <gtest/gtest.h>

#include <csignal>

#include "infergate/common/subprocess.h"
#include "integration/operator_fixture.h"

namespace infergate::op::testing {
namespace {

using namespace std::chrono_literals;

class LeaderProcesses : public OperatorFixture {
 protected:
  void SetUp() override {
    OperatorFixture::SetUp();
    auto d = TempDir::create("leader");
    ASSERT_TRUE(d.ok());
    dir_ = std::make_unique<TempDir>(std::move(*d));
    ASSERT_TRUE(write_file_atomic(dir_->path() / "kubeconfig", server_->kubeconfig()).ok());
  }

  Subprocess spawn(const std::string& identity) {
    SpawnOptions o;
    o.argv = {INFERGATE_OPERATOR_BIN,
              "--kubeconfig",
              (dir_->path() / "kubeconfig").string(),
              "--leader-elect",
              "--leader-elect-namespace",
              "default",
              "--leader-elect-lease-duration",
              "3s",
              "--leader-elect-renew-deadline",
              "2s",
              "--leader-elect-retry-period",
              "200ms",
              "--identity",
              identity,
              "--metrics-bind-address",
              "0",
              "--health-probe-bind-address",
              "0",
              "--workers",
              "2"};
    o.stdout_file = dir_->path() / (identity + ".log");
    o.stderr_file = o.stdout_file;
    o.die_with_parent = true;
    auto p = Subprocess::spawn(o);
    EXPECT_TRUE(p.ok()) << p.error().to_string();
    return std::move(*p);
  }

  std::string holder() {
    auto r = server_->get("/apis/coordination.k8s.io/v1/namespaces/default/leases/infergate-operator-leader");
    return r.ok() ? r.body["spec"].value("holderIdentity", "") : "";
  }

  std::string log_of(const std::string& identity) {
    auto text = read_file(dir_->path() / (identity + ".log"));
    return text.ok() ? *text : "";
  }

  std::unique_ptr<TempDir> dir_;
};

TEST_F(LeaderProcesses, OneActsAndTheOtherTakesOverWhenItIsKilled) {
  Subprocess a = spawn("op-a");
  Subprocess b = spawn("op-b");
  ASSERT_TRUE(eventually([&] { return !holder().empty(); }, 15s)) << log_of("op-a") << log_of("op-b");
  const std::string leader = holder();
  const std::string follower = leader == "op-a" ? "op-b" : "op-a";
  Subprocess& leader_proc = leader == "op-a" ? a : b;
  Subprocess& follower_proc = leader == "op-a" ? b : a;

  size_t mark = server_->request_count();
  server_->create(kModels, model_json("first"));
  ASSERT_TRUE(wait_condition("first", "Ready", "True")) << log_of(leader);
  EXPECT_GT(server_->writes_since(mark, "(" + leader + ")"), 0u);
  // The follower never acts. Its own lease traffic is not acting: a create it sent before it saw the
  // leader's lease lands after `mark` as a 409, and that is how election works (CI saw exactly this).
  const size_t follower_writes = server_->writes_since(mark, "(" + follower + ")");
  const size_t follower_lease_writes = server_->writes_since(mark, "(" + follower + ")", "/leases");
  EXPECT_EQ(follower_writes - follower_lease_writes, 0u) << log_of(follower);

  // The leader dies without a word; the follower waits out the lease, takes over, and carries on.
  leader_proc.signal(SIGKILL);
  leader_proc.wait();
  ASSERT_TRUE(eventually([&] { return holder() == follower; }, 15s)) << log_of(follower);
  server_->create(kModels, model_json("second"));
  ASSERT_TRUE(wait_condition("second", "Ready", "True")) << log_of(follower);
  // It resumed from status: the first model was not redeployed, its stable release is unchanged.
  Json first = get_model("first");
  EXPECT_EQ(first["status"]["history"].size(), 1u);
  EXPECT_EQ(condition_of(first, "Ready")["status"], "True");

  // A clean stop releases the lease.
  follower_proc.signal(SIGTERM);
  auto exit = follower_proc.wait_for(20s);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success()) << exit->describe() << "\n" << log_of(follower);
  EXPECT_EQ(holder(), "");
}

}  // namespace
}  // namespace infergate::op::testing
