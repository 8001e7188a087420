// LocalPlatform: pods as supervised processes, endpoints as router listeners, records on disk.
#include "infergate/operator/local/local_platform.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "infergate/common/fs.h"
#include "infergate/common/log.h"
#include "infergate/http/client.h"
#include "infergate/operator/api/verification.h"

namespace infergate::op::local {
namespace fs = std::filesystem;
using platform::JobState;
using platform::ModelRef;
using platform::PodState;
using platform::VerifyState;

namespace {

constexpr std::string_view kTerminationLog = "termination-log";
constexpr std::string_view kLastTerminationLog = "termination-log.last";
// The agent's verdict on the current start. `exec` leaves the termination log to the command it
// starts once the release is verified (a crashing engine's last words belong there), so a pod's
// "Verified" is read from the agent's report file; a refusal is in both.
constexpr std::string_view kVerdictFile = "verdict.json";

std::string replace_all(std::string s, std::string_view from, const std::string& to) {
  if (from.empty()) return s;
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

std::string read_small(const fs::path& p, size_t cap = api::kMaxTerminationMessage) {
  auto r = read_file(p, 1u << 20);
  if (!r.ok()) return "";
  std::string s = std::move(*r);
  if (s.size() > cap) s.resize(cap);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

// A free loopback port for engines that cannot bind port 0 and say which port they got.
int free_port(const std::string& host) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return 0;
  socklen_t len = sizeof addr;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  return ntohs(addr.sin_port);
}

Json command_json(const api::ContainerCommand& c) {
  return {{"image", c.image}, {"command", c.command}, {"args", c.args}, {"env", c.env}};
}

api::ContainerCommand command_from(const Json& j) {
  api::ContainerCommand c;
  c.image = j.value("image", "");
  if (auto it = j.find("command"); it != j.end() && it->is_array())
    c.command = it->get<std::vector<std::string>>();
  if (auto it = j.find("args"); it != j.end() && it->is_array()) c.args = it->get<std::vector<std::string>>();
  if (auto it = j.find("env"); it != j.end() && it->is_object())
    c.env = it->get<std::map<std::string, std::string>>();
  return c;
}

Json model_json(const ModelRef& m) { return {{"namespace", m.namespace_}, {"name", m.name}, {"uid", m.uid}}; }
ModelRef model_from(const Json& j) {
  return ModelRef{j.value("namespace", ""), j.value("name", ""), j.value("uid", "")};
}

Json workload_json(const ModelRef& m, const platform::WorkloadSpec& s, const std::string& hash,
                   int32_t replicas) {
  const auto& a = s.artifact;
  Json trust = {{"publicKeySecret", a.trust.public_key_secret}, {"expectName", a.trust.expect_name}};
  if (a.trust.min_version) trust["minVersion"] = *a.trust.min_version;
  if (!a.trust.formats.empty()) trust["formats"] = a.trust.formats;
  return {{"model", model_json(m)},
          {"name", s.name},
          {"track", std::string(api::to_string(s.track))},
          {"revision", s.revision},
          {"replicas", replicas},
          {"labels", s.labels},
          {"verify", command_json(s.verify)},
          {"trustSecret", s.trust_secret},
          {"engine",
           {{"container", command_json(s.engine.container)},
            {"port", s.engine.port},
            {"livenessPath", s.engine.liveness_path},
            {"readinessPath", s.engine.readiness_path}}},
          {"artifact",
           {{"volume",
             {{"kind", a.volume.kind == api::VolumeSource::Kind::kNfs ? "nfs" : "pvc"},
              {"claimName", a.volume.claim_name},
              {"nfsServer", a.volume.nfs_server},
              {"nfsPath", a.volume.nfs_path}}},
            {"path", a.path},
            {"trust", trust}}},
          {"summary", s.summary},
          {"templateHash", hash}};
}

platform::WorkloadSpec workload_from(const Json& j) {
  platform::WorkloadSpec s;
  s.name = j.value("name", "");
  s.track = j.value("track", "") == "canary" ? api::Track::kCanary : api::Track::kStable;
  s.revision = j.value("revision", "");
  s.replicas = j.value("replicas", 0);
  if (auto it = j.find("labels"); it != j.end() && it->is_object())
    s.labels = it->get<std::map<std::string, std::string>>();
  s.verify = command_from(j.value("verify", Json::object()));
  s.trust_secret = j.value("trustSecret", "");
  const Json engine = j.value("engine", Json::object());
  s.engine.container = command_from(engine.value("container", Json::object()));
  s.engine.port = engine.value("port", 8000);
  s.engine.liveness_path = engine.value("livenessPath", "/healthz");
  s.engine.readiness_path = engine.value("readinessPath", "/readyz");
  const Json art = j.value("artifact", Json::object());
  const Json vol = art.value("volume", Json::object());
  s.artifact.volume.kind = vol.value("kind", "pvc") == "nfs"
                               ? api::VolumeSource::Kind::kNfs
                               : api::VolumeSource::Kind::kPersistentVolumeClaim;
  s.artifact.volume.claim_name = vol.value("claimName", "");
  s.artifact.volume.nfs_server = vol.value("nfsServer", "");
  s.artifact.volume.nfs_path = vol.value("nfsPath", "");
  s.artifact.path = art.value("path", "");
  const Json trust = art.value("trust", Json::object());
  s.artifact.trust.public_key_secret = trust.value("publicKeySecret", "");
  s.artifact.trust.expect_name = trust.value("expectName", "");
  if (trust.contains("minVersion") && trust["minVersion"].is_number_integer())
    s.artifact.trust.min_version = trust["minVersion"].get<int64_t>();
  for (const auto& f : trust.value("formats", Json::array())) {
    if (f.is_string()) s.artifact.trust.formats.push_back(f.get<std::string>());
  }
  s.summary = j.value("summary", "");
  return s;
}

std::string_view phase_name(JobState::Phase p) {
  switch (p) {
    case JobState::Phase::kPending: return "Pending";
    case JobState::Phase::kRunning: return "Running";
    case JobState::Phase::kSucceeded: return "Succeeded";
    case JobState::Phase::kFailed: return "Failed";
  }
  return "Pending";
}

Json job_state_json(const JobState& s) {
  return {
      {"phase", std::string(phase_name(s.phase))},   {"exitCode", s.exit_code}, {"terminated", s.terminated},
      {"terminationMessage", s.termination_message}, {"reason", s.reason},      {"message", s.message}};
}

JobState job_state_from(const Json& j) {
  JobState s;
  s.exists = true;
  std::string p = j.value("phase", "Failed");
  s.phase = p == "Succeeded" ? JobState::Phase::kSucceeded
            : p == "Running" ? JobState::Phase::kRunning
            : p == "Pending" ? JobState::Phase::kPending
                             : JobState::Phase::kFailed;
  s.exit_code = j.value("exitCode", 0);
  s.terminated = j.value("terminated", false);
  s.termination_message = j.value("terminationMessage", "");
  s.reason = j.value("reason", "");
  s.message = j.value("message", "");
  return s;
}

// A file name for a record: model keys hold one '/', which becomes "__" (names never hold '_').
std::string record_name(const std::string& key) { return replace_all(key, "/", "__"); }

}  // namespace

// ---- construction, restore, shutdown ----

LocalPlatform::LocalPlatform(LocalOptions options, Clock& clock)
    : options_(std::move(options)), clock_(clock) {}

Result<std::unique_ptr<LocalPlatform>> LocalPlatform::create(LocalOptions options, Clock& clock) {
  if (options.state_dir.empty()) return invalid_argument("the local platform needs a state directory");
  std::error_code ec;
  for (const char* sub : {"platform/workloads", "platform/endpoints", "platform/jobs", "pods", "jobs"}) {
    fs::create_directories(options.state_dir / sub, ec);
    if (ec) return io_error("creating " + (options.state_dir / sub).string() + ": " + ec.message());
  }
  if (options.bin_dir.empty()) {
    fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) options.bin_dir = self.parent_path();
  }
  options.state_dir = fs::absolute(options.state_dir, ec);
  // Processes an earlier operator on this state directory left behind (it was killed, and a pod had
  // forked something outside its process group) go before anything starts.
  if (int n = kill_processes_with_owner(options.state_dir.string()); n > 0) {
    log::warn("killed processes an earlier operator left behind", {{"count", n}});
  }
  std::unique_ptr<LocalPlatform> p(new LocalPlatform(std::move(options), clock));
  p->supervisor_ = std::make_unique<ProcessSupervisor>(p->options_.backoff, clock);
  LocalPlatform* raw = p.get();
  p->supervisor_->set_on_change([raw](const std::string& process) {
    // "pod/<model key>/<pod>" or "job/<model key>/<job>": the model key is the middle part.
    auto first = process.find('/');
    auto last = process.rfind('/');
    if (first == std::string::npos || last == first) return;
    raw->notify(process.substr(first + 1, last - first - 1));
  });
  INFERGATE_RETURN_IF_ERROR(p->restore());
  p->prober_ = std::thread([raw] { raw->probe_loop(); });
  return p;
}

LocalPlatform::~LocalPlatform() { shutdown(); }

void LocalPlatform::shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (prober_.joinable()) prober_.join();
  if (supervisor_) supervisor_->shutdown();
  if (int n = kill_processes_with_owner(options_.state_dir.string()); n > 0) {
    log::warn("killed processes that pods left outside their process groups", {{"count", n}});
  }
  // Listeners are closed outside the lock: closing waits for their requests, which resolve() under it.
  std::vector<std::unique_ptr<Router>> closing;
  {
    std::lock_guard lock(mu_);
    for (auto& [k, e] : endpoints_) closing.push_back(std::move(e.listener));
  }
  closing.clear();
}

