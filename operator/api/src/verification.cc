// Parsing the agent's termination message.
#include "infergate/operator/api/verification.h"

#include "infergate/common/encoding.h"
#include "infergate/common/json.h"

namespace infergate::op::api {
namespace {

bool is_reason_word(const std::string& s) {
  if (s.empty() || s.size() > 64 || !(s[0] >= 'A' && s[0] <= 'Z')) return false;
  for (char c : s) {
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

std::string str(const Json& j, const char* key, size_t cap = 1024) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  std::string s = it->get<std::string>();
  if (s.size() > cap) s.resize(cap);
  return s;
}

VerificationReport garbled(int exit_code, const std::string& why) {
  VerificationReport r;
  r.reason = "VerificationFailed";
  r.exit_code = exit_code;
  r.message = "the agent exited with code " + std::to_string(exit_code) + " and " + why;
  return r;
}

}  // namespace

std::string VerificationReport::describe() const {
  std::string out = reason;
  if (!message.empty()) out += ": " + message;
  if (!file.empty()) out += " (file " + file + ")";
  return out;
}

VerificationReport parse_termination_message(std::string_view text, int exit_code) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
    text.remove_suffix(1);
  if (text.empty()) return garbled(exit_code, "left no termination message");
  if (text.size() > kMaxTerminationMessage)
    return garbled(exit_code, "wrote an oversized termination message");
  auto parsed = parse_json(text, "termination message");
  if (!parsed.ok() || !parsed->is_object())
    return garbled(exit_code, "wrote a termination message that is not a JSON object");
  const Json& j = *parsed;
  VerificationReport r;
  r.reason = str(j, "reason", 64);
  if (!is_reason_word(r.reason)) return garbled(exit_code, "wrote no reason word");
  r.message = str(j, "message");
  r.file = str(j, "file");
  r.expected = str(j, "expected", 256);
  r.actual = str(j, "actual", 256);
  r.name = str(j, "name", 253);
  r.weight_format = str(j, "weightFormat", 32);  // a statement word: up to 32 characters
  r.exit_code = exit_code;
  if (auto it = j.find("exitCode"); it != j.end() && it->is_number_integer()) r.exit_code = it->get<int>();
  if (auto it = j.find("version"); it != j.end() && it->is_number_integer()) r.version = it->get<int64_t>();
  if (r.reason == "Verified") {
    std::string digest = str(j, "releaseDigest", 128);
    bool ok = digest.size() == 71 && digest.rfind("sha256:", 0) == 0 && is_lower_hex(digest.substr(7));
    if (exit_code != 0) return garbled(exit_code, "claimed Verified while failing");
    if (!ok) return garbled(exit_code, "claimed Verified without a sha256 release digest");
    r.verified = true;
    r.release_digest = digest;
  } else if (exit_code == 0) {
    // A refusal word with a zero exit is contradictory: treat it as a failure, keep the word.
    r.message = r.message.empty() ? "the agent reported a refusal but exited 0" : r.message;
  }
  return r;
}

}  // namespace infergate::op::api
