// What is trusted: the public keys given on the command line, any one of which may have signed the
// release (several keys are how a key is rotated without a gap); for OMS bundles also CA certificates
// (the certificate method), a Sigstore trusted root and the identities keyless signatures must name.
#pragma once

#include <filesystem>
#include <optional>
#include <string_view>
#include <vector>

#include "infergate/agent/policy/certificates.h"
#include "infergate/agent/policy/sigstore_trust.h"
#include "infergate/agent/signing/dsse.h"
#include "infergate/agent/signing/keys.h"
#include "infergate/common/result.h"

namespace infergate::agent {

// Where trust comes from (the command line's --public-key, --trust-dir, --ca-cert, --trusted-root,
// --identity/--issuer).
struct TrustSources {
  std::vector<std::filesystem::path> public_keys;  // files, or directories of *.pem public keys
  // Directories (a mounted Secret) whose *.pem and *.crt files are read by their PEM label (PUBLIC
  // KEY: a trusted key; CERTIFICATE: a CA certificate) and whose trusted_root.json is the trusted root.
  std::vector<std::filesystem::path> trust_dirs;
  std::vector<std::filesystem::path> ca_certs;  // PEM files of CA certificates
  std::optional<std::filesystem::path> trusted_root;
  std::vector<SignerIdentity> identities;
};

struct Trust {
  std::vector<PublicKey> keys;
  std::vector<Certificate> cas;
  std::optional<TrustedRoot> root;
  std::vector<SignerIdentity> identities;
  bool empty() const { return keys.empty() && cas.empty() && !root; }
};

// Loads every source. Refuses KeyInvalid for a file that cannot be read or holds neither a key nor
// certificates, a bad trusted root, or a trust directory with nothing in it; UsageError when nothing at
// all is given (there is no unsigned mode) or when two trusted roots are.
Result<Trust> load_trust(const TrustSources& sources);

// Checks an envelope against the trusted keys; returns the key that verified.
// Accepts when any signature verifies under any trusted key over the DSSE pre-authentication
// encoding, and only when the payload type is in-toto's. The keyid is a hint only: every signature is
// tried with every key, so a missing or wrong keyid cannot cause a false refusal or acceptance.
// Refuses: SignatureMalformed (another payload type), UntrustedKey (no signature's keyid names a
// trusted key, and none verifies), SignatureInvalid (a trusted key is named but nothing verifies).
// `what` names the signature's file in messages.
Result<const PublicKey*> verify_envelope(const DsseEnvelope& envelope, const std::vector<PublicKey>& trusted,
                                         std::string_view what = "release.dsse.json");

}  // namespace infergate::agent
