// The CRD skew check.
#include "infergate/operator/api/crd_check.h"

#include "infergate/operator/api/inference_model.h"
#include "infergate/operator/api/names.h"

namespace infergate::op::api {
namespace {

// A status with every optional part present, every list non-empty: all the fields this operator
// can write.
InferenceModelStatus every_field() {
  InferenceModelStatus s;
  ReleaseConfig rc;
  rc.release_digest = "sha256:x";
  rc.release_version = 1;
  rc.revision = "r";
  rc.summary = "s";
  rc.pod_config =
      Json{{"serving", Json::object()}};  // kept as written (x-kubernetes-preserve-unknown-fields)
  s.stable = rc;
  s.canary = CanaryStatus{rc, "w", 1, 1};
  StageStatus st;
  st.name = "weights";
  st.revision = "r";
  st.gate_results = {GateResult{"quality", "Passed", "m", {{"k", 1}}, {{"k", 1}}, {}}};
  st.from_revision = "f";
  st.analysis_started_at = WallTime{};
  st.failed_at = WallTime{};
  st.outcome = "RolledBack";
  st.failure_reason = "r";
  st.failure_message = "m";
  s.stage = st;
  s.conditions.push_back({"Ready", "True", "Serving", "m", 1, {}});
  s.history.push_back({"weights", "r", "Promoted", "r", "m", {}});
  s.failed_revisions = {"r"};
  s.control = RolloutControlStatus{"a", "b", "c", true};
  s.selector = "a=b";
  return s;
}

void gaps(const Json& value, const Json& node, const std::string& path, std::vector<std::string>& out) {
  if (!node.is_object() || node.value("x-kubernetes-preserve-unknown-fields", false)) return;
  if (value.is_object()) {
    const Json props = node.value("properties", Json::object());
    const Json extra = node.value("additionalProperties", Json());
    for (const auto& [k, v] : value.items()) {
      if (props.contains(k)) {
        gaps(v, props[k], path + "." + k, out);
      } else if (extra.is_object()) {
        gaps(v, extra, path + "." + k, out);
      } else if (extra != Json(true)) {
        out.push_back(path + "." + k);
      }
    }
  } else if (value.is_array()) {
    for (const auto& v : value) gaps(v, node.value("items", Json::object()), path + "[]", out);
  }
}

}  // namespace

std::vector<std::string> crd_schema_gaps(const Json& crd) {
  const Json spec = crd.value("spec", Json::object());
  for (const auto& v : spec.value("versions", Json::array())) {
    if (!v.is_object() || v.value("name", "") != kVersion) continue;
    if (!v.value("served", false)) return {"version " + std::string(kVersion) + " (not served)"};
    if (!v.value("subresources", Json::object()).contains("status")) return {"the status subresource"};
    const Json schema = v.value("schema", Json::object()).value("openAPIV3Schema", Json::object());
    const Json status = schema.value("properties", Json::object()).value("status", Json());
    if (!status.is_object()) return {"status"};
    std::vector<std::string> out;
    gaps(status_to_json(every_field()), status, "status", out);
    return out;
  }
  return {"version " + std::string(kVersion)};
}

}  // namespace infergate::op::api
