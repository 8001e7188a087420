// Release statements: building the signed JSON and reading it back, strictly.
#include "infergate/agent/signing/statement.h"

#include <algorithm>
#include <cstdint>

#include "infergate/agent/reasons.h"
#include "infergate/agent/signing/dsse.h"
#include "infergate/common/encoding.h"
#include "infergate/common/json.h"
#include "infergate/common/manifest.h"
#include "infergate/weights/scheme.h"

namespace infergate::agent {
namespace {

Error invalid(const std::string& why) {
  return refusal(Reason::kStatementInvalid, "release statement: " + why);
}

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("._:/@+-").find(c) != std::string_view::npos;
}

Result<const Json*> field(const Json& obj, std::string_view key, std::string_view path) {
  auto it = obj.find(std::string(key));
  if (it == obj.end()) return invalid(json_path(path, key) + " is missing");
  return &*it;
}

Result<std::string> string_field(const Json& obj, std::string_view key, std::string_view path) {
  INFERGATE_ASSIGN_OR_RETURN(const Json* v, field(obj, key, path));
  if (!v->is_string()) return invalid(json_path(path, key) + " is not a string");
  return v->get<std::string>();
}

// A JSON integer >= 0 (never a float: 3.0 is refused, so that signers cannot be ambiguous).
Result<uint64_t> count_of(const Json& v, const std::string& path) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return invalid(path + " is not a non-negative integer");
}

Result<WallTime> time_field(const Json& obj, std::string_view key, std::string_view path) {
  INFERGATE_ASSIGN_OR_RETURN(std::string text, string_field(obj, key, path));
  auto t = parse_rfc3339(text);
  if (!t.ok()) return invalid(json_path(path, key) + ": " + t.error().message());
  // Statements carry whole seconds (that is what we write); a fraction from another signer is
  // dropped, so that the times compared are the times written back. No release predates 1970.
  WallTime secs = std::chrono::floor<std::chrono::seconds>(*t);
  if (secs < WallTime()) return invalid(json_path(path, key) + " is before 1970");
  return secs;
}

}  // namespace

Status validate_release_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes || !std::all_of(name.begin(), name.end(), name_char)) {
    return refusal(Reason::kUsageError, "a model name is 1 to 253 characters of A-Z a-z 0-9 . _ : / @ + -");
  }
  return ok_status();
}

Status validate_weight_format(std::string_view format) {
  if (!weights::is_statement_word(format)) {
    return refusal(
        Reason::kUsageError,
        "a weight format is 1 to 32 characters of a-z 0-9 _ - (e.g. int8, bf16, fp8-block, int4-ct-g32-sym)");
  }
  return ok_status();
}

std::string serialize_statement(const ReleaseStatement& s) {
  Json sizes = Json::object();
  for (const auto& [path, size] : s.file_sizes) sizes[path] = size;
  Json predicate = {{"name", s.name},
                    {"version", s.version},
                    {"weightFormat", s.weight_format},
                    {"createdAt", format_rfc3339(s.created_at)},
                    {"fileSizes", std::move(sizes)}};
  if (s.expires_at) predicate["expiresAt"] = format_rfc3339(*s.expires_at);
  Json j = {{"_type", kStatementType},
            {"subject",
             Json::array({{{"name", kManifestFileName}, {"digest", {{"sha256", s.manifest_digest.hex()}}}}})},
            {"predicateType", kReleasePredicateType},
            {"predicate", std::move(predicate)}};
  return dump_json(j);
}

Result<ReleaseStatement> parse_statement(std::string_view payload) {
  auto parsed = parse_json_unique_keys(payload, "release statement");
  if (!parsed.ok()) return refusal(Reason::kStatementInvalid, parsed.error().message());
  const Json& j = *parsed;
  if (!j.is_object()) return invalid("not a JSON object");
  ReleaseStatement s;

  INFERGATE_ASSIGN_OR_RETURN(std::string type, string_field(j, "_type", ""));
  if (type != kStatementType)
    return invalid("_type is \"" + type.substr(0, 100) + "\", not " + std::string(kStatementType));
  INFERGATE_ASSIGN_OR_RETURN(std::string ptype, string_field(j, "predicateType", ""));
  if (ptype != kReleasePredicateType) {
    return invalid("predicateType is \"" + ptype.substr(0, 100) + "\", not " +
                   std::string(kReleasePredicateType));
  }

  INFERGATE_ASSIGN_OR_RETURN(const Json* subject, field(j, "subject", ""));
  if (!subject->is_array() || subject->size() != 1) return invalid("subject must hold exactly one entry");
  const Json& sub = (*subject)[0];
  if (!sub.is_object()) return invalid("subject[0] is not an object");
  INFERGATE_ASSIGN_OR_RETURN(std::string sub_name, string_field(sub, "name", "subject[0]"));
  if (sub_name != kManifestFileName) return invalid("subject[0].name is not SHA256SUMS");
  INFERGATE_ASSIGN_OR_RETURN(const Json* digest, field(sub, "digest", "subject[0]"));
  if (!digest->is_object()) return invalid("subject[0].digest is not an object");
  INFERGATE_ASSIGN_OR_RETURN(std::string hex, string_field(*digest, "sha256", "subject[0].digest"));
  auto d = Sha256Digest::from_hex(hex);
  if (!d.ok() || !is_lower_hex(hex))
    return invalid("subject[0].digest.sha256 is not 64 lowercase hex digits");
  s.manifest_digest = *d;

  INFERGATE_ASSIGN_OR_RETURN(const Json* pred, field(j, "predicate", ""));
  if (!pred->is_object()) return invalid("predicate is not an object");
  INFERGATE_ASSIGN_OR_RETURN(s.name, string_field(*pred, "name", "predicate"));
  if (!validate_release_name(s.name).ok()) return invalid("predicate.name is not a valid model name");
  INFERGATE_ASSIGN_OR_RETURN(const Json* version, field(*pred, "version", "predicate"));
  INFERGATE_ASSIGN_OR_RETURN(uint64_t v, count_of(*version, "predicate.version"));
  if (v > static_cast<uint64_t>(INT64_MAX)) return invalid("predicate.version is too large");
  s.version = static_cast<int64_t>(v);
  INFERGATE_ASSIGN_OR_RETURN(s.weight_format, string_field(*pred, "weightFormat", "predicate"));
  if (!validate_weight_format(s.weight_format).ok())
    return invalid("predicate.weightFormat is not a valid format");
  INFERGATE_ASSIGN_OR_RETURN(s.created_at, time_field(*pred, "createdAt", "predicate"));
  if (pred->contains("expiresAt")) {
    INFERGATE_ASSIGN_OR_RETURN(WallTime expires, time_field(*pred, "expiresAt", "predicate"));
    if (expires <= s.created_at) return invalid("predicate.expiresAt is not after createdAt");
    s.expires_at = expires;
  }
  INFERGATE_ASSIGN_OR_RETURN(const Json* sizes, field(*pred, "fileSizes", "predicate"));
  if (!sizes->is_object()) return invalid("predicate.fileSizes is not an object");
  for (const auto& [path, size] : sizes->items()) {
    auto canonical = canonical_manifest_path(path);
    if (!canonical.ok() || *canonical != path) {
      return invalid("predicate.fileSizes holds a path that is not canonical: " + path.substr(0, 200));
    }
    INFERGATE_ASSIGN_OR_RETURN(uint64_t n,
                               count_of(size, "predicate.fileSizes[" + path.substr(0, 200) + "]"));
    s.file_sizes.emplace(path, n);
  }
  return s;
}

}  // namespace infergate::agent
