// Trusted roots and the two certificate-based ways an OMS bundle is verified.
#include "infergate/agent/policy/sigstore_trust.h"

#include "infergate/agent/reasons.h"
#include "infergate/agent/signing/dsse.h"
#include "infergate/common/encoding.h"
#include "infergate/common/fs.h"
#include "infergate/common/json.h"

namespace infergate::agent {
namespace {

constexpr size_t kMaxTrustedRootBytes = 4u << 20;

Error root_invalid(std::string_view source, const std::string& why) {
  return refusal(Reason::kKeyInvalid, std::string(source) + ": " + why);
}

Result<std::optional<WallTime>> time_field(const Json& range, const char* key, std::string_view source,
                                           const std::string& path) {
  auto it = range.find(key);
  if (it == range.end() || it->is_null()) return std::optional<WallTime>();
  if (!it->is_string()) return root_invalid(source, path + "." + key + ": expected a time");
  auto t = parse_rfc3339(it->get_ref<const std::string&>());
  if (!t.ok()) return root_invalid(source, path + "." + key + ": " + t.error().message());
  return std::optional<WallTime>(*t);
}

Status read_validity(const Json& obj, std::string_view source, const std::string& path,
                     std::optional<WallTime>* from, std::optional<WallTime>* until) {
  auto it = obj.find("validFor");
  if (it == obj.end() || it->is_null()) return ok_status();
  if (!it->is_object()) return root_invalid(source, path + ".validFor: expected an object");
  INFERGATE_ASSIGN_OR_RETURN(*from, time_field(*it, "start", source, path + ".validFor"));
  INFERGATE_ASSIGN_OR_RETURN(*until, time_field(*it, "end", source, path + ".validFor"));
  return ok_status();
}

Result<std::string> b64_field(const Json& obj, const char* key, std::string_view source,
                              const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string())
    return root_invalid(source, path + "." + key + ": expected base64");
  auto raw = base64_decode(it->get_ref<const std::string&>());
  if (!raw.ok()) return root_invalid(source, path + "." + key + ": " + raw.error().message());
  return std::move(raw).value();
}

// One tlogs/ctlogs entry: {baseUrl, publicKey: {rawBytes, validFor}, logId: {keyId}}.
Result<TransparencyLog> parse_log(const Json& j, std::string_view source, const std::string& path) {
  if (!j.is_object()) return root_invalid(source, path + ": not an object");
  auto pk = j.find("publicKey");
  auto id = j.find("logId");
  if (pk == j.end() || !pk->is_object() || id == j.end() || !id->is_object()) {
    return root_invalid(source, path + ": needs publicKey and logId");
  }
  INFERGATE_ASSIGN_OR_RETURN(std::string der, b64_field(*pk, "rawBytes", source, path + ".publicKey"));
  auto key = PublicKey::from_der(der, std::string(source) + " " + path);
  if (!key.ok()) return std::move(key).error();
  TransparencyLog log{"", std::move(key).value(), std::nullopt, std::nullopt, ""};
  // Rekor v1 and CT logs use the SHA-256 of the DER key as id; Rekor v2 logs derive theirs otherwise,
  // so the id is taken as the root states it and entries are matched against it.
  INFERGATE_ASSIGN_OR_RETURN(log.log_id, b64_field(*id, "keyId", source, path + ".logId"));
  if (log.log_id.empty()) return root_invalid(source, path + ".logId.keyId: empty");
  INFERGATE_RETURN_IF_ERROR(
      read_validity(*pk, source, path + ".publicKey", &log.valid_from, &log.valid_until));
  if (auto url = j.find("baseUrl"); url != j.end() && url->is_string())
    log.base_url = url->get<std::string>();
  return log;
}

Result<std::vector<TransparencyLog>> parse_logs(const Json& root, const char* key, std::string_view source) {
  std::vector<TransparencyLog> out;
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return out;
  if (!it->is_array()) return root_invalid(source, std::string(key) + ": expected an array");
  for (size_t i = 0; i < it->size(); ++i) {
    INFERGATE_ASSIGN_OR_RETURN(TransparencyLog log,
                               parse_log((*it)[i], source, std::string(key) + "[" + std::to_string(i) + "]"));
    out.push_back(std::move(log));
  }
  return out;
}

Result<CertificateAuthority> parse_ca(const Json& j, std::string_view source, const std::string& path) {
  if (!j.is_object()) return root_invalid(source, path + ": not an object");
  auto chain = j.find("certChain");
  auto certs = chain == j.end() || !chain->is_object() ? chain : chain->find("certificates");
  if (chain == j.end() || !chain->is_object() || certs == chain->end() || !certs->is_array() ||
      certs->empty()) {
    return root_invalid(source, path + ".certChain.certificates: expected certificates");
  }
  CertificateAuthority ca;
  for (size_t i = 0; i < certs->size(); ++i) {
    std::string where = path + ".certChain.certificates[" + std::to_string(i) + "]";
    if (!(*certs)[i].is_object()) return root_invalid(source, where + ": not an object");
    INFERGATE_ASSIGN_OR_RETURN(std::string der, b64_field((*certs)[i], "rawBytes", source, where));
    auto c = Certificate::from_der(der, where);
    if (!c.ok()) return root_invalid(source, c.error().message());
    ca.chain.push_back(std::move(c).value());
  }
  INFERGATE_RETURN_IF_ERROR(read_validity(j, source, path, &ca.valid_from, &ca.valid_until));
  return ca;
}

bool in_range(WallTime t, const std::optional<WallTime>& from, const std::optional<WallTime>& until) {
  return (!from || t >= *from) && (!until || t <= *until);
}

Status check_envelope_signature(const DsseEnvelope& env, const PublicKey& key) {
  if (env.payload_type != kInTotoPayloadType) {
    return refusal(Reason::kSignatureMalformed, "model.sig: payloadType is \"" +
                                                    env.payload_type.substr(0, 100) + "\", not " +
                                                    std::string(kInTotoPayloadType));
  }
  std::string pae = dsse_pae(env.payload_type, env.payload);
  for (const auto& s : env.signatures) {
    if (key.verify(pae, s.sig)) return ok_status();
  }
  return refusal(
             Reason::kSignatureInvalid,
             "model.sig: the envelope's signature does not verify under the signing certificate's key (the "
             "statement or the signature was altered)")
      .with_detail("file", std::string(kBundleFileName));
}

Status check_identity(const Certificate& leaf, const std::vector<SignerIdentity>& identities,
                      VerifiedSigner* out) {
  std::vector<std::string> sans = leaf.identities();
  std::optional<std::string> issuer = leaf.oidc_issuer();
  for (const auto& want : identities) {
    for (const auto& san : sans) {
      if (san == want.subject && issuer && *issuer == want.issuer) {
        out->subject = san;
        out->issuer = *issuer;
        return ok_status();
      }
    }
  }
  std::string got = sans.empty() ? "(no email or URI)" : sans.front();
  std::string expected = identities.front().subject + " from " + identities.front().issuer;
  return refusal(Reason::kIdentityMismatch, "model.sig is signed by " + got.substr(0, 200) + " from " +
                                                issuer.value_or("(no issuer)").substr(0, 200) +
                                                ", not by an expected identity (" + expected.substr(0, 400) +
                                                ")")
      .with_detail("file", std::string(kBundleFileName))
      .with_detail("expected", expected.substr(0, 400))
      .with_detail("actual", (got + " from " + issuer.value_or("(no issuer)")).substr(0, 400));
}

// The CA of the root whose chain verifies `leaf` at `t`, and the chain it gave.
Result<std::vector<Certificate>> chain_to_root(const Certificate& leaf, const TrustedRoot& root, WallTime t) {
  std::optional<Error> last;
  for (const auto& ca : root.certificate_authorities) {
    if (!in_range(t, ca.valid_from, ca.valid_until)) continue;
    auto chain = verify_chain(leaf, {}, ca.chain, t, "the signing certificate");
    if (chain.ok()) return chain;
    last = std::move(chain).error();
  }
  if (last) return std::move(*last);
  return refusal(Reason::kCertificateInvalid,
                 "no certificate authority of the trusted root was valid at " + format_rfc3339(t));
}

}  // namespace

