// Rekor transparency log entries, checked offline: the signed entry timestamp (SET) over the canonical
// entry, the RFC 6962 inclusion proof up to a root, the signed checkpoint (a signed note) that commits
// to that root, and that the entry's body records exactly the signature being verified. The log's key
// comes from a trusted root file; nothing is fetched.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/agent/signing/dsse.h"
#include "infergate/agent/signing/keys.h"
#include "infergate/agent/signing/sigstore_bundle.h"
#include "infergate/common/clock.h"
#include "infergate/common/result.h"

namespace infergate::agent {

// A log a trusted root names (tlogs): its id, key and validity period.
struct TransparencyLog {
  std::string log_id;  // raw 32 bytes: SHA-256 of the DER public key
  PublicKey key;
  std::optional<WallTime> valid_from;
  std::optional<WallTime> valid_until;
  std::string base_url;
};

// SHA-256(0x00 || body): the leaf hash of RFC 6962 section 2.1.
std::string rfc6962_leaf_hash(std::string_view body);

// The root an inclusion proof leads to (RFC 9162 2.1.3.2), or an error when the proof's shape does
// not fit the index and tree size (TransparencyLogInvalid).
Result<std::string> root_from_inclusion_proof(std::string_view leaf_hash, int64_t index, int64_t tree_size,
                                              const std::vector<std::string>& hashes);

// Verifies a checkpoint (c2sp.org signed note: "<origin>\n<size>\n<base64 root>\n[...]\n\n— <name>
// <base64(key hint || signature)>\n") against the log's key, and that it commits to `tree_size` and
// `root_hash`. TransparencyLogInvalid otherwise.
Status verify_checkpoint(std::string_view checkpoint, const TransparencyLog& log, int64_t tree_size,
                         std::string_view root_hash);

// The entry's body (dsse 0.0.1 or intoto 0.0.2, kind and version as the entry says) records exactly
// the envelope's one signature, the certificate `signer_der` and the SHA-256 of the payload.
// TransparencyLogInvalid otherwise.
Status check_tlog_body(const TlogEntry& entry, const DsseEnvelope& envelope, std::string_view signer_der);

// The bytes a SET signs: canonical JSON of {body, integratedTime, logID, logIndex}.
std::string set_payload(const TlogEntry& entry);

// Verifies one entry for `envelope`, whose one signature was made with the key of the certificate
// `signer_der` (DER), and returns the time the log integrated it. In order (TransparencyLogInvalid):
// the log is one of `logs`; its SET verifies (required: it is what makes integratedTime trusted) and
// the log was valid then; the body is a dsse 0.0.1 or intoto 0.0.2 entry recording this signature,
// this certificate and the SHA-256 of this payload; the inclusion proof (required when
// `require_proof`, checked whenever present) reaches a root its checkpoint commits to.
Result<WallTime> verify_tlog_entry(const TlogEntry& entry, const DsseEnvelope& envelope,
                                   std::string_view signer_der, const std::vector<TransparencyLog>& logs,
                                   bool require_proof);

}  // namespace infergate::agent
