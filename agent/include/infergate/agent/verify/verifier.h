// The verification facade the binary calls: signature first, then the statement and the policy, then
// the manifest's digest, then every file. Two release formats: ours (release.dsse.json over
// SHA256SUMS) and the OpenSSF model signing format (model.sig, a Sigstore bundle). Fails closed: any
// doubt is a refusal with its reason.
#pragma once

#include <filesystem>
#include <set>
#include <string_view>
#include <vector>

#include "infergate/agent/manifest/tree_check.h"
#include "infergate/agent/policy/release_policy.h"
#include "infergate/agent/policy/trust.h"
#include "infergate/agent/report.h"
#include "infergate/common/clock.h"
#include "infergate/common/result.h"

namespace infergate::agent {

enum class ReleaseFormat { kInfergate, kOms };
std::string_view release_format_name(ReleaseFormat format);  // "infergate", "oms"
Result<ReleaseFormat> parse_release_format(std::string_view name);

struct VerifyOptions {
  std::filesystem::path dir;
  TrustSources trust;
  // The formats the trust configuration allows (--format); ours only unless told otherwise.
  std::set<ReleaseFormat> formats = {ReleaseFormat::kInfergate};
  ReleasePolicy policy;
  const Clock* clock = nullptr;  // SystemClock when null
  TreeOptions tree;
};

// Verifies DIR. Steps and the reasons each can refuse with, in order:
//   1. the trust material loads                    KeyInvalid, UsageError (none given)
//   2. DIR opens                                   ArtifactDirInvalid, Symlink
//   2b. the format: release.dsse.json when present and allowed, else model.sig when present and
//      allowed (then verify_oms_release's steps follow)      FormatNotAllowed, SignatureMissing
//   3. release.dsse.json is read and parsed        SignatureMalformed, Symlink, SpecialFile,
//                                                  UsageError (no --public-key)
//   4. a trusted key verifies it                   SignatureMalformed (payload type), UntrustedKey,
//   SignatureInvalid
//   5. the statement parses                        StatementInvalid
//   6. the policy holds                            NameMismatch, VersionTooLow, ReleaseExpired,
//   WeightFormatMismatch
//   7. SHA256SUMS is the signed manifest           ManifestMissing, ManifestTooLarge, ManifestDigestMismatch
//   8. SHA256SUMS parses, lists something, and
//      lists exactly the files with signed sizes   ManifestMalformed, DuplicateEntry, UnsafePath,
//      EmptyRelease,
//                                                  StatementInvalid
//   9. the tree matches (check_tree)               Symlink, SpecialFile, MissingFile, UnlistedFile,
//                                                  SizeMismatch, DigestMismatch, FileChanged, LimitExceeded,
//                                                  PermissionDenied, IoError
// Never writes into DIR. Thread-safe in the sense that separate calls share nothing.
Result<VerifiedRelease> verify_release(const VerifyOptions& options);

// The OMS half of verify_release, for DIR already opened and trust already loaded. In order:
//   1. model.sig is read and parsed as a Sigstore bundle      SignatureMalformed, Symlink, SpecialFile
//   2. its signature verifies with the material it names:
//      a public key (any trusted key)                         UntrustedKey, SignatureInvalid
//      a certificate with log entries (keyless, offline)      see verify_keyless
//      a certificate chain without (a private CA)             see verify_certificate_signed
//   3. the payload is an OMS v1.0 statement                   StatementInvalid, UnsafePath, DuplicateEntry
//   4. the policy: --expect-name against the subject name     NameMismatch; PolicyUnsupported for
//      --min-version (OMS carries no version)
//   5. the tree matches (check_oms_tree)                      its reasons
//   6. --expect-weight-format against the verified files      WeightFormatMismatch, MetadataInvalid
Result<VerifiedRelease> verify_oms_release(const ArtifactRoot& root, const Trust& trust,
                                           const VerifyOptions& options);

}  // namespace infergate::agent
