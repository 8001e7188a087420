// Subcommand bodies: run the library, report, and turn the outcome into an exit code.
#include "infergate/agent/commands.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "infergate/agent/hashing/tree.h"
#include "infergate/agent/install/self_install.h"
#include "infergate/agent/manifest/tree_check.h"
#include "infergate/agent/reasons.h"
#include "infergate/agent/report.h"
#include "infergate/agent/verify/progress.h"
#include "infergate/common/fs.h"
#include "infergate/common/log.h"

namespace infergate::agent {
namespace {

namespace fs = std::filesystem;

int refuse(std::string_view what, const Error& e) {
  Reason r = reason_of(e);
  log::error(std::string(what) + " refused",
             {{"reason", reason_word(r)}, {"file", e.detail("file")}, {"message", e.message()}});
  return exit_code(r);
}

// True when `path` would land inside `dir` (verify never writes into the artifact).
bool inside(const fs::path& path, const fs::path& dir) {
  std::error_code ec;
  fs::path d = fs::weakly_canonical(dir, ec);
  if (ec) return false;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return false;
  auto [di, pi] = std::mismatch(d.begin(), d.end(), p.begin(), p.end());
  return di == d.end();
}

Status check_outputs(const VerifyCommand& c) {
  for (const auto& p : {c.report, c.termination_log}) {
    if (p && inside(*p, c.verify.dir)) {
      return refusal(Reason::kUsageError,
                     p->string() + " is inside the artifact directory; verify never writes there");
    }
  }
  if (c.install_agent) {
    const std::string dir = c.install_agent->string();
    if (inside(*c.install_agent, c.verify.dir)) {
      return refusal(Reason::kUsageError, "--install-agent " + dir +
                                              " is inside the artifact directory; verify never writes there");
    }
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
      return refusal(Reason::kUsageError, "--install-agent " + dir + ": " + errno_text(errno) +
                                              " (it must be an existing, writable directory)");
    }
    if (!S_ISDIR(st.st_mode)) {
      return refusal(Reason::kUsageError, "--install-agent " + dir + " is not a directory");
    }
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
      return refusal(Reason::kUsageError,
                     "--install-agent " + dir + " is not writable: " + errno_text(errno));
    }
  }
  return ok_status();
}

void emit(const VerifyCommand& c, const std::string& line, bool to_stdout) {
  if (c.report) {
    if (auto st = write_report_file(*c.report, line); !st.ok())
      log::error("cannot write the report", {{"error", st.error().message()}});
  }
  if (c.termination_log) {
    if (auto st = write_termination_log(*c.termination_log, line); !st.ok()) {
      log::error("cannot write the termination log", {{"error", st.error().message()}});
    }
  }
  if (to_stdout) {
    auto st = write_all(STDOUT_FILENO, line, "stdout");
    (void)st;
  }
}

// No report of an earlier run may survive this one: if this run dies, or cannot write its own
// report, a stale "Verified" must not be read as its outcome. The termination log is emptied (the
// kubelet then falls back to the container's log), the report file removed.
void clear_outputs(const VerifyCommand& c) {
  if (c.report && ::unlink(c.report->c_str()) != 0 && errno != ENOENT) {
    log::warn("cannot remove an earlier report",
              {{"path", c.report->string()}, {"error", errno_text(errno)}});
  }
  if (c.termination_log) {
    int fd = ::open(c.termination_log->c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOCTTY);
    if (fd >= 0) ::close(fd);
  }
}

// Verification with progress; returns the verified release or the refusal, already reported. With
// `then_exec` the command that follows owns the container's termination message: a verified release
// is reported to the report file and the log only, so that a crashing engine's own last words (the
// kubelet's FallbackToLogsOnError) are not hidden behind our "Verified" line.
Result<VerifiedRelease> verify_and_report(const VerifyCommand& c, bool to_stdout, bool then_exec = false) {
  Status outputs = check_outputs(c);
  if (!outputs.ok()) {
    VerifyCommand safe = c;  // report the refusal only where that is allowed
    if (safe.report && inside(*safe.report, c.verify.dir)) safe.report.reset();
    if (safe.termination_log && inside(*safe.termination_log, c.verify.dir)) safe.termination_log.reset();
    emit(safe, refusal_report(outputs.error()), to_stdout);
    return std::move(outputs).error();
  }
  clear_outputs(c);
  Progress progress("verifying", c.progress);
  VerifyOptions options = c.verify;
  options.tree.bytes_hashed = progress.counter();
  options.tree.before_hashing = [&](uint64_t total) { progress.start(total); };
  auto result = verify_release(options);
  progress.stop();
  if (!result.ok()) {
    emit(c, refusal_report(result.error()), to_stdout);
    refuse("verification", result.error());
    return result;
  }
  if (c.install_agent) {
    auto installed = install_self(*c.install_agent);
    if (!installed.ok()) {
      emit(c, refusal_report(installed.error()), to_stdout);
      refuse("installing the agent", installed.error());
      return std::move(installed).error();
    }
    log::info("installed the agent",
              {{"binary", installed->binary.string()},
               {"loader", installed->loader.string()},
               {"libraries", static_cast<unsigned long long>(installed->libraries.size())}});
  }
  VerifyCommand success = c;
  if (then_exec) success.termination_log.reset();
  emit(success, success_report(*result), to_stdout);
  const auto& r = *result;
  double gbps = r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e9 : 0;
  log::info("verified", {{"format", r.format},
                         {"name", r.name},
                         {"version", r.version ? std::to_string(*r.version) : std::string("none")},
                         {"weightFormat", r.weight_format},
                         {"signer", r.signer},
                         {"files", static_cast<unsigned long long>(r.files)},
                         {"bytes", static_cast<unsigned long long>(r.bytes)},
                         {"seconds", r.seconds},
                         {"GBps", gbps},
                         {"releaseDigest", r.release_digest}});
  return result;
}

}  // namespace

