// infergate-agent: parses the command line and runs one subcommand (see infergate/agent/commands.h).
#include <unistd.h>

#include <openssl/crypto.h>

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
  std::vector<std::string> public_keys, trust_dirs, ca_certs, identities, issuers;
  std::vector<std::string> formats;
  std::optional<std::string> trusted_root;
  std::optional<std::string> expect_name;
  std::optional<int64_t> min_version;
  std::optional<std::string> expect_weight_format;
  std::optional<std::string> report;
  std::optional<std::string> termination_log;
  std::optional<std::string> install_agent;
  unsigned jobs = 0;
};

void add_verify_flags(CLI::App* sub, VerifyFlags* f) {
  sub->add_option("DIR", f->dir, "the artifact directory")->required();
  auto many = [&](const char* name, std::vector<std::string>* v, const char* help) {
    sub->add_option(name, *v, help)->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  };
  many("--public-key", &f->public_keys,
       "a trusted public key (PEM), or a directory of *.pem; repeat for several (any may have signed)");
  many("--trust-dir", &f->trust_dirs,
       "a directory (a mounted Secret) of *.pem/*.crt public keys and CA certificates, read by their PEM "
       "label, and trusted_root.json");
  many("--ca-cert", &f->ca_certs, "CA certificates (PEM) for OMS bundles signed with a certificate chain");
  sub->add_option("--trusted-root", f->trusted_root,
                  "a Sigstore trusted_root.json for keyless OMS bundles (verified offline)");
  many("--identity", &f->identities,
       "an identity keyless signatures may carry (the certificate's email or URI); pairs with --issuer");
  many("--issuer", &f->issuers, "the OIDC issuer of the --identity at the same position");
  many("--format", &f->formats,
       "a release format to accept: infergate (the default) or oms; repeat for both");
  sub->add_option("--expect-name", f->expect_name, "refuse a release for another model name");
  sub->add_option("--min-version", f->min_version, "refuse a release version below N (rollback)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--expect-weight-format", f->expect_weight_format,
                  "refuse a release of another weight format");
  sub->add_option("--report", f->report, "write the one-line JSON report to FILE");
  sub->add_option("--termination-log", f->termination_log,
                  "write the one-line JSON report to PATH (e.g. /dev/termination-log)");
  sub->add_option("--jobs", f->jobs, "hashing threads (default: the CPUs this process may use)");
  sub->add_option("--install-agent", f->install_agent,
                  "verify only: once verified, copy this agent with its libraries and loader into DIR "
                  "(DIR/bin, DIR/lib) for an engine image without it");
}

