// The verification report: exactly one JSON line of at most 4096 bytes (Kubernetes' termination-
// message limit), for a refusal or for a success, written to --report and --termination-log.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "infergate/common/result.h"

namespace infergate::agent {

inline constexpr size_t kMaxReportBytes = 4096;  // including the final newline

// What a successful verification established; the operator reads releaseDigest from the report.
struct VerifiedRelease {
  std::string format = "infergate";  // or "oms"
  std::string release_digest;        // "sha256:<hex of release.dsse.json's or model.sig's bytes>"
  std::string name;
  std::optional<int64_t> version;         // OMS bundles carry none
  std::string weight_format;              // OMS: detected from the verified files, "" when nothing says
  std::optional<std::string> created_at;  // OMS: the transparency log's time (keyless) or none
  std::optional<std::string> expires_at;
  // Who signed: "key <keyid>", "keyless <identity> (<issuer>)", "certificate <subject>".
  std::string signer;
  uint64_t files = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

// {"reason":"DigestMismatch","message":"...","file":"...","expected":"...","actual":"...","exitCode":33}
// file/expected/actual appear when the error carries those details. Long fields are shortened (ending
// in "...") so that the line, newline included, never exceeds kMaxReportBytes.
std::string refusal_report(const Error& error);

// {"reason":"Verified","format":"infergate","releaseDigest":"sha256:...","name":...,["version":N,]
//  "weightFormat":...,["createdAt":...,]["expiresAt":...,]"signer":...,"files":N,"bytes":N,"seconds":S,
//  "exitCode":0}
std::string success_report(const VerifiedRelease& release);

// Writes a report line to a file. The report file is replaced atomically; the termination-message
// path (a file the kubelet bind-mounts, which cannot be renamed over) is truncated and rewritten.
Status write_report_file(const std::filesystem::path& path, std::string_view line);
Status write_termination_log(const std::filesystem::path& path, std::string_view line);

}  // namespace infergate::agent
