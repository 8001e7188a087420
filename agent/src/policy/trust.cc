// Signature verification against the trusted keys, and loading everything that is trusted.
#include "infergate/agent/policy/trust.h"

#include <algorithm>

#include "infergate/agent/reasons.h"
#include "infergate/common/fs.h"

namespace infergate::agent {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxTrustFileBytes = 1u << 20;

Error trust_invalid(const fs::path& p, const std::string& why) {
  return refusal(Reason::kKeyInvalid, p.string() + ": " + why);
}

// One *.pem / *.crt file of a trust directory, read by what its PEM blocks say it is.
Status read_trust_file(const fs::path& f, Trust* out) {
  auto text = read_file(f, kMaxTrustFileBytes);
  if (!text.ok()) return trust_invalid(f, text.error().message());
  if (text->find("-----BEGIN PUBLIC KEY-----") != std::string::npos) {
    INFERGATE_ASSIGN_OR_RETURN(PublicKey k, PublicKey::from_pem(*text, f.string()));
    out->keys.push_back(std::move(k));
    return ok_status();
  }
  if (text->find("-----BEGIN CERTIFICATE-----") != std::string::npos) {
    INFERGATE_ASSIGN_OR_RETURN(std::vector<Certificate> certs, Certificate::from_pem(*text, f.string()));
    for (auto& c : certs) out->cas.push_back(std::move(c));
    return ok_status();
  }
  return trust_invalid(f, "holds neither a PEM public key nor PEM certificates");
}

Status set_root(const fs::path& path, Trust* out) {
  if (out->root)
    return refusal(Reason::kUsageError, "more than one trusted root given (" + path.string() + ")");
  INFERGATE_ASSIGN_OR_RETURN(TrustedRoot root, load_trusted_root(path));
  out->root = std::move(root);
  return ok_status();
}

// A mounted Secret: visible names are links into a hidden directory, so links are followed here.
Status read_trust_dir(const fs::path& dir, Trust* out) {
  std::error_code ec;
  if (!fs::is_directory(fs::status(dir, ec))) return trust_invalid(dir, "not a directory");
  std::vector<fs::path> files;
  bool root = false;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (name == kTrustedRootFileName) root = true;
    if (it->path().extension() == ".pem" || it->path().extension() == ".crt") files.push_back(it->path());
  }
  if (ec) return trust_invalid(dir, ec.message());
  std::sort(files.begin(), files.end());
  if (files.empty() && !root) {
    return trust_invalid(dir, "holds no *.pem or *.crt file and no " + std::string(kTrustedRootFileName));
  }
  for (const auto& f : files) INFERGATE_RETURN_IF_ERROR(read_trust_file(f, out));
  if (root) INFERGATE_RETURN_IF_ERROR(set_root(dir / kTrustedRootFileName, out));
  return ok_status();
}

}  // namespace

Result<Trust> load_trust(const TrustSources& s) {
  Trust out;
  if (s.public_keys.empty() && s.trust_dirs.empty() && s.ca_certs.empty() && !s.trusted_root) {
    return refusal(Reason::kUsageError, "no --public-key given: there is no unsigned mode");
  }
  if (!s.public_keys.empty()) {
    INFERGATE_ASSIGN_OR_RETURN(out.keys, load_public_keys(s.public_keys));
  }
  for (const auto& d : s.trust_dirs) INFERGATE_RETURN_IF_ERROR(read_trust_dir(d, &out));
  for (const auto& f : s.ca_certs) {
    auto text = read_file(f, kMaxTrustFileBytes);
    if (!text.ok()) return trust_invalid(f, text.error().message());
    INFERGATE_ASSIGN_OR_RETURN(std::vector<Certificate> certs, Certificate::from_pem(*text, f.string()));
    for (auto& c : certs) out.cas.push_back(std::move(c));
  }
  if (s.trusted_root) INFERGATE_RETURN_IF_ERROR(set_root(*s.trusted_root, &out));
  out.identities = s.identities;
  return out;
}

Result<const PublicKey*> verify_envelope(const DsseEnvelope& envelope, const std::vector<PublicKey>& trusted,
                                         std::string_view what) {
  const std::string file(what);
  if (envelope.payload_type != kInTotoPayloadType) {
    return refusal(Reason::kSignatureMalformed, file + ": payloadType is \"" +
                                                    envelope.payload_type.substr(0, 100) + "\", not " +
                                                    std::string(kInTotoPayloadType));
  }
  std::string pae = dsse_pae(envelope.payload_type, envelope.payload);
  bool named_trusted = false;
  for (const auto& sig : envelope.signatures) {
    for (const auto& key : trusted) {
      if (sig.keyid == key.key_id() || (!sig.keyid.empty() && sig.keyid == key.pem_hint()))
        named_trusted = true;
      if (key.verify(pae, sig.sig)) return &key;
    }
  }
  if (!named_trusted) {
    std::string ids;
    for (const auto& sig : envelope.signatures) {
      if (!ids.empty()) ids.append(", ");
      ids.append(sig.keyid.empty() ? "(no keyid)" : sig.keyid.substr(0, 64));
    }
    return refusal(Reason::kUntrustedKey,
                   file + " is signed by a key that is not trusted (keyid " + ids + ")")
        .with_detail("file", file)
        .with_detail("actual", envelope.signatures.front().keyid.substr(0, 64));
  }
  return refusal(Reason::kSignatureInvalid,
                 file +
                     ": no signature verifies under the trusted keys (the statement or the signature was "
                     "altered)")
      .with_detail("file", file);
}

}  // namespace infergate::agent
