// The agent's subcommands as functions returning the process exit code: main() parses flags into
// these structs and calls one. Each command logs to stderr; verify also prints its report line on
// stdout; exec prints nothing on stdout (it belongs to the command that follows).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "infergate/agent/signing/keys.h"
#include "infergate/agent/signing/release_signer.h"
#include "infergate/agent/verify/verifier.h"
#include "infergate/common/result.h"

namespace infergate::agent {

struct ManifestCommand {
  std::filesystem::path dir;
  unsigned threads = 0;
  bool progress = false;
};

struct KeygenCommand {
  std::filesystem::path prefix;
  KeyType type = KeyType::kEd25519;
};

struct SignCommand {
  std::string format = "infergate";  // or "oms"
  SignOptions sign;
  OmsSignOptions oms;
  std::filesystem::path key;
  bool progress = false;
};

struct VerifyCommand {
  VerifyOptions verify;
  std::optional<std::filesystem::path> report;
  std::optional<std::filesystem::path> termination_log;
  // verify only: after a successful verification, install_self() into this existing, writable
  // directory (for engine images without the agent); a failure to install is AgentInstallFailed.
  std::optional<std::filesystem::path> install_agent;
  bool progress = false;
};

int run_manifest(const ManifestCommand& command);
int run_keygen(const KeygenCommand& command);
int run_sign(const SignCommand& command);
// Writes exactly one report line (success or refusal) to --report and --termination-log, and to stdout.
// With install_agent, the success is reported only once the agent is installed (else the line says
// AgentInstallFailed).
int run_verify(const VerifyCommand& command);
// Verifies, then replaces this process with argv (PATH is searched when argv[0] has no '/'): same
// pid, so signals reach the command directly. Returns only when it does not exec: the verification's
// exit code, or ExecFailed's when exec itself fails (the reports then say ExecFailed).
int run_exec(const VerifyCommand& command, const std::vector<std::string>& argv);

// A refusal that happened before a command could run (bad flags): logged, and written to the
// termination log when one was named, so that Kubernetes still shows why.
int report_usage_error(const std::string& message,
                       const std::optional<std::filesystem::path>& termination_log);

}  // namespace infergate::agent
