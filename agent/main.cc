// infergate-agent: parses the command line and runs one subcommand (see infergate/agent/commands.h).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "infergate/agent/commands.h"
#include "infergate/agent/reasons.h"
#include "infergate/common/clock.h"
#include "infergate/common/log.h"

namespace {

using namespace infergate;
using namespace infergate::agent;

// The value of --termination-log in raw arguments, so that even a command line CLI11 refuses can be
// reported where Kubernetes looks.
std::optional<std::filesystem::path> find_termination_log(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--termination-log" && i + 1 < args.size()) return args[i + 1];
    if (args[i].rfind("--termination-log=", 0) == 0) return args[i].substr(18);
  }
  return std::nullopt;
}

struct VerifyFlags {
  std::string dir;
  std::vector<std::string> public_keys;
  std::optional<std::string> expect_name;
  std::optional<int64_t> min_version;
  std::optional<std::string> expect_weight_format;
  std::optional<std::string> report;
  std::optional<std::string> termination_log;
  unsigned jobs = 0;
};

void add_verify_flags(CLI::App* sub, VerifyFlags* f) {
  sub->add_option("DIR", f->dir, "the artifact directory")->required();
  sub->add_option(
         "--public-key", f->public_keys,
         "a trusted public key (PEM), or a directory of *.pem; repeat for several (any may have signed)")
      ->required()
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--expect-name", f->expect_name, "refuse a release for another model name");
  sub->add_option("--min-version", f->min_version, "refuse a release version below N (rollback)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--expect-weight-format", f->expect_weight_format,
                  "refuse a release of another weight format");
  sub->add_option("--report", f->report, "write the one-line JSON report to FILE");
  sub->add_option("--termination-log", f->termination_log,
                  "write the one-line JSON report to PATH (e.g. /dev/termination-log)");
  sub->add_option("--jobs", f->jobs, "hashing threads (default: the CPUs this process may use)");
}

