// Child processes: spawn with arguments, environment and redirected output; wait with a timeout;
// terminate with a grace period (SIGTERM, then SIGKILL); capture output. Used by the local platform
// to run pods as processes and by tests to run our binaries. A Subprocess still running when it is
// destroyed is killed and reaped, so nothing is left behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "infergate/common/result.h"

namespace infergate {

struct ExitStatus {
  int code = -1;   // the exit code when the process exited, else -1
  int signal = 0;  // the signal that ended it, else 0
  bool success() const { return code == 0 && signal == 0; }
  // "exit 3" or "signal 9 (Killed)"
  std::string describe() const;
};

struct CommandResult {
  ExitStatus status;
  std::string out;
  std::string err;
  bool timed_out = false;
};

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is the program; searched in PATH when it has no '/'
  // Variables set on top of the inherited environment (or of an empty one with clear_env).
  std::map<std::string, std::string> env;
  bool clear_env = false;
  std::filesystem::path cwd;          // empty: inherit
  std::filesystem::path stdout_file;  // empty: inherit; else created/truncated (append with append_output)
  std::filesystem::path stderr_file;  // empty: inherit; may equal stdout_file
  bool append_output = false;
  bool stdin_null = true;
  // Own process group, so that terminate() reaches the whole tree the child starts.
  bool new_process_group = true;
  // The child is sent SIGKILL when the spawning thread's process dies (PR_SET_PDEATHSIG).
  bool die_with_parent = false;
};

class Subprocess {
 public:
  static Result<Subprocess> spawn(const SpawnOptions& options);

  Subprocess(Subprocess&& o) noexcept;
  Subprocess& operator=(Subprocess&& o) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  bool running();
  // The exit status if the process has ended, without blocking.
  std::optional<ExitStatus> poll();
  ExitStatus wait();
  // nullopt when it is still running after `timeout`.
  std::optional<ExitStatus> wait_for(std::chrono::milliseconds timeout);
  // Sends a signal to the process (its group when it has one). No-op once reaped.
  void signal(int sig);
  // SIGTERM, wait up to `grace`, then SIGKILL; always reaps.
  ExitStatus terminate(std::chrono::milliseconds grace);

 private:
  friend Result<CommandResult> run_command(const std::vector<std::string>&, std::chrono::milliseconds,
                                           const std::map<std::string, std::string>&,
                                           const std::filesystem::path&, size_t);
  Subprocess(pid_t pid, bool group) : pid_(pid), group_(group) {}
  pid_t pid_ = -1;
  bool group_ = false;
  std::optional<ExitStatus> status_;
};

// Runs a command to completion capturing stdout and stderr (each capped at max_output bytes; the
// rest is drained and dropped). Killed (and timed_out set) after `timeout`.
Result<CommandResult> run_command(const std::vector<std::string>& argv,
                                  std::chrono::milliseconds timeout = std::chrono::minutes(5),
                                  const std::map<std::string, std::string>& env = {},
                                  const std::filesystem::path& cwd = {}, size_t max_output = 64u << 20);

}  // namespace infergate
