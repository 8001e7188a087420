// X.509 for the certificate-based and keyless (Fulcio) signing methods: parsing, chain verification
// at a given time, the usage a signing certificate must allow, the identity it names (SAN and the
// Fulcio OIDC issuer extension), and the certificate transparency proofs (SCTs) embedded in it.
// OpenSSL does the path building and signature checks; nothing here trusts a certificate by itself.
#pragma once

#include <openssl/types.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/agent/signing/keys.h"
#include "infergate/common/clock.h"
#include "infergate/common/result.h"

namespace infergate::agent {

// Fulcio's OIDC issuer extensions: v2 (a DER UTF8String) and the deprecated v1 (raw bytes).
inline constexpr std::string_view kFulcioIssuerV2Oid = "1.3.6.1.4.1.57264.1.8";
inline constexpr std::string_view kFulcioIssuerV1Oid = "1.3.6.1.4.1.57264.1.1";

// An immutable, parsed certificate. Thread-safe to share.
class Certificate {
 public:
  // Refuses (CertificateInvalid) anything but exactly one DER certificate; `what` names it in errors.
  static Result<Certificate> from_der(std::string_view der, std::string_view what);
  // Every certificate of a PEM text (a CA file may hold several); refuses (KeyInvalid) a text with
  // none or with a block that does not parse.
  static Result<std::vector<Certificate>> from_pem(std::string_view pem, std::string_view source);

  X509* get() const { return x509_.get(); }
  const std::string& der() const { return der_; }
  WallTime not_before() const;
  WallTime not_after() const;
  // "CN=...,O=..." of the subject, for messages and reports.
  std::string subject() const;
  // The subject alternative names that Sigstore identities are: rfc822Name (email) and URI.
  std::vector<std::string> identities() const;
  // The Fulcio OIDC issuer (v2 extension, else v1), or nothing.
  std::optional<std::string> oidc_issuer() const;
  // The public key (SubjectPublicKeyInfo) the certificate binds.
  Result<PublicKey> public_key() const;

 private:
  std::shared_ptr<X509> x509_;
  std::string der_;
};

// Verifies that `leaf` chains to one of `anchors` (trusted as given, root or not) through any of
// `intermediates` with every certificate valid at `at`, and returns the chain, leaf first.
// Refuses CertificateInvalid with OpenSSL's reason ("certificate has expired", "unable to get local
// issuer certificate", ...) and `what` naming the leaf.
Result<std::vector<Certificate>> verify_chain(const Certificate& leaf,
                                              const std::vector<Certificate>& intermediates,
                                              const std::vector<Certificate>& anchors, WallTime at,
                                              std::string_view what);

// A signing certificate must allow signing: key usage digitalSignature and, when `require_code_signing`
// (Fulcio) or when it has an extended key usage at all, the codeSigning purpose. CertificateInvalid.
Status check_signing_usage(const Certificate& leaf, bool require_code_signing, std::string_view what);

// A certificate transparency log (a Sigstore trusted root's ctlogs entry).
struct CtLog {
  std::string log_id;  // raw 32 bytes: SHA-256 of the DER public key
  PublicKey key;
  std::optional<WallTime> valid_from;
  std::optional<WallTime> valid_until;
};

// Verifies the SCTs embedded in `leaf` (RFC 6962 precertificate SCTs, v1) over the certificate with the
// SCT extension removed and `issuer`'s key hash, each against the log it names; accepts when at least
// one verifies under a log of `logs` valid at the SCT's time. Refuses CertificateInvalid (no SCT, no
// known log, or no SCT verifies).
Status verify_embedded_scts(const Certificate& leaf, const Certificate& issuer,
                            const std::vector<CtLog>& logs);

}  // namespace infergate::agent