Result<TrustedRoot> parse_trusted_root(std::string_view text, std::string_view source) {
  if (text.size() > kMaxTrustedRootBytes) return root_invalid(source, "too large for a trusted root");
  auto parsed = parse_json_unique_keys(text, source);
  if (!parsed.ok()) return root_invalid(source, parsed.error().message());
  const Json& j = *parsed;
  if (!j.is_object()) return root_invalid(source, "not a JSON object");
  auto media = j.find("mediaType");
  if (media == j.end() || !media->is_string() ||
      media->get<std::string>().rfind("application/vnd.dev.sigstore.trustedroot", 0) != 0) {
    return root_invalid(source, "mediaType is not a Sigstore trusted root");
  }
  TrustedRoot root;
  INFERGATE_ASSIGN_OR_RETURN(root.tlogs, parse_logs(j, "tlogs", source));
  INFERGATE_ASSIGN_OR_RETURN(std::vector<TransparencyLog> ct, parse_logs(j, "ctlogs", source));
  for (auto& l : ct)
    root.ctlogs.push_back({std::move(l.log_id), std::move(l.key), l.valid_from, l.valid_until});
  auto cas = j.find("certificateAuthorities");
  if (cas != j.end() && !cas->is_null()) {
    if (!cas->is_array()) return root_invalid(source, "certificateAuthorities: expected an array");
    for (size_t i = 0; i < cas->size(); ++i) {
      INFERGATE_ASSIGN_OR_RETURN(
          CertificateAuthority ca,
          parse_ca((*cas)[i], source, "certificateAuthorities[" + std::to_string(i) + "]"));
      root.certificate_authorities.push_back(std::move(ca));
    }
  }
  if (root.tlogs.empty() || root.certificate_authorities.empty()) {
    return root_invalid(source, "names no transparency log or no certificate authority");
  }
  return root;
}

