// `infergate-agent exec`: verify, then become the command (same pid, signals straight to it); on a
// refusal the command never starts and the exit code is the verification's.
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "agent_test_util.h"
#include "infergate/common/fs.h"
#include "infergate/common/subprocess.h"

namespace infergate::agent {
namespace {

using testing::make_release;
using testing::Release;
using testing::run_agent;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::vector<std::string> exec_args(const Release& r, std::vector<std::string> command) {
  std::vector<std::string> a = {"exec", r.dir.string(), "--public-key", r.pub.string(), "--"};
  a.insert(a.end(), command.begin(), command.end());
  return a;
}

TEST(ExecCli, BecomesTheCommandInTheSamePid) {
  Release r = make_release();
  fs::path out = r.tmp.path() / "out.txt";
  SpawnOptions o;
  o.argv = {INFERGATE_AGENT_BIN};
  for (const auto& a : exec_args(r, {"/bin/sh", "-c", "echo $$"})) o.argv.push_back(a);
  o.stdout_file = out;
  auto p = Subprocess::spawn(o);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  pid_t pid = p->pid();
  auto st = p->wait_for(60s);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->success()) << st->describe();
  EXPECT_EQ(*read_file(out), std::to_string(pid) + "\n") << "stdout holds only the command's output";
}

TEST(ExecCli, PassesTheCommandsArgumentsUntouched) {
  Release r = make_release();
  auto run =
      run_agent(exec_args(r, {"/bin/sh", "-c", "printf '%s|' \"$@\"", "sh", "--public-key", "--", "a b"}));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "--public-key|--|a b|");
  EXPECT_EQ(run.reason(), "Verified");
}

TEST(ExecCli, NeverStartsTheCommandWhenVerificationFails) {
  Release r = make_release();
  std::string tok = *read_file(r.dir / "tokenizer.json");
  tok[1] ^= 1;
  testing::write_file(r.dir, "tokenizer.json", tok);
  fs::path marker = r.tmp.path() / "started";
  auto run = run_agent(exec_args(r, {"/bin/sh", "-c", "touch " + marker.string()}));
  EXPECT_EQ(run.exit_code, 33);
  EXPECT_EQ(run.reason(), "DigestMismatch");
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_EQ(run.out, "") << "exec keeps stdout for the command";
}

// After exec the engine owns the container's termination message: a "Verified" line there would hide
// a crashing engine's own last log lines (the kubelet's FallbackToLogsOnError reads the file first).
TEST(ExecCli, LeavesTheTerminationLogToTheCommandOnceVerified) {
  Release r = make_release();
  fs::path term = r.tmp.path() / "termination-log";
  ASSERT_TRUE(write_file_atomic(term, "a verdict of an earlier start").ok());
  auto args = exec_args(r, {"/bin/sh", "-c", "exit 7"});
  args.insert(args.begin() + 4, {"--termination-log", term.string()});
  auto run = run_agent(args);
  EXPECT_EQ(run.exit_code, 7) << run.err;
  EXPECT_EQ(run.reason(), "Verified");  // still in the report file
  EXPECT_EQ(*read_file(term), "") << "neither our verdict nor an earlier one";
  std::string tok = *read_file(r.dir / "tokenizer.json");
  tok[1] ^= 1;
  testing::write_file(r.dir, "tokenizer.json", tok);
  auto refused = run_agent(args);
  EXPECT_EQ(refused.exit_code, 33);
  EXPECT_NE(read_file(term)->find("DigestMismatch"), std::string::npos) << *read_file(term);
}

TEST(ExecCli, DeliversSignalsToTheCommandDirectly) {
  Release r = make_release();
  SpawnOptions o;
  o.argv = {INFERGATE_AGENT_BIN};
  for (const auto& a : exec_args(r, {"/bin/sleep", "30"})) o.argv.push_back(a);
  o.new_process_group = false;
  auto p = Subprocess::spawn(o);
  ASSERT_TRUE(p.ok());
  // Wait until the agent has become sleep.
  auto deadline = std::chrono::steady_clock::now() + 30s;
  std::string comm;
  while (std::chrono::steady_clock::now() < deadline) {
    auto c = read_file("/proc/" + std::to_string(p->pid()) + "/comm");
    if (c.ok() && *c == "sleep\n") break;
    std::this_thread::sleep_for(10ms);
  }
  ::kill(p->pid(), SIGTERM);
  auto st = p->wait_for(10s);
  ASSERT_TRUE(st.has_value()) << "sleep did not get SIGTERM";
  EXPECT_EQ(st->signal, SIGTERM) << st->describe();
}

TEST(ExecCli, ReportsACommandThatCannotStart) {
  Release r = make_release();
  auto run = run_agent(exec_args(r, {"/nonexistent/program"}));
  EXPECT_EQ(run.exit_code, 127);
  EXPECT_EQ(run.reason(), "ExecFailed");
  EXPECT_EQ(run.report["file"], "/nonexistent/program");
}

TEST(ExecCli, RefusesAMissingCommand) {
  Release r = make_release();
  EXPECT_EQ(run_agent(exec_args(r, {})).exit_code, 2);
  EXPECT_EQ(run_agent({"exec", r.dir.string(), "--public-key", r.pub.string()}).exit_code, 2);
}

}  // namespace
}  // namespace infergate::agent
