// What is trusted: the public keys given on the command line, any one of which may have signed the
// release (several keys are how a key is rotated without a gap).
#pragma once

#include <vector>

#include "infergate/agent/signing/dsse.h"
#include "infergate/agent/signing/keys.h"
#include "infergate/common/result.h"

namespace infergate::agent {

// Checks an envelope against the trusted keys; returns the key that verified.
// Accepts when any signature verifies under any trusted key over the DSSE pre-authentication
// encoding, and only when the payload type is in-toto's. The keyid is a hint only: every signature is
// tried with every key, so a missing or wrong keyid cannot cause a false refusal or acceptance.
// Refuses: SignatureMalformed (another payload type), UntrustedKey (no signature's keyid names a
// trusted key, and none verifies), SignatureInvalid (a trusted key is named but nothing verifies).
Result<const PublicKey*> verify_envelope(const DsseEnvelope& envelope, const std::vector<PublicKey>& trusted);

}  // namespace infergate::agent
