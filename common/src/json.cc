// Exception-free JSON parsing and typed field access.
#include "infergate/common/json.h"

#include <cmath>
#include <limits>

namespace infergate {

std::string json_path(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  std::string p(parent);
  p.append(".").append(key);
  return p;
}

Result<Json> parse_json(std::string_view text, std::string_view what) {
  // nlohmann reports the position only through its exception; it is converted here, at the boundary.
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string(what) + ": not valid JSON at byte " + std::to_string(e.byte), "InvalidJson");
  } catch (const std::exception& e) {
    return Error(ErrorCode::kInvalidArgument, std::string(what) + ": not valid JSON", "InvalidJson");
  }
}

std::string dump_json(const Json& j, int indent) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

namespace {

Result<const Json*> field(const Json& obj, std::string_view key, std::string_view path) {
  if (!obj.is_object()) {
    return invalid_argument((path.empty() ? std::string("document") : std::string(path)) +
                            ": expected an object");
  }
  auto it = obj.find(std::string(key));
  if (it == obj.end())
    return Error(ErrorCode::kInvalidArgument, json_path(path, key) + ": required field is missing",
                 "MissingField");
  return &*it;
}

Error wrong_type(std::string_view path, std::string_view key, std::string_view expected) {
  return invalid_argument(json_path(path, key) + ": expected " + std::string(expected));
}

bool has(const Json& obj, std::string_view key) {
  return obj.is_object() && obj.contains(std::string(key)) && !obj.at(std::string(key)).is_null();
}

}  // namespace

Result<std::string> json_string(const Json& obj, std::string_view key, std::string_view path) {
  INFERGATE_ASSIGN_OR_RETURN(const Json* v, field(obj, key, path));
  if (!v->is_string()) return wrong_type(path, key, "a string");
  return v->get<std::string>();
}

Result<int64_t> json_int(const Json& obj, std::string_view key, std::string_view path) {
  INFERGATE_ASSIGN_OR_RETURN(const Json* v, field(obj, key, path));
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return wrong_type(path, key, "an integer that fits in 64 bits");
    }
    return v->get<int64_t>();
  }
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  return wrong_type(path, key, "an integer");
}

Result<double> json_number(const Json& obj, std::string_view key, std::string_view path) {
  INFERGATE_ASSIGN_OR_RETURN(const Json* v, field(obj, key, path));
  if (!v->is_number()) return wrong_type(path, key, "a number");
  return v->get<double>();
}

Result<bool> json_bool(const Json& obj, std::string_view key, std::string_view path) {
  INFERGATE_ASSIGN_OR_RETURN(const Json* v, field(obj, key, path));
  if (!v->is_boolean()) return wrong_type(path, key, "true or false");
  return v->get<bool>();
}

Result<const Json*> json_object(const Json& obj, std::string_view key, std::string_view path) {
  INFERGATE_ASSIGN_OR_RETURN(const Json* v, field(obj, key, path));
  if (!v->is_object()) return wrong_type(path, key, "an object");
  return v;
}

Result<const Json*> json_array(const Json& obj, std::string_view key, std::string_view path) {
  INFERGATE_ASSIGN_OR_RETURN(const Json* v, field(obj, key, path));
  if (!v->is_array()) return wrong_type(path, key, "an array");
  return v;
}

Result<std::string> json_string_or(const Json& obj, std::string_view key, std::string fallback,
                                   std::string_view path) {
  if (!has(obj, key)) return fallback;
  return json_string(obj, key, path);
}

Result<int64_t> json_int_or(const Json& obj, std::string_view key, int64_t fallback, std::string_view path) {
  if (!has(obj, key)) return fallback;
  return json_int(obj, key, path);
}

Result<double> json_number_or(const Json& obj, std::string_view key, double fallback, std::string_view path) {
  if (!has(obj, key)) return fallback;
  return json_number(obj, key, path);
}

Result<bool> json_bool_or(const Json& obj, std::string_view key, bool fallback, std::string_view path) {
  if (!has(obj, key)) return fallback;
  return json_bool(obj, key, path);
}

}  // namespace infergate
