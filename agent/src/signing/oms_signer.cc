// sign --format oms: hash, describe in the OMS v1.0 shape, sign, write model.sig.
#include "infergate/agent/hashing/tree.h"
#include "infergate/agent/manifest/oms_check.h"
#include "infergate/agent/reasons.h"
#include "infergate/agent/signing/dsse.h"
#include "infergate/agent/signing/release_signer.h"
#include "infergate/agent/signing/sigstore_bundle.h"
#include "infergate/common/fs.h"
#include "infergate/common/manifest.h"

namespace infergate::agent {
namespace {

// A SHA256SUMS beside the bundle must say what the bundle says, or the runtime's hash-while-load
// (which reads SHA256SUMS) would refuse what verification accepted.
Status check_against_manifest(int root_fd, const std::vector<OmsResource>& resources) {
  auto text = read_small_file(root_fd, kManifestFileName, kMaxManifestBytes, Reason::kManifestTooLarge);
  if (!text.ok()) {
    if (reason_of(text.error()) == Reason::kMissingFile) return ok_status();
    return std::move(text).error();
  }
  INFERGATE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::parse(*text));
  size_t listed = 0;
  for (const auto& r : resources) {
    if (r.path == kManifestFileName) continue;
    const ManifestEntry* e = manifest.find(r.path);
    if (e == nullptr) {
      return refusal(Reason::kUnlistedFile,
                     r.path + " is not listed in SHA256SUMS; run `infergate-agent manifest`")
          .with_detail("file", r.path);
    }
    if (e->digest != r.digest) {
      return refusal(Reason::kDigestMismatch, r.path + ": SHA256SUMS says " + e->digest.hex() +
                                                  ", the file is " + r.digest.hex() +
                                                  "; run `infergate-agent manifest`")
          .with_detail("file", r.path)
          .with_detail("expected", e->digest.hex())
          .with_detail("actual", r.digest.hex());
    }
    ++listed;
  }
  if (listed != manifest.size()) {
    return refusal(Reason::kMissingFile,
                   "SHA256SUMS lists a file that is absent; run `infergate-agent manifest`");
  }
  return ok_status();
}

}  // namespace

Result<SignedOmsRelease> sign_oms_release(const OmsSignOptions& options, const PrivateKey& key) {
  std::string name = options.name;
  if (name.empty()) {
    std::string dir = options.dir.string();
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    name = std::filesystem::path(dir).filename().string();
  }
  INFERGATE_RETURN_IF_ERROR(validate_release_name(name));
  if (options.shard_size && *options.shard_size == 0) {
    return refusal(Reason::kUsageError, "--shard-size must be a positive number of bytes");
  }
  INFERGATE_ASSIGN_OR_RETURN(ArtifactRoot root, ArtifactRoot::open(options.dir));

  SignedOmsRelease out;
  OmsStatement& s = out.statement;
  s.model_name = name;
  s.serialization.method = options.shard_size ? OmsMethod::kShards : OmsMethod::kFiles;
  s.serialization.shard_size = options.shard_size.value_or(0);
  s.serialization.allow_symlinks = false;
  s.serialization.ignore_paths = {std::string(kBundleFileName), std::string(kReleaseFileName)};
  INFERGATE_ASSIGN_OR_RETURN(s.resources,
                             build_oms_resources(root.fd(), s.serialization, options.tree, &out.summary));
  if (s.resources.empty())
    return refusal(Reason::kEmptyRelease, options.dir.string() + " holds no file to sign");
  if (s.serialization.method == OmsMethod::kShards) {
    for (const auto& r : s.resources) {
      if (r.path.find(':') != std::string::npos) {
        return refusal(Reason::kUsageError,
                       r.path + ": a ':' in a path cannot be named in a shard (path:start:end)")
            .with_detail("file", r.path);
      }
    }
  } else {
    INFERGATE_RETURN_IF_ERROR(check_against_manifest(root.fd(), s.resources));
  }
  s.root_digest = oms_root_digest(s.resources);

  SigstoreBundle bundle;
  bundle.media_type = std::string(kBundleMediaTypeV03);
  bundle.material = BundleMaterial::kPublicKey;
  bundle.public_key_hint = key.public_key().pem_hint();
  bundle.envelope.payload_type = std::string(kInTotoPayloadType);
  bundle.envelope.payload = serialize_oms_statement(s);
  INFERGATE_ASSIGN_OR_RETURN(std::string sig,
                             key.sign(dsse_pae(bundle.envelope.payload_type, bundle.envelope.payload)));
  bundle.envelope.signatures.push_back({"", std::move(sig)});
  out.bundle = serialize_bundle(bundle);
  INFERGATE_RETURN_IF_ERROR(
      write_file_atomic(root.path() / kBundleFileName, out.bundle, 0644).context("writing model.sig"));
  return out;
}

}  // namespace infergate::agent
