// OMS v1.0 statements: parsing with every consistency check the format allows before a byte is hashed.
#include "infergate/agent/signing/oms_statement.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "infergate/agent/reasons.h"
#include "infergate/agent/signing/dsse.h"
#include "infergate/agent/signing/statement.h"
#include "infergate/common/json.h"
#include "infergate/common/manifest.h"

namespace infergate::agent {
namespace {

Error invalid(const std::string& why) {
  return refusal(Reason::kStatementInvalid, "the OMS statement in model.sig: " + why);
}

// "123" -> 123: canonical decimal (no sign, no leading zero), as str(int) writes it.
bool parse_decimal(std::string_view s, uint64_t* out) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// The components of a path as pathlib would see them: empty and "." components dropped.
std::vector<std::string_view> components(std::string_view p) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string_view::npos) end = p.size();
    std::string_view c = p.substr(start, end - start);
    if (!c.empty() && c != ".") out.push_back(c);
    start = end + 1;
  }
  return out;
}

Result<OmsSerialization> parse_serialization(const Json& predicate) {
  auto ser = json_object(predicate, "serialization", "predicate");
  if (!ser.ok()) return invalid(ser.error().message());
  const Json& s = **ser;
  OmsSerialization out;
  auto method = json_string(s, "method", "predicate.serialization");
  if (!method.ok()) return invalid(method.error().message());
  if (*method == "files") {
    out.method = OmsMethod::kFiles;
  } else if (*method == "shards") {
    out.method = OmsMethod::kShards;
  } else {
    return invalid("serialization method \"" + method->substr(0, 64) + "\" is neither files nor shards");
  }
  auto hash = json_string(s, "hash_type", "predicate.serialization");
  if (!hash.ok()) return invalid(hash.error().message());
  if (*hash != "sha256") {
    return invalid("hash_type \"" + hash->substr(0, 64) + "\" is not supported (sha256 only)");
  }
  auto links = json_bool(s, "allow_symlinks", "predicate.serialization");
  if (!links.ok()) return invalid(links.error().message());
  out.allow_symlinks = *links;
  if (out.method == OmsMethod::kShards) {
    // A protobuf Struct holds numbers as doubles, so a writer may print 1000000000.0: any integral
    // positive number is the shard size.
    const Json* size = s.contains("shard_size") ? &s.at("shard_size") : nullptr;
    double v = size != nullptr && size->is_number() ? size->get<double>() : 0;
    if (size == nullptr || !size->is_number() || !(v >= 1 && v <= 9.0e15) ||
        v != static_cast<double>(static_cast<uint64_t>(v))) {
      return invalid("predicate.serialization.shard_size: expected a positive integer");
    }
    out.shard_size = size->is_number_unsigned() ? size->get<uint64_t>() : static_cast<uint64_t>(v);
  }
  if (s.contains("ignore_paths")) {
    const Json& ign = s.at("ignore_paths");
    if (!ign.is_array()) return invalid("predicate.serialization.ignore_paths: expected an array");
    if (ign.size() > kMaxOmsIgnorePaths)
      return invalid("more than " + std::to_string(kMaxOmsIgnorePaths) + " ignore_paths");
    for (const auto& p : ign) {
      if (!p.is_string()) return invalid("predicate.serialization.ignore_paths: expected strings");
      out.ignore_paths.push_back(p.get<std::string>());
    }
  }
  return out;
}