void LocalPlatform::set_notify(std::function<void(const std::string&)> fn) {
  std::lock_guard lock(notify_mu_);
  notify_ = std::move(fn);
}

void LocalPlatform::notify(const std::string& model_key) {
  std::function<void(const std::string&)> fn;
  {
    std::lock_guard lock(notify_mu_);
    fn = notify_;
  }
  if (fn) fn(model_key);
}

Status LocalPlatform::restore() {
  std::lock_guard lock(mu_);
  auto records = [&](const char* sub) {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& de : fs::directory_iterator(options_.state_dir / "platform" / sub, ec)) {
      if (de.path().extension() == ".json") out.push_back(de.path());
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  for (const auto& path : records("workloads")) {
    auto text = read_file(path);
    if (!text.ok()) return std::move(text).error().context("restoring a workload");
    auto j = parse_json(*text, path.string());
    if (!j.ok()) return std::move(j).error().context("restoring a workload");
    Workload w;
    w.model = model_from(j->value("model", Json::object()));
    w.spec = workload_from(*j);
    w.template_hash = j->value("templateHash", "");
    w.replicas = j->value("replicas", 0);
    const std::string key = w.model.key() + "/" + w.spec.name;
    log::info("restored workload",
              {{"model", w.model.key()}, {"workload", w.spec.name}, {"replicas", w.replicas}});
    workloads_[key] = std::move(w);
  }
  for (const auto& path : records("endpoints")) {
    auto text = read_file(path);
    if (!text.ok()) return std::move(text).error().context("restoring an endpoint");
    auto j = parse_json(*text, path.string());
    if (!j.ok()) return std::move(j).error().context("restoring an endpoint");
    Endpoint e;
    e.model = model_from(j->value("model", Json::object()));
    e.spec.name = j->value("name", "");
    if (auto it = j->find("selector"); it != j->end() && it->is_object())
      e.spec.selector = it->get<std::map<std::string, std::string>>();
    if (auto it = j->find("labels"); it != j->end() && it->is_object())
      e.spec.labels = it->get<std::map<std::string, std::string>>();
    e.spec.port = j->value("servicePort", 80);
    e.hash = j->value("hash", "");
    e.port = j->value("port", 0);
    if (Status st = start_listener(e); !st.ok()) return st;
    endpoints_[e.model.key() + "/" + e.spec.name] = std::move(e);
  }
  for (const auto& path : records("jobs")) {
    auto text = read_file(path);
    if (!text.ok()) return std::move(text).error().context("restoring a job");
    auto j = parse_json(*text, path.string());
    if (!j.ok()) return std::move(j).error().context("restoring a job");
    Job job;
    job.model = model_from(j->value("model", Json::object()));
    job.spec.name = j->value("name", "");
    if (auto it = j->find("labels"); it != j->end() && it->is_object())
      job.spec.labels = it->get<std::map<std::string, std::string>>();
    job.spec.container = command_from(j->value("container", Json::object()));
    job.spec.deadline_seconds = j->value("deadlineSeconds", int64_t{1800});
    job.hash = j->value("hash", "");
    job.dir = options_.state_dir / "jobs" / record_name(job.model.key()) / job.spec.name;
    if (j->contains("final")) job.final_state = job_state_from((*j)["final"]);
    const std::string key = job.model.key() + "/" + job.spec.name;
    jobs_[key] = std::move(job);
  }
  // Unfinished jobs lost their process with the operator that started them, and so did the pods they
  // were checking: the pods restart now, possibly behind other router ports than the job's arguments
  // name. Restarting the job at once would judge a stage on that race (an eval that cannot reach
  // its targets is inconclusive, and the stage rolls back), so the job is forgotten instead: the
  // rollout sees no job and starts a fresh one (with the endpoints' current URLs) once the canary
  // serves again, as a Job whose pod was lost with its node gets a new pod.
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->second.final_state) {
      ++it;
      continue;
    }
    std::error_code ec;
    fs::remove(options_.state_dir / "platform" / "jobs" /
                   (record_name(it->second.model.key()) + "__" + it->second.spec.name + ".json"),
               ec);
    log::info("an unfinished job is dropped; the rollout starts it again once its targets serve",
              {{"model", it->second.model.key()}, {"job", it->second.spec.name}});
    it = jobs_.erase(it);
  }
  return ok_status();
}

