// The agent's refusal vocabulary: one stable reason word and one exit code per failure class. The
// operator maps the words into status conditions; docs/agent.md lists them (a test keeps it in sync).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "infergate/common/result.h"

namespace infergate::agent {

enum class Reason {
  kVerified,
  kUsageError,
  kKeyInvalid,
  kArtifactDirInvalid,
  kMetadataInvalid,
  kWeightsInvalid,
  kPolicyUnsupported,
  kSignatureMissing,
  kSignatureMalformed,
  kSignatureInvalid,
  kUntrustedKey,
  kStatementInvalid,
  kNameMismatch,
  kVersionTooLow,
  kReleaseExpired,
  kWeightFormatMismatch,
  kManifestDigestMismatch,
  kManifestMissing,
  kManifestMalformed,
  kManifestTooLarge,
  kDuplicateEntry,
  kUnsafePath,
  kEmptyRelease,
  kFormatNotAllowed,
  kCertificateInvalid,
  kIdentityMismatch,
  kTransparencyLogInvalid,
  kMissingFile,
  kUnlistedFile,
  kSizeMismatch,
  kDigestMismatch,
  kSymlink,
  kSpecialFile,
  kFileChanged,
  kLimitExceeded,
  kIoError,
  kPermissionDenied,
  kExecFailed,
  kAgentInstallFailed,
  kInternalError,
};

struct ReasonInfo {
  Reason reason;
  std::string_view word;     // "DigestMismatch"
  int exit_code;             // distinct per reason; 0 only for kVerified
  std::string_view meaning;  // one line for docs and --help
};

// Every reason, in exit-code order.
std::span<const ReasonInfo> all_reasons();
const ReasonInfo& reason_info(Reason reason);
inline std::string_view reason_word(Reason reason) { return reason_info(reason).word; }
inline int exit_code(Reason reason) { return reason_info(reason).exit_code; }

// The reason an Error stands for: its reason word when that is one of ours; otherwise derived from
// its code (PermissionDenied, IoError for I/O codes, InternalError for the rest). Never kVerified.
Reason reason_of(const Error& error);

// An Error carrying `reason`'s word (and a fitting ErrorCode).
Error refusal(Reason reason, std::string message);

// The text for an errno value; unlike strerror, safe to call from the hashing threads.
std::string errno_text(int err);

// An Error for a failed system call on a file of the artifact: ELOOP (met with O_NOFOLLOW) ->
// Symlink, EACCES/EPERM -> PermissionDenied, ENOENT -> MissingFile, anything else -> IoError.
// `file` becomes the "file" detail.
Error file_errno_error(std::string_view what, std::string_view file, int err);

}  // namespace infergate::agent
