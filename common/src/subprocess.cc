// Child processes with fork/exec. Everything the child needs is prepared before fork(); between
// fork and exec the child calls only async-signal-safe functions.
#include "infergate/common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "infergate/common/fs.h"

extern char** environ;

namespace infergate {

std::string ExitStatus::describe() const {
  if (signal != 0) return "signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "exit " + std::to_string(code);
}

namespace {

ExitStatus from_wait_status(int ws) {
  ExitStatus s;
  if (WIFEXITED(ws)) s.code = WEXITSTATUS(ws);
  if (WIFSIGNALED(ws)) s.signal = WTERMSIG(ws);
  return s;
}

struct CStrings {
  std::vector<std::string> storage;
  std::vector<char*> ptrs;
  void finish() {
    ptrs.clear();
    for (auto& s : storage) ptrs.push_back(s.data());
    ptrs.push_back(nullptr);
  }
};

Result<UniqueFd> open_output(const std::filesystem::path& p, bool append) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
  if (fd < 0) return errno_error("open output " + p.string(), errno);
  return UniqueFd(fd);
}

[[noreturn]] void child_fail(int err_pipe, int err) {
  (void)!::write(err_pipe, &err, sizeof err);
  _exit(127);
}

// Forks and execs. `fds` are dup2'ed onto 0,1,2 where >= 0. Returns the pid or an error (including
// exec failure, reported through a close-on-exec pipe).
Result<pid_t> fork_exec(const std::vector<std::string>& argv_in,
                        const std::map<std::string, std::string>& env_in, bool clear_env,
                        const std::filesystem::path& cwd, int in_fd, int out_fd, int err_fd, bool group,
                        bool die_with_parent) {
  if (argv_in.empty()) return invalid_argument("spawn: empty command line");
  CStrings argv;
  argv.storage = argv_in;
  argv.finish();
  CStrings envs;
  if (!clear_env) {
    for (char** e = environ; *e; ++e) {
      std::string_view kv(*e);
      auto eq = kv.find('=');
      if (eq != std::string_view::npos && env_in.count(std::string(kv.substr(0, eq)))) continue;
      envs.storage.emplace_back(kv);
    }
  }
  for (const auto& [k, v] : env_in) envs.storage.push_back(k + "=" + v);
  envs.finish();
  std::string cwd_s = cwd.string();

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return errno_error("spawn: pipe", errno);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return errno_error("spawn " + argv_in[0] + ": fork", e);
  }
  if (pid == 0) {
    ::close(pipefd[0]);
    // Restore default signal handling and an empty mask in the child.
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, nullptr);
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD, SIGQUIT}) ::signal(sig, SIG_DFL);
    if (group && ::setpgid(0, 0) != 0) child_fail(pipefd[1], errno);
    if (die_with_parent) {
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(pipefd[1], errno);
      if (::getppid() != parent) _exit(127);  // the parent died before prctl took effect
    }
    if (in_fd >= 0 && ::dup2(in_fd, 0) < 0) child_fail(pipefd[1], errno);
    if (out_fd >= 0 && ::dup2(out_fd, 1) < 0) child_fail(pipefd[1], errno);
    if (err_fd >= 0 && ::dup2(err_fd, 2) < 0) child_fail(pipefd[1], errno);
    if (!cwd_s.empty() && ::chdir(cwd_s.c_str()) != 0) child_fail(pipefd[1], errno);
    ::execvpe(argv.ptrs[0], argv.ptrs.data(), envs.ptrs.data());
    child_fail(pipefd[1], errno);
  }
  ::close(pipefd[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(pipefd[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  ::close(pipefd[0]);
  if (n == sizeof child_errno) {
    int ws;
    ::waitpid(pid, &ws, 0);
    return errno_error("spawn " + argv_in[0], child_errno);
  }
  if (group) ::setpgid(pid, pid);  // also from the parent: no race with an early signal()
  return pid;
}

}  // namespace

Result<Subprocess> Subprocess::spawn(const SpawnOptions& o) {
  UniqueFd in, out, err;
  if (o.stdin_null) {
    int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno_error("open /dev/null", errno);
    in.reset(fd);
  }
  if (!o.stdout_file.empty()) {
    INFERGATE_ASSIGN_OR_RETURN(out, open_output(o.stdout_file, o.append_output));
  }
  if (!o.stderr_file.empty()) {
    if (o.stderr_file == o.stdout_file) {
      int fd = ::fcntl(out.get(), F_DUPFD_CLOEXEC, 3);
      if (fd < 0) return errno_error("dup", errno);
      err.reset(fd);
    } else {
      INFERGATE_ASSIGN_OR_RETURN(err, open_output(o.stderr_file, o.append_output));
    }
  }
  INFERGATE_ASSIGN_OR_RETURN(pid_t pid, fork_exec(o.argv, o.env, o.clear_env, o.cwd, in.get(), out.get(),
                                                  err.get(), o.new_process_group, o.die_with_parent));
  return Subprocess(pid, o.new_process_group);
}

Subprocess::Subprocess(Subprocess&& o) noexcept : pid_(o.pid_), group_(o.group_), status_(o.status_) {
  o.pid_ = -1;
}

Subprocess& Subprocess::operator=(Subprocess&& o) noexcept {
  if (this != &o) {
    this->~Subprocess();
    pid_ = o.pid_;
    group_ = o.group_;
    status_ = o.status_;
    o.pid_ = -1;
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !status_) terminate(std::chrono::milliseconds(0));
}

std::optional<ExitStatus> Subprocess::poll() {
  if (status_ || pid_ <= 0) return status_;
  int ws;
  pid_t r;
  do {
    r = ::waitpid(pid_, &ws, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_)
    status_ = from_wait_status(ws);
  else if (r < 0)
    status_ = ExitStatus{};  // not our child any more (ECHILD): treat as gone
  return status_;
}

bool Subprocess::running() { return !poll().has_value(); }

ExitStatus Subprocess::wait() {
  if (status_ || pid_ <= 0) return status_.value_or(ExitStatus{});
  int ws;
  pid_t r;
  do {
    r = ::waitpid(pid_, &ws, 0);
  } while (r < 0 && errno == EINTR);
  status_ = r == pid_ ? from_wait_status(ws) : ExitStatus{};
  return *status_;
}

std::optional<ExitStatus> Subprocess::wait_for(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto step = std::chrono::microseconds(200);
  for (;;) {
    if (auto s = poll()) return s;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(step);
    step = std::min<std::chrono::microseconds>(step * 2, std::chrono::milliseconds(20));
  }
}

void Subprocess::signal(int sig) {
  if (pid_ <= 0 || status_) return;
  if (group_) {
    if (::kill(-pid_, sig) == 0) return;
  }
  ::kill(pid_, sig);
}

ExitStatus Subprocess::terminate(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return ExitStatus{};
  if (status_) {
    // The leader is gone; make sure nothing of its group lingers.
    if (group_) ::kill(-pid_, SIGKILL);
    return *status_;
  }
  if (grace.count() > 0) {
    signal(SIGTERM);
    if (auto s = wait_for(grace)) {
      if (group_) ::kill(-pid_, SIGKILL);
      return *s;
    }
  }
  signal(SIGKILL);
  return wait();
}

Result<CommandResult> run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                  const std::map<std::string, std::string>& env,
                                  const std::filesystem::path& cwd, size_t max_output) {
  int outp[2], errp[2];
  if (::pipe2(outp, O_CLOEXEC) != 0) return errno_error("pipe", errno);
  UniqueFd out_r(outp[0]), out_w(outp[1]);
  if (::pipe2(errp, O_CLOEXEC) != 0) return errno_error("pipe", errno);
  UniqueFd err_r(errp[0]), err_w(errp[1]);
  UniqueFd in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  INFERGATE_ASSIGN_OR_RETURN(pid_t pid, fork_exec(argv, env, false, cwd, in.get(), out_w.get(), err_w.get(),
                                                  /*group=*/true, /*die_with_parent=*/false));
  Subprocess proc(pid, true);
  out_w.reset();
  err_w.reset();

  CommandResult result;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[65536];
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      break;
    }
    pollfd fds[2] = {{out_open ? out_r.get() : -1, POLLIN, 0}, {err_open ? err_r.get() : -1, POLLIN, 0}};
    int r = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno_error("poll", errno);
    }
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(fds[k].fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        (k == 0 ? out_open : err_open) = false;
        continue;
      }
      std::string& dst = k == 0 ? result.out : result.err;
      if (dst.size() < max_output)
        dst.append(buf, std::min<size_t>(static_cast<size_t>(n), max_output - dst.size()));
    }
  }
  if (result.timed_out) {
    result.status = proc.terminate(std::chrono::milliseconds(0));
    return result;
  }
  // Output closed: the process has exited or closed its descriptors; wait for what is left.
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (auto s = proc.wait_for(std::max(left, std::chrono::milliseconds(0)))) {
    result.status = *s;
  } else {
    result.timed_out = true;
    result.status = proc.terminate(std::chrono::milliseconds(0));
  }
  return result;
}

}  // namespace infergate
