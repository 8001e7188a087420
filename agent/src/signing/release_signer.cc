// The sign command's work: check, describe, sign, write.
#include "infergate/agent/signing/release_signer.h"

#include "infergate/agent/hashing/tree.h"
#include "infergate/agent/manifest/weight_format.h"
#include "infergate/agent/reasons.h"
#include "infergate/agent/signing/dsse.h"
#include "infergate/common/fs.h"

namespace infergate::agent {

Result<SignedRelease> sign_release(const SignOptions& options, const PrivateKey& key) {
  INFERGATE_RETURN_IF_ERROR(validate_release_name(options.name));
  if (options.version < 0) return refusal(Reason::kUsageError, "--version must be a non-negative integer");
  if (options.weight_format) INFERGATE_RETURN_IF_ERROR(validate_weight_format(*options.weight_format));
  if (options.expires_in && options.expires_in->count() <= 0) {
    return refusal(Reason::kUsageError, "--expires must be a positive duration");
  }
  const Clock& clock = options.clock ? *options.clock : SystemClock::instance();

  INFERGATE_ASSIGN_OR_RETURN(ArtifactRoot root, ArtifactRoot::open(options.dir));
  auto text = read_small_file(root.fd(), kManifestFileName, kMaxManifestBytes, Reason::kManifestTooLarge);
  if (!text.ok()) {
    if (reason_of(text.error()) == Reason::kMissingFile) {
      return refusal(Reason::kManifestMissing, "SHA256SUMS is absent; run `infergate-agent manifest` first")
          .with_detail("file", std::string(kManifestFileName));
    }
    return std::move(text).error();
  }
  INFERGATE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::parse(*text));
  if (manifest.empty()) return refusal(Reason::kEmptyRelease, "SHA256SUMS lists no file: nothing to serve");
  INFERGATE_ASSIGN_OR_RETURN(TreeSummary summary,
                             check_tree(root.fd(), manifest, std::nullopt, options.tree));

  INFERGATE_ASSIGN_OR_RETURN(std::optional<std::string> detected, detect_weight_format(root.fd(), manifest));
  std::string format;
  if (detected && options.weight_format && *detected != *options.weight_format) {
    return refusal(Reason::kMetadataInvalid, "--weight-format " + *options.weight_format +
                                                 " contradicts the artifact's metadata, which says " +
                                                 *detected);
  }
  if (detected) {
    format = *detected;
  } else if (options.weight_format) {
    format = *options.weight_format;
  } else {
    return refusal(
        Reason::kMetadataInvalid,
        "cannot tell the weight format (no quantization.json, safetensors or config.json torch_dtype); "
        "pass --weight-format");
  }

  SignedRelease out;
  ReleaseStatement& s = out.statement;
  INFERGATE_ASSIGN_OR_RETURN(s.manifest_digest, sha256(*text));
  s.name = options.name;
  s.version = options.version;
  s.weight_format = format;
  // Whole seconds: the statement carries RFC 3339 times at seconds precision.
  s.created_at = std::chrono::time_point_cast<std::chrono::seconds>(clock.wall_now());
  if (options.expires_in) s.expires_at = s.created_at + *options.expires_in;
  s.file_sizes = summary.sizes;

  DsseEnvelope env;
  env.payload_type = std::string(kInTotoPayloadType);
  env.payload = serialize_statement(s);
  INFERGATE_ASSIGN_OR_RETURN(std::string sig, key.sign(dsse_pae(env.payload_type, env.payload)));
  env.signatures.push_back({key.key_id(), std::move(sig)});
  out.envelope = serialize_envelope(env);
  INFERGATE_RETURN_IF_ERROR(write_file_atomic(root.path() / kReleaseFileName, out.envelope, 0644)
                                .context("writing release.dsse.json"));
  out.summary = std::move(summary);
  return out;
}

}  // namespace infergate::agent
