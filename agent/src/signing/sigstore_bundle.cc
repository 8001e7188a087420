// Sigstore bundle JSON: strict where a field is signed or checked later, tolerant of unknown fields.
#include "infergate/agent/signing/sigstore_bundle.h"

#include <charconv>

#include "infergate/agent/reasons.h"
#include "infergate/common/encoding.h"

namespace infergate::agent {
namespace {

constexpr std::string_view kWhat = "model.sig";

Error malformed(const std::string& why) {
  return refusal(Reason::kSignatureMalformed, std::string(kWhat) + ": " + why);
}

// The media types of the bundle versions we read, and their minor version.
int media_minor_version(std::string_view type) {
  if (type == "application/vnd.dev.sigstore.bundle+json;version=0.1") return 1;
  if (type == "application/vnd.dev.sigstore.bundle+json;version=0.2") return 2;
  if (type == "application/vnd.dev.sigstore.bundle+json;version=0.3" || type == kBundleMediaTypeV03) return 3;
  return 0;
}

const Json* member(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

Result<const Json*> object_member(const Json& obj, const char* key, const std::string& path, bool required) {
  const Json* v = member(obj, key);
  if (v == nullptr) {
    if (required) return malformed(json_path(path, key) + ": required field is missing");
    return static_cast<const Json*>(nullptr);
  }
  if (!v->is_object()) return malformed(json_path(path, key) + ": expected an object");
  return v;
}

// A protobuf bytes field: standard base64 (what every Sigstore client writes).
Result<std::string> bytes_member(const Json& obj, const char* key, const std::string& path) {
  const Json* v = member(obj, key);
  if (v == nullptr) return malformed(json_path(path, key) + ": required field is missing");
  if (!v->is_string()) return malformed(json_path(path, key) + ": expected a base64 string");
  auto raw = base64_decode(v->get_ref<const std::string&>());
  if (!raw.ok()) return malformed(json_path(path, key) + ": " + raw.error().message());
  return std::move(raw).value();
}

Result<std::string> hash_member(const Json& obj, const char* key, const std::string& path) {
  INFERGATE_ASSIGN_OR_RETURN(std::string raw, bytes_member(obj, key, path));
  if (raw.size() != 32) return malformed(json_path(path, key) + ": not a 32-byte SHA-256 hash");
  return raw;
}

// A protobuf int64 in JSON: a decimal string (as the spec maps it) or a JSON integer; never negative.
// Absent means 0, as in every proto3 JSON mapping (writers omit default values: a first log index).
Result<int64_t> int64_member(const Json& obj, const char* key, const std::string& path) {
  const Json* v = member(obj, key);
  std::string where = json_path(path, key);
  if (v == nullptr) return int64_t{0};
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return malformed(where + ": out of range");
    return static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) {
    int64_t i = v->get<int64_t>();
    if (i < 0) return malformed(where + ": negative");
    return i;
  }
  if (!v->is_string()) return malformed(where + ": expected an integer");
  const std::string& s = v->get_ref<const std::string&>();
  int64_t out = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || out < 0 ||
      (s.size() > 1 && s[0] == '0')) {
    return malformed(where + ": not a non-negative decimal integer");
  }
  return out;
}

Result<std::string> string_member(const Json& obj, const char* key, const std::string& path) {
  const Json* v = member(obj, key);
  if (v == nullptr) return malformed(json_path(path, key) + ": required field is missing");
  if (!v->is_string()) return malformed(json_path(path, key) + ": expected a string");
  return v->get<std::string>();
}

Result<InclusionProof> parse_proof(const Json& j, const std::string& path, int minor) {
  InclusionProof p;
  INFERGATE_ASSIGN_OR_RETURN(p.log_index, int64_member(j, "logIndex", path));
  INFERGATE_ASSIGN_OR_RETURN(p.tree_size, int64_member(j, "treeSize", path));
  INFERGATE_ASSIGN_OR_RETURN(p.root_hash, hash_member(j, "rootHash", path));
  if (const Json* hashes = member(j, "hashes")) {
    if (!hashes->is_array()) return malformed(path + ".hashes: expected an array");
    if (hashes->size() > kMaxProofHashes) return malformed(path + ".hashes: too many");
    for (size_t i = 0; i < hashes->size(); ++i) {
      std::string where = path + ".hashes[" + std::to_string(i) + "]";
      const Json& h = (*hashes)[i];
      if (!h.is_string()) return malformed(where + ": expected a base64 string");
      auto raw = base64_decode(h.get_ref<const std::string&>());
      if (!raw.ok() || raw->size() != 32) return malformed(where + ": not a 32-byte SHA-256 hash");
      p.hashes.push_back(std::move(raw).value());
    }
  }
  INFERGATE_ASSIGN_OR_RETURN(const Json* cp, object_member(j, "checkpoint", path, minor >= 2));
  if (cp != nullptr) {
    INFERGATE_ASSIGN_OR_RETURN(p.checkpoint, string_member(*cp, "envelope", path + ".checkpoint"));
  }
  return p;
}

Result<TlogEntry> parse_tlog_entry(const Json& j, const std::string& path, int minor) {
  if (!j.is_object()) return malformed(path + ": not an object");
  TlogEntry e;
  INFERGATE_ASSIGN_OR_RETURN(e.log_index, int64_member(j, "logIndex", path));
  INFERGATE_ASSIGN_OR_RETURN(const Json* log_id, object_member(j, "logId", path, true));
  INFERGATE_ASSIGN_OR_RETURN(e.log_id, bytes_member(*log_id, "keyId", path + ".logId"));
  INFERGATE_ASSIGN_OR_RETURN(const Json* kv, object_member(j, "kindVersion", path, true));
  INFERGATE_ASSIGN_OR_RETURN(e.kind, string_member(*kv, "kind", path + ".kindVersion"));
  INFERGATE_ASSIGN_OR_RETURN(e.kind_version, string_member(*kv, "version", path + ".kindVersion"));
  INFERGATE_ASSIGN_OR_RETURN(e.integrated_time, int64_member(j, "integratedTime", path));
  INFERGATE_ASSIGN_OR_RETURN(const Json* promise, object_member(j, "inclusionPromise", path, false));
  if (promise != nullptr) {
    INFERGATE_ASSIGN_OR_RETURN(std::string set,
                               bytes_member(*promise, "signedEntryTimestamp", path + ".inclusionPromise"));
    e.signed_entry_timestamp = std::move(set);
  }
  INFERGATE_ASSIGN_OR_RETURN(const Json* proof, object_member(j, "inclusionProof", path, minor >= 2));
  if (proof != nullptr) {
    INFERGATE_ASSIGN_OR_RETURN(e.inclusion_proof, parse_proof(*proof, path + ".inclusionProof", minor));
  }
  INFERGATE_ASSIGN_OR_RETURN(e.canonicalized_body, bytes_member(j, "canonicalizedBody", path));
  return e;
}

Result<std::string> certificate(const Json& j, const std::string& path) {
  if (!j.is_object()) return malformed(path + ": not an object");
  INFERGATE_ASSIGN_OR_RETURN(std::string der, bytes_member(j, "rawBytes", path));
  if (der.empty()) return malformed(path + ".rawBytes: empty");
  return der;
}

Status parse_material(const Json& vm, SigstoreBundle* b) {
  const std::string path = "verificationMaterial";
  const Json* key = member(vm, "publicKey");
  const Json* chain = member(vm, "x509CertificateChain");
  const Json* cert = member(vm, "certificate");
  if ((key != nullptr) + (chain != nullptr) + (cert != nullptr) != 1) {
    return malformed(path + ": needs exactly one of publicKey, x509CertificateChain and certificate");
  }
  if (key != nullptr) {
    if (!key->is_object()) return malformed(path + ".publicKey: expected an object");
    b->material = BundleMaterial::kPublicKey;
    if (const Json* hint = member(*key, "hint")) {
      if (!hint->is_string()) return malformed(path + ".publicKey.hint: expected a string");
      b->public_key_hint = hint->get<std::string>();
    }
  } else if (chain != nullptr) {
    if (!chain->is_object()) return malformed(path + ".x509CertificateChain: expected an object");
    const Json* certs = member(*chain, "certificates");
    if (certs == nullptr || !certs->is_array() || certs->empty() || certs->size() > kMaxCertificates) {
      return malformed(path + ".x509CertificateChain.certificates: expected 1 to " +
                       std::to_string(kMaxCertificates) + " certificates");
    }
    b->material = BundleMaterial::kCertificateChain;
    for (size_t i = 0; i < certs->size(); ++i) {
      INFERGATE_ASSIGN_OR_RETURN(
          std::string der,
          certificate((*certs)[i], path + ".x509CertificateChain.certificates[" + std::to_string(i) + "]"));
      b->certificates.push_back(std::move(der));
    }
  } else {
    b->material = BundleMaterial::kCertificate;
    INFERGATE_ASSIGN_OR_RETURN(std::string der, certificate(*cert, path + ".certificate"));
    b->certificates.push_back(std::move(der));
  }
  if (const Json* entries = member(vm, "tlogEntries")) {
    if (!entries->is_array()) return malformed(path + ".tlogEntries: expected an array");
    if (entries->size() > kMaxTlogEntries) return malformed(path + ".tlogEntries: too many");
    for (size_t i = 0; i < entries->size(); ++i) {
      INFERGATE_ASSIGN_OR_RETURN(
          TlogEntry e, parse_tlog_entry((*entries)[i], path + ".tlogEntries[" + std::to_string(i) + "]",
                                        b->minor_version));
      b->tlog_entries.push_back(std::move(e));
    }
  }
  if (const Json* tsd = member(vm, "timestampVerificationData")) {
    if (!tsd->is_object()) return malformed(path + ".timestampVerificationData: expected an object");
    if (const Json* ts = member(*tsd, "rfc3161Timestamps")) {
      if (!ts->is_array())
        return malformed(path + ".timestampVerificationData.rfc3161Timestamps: not an array");
      b->rfc3161_timestamps = ts->size();
    }
  }
  return ok_status();
}

}  // namespace

