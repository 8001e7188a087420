// verify_oms_release: the ordered checks of a release signed in the OpenSSF model signing format.
#include "infergate/agent/hashing/tree.h"
#include "infergate/agent/manifest/oms_check.h"
#include "infergate/agent/manifest/weight_format.h"
#include "infergate/agent/reasons.h"
#include "infergate/agent/signing/oms_statement.h"
#include "infergate/agent/signing/sigstore_bundle.h"
#include "infergate/agent/verify/verifier.h"

namespace infergate::agent {
namespace {

// Step 2: the signature, with whichever material the bundle names.
Result<std::string> verify_bundle_signature(const SigstoreBundle& bundle, const Trust& trust,
                                            const Clock& clock, std::optional<std::string>* signed_at) {
  if (bundle.material == BundleMaterial::kPublicKey) {
    if (trust.keys.empty()) {
      return refusal(Reason::kUntrustedKey, "model.sig is signed with a key, and no public key is trusted")
          .with_detail("file", std::string(kBundleFileName));
    }
    // The hint names the key as the reference tool names it (SHA-256 of its PEM); like a DSSE keyid it
    // is unauthenticated, so every key is still tried.
    DsseEnvelope env = bundle.envelope;
    for (auto& s : env.signatures) {
      if (s.keyid.empty()) s.keyid = bundle.public_key_hint;
    }
    INFERGATE_ASSIGN_OR_RETURN(const PublicKey* key, verify_envelope(env, trust.keys, kBundleFileName));
    return "key " + key->key_id();
  }
  // Log entries make it keyless; so does a certificate with no entries when only a trusted root is
  // configured (a keyless bundle stripped of its proof must be refused as such, not as untrusted).
  if (!bundle.tlog_entries.empty() || (trust.cas.empty() && trust.root)) {
    if (!trust.root) {
      return refusal(
                 Reason::kUntrustedKey,
                 "model.sig is a keyless (Sigstore) signature, and no trusted root is given (--trusted-root)")
          .with_detail("file", std::string(kBundleFileName));
    }
    INFERGATE_ASSIGN_OR_RETURN(VerifiedSigner s, verify_keyless(bundle, *trust.root, trust.identities));
    if (s.signed_at) *signed_at = format_rfc3339(*s.signed_at);
    return "keyless " + s.subject + " (" + s.issuer + ")";
  }
  if (trust.cas.empty()) {
    return refusal(Reason::kUntrustedKey,
                   "model.sig is signed with a certificate, and no CA certificate is trusted (--ca-cert)")
        .with_detail("file", std::string(kBundleFileName));
  }
  INFERGATE_ASSIGN_OR_RETURN(VerifiedSigner s,
                             verify_certificate_signed(bundle, trust.cas, clock.wall_now()));
  return "certificate " + s.subject;
}

// Step 6: the weight format, from the files just verified (OMS itself does not say).
Result<std::string> verified_weight_format(int root_fd, const OmsStatement& s, const ReleasePolicy& policy) {
  std::vector<ManifestEntry> entries;
  for (const auto& r : s.resources) {
    if (entries.empty() || entries.back().path != r.path) entries.push_back({r.path, r.digest});
  }
  std::sort(entries.begin(), entries.end(),
            [](const ManifestEntry& a, const ManifestEntry& b) { return a.path < b.path; });
  entries.erase(std::unique(entries.begin(), entries.end(),
                            [](const ManifestEntry& a, const ManifestEntry& b) { return a.path == b.path; }),
                entries.end());
  INFERGATE_ASSIGN_OR_RETURN(Manifest listed, Manifest::from_entries(std::move(entries)));
  // OMS signs no weight format: the release's own description is the only source. Weights it cannot
  // describe leave the format unknown, which only a stage that expects a format refuses.
  auto detected = detect_weight_format(root_fd, listed);
  if (!detected.ok() &&
      (reason_of(detected.error()) != Reason::kWeightsInvalid || policy.expect_weight_format)) {
    return std::move(detected).error();
  }
  std::string format = detected.ok() ? detected->value_or("") : "";
  if (policy.expect_weight_format && format != *policy.expect_weight_format) {
    return refusal(Reason::kWeightFormatMismatch,
                   "the release holds " +
                       (format.empty() ? std::string("an unknown weight format") : format) +
                       "; this stage expects " + *policy.expect_weight_format)
        .with_detail("expected", *policy.expect_weight_format)
        .with_detail("actual", format.empty() ? "unknown" : format);
  }
  return format;
}

}  // namespace

Result<VerifiedRelease> verify_oms_release(const ArtifactRoot& root, const Trust& trust,
                                           const VerifyOptions& options) {
  const Clock& clock = options.clock ? *options.clock : SystemClock::instance();
  // 1: the bundle.
  INFERGATE_ASSIGN_OR_RETURN(std::string text, read_small_file(root.fd(), kBundleFileName, kMaxBundleBytes,
                                                               Reason::kSignatureMalformed));
  INFERGATE_ASSIGN_OR_RETURN(SigstoreBundle bundle, parse_bundle(text));
  // 2: the signature, before anything it covers is trusted.
  VerifiedRelease out;
  out.format = "oms";
  INFERGATE_ASSIGN_OR_RETURN(out.signer, verify_bundle_signature(bundle, trust, clock, &out.created_at));
  // 3-4: what was signed, and whether this stage accepts it.
  INFERGATE_ASSIGN_OR_RETURN(OmsStatement statement, parse_oms_statement(bundle.envelope.payload));
  if (options.policy.min_version) {
    return refusal(Reason::kPolicyUnsupported,
                   "an OMS bundle carries no release version, so --min-version cannot be checked: sign the "
                   "release with infergate-agent sign too, or drop minVersion")
        .with_detail("file", std::string(kBundleFileName));
  }
  if (options.policy.expect_name && statement.model_name != *options.policy.expect_name) {
    return refusal(Reason::kNameMismatch, "model.sig is for model \"" + statement.model_name.substr(0, 200) +
                                              "\", not \"" + *options.policy.expect_name + "\"")
        .with_detail("expected", *options.policy.expect_name)
        .with_detail("actual", statement.model_name.substr(0, 200));
  }
  // 5: every file.
  INFERGATE_ASSIGN_OR_RETURN(TreeSummary summary, check_oms_tree(root.fd(), statement, options.tree));
  // 6: the weight format of what was verified.
  INFERGATE_ASSIGN_OR_RETURN(out.weight_format, verified_weight_format(root.fd(), statement, options.policy));

  INFERGATE_ASSIGN_OR_RETURN(Sha256Digest digest, sha256(text));
  out.release_digest = "sha256:" + digest.hex();
  out.name = statement.model_name;
  out.files = summary.files;
  out.bytes = summary.bytes;
  return out;
}

}  // namespace infergate::agent
