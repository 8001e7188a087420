// The process supervisor: one thread that spawns, reaps, restarts and stops every local process.
#include "infergate/operator/local/supervisor.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "infergate/common/fs.h"
#include "infergate/common/log.h"

namespace infergate::op::local {

std::chrono::milliseconds backoff_delay(const BackoffPolicy& policy, int failures) {
  if (failures <= 0) return std::chrono::milliseconds(0);
  auto d = policy.initial;
  for (int i = 1; i < failures && d < policy.max; ++i) d *= 2;
  return std::min(d, policy.max);
}

std::string_view to_string(ProcessStatus::Phase phase) {
  switch (phase) {
    case ProcessStatus::Phase::kPending: return "Pending";
    case ProcessStatus::Phase::kRunning: return "Running";
    case ProcessStatus::Phase::kBackoff: return "BackOff";
    case ProcessStatus::Phase::kStopping: return "Stopping";
    case ProcessStatus::Phase::kExited: return "Exited";
  }
  return "Unknown";
}

ProcessSupervisor::ProcessSupervisor(BackoffPolicy policy, Clock& clock, std::chrono::milliseconds tick)
    : policy_(policy), clock_(clock), tick_(tick) {
  // Every process is spawned from this thread: PR_SET_PDEATHSIG fires when the thread that forked
  // the child ends, so the spawning thread must live as long as the processes it started.
  thread_ = std::thread([this] { loop(); });
}

ProcessSupervisor::~ProcessSupervisor() {
  shutdown();
  {
    std::lock_guard lock(mu_);
    stop_thread_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status ProcessSupervisor::add(const std::string& name, ProcessSpec spec) {
  if (spec.argv.empty()) return invalid_argument("process " + name + ": empty command line");
  {
    std::lock_guard lock(mu_);
    if (shutting_down_) return failed_precondition("the supervisor is shutting down");
    if (entries_.count(name)) {
      return Error(ErrorCode::kAlreadyExists, "a process named " + name + " is still known");
    }
    Entry e;
    e.spec = std::move(spec);
    entries_.emplace(name, std::move(e));
  }
  cv_.notify_all();
  return ok_status();
}

void ProcessSupervisor::remove(const std::string& name) {
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(name);
    if (it == entries_.end() || it->second.removing) return;
    it->second.removing = true;
    begin_stop(it->second, clock_.mono_now());
  }
  cv_.notify_all();
}

std::optional<ProcessStatus> ProcessSupervisor::status(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return std::nullopt;
  return it->second.status;
}

std::vector<std::string> ProcessSupervisor::names() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [n, e] : entries_) out.push_back(n);
  return out;
}

std::map<std::string, ProcessStatus> ProcessSupervisor::snapshot() const {
  std::lock_guard lock(mu_);
  std::map<std::string, ProcessStatus> out;
  for (const auto& [n, e] : entries_) out.emplace(n, e.status);
  return out;
}

void ProcessSupervisor::set_on_change(std::function<void(const std::string&)> fn) {
  std::lock_guard lock(mu_);
  on_change_ = std::move(fn);
}

void ProcessSupervisor::shutdown() {
  std::unique_lock lock(mu_);
  shutting_down_ = true;
  const MonoTime now = clock_.mono_now();
  for (auto& [n, e] : entries_) {
    if (!e.removing) {
      e.removing = true;
      begin_stop(e, now);
    }
  }
  cv_.notify_all();
  cv_.wait(lock, [&] { return entries_.empty() || stop_thread_; });
}

void ProcessSupervisor::begin_stop(Entry& e, MonoTime now) {
  if (e.proc && e.status.phase == ProcessStatus::Phase::kRunning) {
    e.proc->signal(SIGTERM);
    e.term_sent = true;
    e.kill_at = now + e.spec.grace;
    e.status.phase = ProcessStatus::Phase::kStopping;
  }
}

void ProcessSupervisor::loop() {
  std::unique_lock lock(mu_);
  while (!stop_thread_) {
    cv_.wait_for(lock, tick_);
    if (stop_thread_) break;
    std::vector<std::string> changed = pass();
    cv_.notify_all();  // shutdown() waits for entries to go
    if (!changed.empty()) {
      auto fn = on_change_;
      lock.unlock();
      if (fn) {
        for (const auto& n : changed) fn(n);
      }
      lock.lock();
    }
  }
}

uint64_t ProcessSupervisor::passes() const {
  std::lock_guard lock(mu_);
  return passes_;
}

std::vector<std::string> ProcessSupervisor::pass() {
  ++passes_;
  const MonoTime now = clock_.mono_now();
  std::vector<std::string> changed, gone;
  for (auto& [name, e] : entries_) step(name, e, now, changed, gone);
  for (const auto& n : gone) entries_.erase(n);
  return changed;
}

