// verify_release: the ordered checks of a release directory.
#include "infergate/agent/verify/verifier.h"

#include "infergate/agent/hashing/tree.h"
#include "infergate/agent/policy/trust.h"
#include "infergate/agent/reasons.h"
#include "infergate/agent/signing/dsse.h"
#include "infergate/agent/signing/keys.h"
#include "infergate/agent/signing/statement.h"
#include "infergate/common/manifest.h"

namespace infergate::agent {

Result<VerifiedRelease> verify_release(const VerifyOptions& options) {
  const Clock& clock = options.clock ? *options.clock : SystemClock::instance();
  MonoTime start = clock.mono_now();
  INFERGATE_ASSIGN_OR_RETURN(std::vector<PublicKey> keys, load_public_keys(options.public_keys));
  INFERGATE_ASSIGN_OR_RETURN(ArtifactRoot root, ArtifactRoot::open(options.dir));

  // 3-4: the signature, before anything it covers is trusted.
  auto envelope_text =
      read_small_file(root.fd(), kReleaseFileName, kMaxEnvelopeBytes, Reason::kSignatureMalformed);
  if (!envelope_text.ok()) {
    if (reason_of(envelope_text.error()) == Reason::kMissingFile) {
      return refusal(Reason::kSignatureMissing, "release.dsse.json is absent: the release is not signed")
          .with_detail("file", std::string(kReleaseFileName));
    }
    return std::move(envelope_text).error();
  }
  INFERGATE_ASSIGN_OR_RETURN(DsseEnvelope envelope, parse_envelope(*envelope_text));
  INFERGATE_ASSIGN_OR_RETURN(const PublicKey* signer, verify_envelope(envelope, keys));
  (void)signer;

  // 5-6: what was signed, and whether this stage accepts it.
  INFERGATE_ASSIGN_OR_RETURN(ReleaseStatement statement, parse_statement(envelope.payload));
  INFERGATE_RETURN_IF_ERROR(check_release_policy(statement, options.policy, clock.wall_now()));

  // 7: the manifest is the one the statement signs.
  auto manifest_text =
      read_small_file(root.fd(), kManifestFileName, kMaxManifestBytes, Reason::kManifestTooLarge);
  if (!manifest_text.ok()) {
    if (reason_of(manifest_text.error()) == Reason::kMissingFile) {
      return refusal(Reason::kManifestMissing, "SHA256SUMS is absent")
          .with_detail("file", std::string(kManifestFileName));
    }
    return std::move(manifest_text).error();
  }
  INFERGATE_ASSIGN_OR_RETURN(Sha256Digest manifest_digest, sha256(*manifest_text));
  if (manifest_digest != statement.manifest_digest) {
    return refusal(
               Reason::kManifestDigestMismatch,
               "SHA256SUMS is not the manifest the release statement signs (files of one release with the "
               "manifest of another?)")
        .with_detail("file", std::string(kManifestFileName))
        .with_detail("expected", statement.manifest_digest.hex())
        .with_detail("actual", manifest_digest.hex());
  }

  // 8: the signed manifest, checked as strictly as any other.
  INFERGATE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::parse(*manifest_text));
  if (manifest.empty()) return refusal(Reason::kEmptyRelease, "SHA256SUMS lists no file: nothing to serve");
  if (statement.file_sizes.size() != manifest.size() ||
      !std::all_of(manifest.entries().begin(), manifest.entries().end(),
                   [&](const ManifestEntry& e) { return statement.file_sizes.count(e.path) == 1; })) {
    return refusal(Reason::kStatementInvalid,
                   "the signed file sizes do not name exactly the files of SHA256SUMS");
  }

  // 9: every file.
  INFERGATE_ASSIGN_OR_RETURN(TreeSummary summary,
                             check_tree(root.fd(), manifest, statement.file_sizes, options.tree));

  VerifiedRelease out;
  INFERGATE_ASSIGN_OR_RETURN(Sha256Digest release_digest, sha256(*envelope_text));
  out.release_digest = "sha256:" + release_digest.hex();
  out.name = statement.name;
  out.version = statement.version;
  out.weight_format = statement.weight_format;
  out.created_at = format_rfc3339(statement.created_at);
  if (statement.expires_at) out.expires_at = format_rfc3339(*statement.expires_at);
  out.files = summary.files;
  out.bytes = summary.bytes;
  out.seconds = std::chrono::duration<double>(clock.mono_now() - start).count();
  return out;
}

}  // namespace infergate::agent
