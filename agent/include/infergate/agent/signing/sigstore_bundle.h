// Sigstore bundles (sigstore/protobuf-specs `sigstore_bundle.proto`, in its JSON mapping): the file the
// OpenSSF model signing format writes (`model.sig`), holding a DSSE envelope and the material to verify
// it: a public key hint, an X.509 certificate chain, or a Fulcio certificate with Rekor log entries.
// This file only parses and writes; nothing in a parsed bundle is trusted until policy/ checks it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/agent/signing/dsse.h"
#include "infergate/common/manifest.h"
#include "infergate/common/result.h"

namespace infergate::agent {

inline constexpr std::string_view kBundleMediaTypeV03 = "application/vnd.dev.sigstore.bundle.v0.3+json";
inline constexpr size_t kMaxBundleBytes = 32u << 20;
inline constexpr size_t kMaxCertificates = 10;
inline constexpr size_t kMaxTlogEntries = 8;
inline constexpr size_t kMaxProofHashes = 64;  // a Merkle path for a tree of up to 2^64 leaves

// An RFC 6962 inclusion proof with the signed checkpoint (a signed note) that commits to its root.
struct InclusionProof {
  int64_t log_index = 0;  // the index in the log (shard) the proof is for
  int64_t tree_size = 0;
  std::string root_hash;            // raw 32 bytes
  std::vector<std::string> hashes;  // raw 32 bytes each, leaf to root
  std::string checkpoint;           // the signed note's text; may be empty in v0.1 bundles
};

// One Rekor entry (TransparencyLogEntry). Integers are protobuf int64s (strings or numbers in JSON).
struct TlogEntry {
  int64_t log_index = 0;
  std::string log_id;  // raw key id: SHA-256 of the log's DER public key
  std::string kind;    // "dsse", "intoto", "hashedrekord"
  std::string kind_version;
  int64_t integrated_time = 0;                        // seconds since the epoch, as the log says
  std::optional<std::string> signed_entry_timestamp;  // inclusionPromise: raw signature bytes
  std::optional<InclusionProof> inclusion_proof;
  std::string canonicalized_body;  // raw bytes of the log's canonical JSON entry
};

enum class BundleMaterial { kPublicKey, kCertificateChain, kCertificate };

struct SigstoreBundle {
  std::string media_type;
  int minor_version = 3;  // 1, 2 or 3: v0.2+ requires inclusion proofs, v0.3 a single certificate
  BundleMaterial material = BundleMaterial::kPublicKey;
  std::string public_key_hint;            // kPublicKey: an unauthenticated hint, may be empty
  std::vector<std::string> certificates;  // kCertificateChain (leaf first) or kCertificate: DER
  std::vector<TlogEntry> tlog_entries;
  size_t rfc3161_timestamps = 0;  // timestampVerificationData entries (counted, not used)
  DsseEnvelope envelope;
};

// Parses a bundle. Refuses (SignatureMalformed, the message naming the field) anything but a JSON
// object without duplicate keys, with a known media type (v0.1 to v0.3), exactly one of publicKey,
// x509CertificateChain (1 to kMaxCertificates) and certificate as verification material, well-formed
// tlog entries (at most kMaxTlogEntries; 32-byte hashes; non-negative integers, absent ones 0 as in
// proto3; a checkpoint in v0.2+
// proofs), and a dsseEnvelope as parse_envelope_json requires. A messageSignature bundle is refused:
// model signing bundles carry DSSE. Unknown fields are ignored (the format's forward compatibility).
// Bounded: texts over kMaxBundleBytes are refused before parsing. Never crashes (fuzzed).
Result<SigstoreBundle> parse_bundle(std::string_view text);

// The bundle as v0.3 JSON (two-space indent, final newline): what `sign --format oms` writes.
std::string serialize_bundle(const SigstoreBundle& bundle);

}  // namespace infergate::agent