Result<SigstoreBundle> parse_bundle(std::string_view text) {
  if (text.size() > kMaxBundleBytes) {
    return malformed(std::to_string(text.size()) + " bytes is over the limit of " +
                     std::to_string(kMaxBundleBytes));
  }
  auto parsed = parse_json_unique_keys(text, kWhat);
  if (!parsed.ok()) return refusal(Reason::kSignatureMalformed, parsed.error().message());
  const Json& j = *parsed;
  if (!j.is_object()) return malformed("not a JSON object");
  SigstoreBundle b;
  INFERGATE_ASSIGN_OR_RETURN(b.media_type, string_member(j, "mediaType", ""));
  b.minor_version = media_minor_version(b.media_type);
  if (b.minor_version == 0) {
    return malformed("mediaType \"" + b.media_type.substr(0, 100) +
                     "\" is not a Sigstore bundle v0.1 to v0.3");
  }
  INFERGATE_ASSIGN_OR_RETURN(const Json* vm, object_member(j, "verificationMaterial", "", true));
  INFERGATE_RETURN_IF_ERROR(parse_material(*vm, &b));
  if (member(j, "messageSignature") != nullptr) {
    return malformed("a messageSignature bundle; model signing bundles hold a dsseEnvelope");
  }
  INFERGATE_ASSIGN_OR_RETURN(const Json* env, object_member(j, "dsseEnvelope", "", true));
  INFERGATE_ASSIGN_OR_RETURN(b.envelope, parse_envelope_json(*env, "model.sig: dsseEnvelope"));
  return b;
}

