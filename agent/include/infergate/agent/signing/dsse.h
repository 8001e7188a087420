// DSSE envelopes (secure-systems-lab/dsse, protocol v1): the signature covers the pre-authentication
// encoding of the payload type and body, never the JSON around them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/json.h"
#include "infergate/common/result.h"

namespace infergate::agent {

inline constexpr std::string_view kInTotoPayloadType = "application/vnd.in-toto+json";
inline constexpr size_t kMaxEnvelopeBytes = 16u << 20;
inline constexpr size_t kMaxEnvelopeSignatures = 16;

struct DsseSignature {
  std::string keyid;  // optional and unauthenticated: a hint for choosing the key, nothing more
  std::string sig;    // raw signature bytes
};

struct DsseEnvelope {
  std::string payload_type;
  std::string payload;  // raw payload bytes
  std::vector<DsseSignature> signatures;
};

// "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body, lengths as ASCII decimal byte counts.
std::string dsse_pae(std::string_view payload_type, std::string_view payload);

// Parses an envelope. Refuses (SignatureMalformed) anything but a JSON object (duplicate keys
// included) with a string payloadType, a standard-base64 payload, and 1 to kMaxEnvelopeSignatures
// signatures each with a non-empty standard-base64 "sig" and an optional string "keyid".
// Bounded: refuses texts over kMaxEnvelopeBytes before parsing. Never crashes (fuzzed).
Result<DsseEnvelope> parse_envelope(std::string_view text);
// The same checks on an already parsed object (a Sigstore bundle's dsseEnvelope); `what` names it in
// errors.
Result<DsseEnvelope> parse_envelope_json(const nlohmann::json& j, std::string_view what);

// Pretty-printed JSON (two-space indent) with a final newline.
std::string serialize_envelope(const DsseEnvelope& envelope);
// The envelope as a JSON object (what a bundle embeds).
nlohmann::json envelope_json(const DsseEnvelope& envelope);

// Parses JSON like parse_json, but refuses an object that holds the same key twice: signed data
// must mean one thing to every reader. Errors carry no reason word; callers add theirs.
Result<nlohmann::json> parse_json_unique_keys(std::string_view text, std::string_view what);

}  // namespace infergate::agent