void ProcessSupervisor::step(const std::string& name, Entry& e, MonoTime now,
                             std::vector<std::string>& changed, std::vector<std::string>& gone) {
  using Phase = ProcessStatus::Phase;
  ProcessStatus& s = e.status;

  // A live process: reap it if it ended, enforce deadlines and grace periods.
  if (e.proc && (s.phase == Phase::kRunning || s.phase == Phase::kStopping)) {
    if (auto exit = e.proc->poll()) {
      (void)e.proc->terminate(
          std::chrono::milliseconds(0));  // the leader is gone: kill what is left of its group
      e.proc.reset();
      s.last_exit = *exit;
      s.last_exit_wall = clock_.wall_now();
      s.pid = 0;
      const auto ran = now - s.started_at;
      log::debug("process exited", {{"process", name}, {"status", exit->describe()}});
      if (e.removing) {
        gone.push_back(name);
      } else if (!e.spec.restart || s.deadline_exceeded) {
        s.phase = Phase::kExited;
      } else {
        s.consecutive_failures = ran >= policy_.reset_after ? 1 : s.consecutive_failures + 1;
        s.phase = Phase::kBackoff;
        s.next_start = now + backoff_delay(policy_, s.consecutive_failures);
      }
      changed.push_back(name);
      return;
    }
    if (e.term_sent && now >= e.kill_at) {
      e.proc->signal(SIGKILL);
      e.term_sent = false;  // once
    }
    if (s.phase == Phase::kRunning && e.spec.deadline && !s.deadline_exceeded &&
        now - s.started_at >= *e.spec.deadline) {
      log::warn("process ran past its deadline; stopping it", {{"process", name}});
      s.deadline_exceeded = true;
      begin_stop(e, now);
      changed.push_back(name);
    }
    return;
  }

  if (e.removing) {
    gone.push_back(name);
    changed.push_back(name);
    return;
  }
  if (s.phase == Phase::kExited) return;
  if (s.phase == Phase::kBackoff && now < s.next_start) return;

  // Start (or restart) it.
  if (e.spec.before_start) e.spec.before_start();
  SpawnOptions o;
  o.argv = e.spec.argv;
  o.env = e.spec.env;
  o.cwd = e.spec.cwd;
  if (!e.spec.log_file.empty()) {
    o.stdout_file = e.spec.log_file;
    o.stderr_file = e.spec.log_file;
    o.append_output = true;
    s.log_offset = file_size_or_zero(e.spec.log_file);
  }
  o.new_process_group = true;
  o.die_with_parent = true;
  s.started_at = now;
  s.started_wall = clock_.wall_now();
  if (s.starts == 0) s.first_started_wall = s.started_wall;
  s.deadline_exceeded = false;
  ++s.starts;
  auto proc = Subprocess::spawn(o);
  if (!proc.ok()) {
    s.start_error = proc.error().message();
    s.last_exit = ExitStatus{127, 0};
    s.last_exit_wall = clock_.wall_now();
    log::warn("cannot start process", {{"process", name}, {"error", s.start_error}});
    if (!e.spec.restart) {
      s.phase = Phase::kExited;
    } else {
      ++s.consecutive_failures;
      s.phase = Phase::kBackoff;
      s.next_start = now + backoff_delay(policy_, s.consecutive_failures);
    }
    changed.push_back(name);
    return;
  }
  s.start_error.clear();
  e.proc = std::make_unique<Subprocess>(std::move(*proc));
  s.pid = e.proc->pid();
  s.phase = Phase::kRunning;
  changed.push_back(name);
}

uint64_t file_size_or_zero(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_size);
}

std::string read_log_from(const std::filesystem::path& path, uint64_t offset, size_t max_bytes) {
  auto fd = open_read(path);
  if (!fd.ok()) return "";
  uint64_t size = file_size_or_zero(path);
  if (size <= offset) return "";
  uint64_t begin = std::max<uint64_t>(offset, size > max_bytes ? size - max_bytes : 0);
  std::string buf(size - begin, '\0');
  if (!read_exact_at(fd->get(), buf.data(), buf.size(), begin, path.string()).ok()) return "";
  return buf;
}

std::string find_listen_address(std::string_view log) {
  constexpr std::string_view kMarker = "listening on http://";
  size_t at = log.rfind(kMarker);
  if (at == std::string_view::npos) return "";
  size_t begin = at + kMarker.size();
  size_t end = begin;
  while (end < log.size() && (std::isalnum(static_cast<unsigned char>(log[end])) || log[end] == '.' ||
                              log[end] == ':' || log[end] == '[' || log[end] == ']' || log[end] == '-')) {
    ++end;
  }
  std::string addr(log.substr(begin, end - begin));
  if (addr.find(':') == std::string::npos) return "";
  // "0.0.0.0:P" is reachable on loopback
  if (addr.rfind("0.0.0.0:", 0) == 0) addr = "127.0.0.1" + addr.substr(7);
  return addr;
}

int kill_processes_with_owner(const std::string& owner) {
  const std::string marker = std::string(kOwnerEnv) + "=" + owner;
  const pid_t self = ::getpid();
  int killed = 0;
  std::error_code ec;
  for (const auto& de : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = de.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == self) continue;
    auto env = read_file(de.path() / "environ", 1u << 20);
    if (!env.ok()) continue;  // gone, or not ours to read
    std::string_view rest = *env;
    bool found = false;
    while (!rest.empty()) {
      size_t end = rest.find('\0');
      std::string_view var = rest.substr(0, end);
      if (var == marker) {
        found = true;
        break;
      }
      if (end == std::string_view::npos) break;
      rest.remove_prefix(end + 1);
    }
    if (found && ::kill(pid, SIGKILL) == 0) ++killed;
  }
  return killed;
}

std::string last_lines(std::string_view text, int lines) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  size_t pos = text.size();
  for (int i = 0; i < lines; ++i) {
    size_t nl = pos == 0 ? std::string_view::npos : text.rfind('\n', pos - 1);
    if (nl == std::string_view::npos) return std::string(text);
    pos = nl;
  }
  return std::string(text.substr(pos + 1));
}

}  // namespace infergate::op::local