// ---- records ----

Status LocalPlatform::save_workload(const Workload& w) const {
  fs::path p = options_.state_dir / "platform" / "workloads" /
               (record_name(w.model.key()) + "__" + w.spec.name + ".json");
  return write_file_atomic(p,
                           dump_json(workload_json(w.model, w.spec, w.template_hash, w.replicas), 2) + "\n");
}

Status LocalPlatform::save_endpoint(const Endpoint& e) const {
  Json j = {{"model", model_json(e.model)},
            {"name", e.spec.name},
            {"selector", e.spec.selector},
            {"labels", e.spec.labels},
            {"servicePort", e.spec.port},
            {"hash", e.hash},
            {"port", e.port}};
  fs::path p = options_.state_dir / "platform" / "endpoints" /
               (record_name(e.model.key()) + "__" + e.spec.name + ".json");
  return write_file_atomic(p, dump_json(j, 2) + "\n");
}

Status LocalPlatform::save_job(const Job& job) const {
  Json j = {{"model", model_json(job.model)},
            {"name", job.spec.name},
            {"labels", job.spec.labels},
            {"container", command_json(job.spec.container)},
            {"deadlineSeconds", job.spec.deadline_seconds},
            {"hash", job.hash}};
  if (job.final_state) j["final"] = job_state_json(*job.final_state);
  fs::path p = options_.state_dir / "platform" / "jobs" /
               (record_name(job.model.key()) + "__" + job.spec.name + ".json");
  return write_file_atomic(p, dump_json(j, 2) + "\n");
}

// ---- commands ----

