// The local platform's process supervisor: the kubelet of one machine. It starts named processes
// (pods, check jobs), restarts the ones that exit with a per-process exponential backoff, kills jobs
// that outlive their deadline, and stops processes with SIGTERM then SIGKILL after a grace period.
//
// Guarantees:
//  - every process runs in its own process group; stopping it signals the whole group, and whatever
//    of the group is left when its leader exits is killed, so nothing a pod started lingers;
//  - every process is spawned from the supervisor's own thread with PR_SET_PDEATHSIG(SIGKILL): if the
//    operator dies, even by SIGKILL, the kernel kills the process (a pod is one process: the agent
//    execs the runtime in place, so the verified runtime is the process the kernel kills);
//  - the destructor (and shutdown()) stops everything, in parallel, each within its grace period.
// Assumptions: a process that forks children of its own keeps them in its process group (the pods
// and jobs we run never fork).
// Thread-safe. Time comes from a Clock, so backoff is tested without waiting for it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "infergate/common/clock.h"
#include "infergate/common/result.h"
#include "infergate/common/subprocess.h"

namespace infergate::op::local {

// Restart delays, as the kubelet's CrashLoopBackOff: initial, doubling, capped; a process that ran
// for reset_after before it exited starts over at initial.
struct BackoffPolicy {
  std::chrono::milliseconds initial{1000};
  std::chrono::milliseconds max{30000};
  std::chrono::milliseconds reset_after{60000};
};

// The delay before start number `failures + 1`, after `failures` consecutive short-lived runs.
std::chrono::milliseconds backoff_delay(const BackoffPolicy& policy, int failures);

struct ProcessSpec {
  std::vector<std::string> argv;  // argv[0]: an absolute path, or a name looked up in PATH
  std::map<std::string, std::string> env;
  std::filesystem::path cwd;       // empty: inherit
  std::filesystem::path log_file;  // stdout and stderr, appended across restarts; empty: inherit
  bool restart = true;             // false: run once (a job); its exit is final
  std::chrono::milliseconds grace{10000};
  // Jobs: stopped (SIGTERM, then SIGKILL after grace) this long after they started.
  std::optional<std::chrono::milliseconds> deadline;
  // Runs on the supervisor thread right before every start (e.g. to clear a stale verdict file).
  std::function<void()> before_start;
};

struct ProcessStatus {
  enum class Phase {
    kPending,   // added, not started yet
    kRunning,   // a process is alive
    kBackoff,   // exited; waits for its restart
    kStopping,  // being stopped (SIGTERM sent)
    kExited,    // exited and will not be restarted (a job, or a stopped process)
  };
  Phase phase = Phase::kPending;
  pid_t pid = 0;  // while running or stopping
  int starts = 0;
  int restarts() const { return starts > 0 ? starts - 1 : 0; }
  int consecutive_failures = 0;
  std::optional<ExitStatus> last_exit;
  std::string start_error;  // the last spawn failure (program not found, ...)
  MonoTime started_at{};    // of the current or last attempt
  WallTime started_wall{};
  WallTime first_started_wall{};           // of the first attempt
  std::optional<WallTime> last_exit_wall;  // when the last attempt ended
  MonoTime next_start{};                   // in kBackoff
  bool deadline_exceeded = false;
  // Size of the log file when the current attempt started: its own output begins there.
  uint64_t log_offset = 0;
};

std::string_view to_string(ProcessStatus::Phase phase);

class ProcessSupervisor {
 public:
  explicit ProcessSupervisor(BackoffPolicy policy = {}, Clock& clock = SystemClock::instance(),
                             std::chrono::milliseconds tick = std::chrono::milliseconds(50));
  ~ProcessSupervisor();
  ProcessSupervisor(const ProcessSupervisor&) = delete;
  ProcessSupervisor& operator=(const ProcessSupervisor&) = delete;

  // Registers and (on the supervisor thread, at once) starts a process. AlreadyExists while a process
  // of that name is still known (also while it is being stopped); FailedPrecondition after shutdown.
  Status add(const std::string& name, ProcessSpec spec);
  // Stops a process (SIGTERM, SIGKILL after its grace) and forgets it once it is gone. No-op for an
  // unknown name.
  void remove(const std::string& name);
  std::optional<ProcessStatus> status(const std::string& name) const;
  std::vector<std::string> names() const;
  // Every known process and its status.
  std::map<std::string, ProcessStatus> snapshot() const;
  // How many passes over the processes the supervisor thread has made (one per tick): a test that
  // waits for two more knows one full pass has seen the clock as it is now.
  uint64_t passes() const;
  // Called (from the supervisor thread, without locks held) with the name of a process whose phase
  // changed: started, exited, restarted, gone.
  void set_on_change(std::function<void(const std::string&)> fn);
  // Stops every process, in parallel, each within its grace, and waits until all are gone.
  void shutdown();

 private:
  struct Entry {
    ProcessSpec spec;
    ProcessStatus status;
    std::unique_ptr<Subprocess> proc;
    bool removing = false;
    MonoTime kill_at{};  // SIGKILL after this, once SIGTERM was sent
    bool term_sent = false;
  };
  void loop();
  // One pass over every entry; returns the names whose phase changed.
  std::vector<std::string> pass();
  void step(const std::string& name, Entry& e, MonoTime now, std::vector<std::string>& changed,
            std::vector<std::string>& gone);
  void begin_stop(Entry& e, MonoTime now);

  BackoffPolicy policy_;
  Clock& clock_;
  std::chrono::milliseconds tick_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Entry> entries_;
  std::function<void(const std::string&)> on_change_;
  bool shutting_down_ = false;
  bool stop_thread_ = false;
  uint64_t passes_ = 0;
  std::thread thread_;
};

// The bytes of `path` from `offset` on (at most max_bytes, the last ones when there are more).
std::string read_log_from(const std::filesystem::path& path, uint64_t offset, size_t max_bytes = 64u << 10);
// The size of a file, 0 when it does not exist.
uint64_t file_size_or_zero(const std::filesystem::path& path);
// "127.0.0.1:43121" from the runtime's "listening on http://127.0.0.1:43121" line (docs/server.md), or "".
std::string find_listen_address(std::string_view log);
// The environment variable that marks every process the local platform starts, with the absolute
// state directory as its value; children inherit it, so whatever a pod forks is marked too.
inline constexpr std::string_view kOwnerEnv = "INFERGATE_LOCAL_OWNER";
// SIGKILLs every process (other than this one) whose environment holds kOwnerEnv=owner: what an earlier
// operator on the same state directory left behind when it was killed, and anything a pod forked and
// left in another process group. Returns how many it killed.
int kill_processes_with_owner(const std::string& owner);

// The last `lines` lines of `text`, for messages about a crash.
std::string last_lines(std::string_view text, int lines);

}  // namespace infergate::op::local
