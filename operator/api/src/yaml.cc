// YAML <-> JSON with yaml-cpp; exceptions stay inside this file.
#include "infergate/operator/api/yaml.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <regex>

#include "infergate/common/encoding.h"

namespace infergate::op::api {
namespace {

constexpr int kMaxDepth = 128;

Json scalar(const YAML::Node& node) {
  const std::string& s = node.Scalar();
  const std::string& tag = node.Tag();
  if (tag == "!" || tag == "tag:yaml.org,2002:str") return s;  // quoted, or explicitly a string
  if (tag == "tag:yaml.org,2002:null") return nullptr;
  static const std::regex int_re("^[-+]?[0-9]+$");
  static const std::regex oct_re("^0o[0-7]+$");
  static const std::regex hex_re("^0x[0-9a-fA-F]+$");
  static const std::regex float_re("^[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?$");
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  if (std::regex_match(s, int_re)) {
    errno = 0;
    long long v = std::strtoll(s.c_str(), nullptr, 10);
    if (errno == 0) return static_cast<int64_t>(v);
    return std::strtod(s.c_str(), nullptr);
  }
  if (std::regex_match(s, oct_re)) return static_cast<int64_t>(std::strtoll(s.c_str() + 2, nullptr, 8));
  if (std::regex_match(s, hex_re)) return static_cast<int64_t>(std::strtoll(s.c_str() + 2, nullptr, 16));
  if (std::regex_match(s, float_re)) return std::strtod(s.c_str(), nullptr);
  if (s == ".inf" || s == ".Inf" || s == "+.inf") return HUGE_VAL;
  if (s == "-.inf" || s == "-.Inf") return -HUGE_VAL;
  return s;
}

// What converting a document may cost: one unit per node and one per byte of scalar text. YAML aliases
// refer to one node many times, and converting copies it each time, so a few hundred bytes of nested
// aliases ("billion laughs") would expand to gigabytes; the budget stops that at a small multiple of
// the text, which no document without aliases (nodes and scalar bytes are each at most its size) can
// reach.
struct Budget {
  size_t left;
  bool spend(size_t cost) {
    if (cost > left) return false;
    left -= cost;
    return true;
  }
};

Error too_expanded(std::string_view what, size_t budget) {
  return Error(ErrorCode::kInvalidArgument,
               std::string(what) + ": YAML aliases expand to more than " + std::to_string(budget) +
                   " nodes and bytes; write the repeated parts out instead",
               "YamlTooLarge");
}

Result<Json> convert(const YAML::Node& node, std::string_view what, int depth, Budget& budget, size_t total) {
  if (depth > kMaxDepth) return invalid_argument(std::string(what) + ": nested deeper than 128 levels");
  if (!budget.spend(1)) return too_expanded(what, total);
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null: return Json(nullptr);
    case YAML::NodeType::Scalar:
      if (!budget.spend(node.Scalar().size())) return too_expanded(what, total);
      return scalar(node);
    case YAML::NodeType::Sequence: {
      Json arr = Json::array();
      for (const auto& item : node) {
        INFERGATE_ASSIGN_OR_RETURN(Json v, convert(item, what, depth + 1, budget, total));
        arr.push_back(std::move(v));
      }
      return arr;
    }
    case YAML::NodeType::Map: {
      Json obj = Json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) {
          return invalid_argument(std::string(what) + ": line " + std::to_string(kv.first.Mark().line + 1) +
                                  ": map keys must be scalars");
        }
        const std::string& key = kv.first.Scalar();
        if (!budget.spend(key.size())) return too_expanded(what, total);
        if (obj.contains(key)) {
          return invalid_argument(std::string(what) + ": line " + std::to_string(kv.first.Mark().line + 1) +
                                  ": duplicate key \"" + key + "\"");
        }
        INFERGATE_ASSIGN_OR_RETURN(Json v, convert(kv.second, what, depth + 1, budget, total));
        obj[key] = std::move(v);
      }
      return obj;
    }
  }
  return Json(nullptr);
}

bool needs_quotes(const std::string& s) {
  if (s.empty()) return true;
  Json typed = scalar(YAML::Node(s));
  if (!typed.is_string()) return true;
  static const std::regex plain("^[A-Za-z0-9_./][A-Za-z0-9_./ :=+@-]*$");
  if (!std::regex_match(s, plain)) return true;
  return s.find(": ") != std::string::npos || s.back() == ' ' || s.back() == ':';
}

void emit(YAML::Emitter& out, const Json& v) {
  switch (v.type()) {
    case Json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [k, item] : v.items()) {
        out << YAML::Key;
        if (needs_quotes(k)) out << YAML::DoubleQuoted;
        out << k << YAML::Value;
        emit(out, item);
      }
      out << YAML::EndMap;
      break;
    case Json::value_t::array:
      out << YAML::BeginSeq;
      for (const auto& item : v) emit(out, item);
      out << YAML::EndSeq;
      break;
    case Json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();  // json-internal: our own value, type switched on
      if (needs_quotes(s)) out << YAML::DoubleQuoted;
      out << s;
      break;
    }
    case Json::value_t::boolean: out << (v == Json(true) ? "true" : "false"); break;
    case Json::value_t::null: out << YAML::Null; break;
    default: out << v.dump(); break;
  }
}

}  // namespace

Result<std::vector<Json>> parse_yaml_documents(std::string_view text, std::string_view what) {
  if (text.size() > kMaxYamlBytes) {
    return Error(ErrorCode::kResourceExhausted,
                 std::string(what) + ": " + std::to_string(text.size()) +
                     " bytes of YAML is over the limit of " + std::to_string(kMaxYamlBytes),
                 "YamlTooLarge");
  }
  // Strings travel on as JSON, which is UTF-8; YAML's reader does not check it.
  if (!valid_utf8(text)) {
    return invalid_argument(std::string(what) + ": not valid UTF-8");
  }
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(std::string(text));
  } catch (const YAML::Exception& e) {
    return invalid_argument(std::string(what) + ": line " + std::to_string(e.mark.line + 1) + ", column " +
                            std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  const size_t total = kYamlExpansion * text.size() + kYamlExpansionSlack;
  Budget budget{total};
  std::vector<Json> out;
  for (const auto& d : docs) {
    if (d.IsNull() || !d.IsDefined()) continue;
    INFERGATE_ASSIGN_OR_RETURN(Json j, convert(d, what, 0, budget, total));
    out.push_back(std::move(j));
  }
  return out;
}

Result<Json> parse_yaml(std::string_view text, std::string_view what) {
  INFERGATE_ASSIGN_OR_RETURN(auto docs, parse_yaml_documents(text, what));
  if (docs.size() != 1) {
    return invalid_argument(std::string(what) + ": expected one YAML document, found " +
                            std::to_string(docs.size()));
  }
  return std::move(docs.front());
}

std::string to_yaml(const Json& value) {
  YAML::Emitter out;
  emit(out, value);
  std::string s = out.c_str();
  if (s.empty() || s.back() != '\n') s += '\n';
  return s;
}

}  // namespace infergate::op::api