fs::path LocalPlatform::binary(const std::string& name) const {
  if (name.find('/') != std::string::npos) return name;
  if (!options_.bin_dir.empty()) {
    fs::path candidate = options_.bin_dir / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return name;  // PATH
}

std::string LocalPlatform::model_dir_key(const ModelRef& m) const { return record_name(m.key()); }

api::Layout LocalPlatform::layout() const {
  api::Layout l;
  l.model_root = std::string(kModelRootToken);
  l.trust_dir = std::string(kTrustDirToken);
  l.termination_log = std::string(kTerminationLogToken);
  l.listen_host = options_.host;
  l.port = 0;
  return l;
}

Result<std::vector<std::string>> LocalPlatform::pod_command(const platform::WorkloadSpec& spec,
                                                            const fs::path& pod_dir) const {
  if (spec.artifact.volume.kind != api::VolumeSource::Kind::kPersistentVolumeClaim) {
    return invalid_argument(
               "spec.artifact.volume: the local platform serves persistentVolumeClaim volumes "
               "(a directory under the volumes directory); NFS is for clusters")
        .with_reason("UnsupportedVolume");
  }
  const auto& verify = spec.verify;
  if (verify.command.empty() || verify.args.empty() || verify.args[0] != "verify") {
    return internal_error("the workload's verify step is not `infergate-agent verify ...`");
  }
  if (spec.engine.container.command.empty()) {
    return invalid_argument(
               "the engine has no command (it relies on a container image's entrypoint); the "
               "local platform runs the bundled runtime or commands it can find")
        .with_reason("UnsupportedEngine");
  }
  const std::string volume = (options_.volumes_dir / spec.artifact.volume.claim_name).string();
  const std::string trust = (options_.keys_dir / spec.trust_secret).string();
  const std::string termination = (pod_dir / kTerminationLog).string();
  auto fill = [&](std::string arg) {
    arg = replace_all(std::move(arg), kModelRootToken, volume);
    arg = replace_all(std::move(arg), kTrustDirToken, trust);
    return replace_all(std::move(arg), kTerminationLogToken, termination);
  };
  std::vector<std::string> argv = {binary(verify.command[0]).string()};
  for (size_t i = 1; i < verify.command.size(); ++i) argv.push_back(fill(verify.command[i]));
  argv.push_back("exec");
  for (size_t i = 1; i < verify.args.size(); ++i) argv.push_back(fill(verify.args[i]));
  argv.push_back("--report");
  argv.push_back((pod_dir / kVerdictFile).string());
  argv.push_back("--");
  const auto& engine = spec.engine.container;
  const bool bundled = fs::path(engine.command[0]).filename() == "infergate-runtime";
  argv.push_back(binary(engine.command[0]).string());
  for (size_t i = 1; i < engine.command.size(); ++i) argv.push_back(fill(engine.command[i]));
  for (size_t i = 0; i < engine.args.size(); ++i) {
    argv.push_back(fill(engine.args[i]));
    if (engine.args[i] == "--port" && i + 1 < engine.args.size()) {
      // Every pod needs a port of its own: the bundled runtime binds port 0 and prints the one it got;
      // another engine gets a free port picked here.
      int port = bundled ? 0 : free_port(options_.host);
      argv.push_back(std::to_string(port));
      ++i;
    }
  }
  return argv;
}

// ---- pods ----

Status LocalPlatform::start_pod(Workload& w, Pod& p) {
  std::error_code ec;
  fs::create_directories(p.dir, ec);
  if (ec) return io_error("creating " + p.dir.string() + ": " + ec.message());
  INFERGATE_ASSIGN_OR_RETURN(std::vector<std::string> argv, pod_command(w.spec, p.dir));
  ProcessSpec ps;
  ps.argv = std::move(argv);
  ps.env = w.spec.engine.container.env;
  for (const auto& [k, v] : options_.env) ps.env.emplace(k, v);
  ps.env[std::string(kOwnerEnv)] = options_.state_dir.string();
  ps.log_file = p.dir / "log";
  ps.restart = true;
  ps.grace = options_.grace;
  const fs::path tl = p.dir / kTerminationLog, last = p.dir / kLastTerminationLog;
  const fs::path verdict = p.dir / kVerdictFile;
  // The agent clears its verdict file when it starts; what an earlier attempt said is kept beside it,
  // as Kubernetes keeps an init container's last state while it retries. The report of the earlier
  // start goes before this one starts, so that it is never read as this start's verdict.
  ps.before_start = [tl, last, verdict] {
    std::error_code e;
    fs::remove(verdict, e);
    if (fs::exists(tl, e) && fs::file_size(tl, e) > 0) fs::rename(tl, last, e);
  };
  {
    std::error_code e;
    fs::remove(tl, e);
    fs::remove(last, e);
    fs::remove(verdict, e);
  }
  INFERGATE_RETURN_IF_ERROR(supervisor_->add("pod/" + w.model.key() + "/" + p.name, std::move(ps)));
  p.started = true;
  log::info("pod starting", {{"model", w.model.key()}, {"pod", p.name}, {"revision", p.revision}});
  return ok_status();
}

PodState LocalPlatform::pod_state(const Workload& w, const Pod& p,
                                  const std::optional<ProcessStatus>& ps) const {
  PodState s;
  s.name = p.name;
  s.revision = p.revision;
  s.deleting = p.deleting;
  s.restarts = ps ? ps->restarts() : 0;
  if (ps && ps->starts > 0) {
    s.started_at = ps->first_started_wall;
    if (ps->restarts() > 0) s.last_terminated_at = ps->last_exit_wall;
  }
  const bool running = ps && ps->phase == ProcessStatus::Phase::kRunning;
  const bool backoff = ps && ps->phase == ProcessStatus::Phase::kBackoff;
  const int exit_code = ps && ps->last_exit
                            ? (ps->last_exit->code >= 0 ? ps->last_exit->code : 128 + ps->last_exit->signal)
                            : 1;
  std::string verdict = read_small(p.dir / kTerminationLog);
  if (verdict.empty()) verdict = read_small(p.dir / kVerdictFile);
  const std::string last = read_small(p.dir / kLastTerminationLog);
  s.verify.restarts = s.restarts;
  // A "Verified" verdict is the agent's step succeeding (exit 0), whatever the runtime it exec'd did
  // later; a refusal is the agent exiting with the process's exit code.
  auto set_verdict = [&](const std::string& text, int code) {
    api::VerificationReport r = api::parse_termination_message(text, 0);
    if (!r.verified) r = api::parse_termination_message(text, code != 0 ? code : 1);
    s.verify.termination_message = text;
    s.verify.exit_code = r.verified ? 0 : (r.exit_code != 0 ? r.exit_code : (code != 0 ? code : 1));
    s.verify.phase = r.verified ? VerifyState::Phase::kSucceeded : VerifyState::Phase::kFailed;
  };
  if (!verdict.empty()) {
    set_verdict(verdict, exit_code);
  } else if (running) {
    s.verify.phase = VerifyState::Phase::kRunning;
    if (!last.empty() && !api::parse_termination_message(last, 0).verified) set_verdict(last, exit_code);
    if (s.verify.phase == VerifyState::Phase::kFailed) s.verify.restarts = s.restarts;
  } else if (ps && ps->starts > 0) {
    // It ended before the agent said anything (it could not start, or was killed while verifying).
    s.verify.phase = VerifyState::Phase::kFailed;
    s.verify.exit_code = exit_code;
    if (!ps->start_error.empty()) s.verify.waiting_reason = "StartError";
  }
  const bool verified = s.verify.phase == VerifyState::Phase::kSucceeded;
  if (!verified) {
    s.phase = PodState::Phase::kPending;
    if (backoff && s.verify.phase == VerifyState::Phase::kFailed)
      s.verify.waiting_reason = "CrashLoopBackOff";
    if (!ps || ps->phase == ProcessStatus::Phase::kPending) s.verify.phase = VerifyState::Phase::kNotStarted;
    return s;
  }
  s.phase = PodState::Phase::kRunning;
  if (running) {
    s.ready = p.ready && !p.deleting;
    s.address = p.address;
  } else if (backoff) {
    s.waiting_reason = "CrashLoopBackOff";
    std::string tail = last_lines(read_log_from(p.dir / "log", ps->log_offset), 5);
    s.message = "the runtime exited (" +
                (ps->last_exit ? ps->last_exit->describe() : std::string("unknown")) + ")" +
                (tail.empty() ? "" : ": " + tail);
  }
  (void)w;
  return s;
}

void LocalPlatform::reconcile_workloads() {
  std::vector<std::string> to_notify;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    for (auto& [key, w] : workloads_) reconcile_workload(key, w, to_notify);
  }
  for (const auto& m : to_notify) notify(m);
}