int run_manifest(const ManifestCommand& c) {
  auto root = ArtifactRoot::open(c.dir);
  if (!root.ok()) return refuse("manifest", root.error());
  Progress progress("hashing", c.progress);
  TreeOptions options;
  options.threads = c.threads;
  options.bytes_hashed = progress.counter();
  options.before_hashing = [&](uint64_t total) { progress.start(total); };
  auto manifest = build_manifest(root->fd(), options);
  progress.stop();
  if (!manifest.ok()) return refuse("manifest", manifest.error());
  if (manifest->empty()) {
    return refuse("manifest", refusal(Reason::kEmptyRelease, c.dir.string() + " holds no file to list"));
  }
  auto st = write_file_atomic(root->path() / kManifestFileName, manifest->to_text(), 0644);
  if (!st.ok()) return refuse("manifest", Error(std::move(st).error()).with_reason("IoError"));
  log::info("wrote SHA256SUMS",
            {{"dir", c.dir.string()}, {"files", static_cast<unsigned long long>(manifest->size())}});
  return 0;
}

int run_keygen(const KeygenCommand& c) {
  auto key = PrivateKey::generate(c.type);
  if (!key.ok()) return refuse("keygen", key.error());
  auto st = write_key_pair(*key, c.prefix);
  if (!st.ok()) {
    Error e = std::move(st).error();
    if (e.reason().empty()) e.with_reason("IoError");
    return refuse("keygen", e);
  }
  log::info("wrote a key pair", {{"private", c.prefix.string() + ".key"},
                                 {"public", c.prefix.string() + ".pub.pem"},
                                 {"type", std::string(key_type_name(c.type))},
                                 {"keyid", key->key_id()}});
  return 0;
}

namespace {

// Runs one of the signers with progress on a terminal.
template <class Options, class Sign>
auto with_progress(const SignCommand& c, Options options, std::string_view label, Sign sign) {
  Progress progress(std::string(label), c.progress);
  options.tree.bytes_hashed = progress.counter();
  options.tree.before_hashing = [&](uint64_t total) { progress.start(total); };
  auto out = sign(options);
  progress.stop();
  return out;
}

int refuse_sign(Error e) {
  if (e.reason().empty() && e.code() == ErrorCode::kIo) e.with_reason("IoError");
  return refuse("sign", e);
}

}  // namespace

int run_sign(const SignCommand& c) {
  auto key = PrivateKey::load(c.key);
  if (!key.ok()) return refuse("sign", key.error());
  if (c.format == "oms") {
    auto signed_oms = with_progress(c, c.oms, "hashing",
                                    [&](const OmsSignOptions& o) { return sign_oms_release(o, *key); });
    if (!signed_oms.ok()) return refuse_sign(signed_oms.error());
    const auto& s = signed_oms->statement;
    log::info("wrote model.sig",
              {{"name", s.model_name},
               {"serialization", s.serialization.method == OmsMethod::kFiles ? "files" : "shards"},
               {"resources", static_cast<unsigned long long>(s.resources.size())},
               {"files", static_cast<unsigned long long>(signed_oms->summary.files)},
               {"keyid", key->key_id()}});
    return 0;
  }
  auto signed_release =
      with_progress(c, c.sign, "checking", [&](const SignOptions& o) { return sign_release(o, *key); });
  if (!signed_release.ok()) return refuse_sign(signed_release.error());
  const auto& s = signed_release->statement;
  log::info("wrote release.dsse.json",
            {{"name", s.name},
             {"version", static_cast<long long>(s.version)},
             {"weightFormat", s.weight_format},
             {"files", static_cast<unsigned long long>(signed_release->summary.files)},
             {"keyid", key->key_id()}});
  return 0;
}

int run_verify(const VerifyCommand& c) {
  auto r = verify_and_report(c, true);
  return r.ok() ? 0 : exit_code(reason_of(r.error()));
}

int run_exec(const VerifyCommand& c, const std::vector<std::string>& argv) {
  if (argv.empty()) return report_usage_error("exec needs a command after --", c.termination_log);
  auto r = verify_and_report(c, false, true);
  if (!r.ok()) return exit_code(reason_of(r.error()));
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  int err = errno;
  Error e = refusal(Reason::kExecFailed, "verified, but cannot run " + argv[0] + ": " + errno_text(err))
                .with_detail("file", argv[0]);
  emit(c, refusal_report(e), false);
  return refuse("exec", e);
}

int report_usage_error(const std::string& message, const std::optional<fs::path>& termination_log) {
  Error e = refusal(Reason::kUsageError, message);
  if (termination_log) {
    auto st = write_termination_log(*termination_log, refusal_report(e));
    (void)st;
  }
  return refuse("command line", e);
}

}  // namespace infergate::agent
