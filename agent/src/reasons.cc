// The reason table: words and exit codes are a stable interface (see docs/agent.md).
#include "infergate/agent/reasons.h"

#include <array>
#include <system_error>

namespace infergate::agent {
namespace {

constexpr std::array<ReasonInfo, 40> kReasons = {{
    {Reason::kVerified, "Verified", 0, "every check passed"},
    {Reason::kUsageError, "UsageError", 2, "bad command line: unknown flag, missing value, bad number"},
    {Reason::kKeyInvalid, "KeyInvalid", 3, "a key file cannot be read or is not a supported key"},
    {Reason::kArtifactDirInvalid, "ArtifactDirInvalid", 4, "DIR does not exist or is not a directory"},
    {Reason::kMetadataInvalid, "MetadataInvalid", 5, "the weight format cannot be determined (sign)"},
    {Reason::kWeightsInvalid, "WeightsInvalid", 6,
     "the weights disagree with their quantization config, or no described format holds them (sign)"},
    {Reason::kPolicyUnsupported, "PolicyUnsupported", 9,
     "the release's format cannot carry a check the policy asks for (a version in an OMS bundle)"},
    {Reason::kSignatureMissing, "SignatureMissing", 10, "neither release.dsse.json nor model.sig is present"},
    {Reason::kSignatureMalformed, "SignatureMalformed", 11,
     "release.dsse.json or model.sig is not a well-formed DSSE envelope or Sigstore bundle"},
    {Reason::kSignatureInvalid, "SignatureInvalid", 12, "no signature verifies under the trusted keys"},
    {Reason::kUntrustedKey, "UntrustedKey", 13, "signed by a key that is not trusted"},
    {Reason::kStatementInvalid, "StatementInvalid", 14, "the signed statement lacks or garbles a field"},
    {Reason::kNameMismatch, "NameMismatch", 15, "the release is for another model name"},
    {Reason::kVersionTooLow, "VersionTooLow", 16, "the release version is below the minimum (rollback)"},
    {Reason::kReleaseExpired, "ReleaseExpired", 17, "the release statement has expired"},
    {Reason::kWeightFormatMismatch, "WeightFormatMismatch", 18,
     "the release is for another weight format than expected"},
    {Reason::kManifestDigestMismatch, "ManifestDigestMismatch", 19,
     "SHA256SUMS is not the manifest the statement signs"},
    {Reason::kManifestMissing, "ManifestMissing", 20, "SHA256SUMS is absent"},
    {Reason::kManifestMalformed, "ManifestMalformed", 21, "a SHA256SUMS line is malformed"},
    {Reason::kManifestTooLarge, "ManifestTooLarge", 22, "SHA256SUMS is over its 16 MiB cap"},
    {Reason::kDuplicateEntry, "DuplicateEntry", 23, "a path is listed twice"},
    {Reason::kUnsafePath, "UnsafePath", 24, "an absolute, '..' or non-canonical path is listed"},
    {Reason::kEmptyRelease, "EmptyRelease", 25, "the manifest lists no file: nothing to serve"},
    {Reason::kFormatNotAllowed, "FormatNotAllowed", 26,
     "the release is signed in a format the trust configuration does not allow"},
    {Reason::kCertificateInvalid, "CertificateInvalid", 27,
     "the signing certificate does not chain to a trusted CA at signing time, or may not sign"},
    {Reason::kIdentityMismatch, "IdentityMismatch", 28,
     "the certificate names another identity or OIDC issuer than expected"},
    {Reason::kTransparencyLogInvalid, "TransparencyLogInvalid", 29,
     "the transparency log entry is absent, unknown, or does not prove this signature"},
    {Reason::kMissingFile, "MissingFile", 30, "a listed file is absent"},
    {Reason::kUnlistedFile, "UnlistedFile", 31, "a regular file is present but not listed"},
    {Reason::kSizeMismatch, "SizeMismatch", 32, "a file's size differs from the signed size"},
    {Reason::kDigestMismatch, "DigestMismatch", 33, "a file's SHA-256 differs from the manifest"},
    {Reason::kSymlink, "Symlink", 34, "a symbolic link in the tree (never followed)"},
    {Reason::kSpecialFile, "SpecialFile", 35, "a FIFO, socket or device node in the tree (never opened)"},
    {Reason::kFileChanged, "FileChanged", 36, "a file changed while it was being verified"},
    {Reason::kLimitExceeded, "LimitExceeded", 37, "the tree is deeper or larger than the walk's caps"},
    {Reason::kIoError, "IoError", 40, "a read failed (EIO and other I/O errors)"},
    {Reason::kPermissionDenied, "PermissionDenied", 41, "a file or directory cannot be read"},
    {Reason::kAgentInstallFailed, "AgentInstallFailed", 42,
     "verify --install-agent: verified, but the agent could not be copied into the directory"},
    {Reason::kInternalError, "InternalError", 50, "a bug or an OpenSSL failure"},
    {Reason::kExecFailed, "ExecFailed", 127, "exec: verified, but the command could not be started"},
}};

ErrorCode code_for(Reason r) {
  switch (r) {
    case Reason::kUsageError:
    case Reason::kKeyInvalid:
    case Reason::kArtifactDirInvalid:
    case Reason::kMetadataInvalid:
    case Reason::kWeightsInvalid:
    case Reason::kPolicyUnsupported: return ErrorCode::kInvalidArgument;
    case Reason::kSignatureMissing:
    case Reason::kManifestMissing:
    case Reason::kMissingFile: return ErrorCode::kNotFound;
    case Reason::kManifestTooLarge:
    case Reason::kLimitExceeded: return ErrorCode::kResourceExhausted;
    case Reason::kIoError:
    case Reason::kAgentInstallFailed: return ErrorCode::kIo;
    case Reason::kPermissionDenied: return ErrorCode::kPermissionDenied;
    case Reason::kExecFailed: return ErrorCode::kFailedPrecondition;
    case Reason::kInternalError: return ErrorCode::kInternal;
    default: return ErrorCode::kDataLoss;  // the artifact or its signature is not what was published
  }
}

}  // namespace

std::span<const ReasonInfo> all_reasons() { return kReasons; }

const ReasonInfo& reason_info(Reason reason) {
  for (const auto& r : kReasons) {
    if (r.reason == reason) return r;
  }
  return kReasons.back();  // unreachable: every enumerator is in the table (a test checks)
}

Reason reason_of(const Error& error) {
  if (!error.reason().empty()) {
    for (const auto& r : kReasons) {
      if (r.word == error.reason() && r.reason != Reason::kVerified) return r.reason;
    }
  }
  switch (error.code()) {
    case ErrorCode::kPermissionDenied: return Reason::kPermissionDenied;
    case ErrorCode::kIo: return Reason::kIoError;
    default: return Reason::kInternalError;
  }
}

Error refusal(Reason reason, std::string message) {
  return Error(code_for(reason), std::move(message), std::string(reason_word(reason)));
}

std::string errno_text(int err) { return std::generic_category().message(err); }

Error file_errno_error(std::string_view what, std::string_view file, int err) {
  Reason r = Reason::kIoError;
  switch (err) {
    case ELOOP: r = Reason::kSymlink; break;
    case EACCES:
    case EPERM: r = Reason::kPermissionDenied; break;
    case ENOENT: r = Reason::kMissingFile; break;
    default: break;
  }
  std::string msg(what);
  msg.append(" ").append(file).append(": ");
  msg.append(err == ELOOP ? "is a symbolic link (never followed)" : errno_text(err));
  return refusal(r, std::move(msg)).with_detail("file", std::string(file));
}

}  // namespace infergate::agent
