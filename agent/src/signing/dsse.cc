// DSSE envelope parsing and writing, and the duplicate-key-refusing JSON parse signed data needs.
#include "infergate/agent/signing/dsse.h"

#include <set>

#include "infergate/agent/reasons.h"
#include "infergate/common/encoding.h"

namespace infergate::agent {
namespace {

Error malformed(std::string_view what, const std::string& why) {
  return refusal(Reason::kSignatureMalformed, std::string(what) + ": " + why);
}

constexpr size_t kMaxJsonDepth = 64;

}  // namespace

std::string dsse_pae(std::string_view payload_type, std::string_view payload) {
  std::string out = "DSSEv1 ";
  out.append(std::to_string(payload_type.size())).append(" ").append(payload_type).append(" ");
  out.append(std::to_string(payload.size())).append(" ").append(payload);
  return out;
}

Result<Json> parse_json_unique_keys(std::string_view text, std::string_view what) {
  // One set of keys per open object; the callback sees keys in order and objects open and close.
  std::vector<std::set<std::string>> open;
  std::string duplicate;
  bool too_deep = false;
  Json::parser_callback_t cb = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (static_cast<size_t>(depth) > kMaxJsonDepth) too_deep = true;
    switch (event) {
      case Json::parse_event_t::object_start: open.emplace_back(); break;
      case Json::parse_event_t::object_end:
        if (!open.empty()) open.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!open.empty() && parsed.is_string() && !open.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default: break;
    }
    return !too_deep;
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), cb);
  } catch (const Json::exception& e) {
    return invalid_argument(std::string(what) + ": not valid JSON");
  }
  if (too_deep)
    return invalid_argument(std::string(what) + ": nested deeper than " + std::to_string(kMaxJsonDepth));
  if (!duplicate.empty()) {
    return invalid_argument(std::string(what) + ": the key \"" + duplicate.substr(0, 100) +
                            "\" appears twice");
  }
  return j;
}

Result<DsseEnvelope> parse_envelope(std::string_view text) {
  constexpr std::string_view what = "release.dsse.json";
  if (text.size() > kMaxEnvelopeBytes) {
    return malformed(what, std::to_string(text.size()) + " bytes is over the limit of " +
                               std::to_string(kMaxEnvelopeBytes));
  }
  auto parsed = parse_json_unique_keys(text, what);
  if (!parsed.ok()) return refusal(Reason::kSignatureMalformed, parsed.error().message());
  return parse_envelope_json(*parsed, what);
}

Result<DsseEnvelope> parse_envelope_json(const Json& j, std::string_view what) {
  if (!j.is_object()) return malformed(what, "not a JSON object");
  DsseEnvelope env;
  auto type = json_string(j, "payloadType");
  if (!type.ok()) return malformed(what, type.error().message());
  env.payload_type = *type;
  auto payload_b64 = json_string(j, "payload");
  if (!payload_b64.ok()) return malformed(what, payload_b64.error().message());
  auto payload = base64_decode(*payload_b64);
  if (!payload.ok()) return malformed(what, "payload: " + payload.error().message());
  env.payload = std::move(payload).value();
  auto sigs = json_array(j, "signatures");
  if (!sigs.ok()) return malformed(what, sigs.error().message());
  if ((*sigs)->empty()) return malformed(what, "signatures: empty");
  if ((*sigs)->size() > kMaxEnvelopeSignatures) {
    return malformed(what, "signatures: more than " + std::to_string(kMaxEnvelopeSignatures));
  }
  for (size_t i = 0; i < (*sigs)->size(); ++i) {
    const Json& s = (**sigs)[i];
    std::string path = "signatures[" + std::to_string(i) + "]";
    if (!s.is_object()) return malformed(what, path + ": not an object");
    auto sig_b64 = json_string(s, "sig", path);
    if (!sig_b64.ok()) return malformed(what, sig_b64.error().message());
    auto sig = base64_decode(*sig_b64);
    if (!sig.ok()) return malformed(what, path + ".sig: " + sig.error().message());
    if (sig->empty()) return malformed(what, path + ".sig: empty");
    auto keyid = json_string_or(s, "keyid", "", path);
    if (!keyid.ok()) return malformed(what, keyid.error().message());
    env.signatures.push_back({std::move(keyid).value(), std::move(sig).value()});
  }
  return env;
}

Json envelope_json(const DsseEnvelope& envelope) {
  Json sigs = Json::array();
  for (const auto& s : envelope.signatures)
    sigs.push_back({{"keyid", s.keyid}, {"sig", base64_encode(s.sig)}});
  return {{"payloadType", envelope.payload_type},
          {"payload", base64_encode(envelope.payload)},
          {"signatures", std::move(sigs)}};
}

std::string serialize_envelope(const DsseEnvelope& envelope) {
  return dump_json(envelope_json(envelope), 2) + "\n";
}

}  // namespace infergate::agent
