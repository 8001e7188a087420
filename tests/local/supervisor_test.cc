// The local supervisor: restarts with backoff, SIGTERM then SIGKILL, whole process groups, job
// deadlines, and no orphans when its owner is killed with SIGKILL.
#include "infergate/operator/local/supervisor.h"
#include "common/eventually.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "infergate/common/fs.h"

namespace infergate::op::local {
namespace {

using namespace std::chrono_literals;

using infergate::testing::eventually;

// True when no live process has this pid (a zombie waiting for init counts as gone).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

pid_t read_pid(const std::filesystem::path& p) {
  std::ifstream in(p);
  long v = 0;
  in >> v;
  return static_cast<pid_t>(v);
}

ProcessSpec shell(const std::string& script, const std::filesystem::path& log = {}) {
  ProcessSpec s;
  s.argv = {"/bin/sh", "-c", script};
  s.log_file = log;
  return s;
}

TEST(Backoff, DoublesFromTheInitialDelayUpToTheCap) {
  BackoffPolicy p{1000ms, 8000ms, 60000ms};
  EXPECT_EQ(backoff_delay(p, 1), 1000ms);
  EXPECT_EQ(backoff_delay(p, 2), 2000ms);
  EXPECT_EQ(backoff_delay(p, 3), 4000ms);
  EXPECT_EQ(backoff_delay(p, 4), 8000ms);
  EXPECT_EQ(backoff_delay(p, 10), 8000ms);
}

TEST(Supervisor, RestartsACrashedProcessOnlyAfterItsBackoff) {
  auto dir = TempDir::create("sup");
  ASSERT_TRUE(dir.ok());
  FakeClock clock;
  ProcessSupervisor sup(BackoffPolicy{1000ms, 4000ms, 60000ms}, clock, 5ms);
  ASSERT_TRUE(sup.add("crasher", shell("echo run >> " + (dir->path() / "runs").string() + "; exit 3")).ok());

  ASSERT_TRUE(eventually([&] { return sup.status("crasher")->phase == ProcessStatus::Phase::kBackoff; }));
  auto s = *sup.status("crasher");
  EXPECT_EQ(s.starts, 1);
  ASSERT_TRUE(s.last_exit);
  EXPECT_EQ(s.last_exit->code, 3);
  // No restart while the backoff has not passed on the supervisor's clock.
  auto two_more_passes = [&] {
    const uint64_t p = sup.passes();
    return eventually([&] { return sup.passes() >= p + 2; });
  };
  ASSERT_TRUE(two_more_passes());
  EXPECT_EQ(sup.status("crasher")->starts, 1);
  clock.advance(1000ms);
  ASSERT_TRUE(eventually([&] { return sup.status("crasher")->starts == 2; }));
  ASSERT_TRUE(eventually([&] { return sup.status("crasher")->phase == ProcessStatus::Phase::kBackoff; }));
  // The second failure waits twice as long.
  clock.advance(1000ms);
  ASSERT_TRUE(two_more_passes());
  EXPECT_EQ(sup.status("crasher")->starts, 2);
  clock.advance(1000ms);
  ASSERT_TRUE(eventually([&] { return sup.status("crasher")->starts == 3; }));
  EXPECT_EQ(sup.status("crasher")->restarts(), 2);
}

TEST(Supervisor, AppendsEveryAttemptsOutputToTheLogAndRemembersWhereEachBegins) {
  auto dir = TempDir::create("sup");
  ASSERT_TRUE(dir.ok());
  FakeClock clock;
  ProcessSupervisor sup(BackoffPolicy{1000ms, 1000ms, 60000ms}, clock, 5ms);
  const auto log = dir->path() / "log";
  ASSERT_TRUE(sup.add("p", shell("echo attempt; exit 1", log)).ok());
  ASSERT_TRUE(eventually([&] { return sup.status("p")->phase == ProcessStatus::Phase::kBackoff; }));
  clock.advance(1000ms);
  ASSERT_TRUE(eventually([&] {
    auto s = sup.status("p");
    return s->starts == 2 && s->phase == ProcessStatus::Phase::kBackoff;
  }));
  EXPECT_EQ(*read_file(log), "attempt\nattempt\n");
  EXPECT_EQ(read_log_from(log, sup.status("p")->log_offset), "attempt\n");
}

TEST(Supervisor, StopsAProcessThatIgnoresSigtermWithSigkillAfterTheGrace) {
  auto dir = TempDir::create("sup");
  ASSERT_TRUE(dir.ok());
  ProcessSupervisor sup(BackoffPolicy{}, SystemClock::instance(), 5ms);
  // SIGTERM must come after the shell ignores it: a loaded machine showed the pid before the trap
  // ran, the shell died of the SIGTERM at once, and the test read that as an early SIGKILL.
  const auto trapped = dir->path() / "trapped";
  ProcessSpec s = shell("trap '' TERM; : > '" + trapped.string() + "'; exec sleep 1000");
  s.grace = 300ms;
  ASSERT_TRUE(sup.add("stubborn", s).ok());
  ASSERT_TRUE(
      eventually([&] { return sup.status("stubborn")->pid > 0 && std::filesystem::exists(trapped); }));
  const pid_t pid = sup.status("stubborn")->pid;
  auto t0 = std::chrono::steady_clock::now();
  sup.remove("stubborn");
  ASSERT_TRUE(eventually([&] { return !sup.status("stubborn").has_value(); }));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms) << "SIGKILL came before the grace period ended";
  EXPECT_TRUE(process_gone(pid));
}

TEST(Supervisor, AProcessThatHonoursSigtermExitsWithoutWaitingForTheGrace) {
  ProcessSupervisor sup(BackoffPolicy{}, SystemClock::instance(), 5ms);
  ProcessSpec s = shell("exec sleep 1000");
  s.grace = 30s;
  ASSERT_TRUE(sup.add("polite", s).ok());
  ASSERT_TRUE(eventually([&] { return sup.status("polite")->pid > 0; }));
  auto t0 = std::chrono::steady_clock::now();
  sup.remove("polite");
  ASSERT_TRUE(eventually([&] { return !sup.status("polite").has_value(); }));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

TEST(Supervisor, StoppingAProcessStopsEverythingInItsProcessGroup) {
  auto dir = TempDir::create("sup");
  ASSERT_TRUE(dir.ok());
  ProcessSupervisor sup(BackoffPolicy{}, SystemClock::instance(), 5ms);
  const auto pidfile = dir->path() / "child.pid";
  ProcessSpec s = shell("sleep 1000 & echo $! > " + pidfile.string() + "; wait");
  s.grace = 2s;
  ASSERT_TRUE(sup.add("parent", s).ok());
  ASSERT_TRUE(eventually([&] { return read_pid(pidfile) > 0; }));
  const pid_t child = read_pid(pidfile);
  sup.remove("parent");
  ASSERT_TRUE(eventually([&] { return !sup.status("parent").has_value(); }));
  EXPECT_TRUE(eventually([&] { return process_gone(child); }, 5s));
}

TEST(Supervisor, AJobThatOutlivesItsDeadlineIsStoppedAndNotRestarted) {
  ProcessSupervisor sup(BackoffPolicy{}, SystemClock::instance(), 5ms);
  ProcessSpec s = shell("exec sleep 1000");
  s.restart = false;
  s.deadline = 200ms;
  s.grace = 1s;
  ASSERT_TRUE(sup.add("job", s).ok());
  ASSERT_TRUE(eventually([&] { return sup.status("job")->phase == ProcessStatus::Phase::kExited; }));
  auto st = *sup.status("job");
  EXPECT_TRUE(st.deadline_exceeded);
  EXPECT_EQ(st.starts, 1);
  ASSERT_TRUE(st.last_exit);
  EXPECT_EQ(st.last_exit->signal, SIGTERM);
}

TEST(Supervisor, AJobThatExitsKeepsItsExitStatus) {
  ProcessSupervisor sup(BackoffPolicy{}, SystemClock::instance(), 5ms);
  ProcessSpec s = shell("exit 7");
  s.restart = false;
  ASSERT_TRUE(sup.add("job", s).ok());
  ASSERT_TRUE(eventually([&] { return sup.status("job")->phase == ProcessStatus::Phase::kExited; }));
  EXPECT_EQ(sup.status("job")->last_exit->code, 7);
  EXPECT_FALSE(sup.status("job")->deadline_exceeded);
}

TEST(Supervisor, AProgramThatCannotBeStartedIsRetriedWithItsErrorKept) {
  FakeClock clock;
  ProcessSupervisor sup(BackoffPolicy{1000ms, 1000ms, 60000ms}, clock, 5ms);
  ProcessSpec s;
  s.argv = {"/nonexistent/infergate-runtime"};
  ASSERT_TRUE(sup.add("missing", s).ok());
  ASSERT_TRUE(eventually([&] { return sup.status("missing")->phase == ProcessStatus::Phase::kBackoff; }));
  EXPECT_NE(sup.status("missing")->start_error.find("nonexistent"), std::string::npos)
      << sup.status("missing")->start_error;
}

TEST(Supervisor, RefusesASecondProcessOfTheSameName) {
  ProcessSupervisor sup(BackoffPolicy{}, SystemClock::instance(), 5ms);
  ASSERT_TRUE(sup.add("a", shell("exec sleep 1000")).ok());
  auto again = sup.add("a", shell("exec sleep 1000"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code(), ErrorCode::kAlreadyExists);
}

TEST(Supervisor, ShutdownStopsEveryProcess) {
  ProcessSupervisor sup(BackoffPolicy{}, SystemClock::instance(), 5ms);
  std::vector<pid_t> pids;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(sup.add("p" + std::to_string(i), shell("exec sleep 1000")).ok());
  ASSERT_TRUE(eventually([&] {
    for (int i = 0; i < 3; ++i) {
      if (sup.status("p" + std::to_string(i))->pid == 0) return false;
    }
    return true;
  }));
  for (int i = 0; i < 3; ++i) pids.push_back(sup.status("p" + std::to_string(i))->pid);
  sup.shutdown();
  EXPECT_TRUE(sup.names().empty());
  for (pid_t p : pids) EXPECT_TRUE(eventually([&] { return process_gone(p); }, 5s));
}

// The owner of the supervisor (the operator) is killed with SIGKILL: the kernel kills its pods.
TEST(Supervisor, LeavesNoOrphanWhenItsOwnerIsKilledWithSigkill) {
  auto dir = TempDir::create("sup");
  ASSERT_TRUE(dir.ok());
  const auto pidfile = dir->path() / "pod.pid";
  pid_t owner = ::fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {
    // The "operator": a supervisor running one pod, until it is killed.
    ProcessSupervisor sup(BackoffPolicy{}, SystemClock::instance(), 5ms);
    if (!sup.add("pod", shell("echo $$ > " + pidfile.string() + "; exec sleep 1000")).ok()) _exit(2);
    for (;;) ::pause();
  }
  ASSERT_TRUE(eventually([&] { return read_pid(pidfile) > 0; }));
  const pid_t pod = read_pid(pidfile);
  ASSERT_FALSE(process_gone(pod));
  ASSERT_EQ(::kill(owner, SIGKILL), 0);
  int ws = 0;
  ASSERT_EQ(::waitpid(owner, &ws, 0), owner);
  EXPECT_TRUE(eventually([&] { return process_gone(pod); }, 5s)) << "pod " << pod << " outlived its operator";
}

TEST(Supervisor, KillsProcessesCarryingItsOwnerMarker) {
  auto dir = TempDir::create("sup");
  ASSERT_TRUE(dir.ok());
  const auto pidfile = dir->path() / "stray.pid";
  const std::string owner = dir->path().string();
  // A stray process (as a pod's forked child left behind would be) carrying the marker.
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo $$ > " + pidfile.string() + "; exec sleep 1000"};
  o.env = {{std::string(kOwnerEnv), owner}};
  auto proc = Subprocess::spawn(o);
  ASSERT_TRUE(proc.ok());
  ASSERT_TRUE(eventually([&] { return read_pid(pidfile) > 0; }));
  EXPECT_EQ(kill_processes_with_owner(owner + "-other"), 0);
  EXPECT_EQ(kill_processes_with_owner(owner), 1);
  auto st = proc->wait_for(5s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->signal, SIGKILL);
}

TEST(LogHelpers, FindTheRuntimesListenLine) {
  EXPECT_EQ(find_listen_address("info msg\ninfo listening on http://127.0.0.1:43121\n"), "127.0.0.1:43121");
  EXPECT_EQ(find_listen_address("level=info msg=\"listening on http://0.0.0.0:8000\""), "127.0.0.1:8000");
  EXPECT_EQ(find_listen_address("nothing here"), "");
  EXPECT_EQ(last_lines("a\nb\nc\n", 2), "b\nc");
  EXPECT_EQ(last_lines("a", 3), "a");
}

}  // namespace
}  // namespace infergate::op::local