void LocalPlatform::reconcile_workload(const std::string& key, Workload& w,
                                       std::vector<std::string>& notify_keys) {
  (void)key;
  bool changed = false;
  // Forget pods whose process is gone after deletion.
  for (auto it = w.pods.begin(); it != w.pods.end();) {
    if (it->second.deleting && !supervisor_->status("pod/" + w.model.key() + "/" + it->first)) {
      it = w.pods.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  auto remove_pod = [&](Pod& p) {
    p.deleting = true;
    p.ready = false;
    supervisor_->remove("pod/" + w.model.key() + "/" + p.name);
    log::info("pod stopping", {{"model", w.model.key()}, {"pod", p.name}});
    changed = true;
  };
  for (int guard = 0; guard < 64; ++guard) {
    std::vector<Pod*> current, old;
    for (auto& [n, p] : w.pods) {
      if (p.deleting) continue;
      (p.template_hash == w.template_hash ? current : old).push_back(&p);
    }
    int ready_current = 0, ready_old = 0;
    for (Pod* p : current) ready_current += p->ready;
    for (Pod* p : old) ready_old += p->ready;
    const int replicas = w.replicas;
    // Scale down: unready pods first, then the newest.
    if (static_cast<int>(current.size()) > replicas) {
      std::sort(current.begin(), current.end(), [](Pod* a, Pod* b) {
        if (a->ready != b->ready) return !a->ready;
        return a->name > b->name;
      });
      remove_pod(*current.front());
      continue;
    }
    // Old pods that serve nothing go at once; a serving one only when enough new ones serve.
    Pod* unready_old = nullptr;
    for (Pod* p : old) {
      if (!p->ready) unready_old = p;
    }
    if (unready_old) {
      remove_pod(*unready_old);
      continue;
    }
    if (!old.empty() && (replicas == 0 || ready_current + ready_old - 1 >= replicas)) {
      remove_pod(*old.front());
      continue;
    }
    // Scale up, one surge pod while old ones still serve.
    const int limit = old.empty() ? replicas : replicas + 1;
    if (static_cast<int>(current.size()) < replicas &&
        static_cast<int>(current.size() + old.size()) < limit) {
      Pod p;
      p.name = w.spec.name + "-" + w.template_hash.substr(0, 6) + "-" + std::to_string(w.next_index++);
      p.template_hash = w.template_hash;
      p.revision = w.spec.revision;
      p.dir = options_.state_dir / "pods" / model_dir_key(w.model) / p.name;
      auto [it, inserted] = w.pods.emplace(p.name, std::move(p));
      if (!inserted) continue;
      if (Status st = start_pod(w, it->second); !st.ok()) {
        log::warn("cannot start a pod",
                  {{"model", w.model.key()}, {"pod", it->first}, {"error", st.error().to_string()}});
        w.pods.erase(it);
        break;
      }
      changed = true;
      continue;
    }
    break;
  }
  if (changed) notify_keys.push_back(w.model.key());
}

void LocalPlatform::probe_loop() {
  struct Probe {
    std::string workload_key, pod, process, readiness_path;
    fs::path log;
    std::string address;
    bool ready = false;
  };
  for (;;) {
    reconcile_workloads();
    std::vector<Probe> probes;
    std::vector<std::string> to_notify;
    {
      std::unique_lock lock(mu_);
      if (stopping_) return;
      for (auto& [key, w] : workloads_) {
        for (auto& [name, p] : w.pods) {
          const std::string process = "pod/" + w.model.key() + "/" + name;
          auto ps = supervisor_->status(process);
          bool running = ps && ps->phase == ProcessStatus::Phase::kRunning;
          if (!running || (ps && ps->starts != p.seen_starts) || p.deleting) {
            if (p.ready || !p.address.empty()) to_notify.push_back(w.model.key());
            p.ready = false;
            p.address.clear();
            if (ps) p.seen_starts = ps->starts;
            if (!running || p.deleting) continue;
          }
          std::string address = p.address;
          if (address.empty()) {
            // Only after the agent verified the release does the runtime start; its log says where it
            // listens.
            address = find_listen_address(read_log_from(p.dir / "log", ps->log_offset));
            if (address.empty()) continue;
          }
          probes.push_back(
              {key, name, process, w.spec.engine.readiness_path, p.dir / "log", address, p.ready});
        }
      }
    }
    for (auto& pr : probes) {
      std::string path = pr.readiness_path.empty() ? "/readyz" : pr.readiness_path;
      http::ClientRequest probe;
      probe.timeout = options_.probe_timeout;
      probe.max_body = 64 << 10;
      auto r = http::fetch("http://" + pr.address + path, probe);
      bool ready = r.ok() && r->status == 200;
      std::lock_guard lock(mu_);
      auto w = workloads_.find(pr.workload_key);
      if (w == workloads_.end()) continue;
      auto p = w->second.pods.find(pr.pod);
      if (p == w->second.pods.end() || p->second.deleting) continue;
      bool changed = p->second.address != pr.address || p->second.ready != ready;
      p->second.address = pr.address;
      p->second.ready = ready;
      if (changed) {
        log::info(ready ? "pod ready" : "pod not ready",
                  {{"model", w->second.model.key()}, {"pod", pr.pod}, {"address", pr.address}});
        to_notify.push_back(w->second.model.key());
      }
    }
    std::sort(to_notify.begin(), to_notify.end());
    to_notify.erase(std::unique(to_notify.begin(), to_notify.end()), to_notify.end());
    for (const auto& m : to_notify) notify(m);
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, options_.probe_period, [&] { return stopping_; });
    if (stopping_) return;
  }
}

// ---- Platform: observations ----

Result<platform::WorkloadState> LocalPlatform::observe_workload(const ModelRef& model,
                                                                const std::string& workload) {
  std::lock_guard lock(mu_);
  auto it = workloads_.find(model.key() + "/" + workload);
  if (it == workloads_.end()) return platform::WorkloadState{};
  const Workload& w = it->second;
  platform::WorkloadState s;
  s.exists = true;
  s.template_hash = w.template_hash;
  s.revision = w.spec.revision;
  s.replicas = w.replicas;
  s.observed_current = true;
  for (const auto& [name, p] : w.pods) {
    auto ps = supervisor_->status("pod/" + w.model.key() + "/" + name);
    PodState st = pod_state(w, p, ps);
    if (!p.deleting && p.template_hash == w.template_hash) ++s.updated_replicas;
    if (st.ready) {
      ++s.ready_replicas;
      ++s.available_replicas;
    }
    s.pods.push_back(std::move(st));
  }
  return s;
}

Result<platform::EndpointState> LocalPlatform::observe_endpoint(const ModelRef& model,
                                                                const std::string& endpoint) {
  std::lock_guard lock(mu_);
  platform::EndpointState s;
  auto it = endpoints_.find(model.key() + "/" + endpoint);
  if (it == endpoints_.end()) return s;
  s.exists = true;
  s.hash = it->second.hash;
  if (it->second.listener) s.url = it->second.listener->url();
  return s;
}

Result<std::vector<std::string>> LocalPlatform::list_workloads(const ModelRef& model) {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [key, w] : workloads_) {
    if (w.model.key() == model.key()) out.push_back(w.spec.name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<platform::TrustState> LocalPlatform::check_trust(const ModelRef&, const api::TrustSpec& trust) {
  if (trust.public_key_secret.empty()) return platform::TrustState::kMissing;
  std::error_code ec;
  for (const auto& de : fs::directory_iterator(options_.keys_dir / trust.public_key_secret, ec)) {
    const std::string n = de.path().filename().string();
    if (de.path().extension() == ".pem" && !n.empty() && n[0] != '.') return platform::TrustState::kPresent;
  }
  return platform::TrustState::kMissing;
}

// ---- Platform: changes ----

Status LocalPlatform::apply_workload(const ModelRef& model, const platform::WorkloadSpec& spec) {
  // Refuse what can never run here before recording it (as an API server refuses an invalid object).
  INFERGATE_RETURN_IF_ERROR(pod_command(spec, options_.state_dir).context("workload " + spec.name));
  std::vector<std::string> to_notify;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return Error(ErrorCode::kUnavailable, "the local platform is shutting down");
    const std::string key = model.key() + "/" + spec.name;
    const std::string hash = spec.template_hash();
    auto it = workloads_.find(key);
    if (it != workloads_.end() && it->second.template_hash == hash && it->second.replicas == spec.replicas) {
      return ok_status();
    }
    Workload& w = workloads_[key];
    if (w.spec.name.empty()) log::info("workload created", {{"model", model.key()}, {"workload", spec.name}});
    w.model = model;
    w.spec = spec;
    w.template_hash = hash;
    w.replicas = spec.replicas;
    INFERGATE_RETURN_IF_ERROR(save_workload(w));
    reconcile_workload(key, w, to_notify);
  }
  for (const auto& m : to_notify) notify(m);
  return ok_status();
}

Status LocalPlatform::scale_workload(const ModelRef& model, const std::string& workload, int32_t replicas) {
  std::vector<std::string> to_notify;
  {
    std::lock_guard lock(mu_);
    const std::string key = model.key() + "/" + workload;
    auto it = workloads_.find(key);
    if (it == workloads_.end())
      return not_found("workload " + workload + " of " + model.key() + " does not exist");
    if (it->second.replicas == replicas) return ok_status();
    it->second.replicas = replicas;
    it->second.spec.replicas = replicas;
    INFERGATE_RETURN_IF_ERROR(save_workload(it->second));
    reconcile_workload(key, it->second, to_notify);
  }
  for (const auto& m : to_notify) notify(m);
  return ok_status();
}

Status LocalPlatform::delete_workload(const ModelRef& model, const std::string& workload) {
  std::lock_guard lock(mu_);
  const std::string key = model.key() + "/" + workload;
  auto it = workloads_.find(key);
  if (it == workloads_.end()) return ok_status();
  for (auto& [name, p] : it->second.pods) supervisor_->remove("pod/" + model.key() + "/" + name);
  std::error_code ec;
  fs::remove(
      options_.state_dir / "platform" / "workloads" / (record_name(model.key()) + "__" + workload + ".json"),
      ec);
  workloads_.erase(it);
  log::info("workload deleted", {{"model", model.key()}, {"workload", workload}});
  return ok_status();
}

Status LocalPlatform::start_listener(Endpoint& e) {
  if (e.listener) return ok_status();
  const std::string name = e.spec.name;
  LocalPlatform* self = this;
  auto resolve = [self, name, model = e.model.key()](const std::string&) {
    return self->resolve(model + "/" + name);
  };
  auto r = Router::for_endpoint(options_.host + ":" + std::to_string(e.port), name, resolve);
  if (!r.ok() && e.port != 0) {
    log::warn("the endpoint's earlier port is taken; picking another",
              {{"endpoint", name}, {"port", e.port}});
    r = Router::for_endpoint(options_.host + ":0", name, resolve);
  }
  if (!r.ok()) return std::move(r).error().context("endpoint " + name);
  e.listener = std::move(*r);
  e.port = e.listener->port();
  return save_endpoint(e);
}

Result<platform::DisruptionBudgetState> LocalPlatform::observe_disruption_budget(const platform::ModelRef&,
                                                                                 const std::string&) {
  platform::DisruptionBudgetState s;
  s.supported = false;
  return s;
}

Status LocalPlatform::apply_disruption_budget(const platform::ModelRef&,
                                              const platform::DisruptionBudgetSpec&) {
  return ok_status();  // never asked (observe says unsupported); harmless if it were
}

Status LocalPlatform::apply_endpoint(const ModelRef& model, const platform::EndpointSpec& spec) {
  std::lock_guard lock(mu_);
  if (stopping_) return Error(ErrorCode::kUnavailable, "the local platform is shutting down");
  const std::string key = model.key() + "/" + spec.name;
  const std::string hash = spec.hash();
  Endpoint& e = endpoints_[key];
  if (e.listener && e.hash == hash) return ok_status();
  e.model = model;
  e.spec = spec;
  e.hash = hash;
  INFERGATE_RETURN_IF_ERROR(start_listener(e));
  log::info("endpoint ready", {{"model", model.key()}, {"endpoint", spec.name}, {"url", e.listener->url()}});
  return save_endpoint(e);
}

Status LocalPlatform::cleanup(const ModelRef& model) {
  std::vector<std::string> workloads, jobs;
  std::vector<std::unique_ptr<Router>> closing;  // closed outside the lock (see shutdown())
  {
    std::lock_guard lock(mu_);
    for (const auto& [k, w] : workloads_) {
      if (w.model.key() == model.key()) workloads.push_back(w.spec.name);
    }
    for (const auto& [k, j] : jobs_) {
      if (j.model.key() == model.key()) jobs.push_back(j.spec.name);
    }
    for (auto it = endpoints_.begin(); it != endpoints_.end();) {
      if (it->second.model.key() != model.key()) {
        ++it;
        continue;
      }
      std::error_code ec;
      fs::remove(options_.state_dir / "platform" / "endpoints" /
                     (record_name(model.key()) + "__" + it->second.spec.name + ".json"),
                 ec);
      log::info("endpoint deleted", {{"model", model.key()}, {"endpoint", it->second.spec.name}});
      closing.push_back(std::move(it->second.listener));
      it = endpoints_.erase(it);
    }
  }
  closing.clear();
  for (const auto& w : workloads) INFERGATE_RETURN_IF_ERROR(delete_workload(model, w));
  for (const auto& j : jobs) INFERGATE_RETURN_IF_ERROR(delete_job(model, j));
  return ok_status();
}

// ---- jobs ----

Status LocalPlatform::apply_job(const ModelRef& model, const platform::JobSpec& spec) {
  std::lock_guard lock(mu_);
  if (stopping_) return Error(ErrorCode::kUnavailable, "the local platform is shutting down");
  const std::string key = model.key() + "/" + spec.name;
  if (jobs_.count(key)) return ok_status();
  std::vector<std::string> argv = spec.container.command;
  argv.insert(argv.end(), spec.container.args.begin(), spec.container.args.end());
  if (argv.empty())
    return invalid_argument("job " + spec.name + " has no command").with_reason("UnsupportedEngine");
  Job job;
  job.model = model;
  job.spec = spec;
  job.hash = spec.hash();
  job.dir = options_.state_dir / "jobs" / model_dir_key(model) / spec.name;
  std::error_code ec;
  fs::create_directories(job.dir, ec);
  if (ec) return io_error("creating " + job.dir.string() + ": " + ec.message());
  argv[0] = binary(argv[0]).string();
  for (auto& a : argv) a = replace_all(a, kTerminationLogToken, (job.dir / kTerminationLog).string());
  ProcessSpec ps;
  ps.argv = std::move(argv);
  ps.env = spec.container.env;
  for (const auto& [k, v] : options_.env) ps.env.emplace(k, v);
  ps.env[std::string(kOwnerEnv)] = options_.state_dir.string();
  ps.log_file = job.dir / "log";
  ps.restart = false;
  ps.grace = options_.grace;
  ps.deadline = std::chrono::seconds(spec.deadline_seconds);
  const fs::path tl = job.dir / kTerminationLog;
  fs::remove(tl, ec);
  INFERGATE_RETURN_IF_ERROR(save_job(job));
  INFERGATE_RETURN_IF_ERROR(supervisor_->add("job/" + key, std::move(ps)));
  log::info("job started", {{"model", model.key()}, {"job", spec.name}, {"log", (job.dir / "log").string()}});
  jobs_[key] = std::move(job);
  return ok_status();
}

Result<JobState> LocalPlatform::observe_job(const ModelRef& model, const std::string& name) {
  std::lock_guard lock(mu_);
  const std::string key = model.key() + "/" + name;
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return JobState{};
  Job& job = it->second;
  if (job.final_state) return *job.final_state;
  JobState s;
  s.exists = true;
  s.hash = job.hash;
  auto ps = supervisor_->status("job/" + key);
  if (!ps || ps->phase == ProcessStatus::Phase::kPending) return s;
  if (ps->phase != ProcessStatus::Phase::kExited) {
    s.phase = JobState::Phase::kRunning;
    return s;
  }
  const ExitStatus exit = ps->last_exit.value_or(ExitStatus{});
  s.exit_code = exit.code >= 0 ? exit.code : 128 + exit.signal;
  s.termination_message = read_small(job.dir / kTerminationLog);
  if (ps->deadline_exceeded) {
    s.phase = JobState::Phase::kFailed;
    s.reason = "DeadlineExceeded";
    s.message = "the job ran longer than its deadline of " + std::to_string(job.spec.deadline_seconds) + "s";
  } else if (!ps->start_error.empty()) {
    s.phase = JobState::Phase::kFailed;
    s.reason = "StartError";
    s.message = ps->start_error;
  } else {
    s.terminated = true;
    s.phase = exit.success() ? JobState::Phase::kSucceeded : JobState::Phase::kFailed;
    if (!exit.success()) {
      s.reason = exit.signal ? "Killed" : "Error";
      s.message = exit.describe() + ": " + last_lines(read_log_from(job.dir / "log", ps->log_offset), 3);
    }
  }
  job.final_state = s;
  if (Status st = save_job(job); !st.ok()) {
    log::warn("cannot record a job's result", {{"job", name}, {"error", st.error().to_string()}});
  }
  supervisor_->remove("job/" + key);
  log::info("job finished", {{"model", model.key()},
                             {"job", name},
                             {"phase", std::string(phase_name(s.phase))},
                             {"exit_code", s.exit_code}});
  return s;
}

Status LocalPlatform::delete_job(const ModelRef& model, const std::string& name) {
  std::lock_guard lock(mu_);
  const std::string key = model.key() + "/" + name;
  supervisor_->remove("job/" + key);
  std::error_code ec;
  fs::remove(options_.state_dir / "platform" / "jobs" / (record_name(model.key()) + "__" + name + ".json"),
             ec);
  jobs_.erase(key);  // its log and termination message stay under jobs/ for people to read
  return ok_status();
}

std::string LocalPlatform::pod_url(const ModelRef&, const PodState& pod) {
  return pod.address.empty() ? "" : "http://" + pod.address;
}

Result<platform::HttpResponse> LocalPlatform::http_get(const ModelRef&, const std::string& url,
                                                       std::chrono::milliseconds timeout) {
  http::ClientRequest request;
  request.timeout = timeout;
  request.max_body = platform::kMaxScrapeBytes;
  INFERGATE_ASSIGN_OR_RETURN(http::ClientResponse r, http::fetch(url, request));
  return platform::HttpResponse{r.status, std::move(r.body)};
}

// ---- router support and tables ----

std::optional<std::vector<std::string>> LocalPlatform::resolve(const std::string& endpoint) const {
  std::lock_guard lock(mu_);
  const Endpoint* e = nullptr;
  auto exact = endpoints_.find(endpoint);  // "<ns>/<model>/<endpoint>"
  if (exact != endpoints_.end()) {
    e = &exact->second;
  } else {
    for (const auto& [k, ep] : endpoints_) {
      if (ep.spec.name == endpoint || ep.model.namespace_ + "/" + ep.spec.name == endpoint) {
        e = &ep;
        break;
      }
    }
  }
  if (!e) return std::nullopt;
  std::vector<std::string> out;
  for (const auto& [k, w] : workloads_) {
    if (w.model.key() != e->model.key()) continue;
    for (const auto& [n, p] : w.pods) {
      if (p.deleting || !p.ready || p.address.empty()) continue;
      std::map<std::string, std::string> labels = w.spec.labels;
      labels[std::string(api::labels::kModel)] = w.model.name;
      labels[std::string(api::labels::kTrack)] = std::string(api::to_string(w.spec.track));
      labels[std::string(api::labels::kRevision)] = p.revision;
      bool match = true;
      for (const auto& [lk, lv] : e->spec.selector) {
        auto it = labels.find(lk);
        if (it == labels.end() || it->second != lv) match = false;
      }
      if (match) out.push_back(p.address);
    }
  }
  return out;
}

std::vector<std::string> LocalPlatform::model_endpoints() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [k, e] : endpoints_) {
    if (e.spec.name == api::endpoint_name(e.model.name)) out.push_back(e.spec.name);
  }
  return out;
}

