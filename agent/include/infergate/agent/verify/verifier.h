// The verification facade the binary calls: signature first, then the statement and the policy, then
// the manifest's digest, then every file. Fails closed: any doubt is a refusal with its reason.
#pragma once

#include <filesystem>
#include <vector>

#include "infergate/agent/manifest/tree_check.h"
#include "infergate/agent/policy/release_policy.h"
#include "infergate/agent/report.h"
#include "infergate/common/clock.h"
#include "infergate/common/result.h"

namespace infergate::agent {

struct VerifyOptions {
  std::filesystem::path dir;
  std::vector<std::filesystem::path> public_keys;  // files or directories of *.pem
  ReleasePolicy policy;
  const Clock* clock = nullptr;  // SystemClock when null
  TreeOptions tree;
};

// Verifies DIR. Steps and the reasons each can refuse with, in order:
//   1. the trusted keys load                       KeyInvalid, UsageError (none given)
//   2. DIR opens                                   ArtifactDirInvalid, Symlink
//   3. release.dsse.json is read and parsed        SignatureMissing, SignatureMalformed, Symlink, SpecialFile
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

}  // namespace infergate::agent
