// verify_release: which format, then the ordered checks of our own release format.
#include "infergate/agent/verify/verifier.h"

#include <sys/stat.h>

#include "infergate/agent/hashing/tree.h"
#include "infergate/agent/policy/trust.h"
#include "infergate/agent/reasons.h"
#include "infergate/agent/signing/dsse.h"
#include "infergate/agent/signing/keys.h"
#include "infergate/agent/signing/statement.h"
#include "infergate/common/manifest.h"

namespace infergate::agent {
namespace {

// Whether an entry of that name exists at the top of the tree (whatever it is: reading it decides).
bool present(int root_fd, std::string_view name) {
  struct stat st {};
  return ::fstatat(root_fd, std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

std::string allowed_list(const std::set<ReleaseFormat>& formats) {
  std::string out;
  for (ReleaseFormat f : formats) out += (out.empty() ? "" : ", ") + std::string(release_format_name(f));
  return out;
}

// Steps 3 to 9 for our own format.
Result<VerifiedRelease> verify_infergate_release(const ArtifactRoot& root, const Trust& trust,
                                                 const VerifyOptions& options, const Clock& clock) {
  const std::vector<PublicKey>& keys = trust.keys;
  if (keys.empty()) {
    return refusal(Reason::kUsageError,
                   "release.dsse.json is verified with public keys, and no --public-key or trust-directory "
                   "key is given");
  }
  // 3-4: the signature, before anything it covers is trusted.
  auto envelope_text =
      read_small_file(root.fd(), kReleaseFileName, kMaxEnvelopeBytes, Reason::kSignatureMalformed);
  if (!envelope_text.ok()) return std::move(envelope_text).error();
  INFERGATE_ASSIGN_OR_RETURN(DsseEnvelope envelope, parse_envelope(*envelope_text));
  INFERGATE_ASSIGN_OR_RETURN(const PublicKey* signer, verify_envelope(envelope, keys));

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
  out.signer = "key " + signer->key_id();
  out.files = summary.files;
  out.bytes = summary.bytes;
  return out;
}

}  // namespace

std::string_view release_format_name(ReleaseFormat format) {
  return format == ReleaseFormat::kInfergate ? "infergate" : "oms";
}

Result<ReleaseFormat> parse_release_format(std::string_view name) {
  if (name == "infergate") return ReleaseFormat::kInfergate;
  if (name == "oms") return ReleaseFormat::kOms;
  return refusal(Reason::kUsageError,
                 "unknown release format \"" + std::string(name).substr(0, 64) + "\" (infergate or oms)");
}

Result<VerifiedRelease> verify_release(const VerifyOptions& options) {
  const Clock& clock = options.clock ? *options.clock : SystemClock::instance();
  MonoTime start = clock.mono_now();
  if (options.formats.empty()) return refusal(Reason::kUsageError, "no release format is allowed");
  INFERGATE_ASSIGN_OR_RETURN(Trust trust, load_trust(options.trust));
  INFERGATE_ASSIGN_OR_RETURN(ArtifactRoot root, ArtifactRoot::open(options.dir));

  bool ours = present(root.fd(), kReleaseFileName), oms = present(root.fd(), kBundleFileName);
  bool allow_ours = options.formats.count(ReleaseFormat::kInfergate) == 1;
  bool allow_oms = options.formats.count(ReleaseFormat::kOms) == 1;
  Result<VerifiedRelease> out = internal_error("unreachable");
  if (ours && allow_ours) {
    out = verify_infergate_release(root, trust, options, clock);
  } else if (oms && allow_oms) {
    out = verify_oms_release(root, trust, options);
  } else if (ours || oms) {
    std::string file(ours ? kReleaseFileName : kBundleFileName);
    return refusal(Reason::kFormatNotAllowed, file + " is a " + (ours ? "infergate" : "oms") +
                                                  " release, and the trust configuration allows only " +
                                                  allowed_list(options.formats))
        .with_detail("file", file)
        .with_detail("expected", allowed_list(options.formats))
        .with_detail("actual", ours ? "infergate" : "oms");
  } else {
    std::string expected = allow_ours && allow_oms ? "release.dsse.json or model.sig"
                           : allow_ours            ? "release.dsse.json"
                                                   : "model.sig";
    return refusal(Reason::kSignatureMissing, expected + " is absent: the release is not signed")
        .with_detail("file", allow_ours ? std::string(kReleaseFileName) : std::string(kBundleFileName));
  }
  if (out.ok()) out->seconds = std::chrono::duration<double>(clock.mono_now() - start).count();
  return out;
}

}  // namespace infergate::agent