Result<OmsResource> parse_resource(const Json& r, size_t i, const OmsSerialization& ser) {
  std::string where = "predicate.resources[" + std::to_string(i) + "]";
  if (!r.is_object()) return invalid(where + ": not an object");
  auto name = json_string(r, "name", where);
  auto algorithm = json_string(r, "algorithm", where);
  auto digest_hex = json_string(r, "digest", where);
  if (!name.ok()) return invalid(name.error().message());
  if (!algorithm.ok()) return invalid(algorithm.error().message());
  if (!digest_hex.ok()) return invalid(digest_hex.error().message());
  std::string expected_algorithm =
      ser.method == OmsMethod::kFiles ? "sha256" : "sha256-sharded-" + std::to_string(ser.shard_size);
  if (*algorithm != expected_algorithm) {
    return invalid(where + ": algorithm \"" + algorithm->substr(0, 64) + "\", expected " +
                   expected_algorithm);
  }
  OmsResource out;
  auto digest = Sha256Digest::from_hex(*digest_hex);
  if (!digest.ok()) return invalid(where + ".digest: " + digest.error().message());
  out.digest = *digest;
  std::string_view path = *name;
  if (ser.method == OmsMethod::kShards) {
    // "path:start:end": the two offsets are the last two fields, so a path may hold ':' itself.
    size_t second = path.rfind(':');
    size_t first = second == std::string_view::npos || second == 0 ? std::string_view::npos
                                                                   : path.rfind(':', second - 1);
    if (first == std::string_view::npos ||
        !parse_decimal(path.substr(first + 1, second - first - 1), &out.start) ||
        !parse_decimal(path.substr(second + 1), &out.end)) {
      return invalid(where + ": shard name \"" + name->substr(0, 200) + "\" is not path:start:end");
    }
    if (out.end <= out.start || out.end - out.start > ser.shard_size) {
      return invalid(where + ": shard " + name->substr(0, 200) + " is empty or longer than shard_size");
    }
    path = path.substr(0, first);
  }
  auto canonical = canonical_manifest_path(path);
  if (!canonical.ok() || *canonical != path) {
    Error e = canonical.ok() ? refusal(Reason::kUnsafePath, "\"" + std::string(path).substr(0, 200) +
                                                                "\" is not a canonical relative path")
                             : std::move(canonical).error();
    return e.context("the OMS statement in model.sig, " + where);
  }
  out.path = std::string(path);
  return out;
}

// Shards of one file must cover [0, size) in shard_size steps; the size itself is checked on disk.
Status check_shard_tiling(const std::vector<OmsResource>& resources, uint64_t shard_size) {
  std::map<std::string_view, std::vector<std::pair<uint64_t, uint64_t>>> by_file;
  for (const auto& r : resources) by_file[r.path].push_back({r.start, r.end});
  for (auto& [path, ranges] : by_file) {
    std::sort(ranges.begin(), ranges.end());
    uint64_t expect = 0;
    for (size_t i = 0; i < ranges.size(); ++i) {
      bool last = i + 1 == ranges.size();
      if (ranges[i].first != expect || (!last && ranges[i].second - ranges[i].first != shard_size)) {
        return invalid("the shards of " + std::string(path).substr(0, 200) +
                       " do not cover it from offset 0 in shard_size steps");
      }
      expect = ranges[i].second;
    }
  }
  return ok_status();
}

}  // namespace

std::string oms_resource_name(const OmsResource& r, OmsMethod method) {
  if (method == OmsMethod::kFiles) return r.path;
  return r.path + ":" + std::to_string(r.start) + ":" + std::to_string(r.end);
}

bool oms_ignored(std::string_view path, const std::vector<std::string>& ignore_paths) {
  std::vector<std::string_view> p = components(path);
  for (const auto& ignore : ignore_paths) {
    if (!ignore.empty() && ignore.front() == '/') continue;  // never relative to the model
    std::vector<std::string_view> i = components(ignore);
    if (std::find(i.begin(), i.end(), "..") != i.end()) continue;  // lexically never a walked path
    if (i.size() <= p.size() && std::equal(i.begin(), i.end(), p.begin())) return true;
  }
  return false;
}

Sha256Digest oms_root_digest(const std::vector<OmsResource>& resources) {
  Sha256 h;
  for (const auto& r : resources) h.update(r.digest.bytes.data(), r.digest.bytes.size());
  auto d = h.finish();
  return d.ok() ? *d : Sha256Digest{};
}

void sort_oms_resources(std::vector<OmsResource>& resources) {
  std::sort(resources.begin(), resources.end(), [](const OmsResource& a, const OmsResource& b) {
    auto ca = components(a.path), cb = components(b.path);
    if (ca != cb) return std::lexicographical_compare(ca.begin(), ca.end(), cb.begin(), cb.end());
    return std::pair(a.start, a.end) < std::pair(b.start, b.end);
  });
}

