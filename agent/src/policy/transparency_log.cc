// Offline Rekor checks: SET, Merkle inclusion, checkpoint, and the entry body against the bundle.
#include "infergate/agent/policy/transparency_log.h"

#include <charconv>

#include "infergate/agent/policy/certificates.h"
#include "infergate/agent/reasons.h"
#include "infergate/common/encoding.h"
#include "infergate/common/json.h"
#include "infergate/common/sha256.h"

namespace infergate::agent {
namespace {

Error log_invalid(const std::string& why) {
  return refusal(Reason::kTransparencyLogInvalid, "model.sig: the transparency log entry " + why);
}

std::string sha256_raw(std::string_view data) {
  auto d = sha256(data);
  return d.ok() ? std::string(reinterpret_cast<const char*>(d->bytes.data()), d->bytes.size())
                : std::string();
}

std::string sha256_hex(std::string_view data) {
  auto d = sha256(data);
  return d.ok() ? d->hex() : std::string();
}

std::string node_hash(std::string_view left, std::string_view right) {
  std::string buf(1, '\x01');
  buf.append(left).append(right);
  return sha256_raw(buf);
}

bool in_range(WallTime t, const std::optional<WallTime>& from, const std::optional<WallTime>& until) {
  return (!from || t >= *from) && (!until || t <= *until);
}

// A PEM certificate, base64-encoded as Rekor stores verifiers; its DER, or empty when it is not one.
std::string verifier_der(const Json& v) {
  if (!v.is_string()) return {};
  auto pem = base64_decode(v.get_ref<const std::string&>());
  if (!pem.ok()) return {};
  auto certs = Certificate::from_pem(*pem, "the log entry's verifier");
  return certs.ok() && certs->size() == 1 ? certs->front().der() : std::string();
}

const Json* at(const Json& j, std::initializer_list<const char*> path) {
  const Json* cur = &j;
  for (const char* k : path) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(k);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

bool is_sha256_of(const Json* hash, std::string_view payload) {
  if (hash == nullptr) return false;
  const Json* alg = at(*hash, {"algorithm"});
  const Json* value = at(*hash, {"value"});
  return alg != nullptr && value != nullptr && alg->is_string() && value->is_string() && *alg == "sha256" &&
         value->get<std::string>() == sha256_hex(payload);
}

std::string_view next_line(std::string_view* text) {
  size_t nl = text->find('\n');
  std::string_view line = text->substr(0, nl);
  text->remove_prefix(nl == std::string_view::npos ? text->size() : nl + 1);
  return line;
}

}  // namespace

Status check_tlog_body(const TlogEntry& e, const DsseEnvelope& env, std::string_view signer_der) {
  auto body = parse_json_unique_keys(e.canonicalized_body, "the log entry body");
  if (!body.ok() || !body->is_object()) return log_invalid("body is not a JSON object");
  const Json* kind = at(*body, {"kind"});
  const Json* version = at(*body, {"apiVersion"});
  if (kind == nullptr || version == nullptr || *kind != e.kind || *version != e.kind_version) {
    return log_invalid("body's kind and apiVersion differ from the entry's kindVersion");
  }
  if (env.signatures.size() != 1) return log_invalid("cannot prove an envelope with more than one signature");
  const std::string& sig = env.signatures.front().sig;
  const Json* sigs = nullptr;
  std::string logged_sig, logged_der;
  if (e.kind == "dsse" && e.kind_version == "0.0.1") {
    sigs = at(*body, {"spec", "signatures"});
    if (sigs == nullptr || !sigs->is_array() || sigs->size() != 1)
      return log_invalid("does not record one signature");
    const Json* s = at((*sigs)[0], {"signature"});
    if (s != nullptr && s->is_string())
      logged_sig = base64_decode(s->get<std::string>()).value_or(std::string());
    if (const Json* v = at((*sigs)[0], {"verifier"})) logged_der = verifier_der(*v);
    if (!is_sha256_of(at(*body, {"spec", "payloadHash"}), env.payload)) {
      return log_invalid("records another payload (payloadHash differs)");
    }
  } else if (e.kind == "intoto" && e.kind_version == "0.0.2") {
    sigs = at(*body, {"spec", "content", "envelope", "signatures"});
    if (sigs == nullptr || !sigs->is_array() || sigs->size() != 1)
      return log_invalid("does not record one signature");
    // intoto entries hold the base64 signature base64-encoded once more.
    const Json* s = at((*sigs)[0], {"sig"});
    if (s != nullptr && s->is_string()) {
      std::string inner = base64_decode(s->get<std::string>()).value_or(std::string());
      logged_sig = base64_decode(inner).value_or(std::string());
    }
    if (const Json* v = at((*sigs)[0], {"publicKey"})) logged_der = verifier_der(*v);
    if (!is_sha256_of(at(*body, {"spec", "content", "payloadHash"}), env.payload)) {
      return log_invalid("records another payload (payloadHash differs)");
    }
  } else {
    return log_invalid("is of kind " + e.kind.substr(0, 32) + " " + e.kind_version.substr(0, 16) +
                       " (dsse 0.0.1 and intoto 0.0.2 are read)");
  }
  if (logged_sig.empty() || logged_sig != sig) return log_invalid("records another signature");
  if (logged_der != signer_der) return log_invalid("records another certificate");
  return ok_status();
}

std::string rfc6962_leaf_hash(std::string_view body) {
  std::string buf(1, '\x00');
  buf.append(body);
  return sha256_raw(buf);
}

Result<std::string> root_from_inclusion_proof(std::string_view leaf_hash, int64_t index, int64_t tree_size,
                                              const std::vector<std::string>& hashes) {
  if (index < 0 || tree_size <= 0 || index >= tree_size) {
    return log_invalid("inclusion proof's index is outside its tree");
  }
  uint64_t fn = static_cast<uint64_t>(index), sn = static_cast<uint64_t>(tree_size - 1);
  std::string r(leaf_hash);
  for (const auto& p : hashes) {
    if (sn == 0) return log_invalid("inclusion proof is longer than its tree allows");
    if ((fn & 1) == 1 || fn == sn) {
      r = node_hash(p, r);
      if ((fn & 1) == 0) {
        while ((fn & 1) == 0 && fn != 0) {
          fn >>= 1;
          sn >>= 1;
        }
      }
    } else {
      r = node_hash(r, p);
    }
    fn >>= 1;
    sn >>= 1;
  }
  if (sn != 0) return log_invalid("inclusion proof is shorter than its tree needs");
  return r;
}

Status verify_checkpoint(std::string_view checkpoint, const TransparencyLog& log, int64_t tree_size,
                         std::string_view root_hash) {
  size_t split = checkpoint.find("\n\n");
  if (split == std::string_view::npos) return log_invalid("checkpoint is not a signed note");
  std::string_view note = checkpoint.substr(0, split + 1);
  std::string_view rest = checkpoint.substr(split + 2);
  std::string_view lines = note;
  std::string_view origin = next_line(&lines);
  std::string_view size = next_line(&lines);
  std::string_view root = next_line(&lines);
  int64_t n = -1;
  auto [end, ec] = std::from_chars(size.data(), size.data() + size.size(), n);
  if (origin.empty() || ec != std::errc() || end != size.data() + size.size() || n != tree_size) {
    return log_invalid("checkpoint is for another tree size than the proof");
  }
  if (root != base64_encode(root_hash))
    return log_invalid("checkpoint commits to another root than the proof");
  // Key hints: Rekor's ECDSA notes use the log id's first four bytes; Ed25519 notes (c2sp signed-note)
  // the first four bytes of SHA-256(name || "\n" || 0x01 || key).
  std::string spki_hint = log.log_id.substr(0, 4);
  while (!rest.empty()) {
    std::string_view line = next_line(&rest);
    constexpr std::string_view kDash = "\xE2\x80\x94 ";
    if (line.substr(0, kDash.size()) != kDash) continue;
    line.remove_prefix(kDash.size());
    size_t space = line.rfind(' ');
    if (space == std::string_view::npos) continue;
    std::string_view name = line.substr(0, space);
    auto blob = base64_decode(line.substr(space + 1));
    if (!blob.ok() || blob->size() <= 4) continue;
    std::string hint = blob->substr(0, 4);
    std::string ed_hint;
    if (log.key.type() == KeyType::kEd25519) {
      std::string raw =
          log.key.spki_der().substr(log.key.spki_der().size() >= 32 ? log.key.spki_der().size() - 32 : 0);
      ed_hint = sha256_raw(std::string(name) + "\n\x01" + raw).substr(0, 4);
    }
    if (hint != spki_hint && hint != ed_hint) continue;
    if (log.key.verify(note, std::string_view(*blob).substr(4))) return ok_status();
  }
  return log_invalid("checkpoint carries no signature of the log that verifies");
}

std::string set_payload(const TlogEntry& e) {
  // Keys in code-point order, no spaces: what RFC 8785 makes of these four plain fields.
  return "{\"body\":\"" + base64_encode(e.canonicalized_body) +
         "\",\"integratedTime\":" + std::to_string(e.integrated_time) + ",\"logID\":\"" +
         hex_encode(e.log_id) + "\",\"logIndex\":" + std::to_string(e.log_index) + "}";
}

Result<WallTime> verify_tlog_entry(const TlogEntry& e, const DsseEnvelope& envelope,
                                   std::string_view signer_der, const std::vector<TransparencyLog>& logs,
                                   bool require_proof) {
  const TransparencyLog* log = nullptr;
  for (const auto& l : logs) {
    if (l.log_id == e.log_id) log = &l;
  }
  if (log == nullptr) {
    return log_invalid("is in a log the trusted root does not name (log id " + base64_encode(e.log_id) + ")");
  }
  if (!e.signed_entry_timestamp) {
    return log_invalid(
        "has no signed entry timestamp (inclusionPromise); without it, or an RFC 3161 timestamp, "
        "the signing time is not proven");
  }
  if (!log->key.verify(set_payload(e), *e.signed_entry_timestamp)) {
    return log_invalid("has a signed entry timestamp that does not verify under the log's key");
  }
  WallTime integrated{std::chrono::seconds(e.integrated_time)};
  if (!in_range(integrated, log->valid_from, log->valid_until)) {
    return log_invalid("was integrated at " + format_rfc3339(integrated) +
                       ", outside the log key's validity");
  }
  INFERGATE_RETURN_IF_ERROR(check_tlog_body(e, envelope, signer_der));
  if (!e.inclusion_proof) {
    if (require_proof) return log_invalid("has no inclusion proof, which bundles from v0.2 on must carry");
    return integrated;
  }
  const InclusionProof& p = *e.inclusion_proof;
  INFERGATE_ASSIGN_OR_RETURN(
      std::string root,
      root_from_inclusion_proof(rfc6962_leaf_hash(e.canonicalized_body), p.log_index, p.tree_size, p.hashes));
  if (root != p.root_hash) return log_invalid("inclusion proof does not lead to its root hash");
  if (p.checkpoint.empty()) {
    if (require_proof) return log_invalid("inclusion proof has no signed checkpoint");
    return integrated;
  }
  INFERGATE_RETURN_IF_ERROR(verify_checkpoint(p.checkpoint, *log, p.tree_size, p.root_hash));
  return integrated;
}

}  // namespace infergate::agent