std::string serialize_bundle(const SigstoreBundle& b) {
  Json vm = Json::object();
  switch (b.material) {
    case BundleMaterial::kPublicKey: vm["publicKey"] = {{"hint", b.public_key_hint}}; break;
    case BundleMaterial::kCertificateChain: {
      Json certs = Json::array();
      for (const auto& c : b.certificates) certs.push_back({{"rawBytes", base64_encode(c)}});
      vm["x509CertificateChain"] = {{"certificates", std::move(certs)}};
      break;
    }
    case BundleMaterial::kCertificate:
      vm["certificate"] = {{"rawBytes", b.certificates.empty() ? "" : base64_encode(b.certificates.front())}};
      break;
  }
  Json entries = Json::array();
  for (const auto& e : b.tlog_entries) {
    Json t = {{"logIndex", std::to_string(e.log_index)},
              {"logId", {{"keyId", base64_encode(e.log_id)}}},
              {"kindVersion", {{"kind", e.kind}, {"version", e.kind_version}}},
              {"integratedTime", std::to_string(e.integrated_time)},
              {"canonicalizedBody", base64_encode(e.canonicalized_body)}};
    if (e.signed_entry_timestamp) {
      t["inclusionPromise"] = {{"signedEntryTimestamp", base64_encode(*e.signed_entry_timestamp)}};
    }
    if (e.inclusion_proof) {
      const InclusionProof& p = *e.inclusion_proof;
      Json hashes = Json::array();
      for (const auto& h : p.hashes) hashes.push_back(base64_encode(h));
      t["inclusionProof"] = {{"logIndex", std::to_string(p.log_index)},
                             {"rootHash", base64_encode(p.root_hash)},
                             {"treeSize", std::to_string(p.tree_size)},
                             {"hashes", std::move(hashes)},
                             {"checkpoint", {{"envelope", p.checkpoint}}}};
    }
    entries.push_back(std::move(t));
  }
  vm["tlogEntries"] = std::move(entries);
  Json j = {{"mediaType", kBundleMediaTypeV03},
            {"verificationMaterial", std::move(vm)},
            {"dsseEnvelope", envelope_json(b.envelope)}};
  return dump_json(j, 2) + "\n";
}

}  // namespace infergate::agent