std::map<std::string, std::string> LocalPlatform::endpoint_urls() const {
  std::lock_guard lock(mu_);
  std::map<std::string, std::string> out;
  for (const auto& [k, e] : endpoints_) {
    if (e.listener) out[k] = e.listener->url();
  }
  return out;
}

std::vector<std::string> LocalPlatform::model_keys() const {
  std::lock_guard lock(mu_);
  std::set<std::string> keys;
  for (const auto& [k, w] : workloads_) keys.insert(w.model.key());
  for (const auto& [k, e] : endpoints_) keys.insert(e.model.key());
  for (const auto& [k, j] : jobs_) keys.insert(j.model.key());
  return {keys.begin(), keys.end()};
}

std::vector<PodRow> LocalPlatform::pods() const {
  std::lock_guard lock(mu_);
  std::vector<PodRow> out;
  for (const auto& [k, w] : workloads_) {
    for (const auto& [n, p] : w.pods) {
      auto ps = supervisor_->status("pod/" + w.model.key() + "/" + n);
      PodState st = pod_state(w, p, ps);
      PodRow r;
      r.model = w.model.key();
      r.name = n;
      r.workload = w.spec.name;
      r.track = std::string(api::to_string(w.spec.track));
      r.revision = p.revision;
      r.ready = st.ready;
      r.restarts = st.restarts;
      r.pid = ps && ps->pid ? ps->pid : 0;
      r.address = p.address;
      r.log = (p.dir / "log").string();
      if (ps) r.started = ps->started_wall;
      if (p.deleting) {
        r.status = "Terminating";
      } else if (st.verify.phase == VerifyState::Phase::kFailed) {
        api::VerificationReport rep =
            api::parse_termination_message(st.verify.termination_message, st.verify.exit_code);
        r.status =
            (st.verify.waiting_reason == "CrashLoopBackOff" ? "Init:CrashLoopBackOff " : "Init:Error ") +
            rep.reason;
      } else if (st.verify.phase != VerifyState::Phase::kSucceeded) {
        r.status = st.verify.phase == VerifyState::Phase::kRunning ? "Verifying" : "Pending";
      } else if (!st.waiting_reason.empty()) {
        r.status = st.waiting_reason;
      } else {
        r.status = st.ready ? "Running" : "Starting";
      }
      out.push_back(std::move(r));
    }
  }
  return out;
}

