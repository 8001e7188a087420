// Who may sign an OMS bundle: the Sigstore trusted root (trusted_root.json: Fulcio CAs, Rekor logs,
// CT logs, each with a validity period) and the identities keyless signatures must name, or CA
// certificates for the certificate-based method. Verifies a bundle's signature with the material it
// carries: keyless (Fulcio certificate + Rekor entry), offline, or a certificate chain.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/agent/policy/certificates.h"
#include "infergate/agent/policy/transparency_log.h"
#include "infergate/agent/signing/sigstore_bundle.h"
#include "infergate/common/clock.h"
#include "infergate/common/result.h"

namespace infergate::agent {

inline constexpr std::string_view kTrustedRootFileName = "trusted_root.json";

struct CertificateAuthority {
  std::vector<Certificate> chain;  // as listed: intermediates, then the root; all are trusted
  std::optional<WallTime> valid_from;
  std::optional<WallTime> valid_until;
};

struct TrustedRoot {
  std::vector<TransparencyLog> tlogs;
  std::vector<CertificateAuthority> certificate_authorities;
  std::vector<CtLog> ctlogs;
};

// Parses the trusted_root.json shape (sigstore/protobuf-specs TrustedRoot, media types
// application/vnd.dev.sigstore.trustedroot+json;version=0.1 and 0.2). Refuses (KeyInvalid, naming
// `source` and the field) duplicate keys, a key or certificate that does not parse, an empty log id,
// a bad time, and a root with no CA or no log. Timestamp authorities are
// read past (RFC 3161 timestamps are not used).
Result<TrustedRoot> parse_trusted_root(std::string_view text, std::string_view source);
Result<TrustedRoot> load_trusted_root(const std::filesystem::path& path);

// An identity a keyless signature may carry: the certificate's SAN (an email or a URI, exactly) and
// the OIDC issuer Fulcio recorded (exactly).
struct SignerIdentity {
  std::string subject;
  std::string issuer;
};

struct VerifiedSigner {
  std::string method;  // "keyless", "certificate"
  std::string subject;
  std::string issuer;                 // keyless only
  std::optional<WallTime> signed_at;  // keyless: when the log integrated the entry
};

// Keyless: checks, in order, and refuses with
//   the envelope's one signature under the leaf certificate's key            SignatureInvalid
//   every tlog entry (at least one) by verify_tlog_entry                     TransparencyLogInvalid
//   the leaf chains to a CA of the root valid at each integrated time, may
//   sign code, and carries an SCT of a CT log of the root (when it has any)  CertificateInvalid
//   its SAN and issuer are one of `identities` (required, non-empty)         IdentityMismatch, UsageError
// Bundle-supplied intermediates are ignored: only the trusted root's CAs issue.
Result<VerifiedSigner> verify_keyless(const SigstoreBundle& bundle, const TrustedRoot& root,
                                      const std::vector<SignerIdentity>& identities);

// Certificate method (a private PKI): the bundle's chain (leaf first) to one of `cas` at `now` (there
// is no trusted signing time), with signing usage, and the envelope's signature under the leaf's key.
// CertificateInvalid, SignatureInvalid.
Result<VerifiedSigner> verify_certificate_signed(const SigstoreBundle& bundle,
                                                 const std::vector<Certificate>& cas, WallTime now);

}  // namespace infergate::agent
