// Child processes: exit codes, output capture, timeouts, termination of whole process groups.
#include "infergate/common/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>

#include "infergate/common/fs.h"

namespace infergate {
namespace {

using namespace std::chrono_literals;

TEST(RunCommand, CapturesOutputAndExitCode) {
  auto r = run_command({"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->status.code, 3);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_FALSE(r->timed_out);
}

TEST(RunCommand, PassesEnvironmentOverrides) {
  auto r = run_command({"sh", "-c", "printf %s \"$INFERGATE_X\""}, 10s, {{"INFERGATE_X", "hello"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "hello");
}

TEST(RunCommand, KillsCommandsThatOutliveTheTimeout) {
  auto start = std::chrono::steady_clock::now();
  auto r = run_command({"sh", "-c", "sleep 30"}, 200ms);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(RunCommand, ReportsAMissingProgram) {
  auto r = run_command({"/nonexistent/infergate-binary"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
}

TEST(Subprocess, TerminateReachesGrandchildren) {
  auto dir = *TempDir::create("subprocess-test");
  auto pidfile = dir.path() / "grandchild.pid";
  SpawnOptions o;
  o.argv = {"sh", "-c", "sleep 60 & echo $! > " + pidfile.string() + "; wait"};
  auto p = Subprocess::spawn(o);
  ASSERT_TRUE(p.ok()) << p.error().to_string();
  pid_t grandchild = 0;
  for (int i = 0; i < 500 && grandchild == 0; ++i) {
    std::ifstream(pidfile) >> grandchild;
    if (grandchild == 0) std::this_thread::sleep_for(10ms);
  }
  ASSERT_GT(grandchild, 0);
  auto status = p->terminate(2s);
  EXPECT_EQ(status.signal, SIGTERM);
  // The grandchild got the signal too (same process group); it is gone or a zombie of init.
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
    std::string pid, comm, state;
    gone = !(stat >> pid >> comm >> state) || state == "Z";
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone);
}

TEST(Subprocess, WritesOutputToFiles) {
  auto dir = *TempDir::create("subprocess-test");
  SpawnOptions o;
  o.argv = {"sh", "-c", "echo to-out; echo to-err >&2"};
  o.stdout_file = dir.path() / "log";
  o.stderr_file = dir.path() / "log";
  auto p = Subprocess::spawn(o);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->wait().success());
  auto log = *read_file(dir.path() / "log");
  EXPECT_NE(log.find("to-out"), std::string::npos);
  EXPECT_NE(log.find("to-err"), std::string::npos);
}

}  // namespace
}  // namespace infergate
