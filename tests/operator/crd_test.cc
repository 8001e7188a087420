// The CRD checked structurally (kubectl cannot validate without an API server, so this test is ours):
// it parses, the schema is structural, enums and CEL rules match the C++ types, defaults agree with
// the operator's, and every example is a model the operator would deploy.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "infergate/common/fs.h"
#include "infergate/operator/api/crd_check.h"
#include "infergate/operator/api/engine.h"
#include "infergate/operator/api/inference_model.h"
#include "infergate/operator/api/names.h"
#include "infergate/operator/api/yaml.h"

namespace infergate::op::api {
namespace {

Json load(const std::string& path) {
  auto text = read_file(path);
  EXPECT_TRUE(text.ok()) << path;
  auto docs = parse_yaml_documents(*text, path);
  EXPECT_TRUE(docs.ok()) << docs.error().to_string();
  EXPECT_EQ(docs->size(), 1u) << path;
  return docs->empty() ? Json() : docs->front();
}

const Json& crd() {
  static const Json c = load(std::string(INFERGATE_CRD_DIR) + "/inferencemodels.serving.infergate.dev.yaml");
  return c;
}

const Json& version() { return crd()["spec"]["versions"][0]; }
const Json& schema() { return version()["schema"]["openAPIV3Schema"]; }

const Json& at(const Json& s, const std::vector<std::string>& path) {
  const Json* cur = &s;
  for (const auto& p : path) {
    if (p == "[]") {
      cur = &(*cur)["items"];
    } else {
      cur = &(*cur)["properties"][p];
    }
  }
  return *cur;
}

std::vector<std::string> strings(const Json& arr) {
  std::vector<std::string> out;
  for (const auto& v : arr) out.push_back(v.get<std::string>());
  return out;
}

std::vector<std::string> names(const std::vector<std::string_view>& v) { return {v.begin(), v.end()}; }

// The structural-schema rules of apiextensions.k8s.io/v1, as far as this CRD uses features.
void check_structural(const Json& node, const std::string& path, bool in_junctor,
                      std::vector<std::string>* errors) {
  auto fail = [&](const std::string& why) { errors->push_back(path + ": " + why); };
  if (!node.is_object()) {
    fail("schema node is not an object");
    return;
  }
  const bool int_or_string = node.value("x-kubernetes-int-or-string", false);
  const bool preserve = node.value("x-kubernetes-preserve-unknown-fields", false);
  if (in_junctor) {
    for (const char* k :
         {"description", "default", "additionalProperties", "nullable", "x-kubernetes-validations"}) {
      if (node.contains(k)) fail(std::string("'") + k + "' is not allowed inside anyOf/allOf/oneOf/not");
    }
  } else if (!node.contains("type") && !int_or_string && !preserve) {
    fail("no type");
  }
  std::string type = node.value("type", "");
  if (!type.empty() && type != "object" && type != "array" && type != "string" && type != "integer" &&
      type != "number" && type != "boolean") {
    fail("unknown type " + type);
  }
  if (node.contains("properties") && node.contains("additionalProperties")) {
    fail("properties and additionalProperties together");
  }
  if (node.contains("properties") && type != "object") fail("properties on a non-object");
  if (node.contains("items") != (type == "array") && !in_junctor)
    fail("items must be given exactly for arrays");
  if (int_or_string && !node.contains("anyOf"))
    fail("x-kubernetes-int-or-string needs anyOf [integer, string]");
  if (node.contains("required")) {
    for (const auto& r : node["required"]) {
      if (!node.contains("properties") || !node["properties"].contains(r.get<std::string>())) {
        fail("required field " + r.get<std::string>() + " is not a property");
      }
    }
  }
  if (node.contains("enum") && node.contains("default")) {
    const Json& def = node["default"];
    if (std::find(node["enum"].begin(), node["enum"].end(), def) == node["enum"].end())
      fail("default not in enum");
  }
  if (node.contains("default")) {
    const Json& def = node["default"];
    bool ok = (type == "object" && def.is_object()) || (type == "array" && def.is_array()) ||
              (type == "string" && def.is_string()) || (type == "integer" && def.is_number_integer()) ||
              (type == "number" && def.is_number()) || (type == "boolean" && def.is_boolean());
    if (!ok) fail("default does not have the node's type");
  }
  if (node.contains("x-kubernetes-validations")) {
    for (const auto& rule : node["x-kubernetes-validations"]) {
      if (!rule.contains("rule") || rule["rule"].get<std::string>().empty())
        fail("CEL validation without a rule");
      if (!rule.contains("message")) fail("CEL validation without a message");
    }
  }
  if (node.contains("properties")) {
    for (const auto& [k, v] : node["properties"].items()) check_structural(v, path + "." + k, false, errors);
  }
  if (node.contains("additionalProperties") && node["additionalProperties"].is_object()) {
    check_structural(node["additionalProperties"], path + ".*", false, errors);
  }
  if (node.contains("items")) check_structural(node["items"], path + "[]", false, errors);
  for (const char* j : {"anyOf", "allOf", "oneOf"}) {
    if (node.contains(j)) {
      for (const auto& sub : node[j]) check_structural(sub, path + "." + j, true, errors);
    }
  }
}

// What the API server does with `default`s in the schema.
void apply_defaults(Json& obj, const Json& schema) {
  if (obj.is_object() && schema.contains("properties")) {
    for (const auto& [name, prop] : schema["properties"].items()) {
      if (!obj.contains(name) && prop.contains("default")) obj[name] = prop["default"];
      if (obj.contains(name)) apply_defaults(obj[name], prop);
    }
  }
}

TEST(Crd, IsAStructuralSchemaWithTheStatusSubresource) {
  ASSERT_EQ(crd()["apiVersion"], "apiextensions.k8s.io/v1");
  ASSERT_EQ(crd()["kind"], "CustomResourceDefinition");
  EXPECT_EQ(crd()["spec"]["group"], std::string(kGroup));
  EXPECT_EQ(crd()["spec"]["names"]["kind"], std::string(kKind));
  EXPECT_EQ(crd()["spec"]["names"]["plural"], std::string(kPlural));
  EXPECT_EQ(crd()["metadata"]["name"], std::string(kPlural) + "." + std::string(kGroup));
  EXPECT_EQ(strings(crd()["spec"]["names"]["shortNames"]), std::vector<std::string>{"im"});
  EXPECT_EQ(crd()["spec"]["scope"], "Namespaced");
  EXPECT_EQ(version()["name"], std::string(kVersion));
  EXPECT_TRUE(version()["served"].get<bool>());
  EXPECT_TRUE(version()["storage"].get<bool>());
  EXPECT_TRUE(version()["subresources"]["status"].is_object());
  std::vector<std::string> errors;
  check_structural(schema(), "openAPIV3Schema", false, &errors);
  for (const auto& e : errors) ADD_FAILURE() << e;
  EXPECT_EQ(strings(at(schema(), {"spec"})["required"]), (std::vector<std::string>{"artifact", "serving"}));
}

TEST(Crd, PrinterColumnsAreStableCanaryStageReadyAge) {
  std::vector<std::string> cols;
  for (const auto& c : version()["additionalPrinterColumns"]) cols.push_back(c["name"]);
  EXPECT_EQ(cols, (std::vector<std::string>{"Stable", "Canary", "Stage", "Ready", "Age"}));
  EXPECT_EQ(version()["additionalPrinterColumns"][0]["jsonPath"], ".status.stable.summary");
  EXPECT_EQ(version()["additionalPrinterColumns"][3]["jsonPath"],
            ".status.conditions[?(@.type==\"Ready\")].status");
  EXPECT_EQ(version()["additionalPrinterColumns"][4]["type"], "date");
}

TEST(Crd, EnumsMatchTheOperatorsTypes) {
  EXPECT_EQ(strings(at(schema(), {"spec", "serving", "weightFormat"})["enum"]), names(weight_format_names()));
  EXPECT_EQ(strings(at(schema(), {"spec", "serving", "kvCacheDtype"})["enum"]),
            names(kv_cache_dtype_names()));
  EXPECT_EQ(strings(at(schema(), {"spec", "engine", "kind"})["enum"]), names(engine_kind_names()));
  EXPECT_EQ(strings(at(schema(), {"spec", "rollout", "stageOrder", "[]"})["enum"]), names(stage_names()));
  for (const char* part : {"stable", "canary"}) {
    EXPECT_EQ(strings(at(schema(), {"status", part, "weightFormat"})["enum"]), names(weight_format_names()));
    EXPECT_EQ(strings(at(schema(), {"status", part, "kvCacheDtype"})["enum"]), names(kv_cache_dtype_names()));
    EXPECT_EQ(strings(at(schema(), {"status", part, "engine"})["enum"]), names(engine_kind_names()));
  }
  EXPECT_EQ(strings(at(schema(), {"status", "stage", "name"})["enum"]), names(stage_names()));
  EXPECT_EQ(strings(at(schema(), {"status", "stage", "phase"})["enum"]), names(stage_phase_names()));
}

TEST(Crd, StatusHoldsEverythingARolloutNeedsToResume) {
  const Json& st = at(schema(), {"status"});
  for (const char* f :
       {"observedGeneration", "stable", "canary", "stage", "conditions", "history", "failedRevisions"}) {
    EXPECT_TRUE(st["properties"].contains(f)) << f;
  }
  const Json& cond = at(schema(), {"status", "conditions"});
  EXPECT_EQ(cond["x-kubernetes-list-type"], "map");
  EXPECT_EQ(strings(cond["x-kubernetes-list-map-keys"]), std::vector<std::string>{"type"});
  for (const char* f : {"type", "status", "reason", "message", "observedGeneration", "lastTransitionTime"}) {
    EXPECT_TRUE(cond["items"]["properties"].contains(f)) << f;
  }
  // The status the operator writes has no field the schema would prune (the check the operator
  // makes at start).
  EXPECT_TRUE(crd_schema_gaps(crd()).empty());
}

TEST(CrdCheck, NamesWhatAnOlderCrdLacks) {
  Json old = crd();
  Json& stage =
      old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["stage"];
  stage["properties"].erase("failureReason");
  EXPECT_EQ(crd_schema_gaps(old), std::vector<std::string>{"status.stage.failureReason"});
  old = crd();
  old["spec"]["versions"][0].erase("subresources");
  EXPECT_EQ(crd_schema_gaps(old), std::vector<std::string>{"the status subresource"});
  old["spec"]["versions"][0]["name"] = "v1beta9";
  EXPECT_EQ(crd_schema_gaps(old), std::vector<std::string>{"version v1alpha1"});
}

TEST(Crd, CelRulesListTheKvDtypesTheEnginesRun) {
  std::vector<std::string> rules;
  for (const auto& r : at(schema(), {"spec"})["x-kubernetes-validations"]) rules.push_back(r["rule"]);
  auto quoted = [](EngineKind k) {
    std::string s;
    for (auto d : supported_kv_cache_dtypes(k))
      s += std::string(s.empty() ? "" : ", ") + "'" + std::string(to_string(d)) + "'";
    return "[" + s + "]";
  };
  ASSERT_EQ(quoted(EngineKind::kVllm), quoted(EngineKind::kSglang));
  auto has = [&](const std::string& needle) {
    return std::any_of(rules.begin(), rules.end(),
                       [&](const std::string& r) { return r.find(needle) != std::string::npos; });
  };
  EXPECT_TRUE(has("!(self.engine.kind in ['vllm', 'sglang']) || self.serving.kvCacheDtype in " +
                  quoted(EngineKind::kVllm)));
  EXPECT_TRUE(
      has("self.engine.kind != 'llamacpp' || self.serving.kvCacheDtype in " + quoted(EngineKind::kLlamacpp)));
  EXPECT_TRUE(has("has(self.engine.image)"));
  EXPECT_TRUE(has("has(self.engine.modelFile)"));
}

TEST(Crd, DefaultsAgreeWithTheOperators) {
  Json minimal = Json::parse(R"({"apiVersion": "serving.infergate.dev/v1alpha1", "kind": "InferenceModel",
    "metadata": {"name": "m", "namespace": "ns"},
    "spec": {"artifact": {"volume": {"persistentVolumeClaim": {"claimName": "pvc"}}, "path": "m/r1",
                          "trust": {"publicKeySecretRef": {"name": "k"}}},
             "serving": {"weightFormat": "int8", "maxContextLength": 4096}}})");
  Json server_defaulted = minimal;
  apply_defaults(server_defaulted, schema());
  auto by_server = parse_inference_model(server_defaulted);
  auto by_operator = parse_inference_model(minimal);
  ASSERT_TRUE(by_server.ok() && by_operator.ok());
  EXPECT_EQ(canonical_json(pod_config(by_server->spec)), canonical_json(pod_config(by_operator->spec)));
  EXPECT_EQ(by_server->spec.replicas, by_operator->spec.replicas);
  EXPECT_EQ(by_server->spec.rollout.stage_order, by_operator->spec.rollout.stage_order);
  EXPECT_EQ(by_server->spec.rollout.canary.analysis_seconds,
            by_operator->spec.rollout.canary.analysis_seconds);
  EXPECT_EQ(by_server->spec.rollout.canary.replicas, by_operator->spec.rollout.canary.replicas);
  EXPECT_EQ(by_server->spec.rollout.canary.surge, by_operator->spec.rollout.canary.surge);
  EXPECT_EQ(by_server->spec.rollout.auto_rollback, by_operator->spec.rollout.auto_rollback);
  EXPECT_EQ(server_defaulted["spec"]["serving"]["kvCacheDtype"], "fp16");
}

TEST(CrdExamples, AreModelsTheOperatorWouldDeploy) {
  int n = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(INFERGATE_CRD_DIR) + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    ++n;
    Json obj = load(entry.path().string());
    obj["metadata"]["namespace"] = "default";
    auto m = parse_inference_model(obj);
    ASSERT_TRUE(m.ok()) << entry.path() << ": " << m.error().to_string();
    auto engine = engine_command(pod_config(m->spec), m->meta.name, Layout{}, Images{});
    EXPECT_TRUE(engine.ok()) << entry.path() << ": " << engine.error().to_string();
  }
  EXPECT_GE(n, 3);
}

TEST(CrdExamples, TheGlmExampleIsInt8At32kOnTwoOneGpuReplicas) {
  Json obj = load(std::string(INFERGATE_CRD_DIR) + "/examples/glm-4-9b-int8.yaml");
  auto m = parse_inference_model(obj);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(m->spec.serving.weight_format, WeightFormat::kInt8);
  EXPECT_EQ(m->spec.serving.kv_cache_dtype, KvCacheDtype::kInt8);
  EXPECT_EQ(m->spec.serving.max_context_length, 32768);
  EXPECT_EQ(m->spec.replicas, 2);
  EXPECT_EQ(m->spec.resources.gpus(), 1);
  EXPECT_EQ(m->spec.artifact.volume.claim_name, "verified-model-artifacts");
}

}  // namespace
}  // namespace infergate::op::api