Result<TrustedRoot> load_trusted_root(const std::filesystem::path& path) {
  auto text = read_file(path, kMaxTrustedRootBytes);
  if (!text.ok()) return root_invalid(path.string(), text.error().message());
  return parse_trusted_root(*text, path.string());
}

Result<VerifiedSigner> verify_keyless(const SigstoreBundle& bundle, const TrustedRoot& root,
                                      const std::vector<SignerIdentity>& identities) {
  if (identities.empty()) {
    return refusal(Reason::kUsageError,
                   "a keyless signature names its signer only through its certificate: give --identity and "
                   "--issuer");
  }
  if (bundle.certificates.empty()) return refusal(Reason::kSignatureMalformed, "model.sig: no certificate");
  INFERGATE_ASSIGN_OR_RETURN(Certificate leaf,
                             Certificate::from_der(bundle.certificates.front(), "the signing certificate"));
  INFERGATE_ASSIGN_OR_RETURN(PublicKey leaf_key, leaf.public_key());
  INFERGATE_RETURN_IF_ERROR(check_envelope_signature(bundle.envelope, leaf_key));

  if (bundle.tlog_entries.empty()) {
    return refusal(Reason::kTransparencyLogInvalid,
                   "model.sig carries no transparency log entry: a keyless signature is only proven by one")
        .with_detail("file", std::string(kBundleFileName));
  }
  VerifiedSigner out;
  out.method = "keyless";
  for (const auto& e : bundle.tlog_entries) {
    auto t = verify_tlog_entry(e, bundle.envelope, leaf.der(), root.tlogs, bundle.minor_version >= 2);
    if (!t.ok()) return std::move(t).error().with_detail("file", std::string(kBundleFileName));
    INFERGATE_ASSIGN_OR_RETURN(std::vector<Certificate> chain, chain_to_root(leaf, root, *t));
    INFERGATE_RETURN_IF_ERROR(check_signing_usage(leaf, true, "the signing certificate"));
    if (!root.ctlogs.empty()) {
      if (chain.size() < 2)
        return refusal(Reason::kCertificateInvalid, "the signing certificate has no issuer");
      INFERGATE_RETURN_IF_ERROR(verify_embedded_scts(leaf, chain[1], root.ctlogs));
    }
    if (!out.signed_at || *t < *out.signed_at) out.signed_at = *t;
  }
  INFERGATE_RETURN_IF_ERROR(check_identity(leaf, identities, &out));
  return out;
}

Result<VerifiedSigner> verify_certificate_signed(const SigstoreBundle& bundle,
                                                 const std::vector<Certificate>& cas, WallTime now) {
  if (bundle.certificates.empty()) return refusal(Reason::kSignatureMalformed, "model.sig: no certificate");
  INFERGATE_ASSIGN_OR_RETURN(Certificate leaf,
                             Certificate::from_der(bundle.certificates.front(), "the signing certificate"));
  std::vector<Certificate> intermediates;
  for (size_t i = 1; i < bundle.certificates.size(); ++i) {
    INFERGATE_ASSIGN_OR_RETURN(Certificate c,
                               Certificate::from_der(bundle.certificates[i], "a chain certificate"));
    intermediates.push_back(std::move(c));
  }
  INFERGATE_ASSIGN_OR_RETURN(std::vector<Certificate> chain,
                             verify_chain(leaf, intermediates, cas, now, "the signing certificate"));
  (void)chain;
  INFERGATE_RETURN_IF_ERROR(check_signing_usage(leaf, false, "the signing certificate"));
  INFERGATE_ASSIGN_OR_RETURN(PublicKey key, leaf.public_key());
  INFERGATE_RETURN_IF_ERROR(check_envelope_signature(bundle.envelope, key));
  VerifiedSigner out;
  out.method = "certificate";
  out.subject = leaf.subject();
  return out;
}

}  // namespace infergate::agent