// ---- events ----

LocalEventSink::LocalEventSink(fs::path file, Clock& clock) : file_(std::move(file)), clock_(clock) {}

void LocalEventSink::emit(const ModelRef& model, const platform::EventRecord& event) {
  const bool warning = event.type == platform::EventRecord::Type::kWarning;
  const std::string at = format_rfc3339(clock_.wall_now());
  std::string line = at + " " + (warning ? "Warning" : "Normal") + " " + model.key() + " " + event.reason +
                     ": " + event.message;
  if (warning) {
    log::warn("event", {{"model", model.key()}, {"reason", event.reason}, {"message", event.message}});
  } else {
    log::info("event", {{"model", model.key()}, {"reason", event.reason}, {"message", event.message}});
  }
  std::lock_guard lock(mu_);
  auto& r = recent_[model.key()];
  r.push_back(line);
  if (r.size() > 50) r.erase(r.begin());
  if (!file_.empty()) {
    std::ofstream out(file_, std::ios::app);
    out << line << "\n";
  }
}

std::vector<std::string> LocalEventSink::recent(const std::string& model_key, size_t n) const {
  std::lock_guard lock(mu_);
  auto it = recent_.find(model_key);
  if (it == recent_.end()) return {};
  const auto& r = it->second;
  return {r.size() > n ? r.end() - static_cast<long>(n) : r.begin(), r.end()};
}

}  // namespace infergate::op::local