VerifyCommand to_verify_command(const VerifyFlags& f) {
  VerifyCommand c;
  c.verify.dir = f.dir;
  for (const auto& k : f.public_keys) c.verify.public_keys.emplace_back(k);
  c.verify.policy.expect_name = f.expect_name;
  c.verify.policy.min_version = f.min_version;
  c.verify.policy.expect_weight_format = f.expect_weight_format;
  c.verify.tree.threads = f.jobs;
  if (f.report) c.report = *f.report;
  if (f.termination_log) c.termination_log = *f.termination_log;
  c.progress = ::isatty(STDERR_FILENO) == 1;
  return c;
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // exec: everything after the first "--" is the command, untouched by flag parsing.
  std::vector<std::string> command;
  if (!args.empty() && args[0] == "exec") {
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--") {
        command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
        args.resize(i);
        break;
      }
    }
  }

  CLI::App app{"infergate-agent: SHA-256 manifests, signed releases, and verification before a model serves"};
  app.require_subcommand(1);
  std::string log_level = "info", log_format = "text";
  app.add_option("--log-level", log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
  app.add_option("--log-format", log_format, "text or json")->check(CLI::IsMember({"text", "json"}));

  ManifestCommand manifest;
  std::string manifest_dir;
  CLI::App* manifest_cmd =
      app.add_subcommand("manifest", "write DIR/SHA256SUMS (what find | sort | sha256sum prints)");
  manifest_cmd->add_option("DIR", manifest_dir, "the artifact directory")->required();
  manifest_cmd->add_option("--jobs", manifest.threads,
                           "hashing threads (default: the CPUs this process may use)");

  std::string keygen_prefix, keygen_type = "ed25519";
  CLI::App* keygen_cmd = app.add_subcommand("keygen", "write PREFIX.key (0600) and PREFIX.pub.pem");
  keygen_cmd->add_option("--out", keygen_prefix, "the path prefix of the two key files")->required();
  keygen_cmd->add_option("--type", keygen_type, "ed25519 (default) or ecdsa-p256")
      ->check(CLI::IsMember({"ed25519", "ecdsa-p256"}));

  std::string sign_dir, sign_key, sign_name;
  int64_t sign_version = -1;
  std::optional<std::string> sign_expires, sign_format;
  unsigned sign_jobs = 0;
  CLI::App* sign_cmd =
      app.add_subcommand("sign", "write DIR/release.dsse.json: a signed in-toto release statement");
  sign_cmd->add_option("DIR", sign_dir, "the artifact directory (with its SHA256SUMS)")->required();
  sign_cmd->add_option("--key", sign_key, "the private key (PEM)")->required();
  sign_cmd->add_option("--name", sign_name, "the model name")->required();
  sign_cmd->add_option("--version", sign_version, "the release version, a non-negative integer")
      ->required()
      ->check(CLI::NonNegativeNumber);
  sign_cmd->add_option("--expires", sign_expires, "validity from now, e.g. 90d, 24h, 1h30m");
  sign_cmd->add_option("--weight-format", sign_format,
                       "the weight format, when quantization.json, safetensors and config.json do not say");
  sign_cmd->add_option("--jobs", sign_jobs, "hashing threads");

  VerifyFlags verify_flags, exec_flags;
  CLI::App* verify_cmd =
      app.add_subcommand("verify", "verify DIR against its signed release; exit 0 only if all holds");
  add_verify_flags(verify_cmd, &verify_flags);
  CLI::App* exec_cmd =
      app.add_subcommand("exec", "verify DIR, then replace this process with COMMAND (after --)");
  add_verify_flags(exec_cmd, &exec_flags);
  std::string codes = "\nExit codes and report reasons (docs/agent.md):\n";
  for (const auto& r : all_reasons()) {
    codes += "  " + std::to_string(r.exit_code) + "\t" + std::string(r.word) + ": " + std::string(r.meaning) +
             "\n";
  }
  verify_cmd->footer(codes);
  exec_cmd->footer(codes);

  std::vector<const char*> cargv;
  cargv.push_back(argv[0]);
  for (const auto& a : args) cargv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(cargv.size()), const_cast<char**>(cargv.data()));
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string help = e.get_name() == "RequiredError" || e.get_name() == "ExtrasError" ? "; see --help" : "";
    return report_usage_error(e.what() + help, find_termination_log(args));
  }
  log::Level level;
  log::Format format;
  if (log::parse_level(log_level, &level)) log::set_level(level);
  if (log::parse_format(log_format, &format)) log::set_format(format);
  bool tty = ::isatty(STDERR_FILENO) == 1;

  if (manifest_cmd->parsed()) {
    manifest.dir = manifest_dir;
    manifest.progress = tty;
    return run_manifest(manifest);
  }
  if (keygen_cmd->parsed()) {
    auto type = parse_key_type(keygen_type);
    if (!type.ok()) return report_usage_error(type.error().message(), std::nullopt);
    return run_keygen({keygen_prefix, *type});
  }
  if (sign_cmd->parsed()) {
    SignCommand c;
    c.sign.dir = sign_dir;
    c.sign.name = sign_name;
    c.sign.version = sign_version;
    c.sign.weight_format = sign_format;
    c.sign.tree.threads = sign_jobs;
    if (sign_expires) {
      auto d = parse_duration(*sign_expires);
      if (!d.ok()) return report_usage_error("--expires: " + d.error().message(), std::nullopt);
      c.sign.expires_in = *d;
    }
    c.key = sign_key;
    c.progress = tty;
    return run_sign(c);
  }
  if (verify_cmd->parsed()) return run_verify(to_verify_command(verify_flags));
  if (exec_cmd->parsed()) return run_exec(to_verify_command(exec_flags), command);
  return report_usage_error("no subcommand", std::nullopt);
}

}  // namespace

int main(int argc, char** argv) {
  // The library reports errors as values; only the standard library itself (an allocation) can
  // throw here, and that is still a refusal with its reason, never an abort without one.
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    infergate::log::error("internal error", {{"error", e.what()}});
    return infergate::agent::exit_code(infergate::agent::Reason::kInternalError);
  }
}