Result<VerifyCommand> to_verify_command(const VerifyFlags& f) {
  VerifyCommand c;
  c.verify.dir = f.dir;
  TrustSources& t = c.verify.trust;
  for (const auto& k : f.public_keys) t.public_keys.emplace_back(k);
  for (const auto& d : f.trust_dirs) t.trust_dirs.emplace_back(d);
  for (const auto& ca : f.ca_certs) t.ca_certs.emplace_back(ca);
  if (f.trusted_root) t.trusted_root = *f.trusted_root;
  if (f.identities.size() != f.issuers.size()) {
    return refusal(Reason::kUsageError,
                   "--identity and --issuer come in pairs: " + std::to_string(f.identities.size()) +
                       " identities, " + std::to_string(f.issuers.size()) + " issuers");
  }
  for (size_t i = 0; i < f.identities.size(); ++i) t.identities.push_back({f.identities[i], f.issuers[i]});
  if (!f.formats.empty()) {
    c.verify.formats.clear();
    for (const auto& name : f.formats) {
      INFERGATE_ASSIGN_OR_RETURN(ReleaseFormat format, parse_release_format(name));
      c.verify.formats.insert(format);
    }
  }
  c.verify.policy.expect_name = f.expect_name;
  c.verify.policy.min_version = f.min_version;
  c.verify.policy.expect_weight_format = f.expect_weight_format;
  c.verify.tree.threads = f.jobs;
  if (f.report) c.report = *f.report;
  if (f.termination_log) c.termination_log = *f.termination_log;
  if (f.install_agent) c.install_agent = *f.install_agent;
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
  keygen_cmd->add_option("--type", keygen_type, "ed25519 (default), ecdsa-p256, ecdsa-p384 or ecdsa-p521")
      ->check(CLI::IsMember({"ed25519", "ecdsa-p256", "ecdsa-p384", "ecdsa-p521"}));

  std::string sign_dir, sign_key, sign_name, sign_release_format = "infergate";
  std::optional<int64_t> sign_version;
  std::optional<uint64_t> sign_shard_size;
  std::optional<std::string> sign_expires, sign_format;
  unsigned sign_jobs = 0;
  CLI::App* sign_cmd = app.add_subcommand(
      "sign",
      "write DIR/release.dsse.json (a signed in-toto release statement), or DIR/model.sig (--format oms)");
  sign_cmd->add_option("DIR", sign_dir, "the artifact directory (with its SHA256SUMS)")->required();
  sign_cmd->add_option("--key", sign_key, "the private key (PEM)")->required();
  sign_cmd
      ->add_option(
          "--format", sign_release_format,
          "infergate (release.dsse.json, the default) or oms (model.sig, OpenSSF model signing v1.0)")
      ->check(CLI::IsMember({"infergate", "oms"}));
  sign_cmd->add_option("--name", sign_name, "the model name (oms: default DIR's last component)");
  sign_cmd->add_option("--version", sign_version, "the release version, a non-negative integer (infergate)")
      ->check(CLI::NonNegativeNumber);
  sign_cmd
      ->add_option("--shard-size", sign_shard_size,
                   "oms: sign shards of BYTES (the sharded serialization) instead of whole files")
      ->check(CLI::PositiveNumber);
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
    c.format = sign_release_format;
    c.oms.dir = sign_dir;
    c.oms.name = sign_name;
    c.oms.shard_size = sign_shard_size;
    c.oms.tree.threads = sign_jobs;
    if (c.format == "infergate" && (sign_name.empty() || !sign_version)) {
      return report_usage_error("sign: --name and --version are required (infergate format); see --help",
                                std::nullopt);
    }
    if (c.format == "oms" && (sign_version || sign_expires || sign_format)) {
      return report_usage_error(
          "sign --format oms: --version, --expires and --weight-format belong to the infergate release "
          "statement (OMS carries none of them)",
          std::nullopt);
    }
    if (c.format == "infergate" && sign_shard_size) {
      return report_usage_error("sign: --shard-size applies to --format oms only", std::nullopt);
    }
    c.sign.dir = sign_dir;
    c.sign.name = sign_name;
    c.sign.version = sign_version.value_or(0);
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
  if (verify_cmd->parsed() || exec_cmd->parsed()) {
    const VerifyFlags& flags = verify_cmd->parsed() ? verify_flags : exec_flags;
    if (exec_cmd->parsed() && flags.install_agent) {
      return report_usage_error(
          "--install-agent belongs to verify (the init container installs the agent; exec runs it)",
          flags.termination_log);
    }
    auto c = to_verify_command(flags);
    if (!c.ok()) return report_usage_error(c.error().message(), flags.termination_log);
    return verify_cmd->parsed() ? run_verify(*c) : run_exec(*c, command);
  }
  return report_usage_error("no subcommand", std::nullopt);
}

}  // namespace

int main(int argc, char** argv) {
  // No OpenSSL configuration file is read: the agent needs none, and installed into an engine's image
  // (verify --install-agent) it would otherwise read that image's openssl.cnf, whose providers may be
  // built for another libcrypto.
  if (OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, nullptr) != 1) {
    infergate::log::error("internal error", {{"error", "OpenSSL failed to initialise"}});
    return infergate::agent::exit_code(infergate::agent::Reason::kInternalError);
  }
  // The library reports errors as values; only the standard library itself (an allocation) can
  // throw here, and that is still a refusal with its reason, never an abort without one.
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    infergate::log::error("internal error", {{"error", e.what()}});
    return infergate::agent::exit_code(infergate::agent::Reason::kInternalError);
  }
}
