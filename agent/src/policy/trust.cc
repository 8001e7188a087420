// Signature verification against the trusted keys.
#include "infergate/agent/policy/trust.h"

#include "infergate/agent/reasons.h"

namespace infergate::agent {

Result<const PublicKey*> verify_envelope(const DsseEnvelope& envelope,
                                         const std::vector<PublicKey>& trusted) {
  if (envelope.payload_type != kInTotoPayloadType) {
    return refusal(Reason::kSignatureMalformed, "release.dsse.json: payloadType is \"" +
                                                    envelope.payload_type.substr(0, 100) + "\", not " +
                                                    std::string(kInTotoPayloadType));
  }
  std::string pae = dsse_pae(envelope.payload_type, envelope.payload);
  bool named_trusted = false;
  for (const auto& sig : envelope.signatures) {
    for (const auto& key : trusted) {
      if (sig.keyid == key.key_id()) named_trusted = true;
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
                   "release.dsse.json is signed by a key that is not trusted (keyid " + ids + ")")
        .with_detail("file", "release.dsse.json")
        .with_detail("actual", envelope.signatures.front().keyid.substr(0, 64));
  }
  return refusal(Reason::kSignatureInvalid,
                 "release.dsse.json: no signature verifies under the trusted keys (the statement or the "
                 "signature was altered)")
      .with_detail("file", "release.dsse.json");
}

}  // namespace infergate::agent