Result<OmsStatement> parse_oms_statement(std::string_view payload) {
  auto parsed = parse_json_unique_keys(payload, "the OMS statement in model.sig");
  if (!parsed.ok()) return refusal(Reason::kStatementInvalid, parsed.error().message());
  const Json& j = *parsed;
  if (!j.is_object()) return invalid("not a JSON object");
  auto type = json_string(j, "_type");
  if (!type.ok()) return invalid(type.error().message());
  if (*type != kStatementType) return invalid("_type is not " + std::string(kStatementType));
  auto predicate_type = json_string(j, "predicateType");
  if (!predicate_type.ok()) return invalid(predicate_type.error().message());
  if (*predicate_type != kOmsPredicateType) {
    return invalid("predicateType \"" + predicate_type->substr(0, 100) + "\" is not " +
                   std::string(kOmsPredicateType));
  }
  auto subjects = json_array(j, "subject");
  if (!subjects.ok()) return invalid(subjects.error().message());
  if ((*subjects)->size() != 1 || !(**subjects)[0].is_object())
    return invalid("expected exactly one subject");
  const Json& subject = (**subjects)[0];
  OmsStatement out;
  auto name = json_string(subject, "name", "subject[0]");
  if (!name.ok()) return invalid(name.error().message());
  out.model_name = *name;
  auto digest = json_object(subject, "digest", "subject[0]");
  if (!digest.ok()) return invalid(digest.error().message());
  auto root_hex = json_string(**digest, "sha256", "subject[0].digest");
  if (!root_hex.ok()) return invalid(root_hex.error().message());
  auto root = Sha256Digest::from_hex(*root_hex);
  if (!root.ok()) return invalid("subject[0].digest.sha256: " + root.error().message());
  out.root_digest = *root;

  auto predicate = json_object(j, "predicate");
  if (!predicate.ok()) return invalid(predicate.error().message());
  INFERGATE_ASSIGN_OR_RETURN(out.serialization, parse_serialization(**predicate));
  auto resources = json_array(**predicate, "resources", "predicate");
  if (!resources.ok()) return invalid(resources.error().message());
  if ((*resources)->size() > kMaxOmsResources) {
    return invalid("more than " + std::to_string(kMaxOmsResources) + " resources");
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < (*resources)->size(); ++i) {
    INFERGATE_ASSIGN_OR_RETURN(OmsResource r, parse_resource((**resources)[i], i, out.serialization));
    std::string key = oms_resource_name(r, out.serialization.method);
    if (!seen.insert(key).second) {
      return refusal(Reason::kDuplicateEntry,
                     "the OMS statement in model.sig lists " + key.substr(0, 200) + " twice")
          .with_detail("file", r.path);
    }
    out.resources.push_back(std::move(r));
  }
  if (out.serialization.method == OmsMethod::kShards) {
    INFERGATE_RETURN_IF_ERROR(check_shard_tiling(out.resources, out.serialization.shard_size));
  }
  Sha256Digest computed = oms_root_digest(out.resources);
  if (computed != out.root_digest) {
    return invalid("its resources hash to " + computed.hex() + ", not to the subject digest " +
                   out.root_digest.hex());
  }
  return out;
}

std::string serialize_oms_statement(const OmsStatement& s) {
  Json ser = {{"method", s.serialization.method == OmsMethod::kFiles ? "files" : "shards"},
              {"hash_type", "sha256"},
              {"allow_symlinks", s.serialization.allow_symlinks}};
  if (s.serialization.method == OmsMethod::kShards) ser["shard_size"] = s.serialization.shard_size;
  if (!s.serialization.ignore_paths.empty()) ser["ignore_paths"] = s.serialization.ignore_paths;
  std::string algorithm = s.serialization.method == OmsMethod::kFiles
                              ? "sha256"
                              : "sha256-sharded-" + std::to_string(s.serialization.shard_size);
  Json resources = Json::array();
  for (const auto& r : s.resources) {
    resources.push_back({{"name", oms_resource_name(r, s.serialization.method)},
                         {"algorithm", algorithm},
                         {"digest", r.digest.hex()}});
  }
  Json j = {
      {"_type", kStatementType},
      {"subject", Json::array({{{"name", s.model_name}, {"digest", {{"sha256", s.root_digest.hex()}}}}})},
      {"predicateType", kOmsPredicateType},
      {"predicate", {{"serialization", std::move(ser)}, {"resources", std::move(resources)}}}};
  return dump_json(j);
}

}  // namespace infergate::agent
