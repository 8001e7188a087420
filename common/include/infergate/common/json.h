// JSON for infergate: nlohmann::json plus parsing and field access that return Result instead of
// throwing, with errors that name the field path ("spec.serving.weightFormat: expected a string").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "infergate/common/result.h"

namespace infergate {

using Json = nlohmann::json;

// Parses text as JSON. `what` names the source in the error ("config.json").
Result<Json> parse_json(std::string_view text, std::string_view what);

// Serialises without throwing: invalid UTF-8 in strings is replaced.
std::string dump_json(const Json& j, int indent = -1);

// Typed access to obj[key]; `path` is the object's own path for error messages ("" at the root).
// Missing keys are errors for get_*, and yield `fallback` for get_*_or.
Result<std::string> json_string(const Json& obj, std::string_view key, std::string_view path = {});
Result<int64_t> json_int(const Json& obj, std::string_view key, std::string_view path = {});
Result<double> json_number(const Json& obj, std::string_view key, std::string_view path = {});
Result<bool> json_bool(const Json& obj, std::string_view key, std::string_view path = {});
Result<const Json*> json_object(const Json& obj, std::string_view key, std::string_view path = {});
Result<const Json*> json_array(const Json& obj, std::string_view key, std::string_view path = {});
Result<std::string> json_string_or(const Json& obj, std::string_view key, std::string fallback,
                                   std::string_view path = {});
Result<int64_t> json_int_or(const Json& obj, std::string_view key, int64_t fallback,
                            std::string_view path = {});
Result<double> json_number_or(const Json& obj, std::string_view key, double fallback,
                              std::string_view path = {});
Result<bool> json_bool_or(const Json& obj, std::string_view key, bool fallback, std::string_view path = {});

// "a.b" from ("a", "b"); just "b" when the parent path is empty.
std::string json_path(std::string_view parent, std::string_view key);

}  // namespace infergate
