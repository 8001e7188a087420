// YAML documents as JSON values (yaml-cpp underneath), with the YAML 1.2 core schema for plain
// scalars: null, booleans, integers and floats are typed; quoted scalars are always strings.
// Used for kubeconfig files, CRD and example manifests, and model files read from disk.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/json.h"
#include "infergate/common/result.h"

namespace infergate::op::api {

// The largest YAML text read (a manifest, a kubeconfig, a saved status), and how far aliases may
// expand it: converting all documents of a text may cost at most kYamlExpansion units per byte of it
// plus kYamlExpansionSlack, a unit being a node or a byte of scalar text. A text without aliases costs
// at most two units per byte; "billion laughs" is refused with reason YamlTooLarge.
inline constexpr size_t kMaxYamlBytes = 4u << 20;
inline constexpr size_t kYamlExpansion = 4;
inline constexpr size_t kYamlExpansionSlack = 64 * 1024;

// Every document in the stream ("---" separated); empty documents are skipped. `what` names the
// source in errors ("kubeconfig ~/.kube/config"), with the line and column of a syntax error. Texts
// over kMaxYamlBytes, and aliases expanding beyond the budget above, are refused (YamlTooLarge).
Result<std::vector<Json>> parse_yaml_documents(std::string_view text, std::string_view what);
// Exactly one document.
Result<Json> parse_yaml(std::string_view text, std::string_view what);
// Block-style YAML for a JSON value (strings that would read back as another type are quoted).
std::string to_yaml(const Json& value);

}  // namespace infergate::op::api
