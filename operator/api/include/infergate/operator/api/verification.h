// The agent's verdict, as it arrives through the termination-message path: one JSON line, at most
// 4096 bytes. {"reason":"Verified","releaseDigest":"sha256:...",...} on success, or a refusal such as
// {"reason":"DigestMismatch","message":"...","file":"...","expected":"...","actual":"...","exitCode":N}.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace infergate::op::api {

inline constexpr size_t kMaxTerminationMessage = 4096;

struct VerificationReport {
  bool verified = false;
  std::string reason;   // "Verified" or the refusal's reason word
  std::string message;  // the agent's human message (never file contents)
  std::string file;     // the file it concerns, when there is one
  std::string expected;
  std::string actual;
  int exit_code = 0;
  std::string release_digest;  // "sha256:<64 hex>" on success
  std::string name;
  std::optional<int64_t> version;
  std::string weight_format;

  // "DigestMismatch: shard 3 differs (file model-00003.safetensors)".
  std::string describe() const;
};

// Reads the agent's termination message. Anything malformed (not JSON, too long, no reason word, a
// "Verified" without a well-formed digest, a reason that is not a CamelCase word) becomes a refusal with
// reason "VerificationFailed" and the exit code: a garbled verdict never counts as verified.
VerificationReport parse_termination_message(std::string_view text, int exit_code);

}  // namespace infergate::op::api
