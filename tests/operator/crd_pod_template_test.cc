// The CRD and the operator agree on spec.podTemplate (and spec.scheduling's tolerations): what the
// operator refuses, the API server refuses first (its schema and CEL rules, as the fake API server
// evaluates them), naming the same field or the object that holds it; what the API server accepts,
// the operator deploys. Where the CRD checks deeper than the operator (the core types inside
// affinity terms, label selectors, volume and env sources, which the operator passes on to the Pod
// and the API server's Pod validation checks too), the table says so case by case.
#include <gtest/gtest.h>

#include "api/testdata.h"
#include "fixtures/openapi_schema.h"
#include "infergate/common/fs.h"
#include "infergate/operator/api/pod_template.h"
#include "infergate/operator/api/yaml.h"

namespace infergate::op::api {
namespace {

const Json& schema() {
  static const Json s = [] {
    auto text = read_file(std::string(INFERGATE_CRD_DIR) + "/inferencemodels.serving.infergate.dev.yaml");
    EXPECT_TRUE(text.ok());
    auto crd = parse_yaml(text.ok() ? *text : "", "crd");
    EXPECT_TRUE(crd.ok());
    return crd.ok() ? (*crd)["spec"]["versions"][0]["schema"]["openAPIV3Schema"] : Json();
  }();
  return s;
}

Json model_with(const Json& tmpl, bool scheduling) {
  Json m = testing::valid_model();
  m["spec"][scheduling ? "scheduling" : "podTemplate"] = tmpl;
  return m;
}

bool under(const std::string& path) {
  return path.rfind("spec.podTemplate", 0) == 0 || path.rfind("spec.scheduling", 0) == 0;
}

// What the API server refuses, by field. `strict`: as kubectl asks (fieldValidation=Strict), an
// unknown field is refused by name; otherwise it is pruned first, as for any other client.
std::vector<std::string> crd_refusals(Json obj, bool strict) {
  std::vector<std::string> out;
  if (strict) {
    for (auto& f : infergate::testing::unknown_fields(obj, schema())) out.push_back(std::move(f));
  }
  infergate::testing::prune_unknown_fields(obj, schema());
  infergate::testing::apply_schema_defaults(obj, schema());
  for (const auto& c : infergate::testing::validate_against_schema(obj, schema())) {
    if (under(c.field)) {
      out.push_back(c.field);
    } else {
      EXPECT_EQ(c.field, "<nil>") << "the base model is valid, so every refusal is about the template: "
                                  << c.field << ": " << c.message;
    }
  }
  return out;
}

std::vector<std::string> operator_refusals(const Json& obj) {
  std::vector<std::string> out;
  for (const auto& e : validate_spec(obj["spec"], nullptr)) out.push_back(e.path);
  return out;
}

// The same field, or one holds the other ("spec.podTemplate.env[1]" and "...env[1].name").
bool related(const std::string& a, const std::string& b) {
  auto holds = [](const std::string& outer, const std::string& inner) {
    return inner == outer ||
           (inner.rfind(outer, 0) == 0 && (inner[outer.size()] == '.' || inner[outer.size()] == '['));
  };
  return holds(a, b) || holds(b, a);
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(none)" : s;
}

enum class Verdict {
  kAccepted,  // both accept
  kRefused,   // both refuse, naming related fields
  kCrdOnly,   // the CRD refuses a core type's inner field the operator passes on to the Pod
};

struct Case {
  const char* name;
  const char* tmpl;
  Verdict verdict;
  bool scheduling = false;  // spec.scheduling instead of spec.podTemplate
};

const Case kCases[] = {
    // Accepted by both.
    {"a full template", R"({
       "imagePullSecrets": [{"name": "regcred"}],
       "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
       "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                       {"operator": "Exists"},
                       {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "tolerationSeconds": 30},
                       {"key": "pool", "operator": "Equal", "value": "h200-a"}],
       "affinity": {
         "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
             {"matchExpressions": [{"key": "gpu-memory", "operator": "Gt", "values": ["80"]},
                                   {"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}},
         "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
             {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
               "labelSelector": {"matchLabels": {"serving.infergate.dev/model": "glm-4-9b"}}}}]}},
       "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                      "whenUnsatisfiable": "DoNotSchedule", "minDomains": 2,
                                      "nodeTaintsPolicy": "Honor",
                                      "labelSelector": {"matchExpressions": [
                                        {"key": "serving.infergate.dev/model", "operator": "Exists"}]}}],
       "priorityClassName": "inference-high", "runtimeClassName": "nvidia", "serviceAccountName": "serving",
       "env": [{"name": "HF_HOME", "value": "/tmp/hf"},
               {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
               {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub", "key": "token"}}}],
       "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "10Gi", "medium": "Memory"}},
                   {"name": "cfg", "configMap": {"name": "engine-config", "items": [{"key": "a", "path": "conf/a"}]}},
                   {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
                       "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "100Gi"}}}}}},
                   {"name": "id", "projected": {"sources": [
                       {"serviceAccountToken": {"audience": "vault", "path": "token", "expirationSeconds": 3600}}]}}],
       "volumeMounts": [{"name": "cache", "mountPath": "/cache/"}, {"name": "cfg", "mountPath": "/etc/engine",
                         "readOnly": true, "subPath": "conf"}]})",
     Verdict::kAccepted},
    {"an empty template", "{}", Verdict::kAccepted},
    {"spec.scheduling tolerations", R"({"tolerations": [{"key": "gpu", "operator": "Exists"}]})",
     Verdict::kAccepted, true},

    // Refused by both.
    {"an unknown toleration operator", R"({"tolerations": [{"key": "k", "operator": "Maybe"}]})",
     Verdict::kRefused},
    {"a number for a toleration operator", R"({"tolerations": [{"key": "gpu", "operator": 1}]})",
     Verdict::kRefused},
    {"Exists with a value", R"({"tolerations": [{"key": "gpu", "operator": "Exists", "value": "h200"}]})",
     Verdict::kRefused},
    {"an empty key with Equal", R"({"tolerations": [{"value": "x"}]})", Verdict::kRefused},
    {"tolerationSeconds without NoExecute",
     R"({"tolerations": [{"key": "gpu", "effect": "NoSchedule", "tolerationSeconds": 60}]})",
     Verdict::kRefused},
    {"a fractional tolerationSeconds",
     R"({"tolerations": [{"key": "g", "effect": "NoExecute", "tolerationSeconds": 1.5}]})",
     Verdict::kRefused},
    {"a bad taint key", R"({"tolerations": [{"key": "bad key!", "operator": "Exists"}]})", Verdict::kRefused},
    {"a bad toleration value", R"({"tolerations": [{"key": "k", "value": "not a label value"}]})",
     Verdict::kRefused},
    {"an unknown toleration effect", R"({"tolerations": [{"key": "k", "effect": "Never"}]})",
     Verdict::kRefused},
    {"an unknown toleration field", R"({"tolerations": [{"key": "k", "priority": 1}]})", Verdict::kRefused},
    {"too many tolerations", "", Verdict::kRefused},  // filled in below: 65 of them
    {"Exists with a value, in spec.scheduling",
     R"({"tolerations": [{"key": "g", "operator": "Exists", "value": "v"}]})", Verdict::kRefused, true},
    {"a zero maxSkew", R"({"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "zone",
                                                          "whenUnsatisfiable": "DoNotSchedule"}]})",
     Verdict::kRefused},
    {"a string maxSkew", R"({"topologySpreadConstraints": [{"maxSkew": "1", "topologyKey": "zone",
                                                            "whenUnsatisfiable": "DoNotSchedule"}]})",
     Verdict::kRefused},
    {"a spread without topologyKey", R"({"topologySpreadConstraints": [{"maxSkew": 1,
                                                                        "whenUnsatisfiable": "DoNotSchedule"}]})",
     Verdict::kRefused},
    {"an unknown whenUnsatisfiable", R"({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                                                        "whenUnsatisfiable": "Sometimes"}]})",
     Verdict::kRefused},
    {"minDomains with ScheduleAnyway", R"({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                          "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}]})",
     Verdict::kRefused},
    {"an unknown nodeAffinityPolicy", R"({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                          "whenUnsatisfiable": "DoNotSchedule", "nodeAffinityPolicy": "Maybe"}]})",
     Verdict::kRefused},
    {"two spreads for one key", R"({"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
        {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]})",
     Verdict::kRefused},
    {"an affinity of an unknown kind", R"({"affinity": {"gpuAffinity": {}}})", Verdict::kRefused},
    {"an env name given twice", R"({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]})",
     Verdict::kRefused},
    {"an INFERGATE_ env", R"({"env": [{"name": "INFERGATE_X", "value": "1"}]})", Verdict::kRefused},
    {"an env without value or valueFrom", R"({"env": [{"name": "B"}]})", Verdict::kRefused},
    {"an env with value and valueFrom",
     R"({"env": [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]})",
     Verdict::kRefused},
    {"an env from two sources", R"({"env": [{"name": "C", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": "k"}, "fieldRef": {"fieldPath": "metadata.name"}}}]})",
     Verdict::kRefused},
    {"an env from no source", R"({"env": [{"name": "C", "valueFrom": {}}]})", Verdict::kRefused},
    {"a bad env name", R"({"env": [{"name": "1 A", "value": "x"}]})", Verdict::kRefused},
    {"a number for an env value", R"({"env": [{"name": "A", "value": 3}]})", Verdict::kRefused},
    {"the operator's own volume", R"({"volumes": [{"name": "model-artifacts", "emptyDir": {}}]})",
     Verdict::kRefused},
    {"a volume name given twice",
     R"({"volumes": [{"name": "c", "emptyDir": {}}, {"name": "c", "emptyDir": {}}]})", Verdict::kRefused},
    {"a volume with two sources",
     R"({"volumes": [{"name": "c", "emptyDir": {}, "configMap": {"name": "x"}}]})", Verdict::kRefused},
    {"a volume without a source", R"({"volumes": [{"name": "c"}]})", Verdict::kRefused},
    {"a hostPath volume", R"({"volumes": [{"name": "host", "hostPath": {"path": "/var"}}]})",
     Verdict::kRefused},
    {"a bad volume name", R"({"volumes": [{"name": "Cache", "emptyDir": {}}]})", Verdict::kRefused},
    {"a mount of no volume", R"({"volumeMounts": [{"name": "nope", "mountPath": "/x"}]})", Verdict::kRefused},
    {"a mount inside /models", R"({"volumes": [{"name": "x", "emptyDir": {}}],
                                   "volumeMounts": [{"name": "x", "mountPath": "/models/glm"}]})",
     Verdict::kRefused},
    {"a mount over /", R"({"volumes": [{"name": "x", "emptyDir": {}}],
                           "volumeMounts": [{"name": "x", "mountPath": "/"}]})",
     Verdict::kRefused},
    {"a mount over /etc/ with its slash", R"({"volumes": [{"name": "x", "emptyDir": {}}],
                                              "volumeMounts": [{"name": "x", "mountPath": "/etc/"}]})",
     Verdict::kRefused},
    {"a relative mount path", R"({"volumes": [{"name": "x", "emptyDir": {}}],
                                  "volumeMounts": [{"name": "x", "mountPath": "cache"}]})",
     Verdict::kRefused},
    {"a mount path with ..", R"({"volumes": [{"name": "x", "emptyDir": {}}],
                                 "volumeMounts": [{"name": "x", "mountPath": "/cache/../models"}]})",
     Verdict::kRefused},
    {"an absolute subPath", R"({"volumes": [{"name": "x", "emptyDir": {}}],
                                "volumeMounts": [{"name": "x", "mountPath": "/c", "subPath": "/a"}]})",
     Verdict::kRefused},
    {"two mounts at one path", R"({"volumes": [{"name": "x", "emptyDir": {}}, {"name": "y", "emptyDir": {}}],
                                   "volumeMounts": [{"name": "x", "mountPath": "/c"}, {"name": "y", "mountPath": "/c"}]})",
     Verdict::kRefused},
    {"a mount that propagates", R"({"volumes": [{"name": "x", "emptyDir": {}}],
        "volumeMounts": [{"name": "x", "mountPath": "/c", "mountPropagation": "Bidirectional"}]})",
     Verdict::kRefused},
    {"a bad pull Secret name", R"({"imagePullSecrets": [{"name": "Bad_Name"}]})", Verdict::kRefused},
    {"a pull Secret without a name", R"({"imagePullSecrets": [{}]})", Verdict::kRefused},
    {"a bad priority class name", R"({"priorityClassName": "Not_A_Name"})", Verdict::kRefused},
    {"a bad service account name", R"({"serviceAccountName": "a b"})", Verdict::kRefused},
    {"a number in the node selector", R"({"nodeSelector": {"gpu": 1}})", Verdict::kRefused},
    {"a host network", R"({"hostNetwork": true})", Verdict::kRefused},
    {"a security context", R"({"securityContext": {"runAsUser": 0}})", Verdict::kRefused},

    // Refused by the CRD, passed on by the operator to the Pod (whose validation refuses it too).
    {"node affinity In without values",
     R"({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In"}]}]}}}})",
     Verdict::kCrdOnly},
    {"node affinity Gt of a word",
     R"({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "mem", "operator": "Gt", "values": ["big"]}]}]}}}})",
     Verdict::kCrdOnly},
    {"a pod affinity term without topologyKey", R"({"affinity": {"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"a": "b"}}}]}}})",
     Verdict::kCrdOnly},
    {"a preference weight of 0",
     R"({"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 0, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}}})",
     Verdict::kCrdOnly},
    {"a spread selector with an unknown operator", R"({"topologySpreadConstraints": [{"maxSkew": 1,
        "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}]})",
     Verdict::kCrdOnly},
    {"a Secret env source without its key",
     R"({"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s"}}}]})", Verdict::kCrdOnly},
    {"a claim volume without claimName", R"({"volumes": [{"name": "c", "persistentVolumeClaim": {}}]})",
     Verdict::kCrdOnly},
    {"a ConfigMap item at an absolute path", R"({"volumes": [{"name": "c", "configMap": {"name": "x",
        "items": [{"key": "a", "path": "/etc/passwd"}]}}]})",
     Verdict::kCrdOnly},
    {"an emptyDir of an unknown medium", R"({"volumes": [{"name": "c", "emptyDir": {"medium": "Disk"}}]})",
     Verdict::kCrdOnly},
};

Json template_of(const Case& c) {
  if (std::string(c.name) == "too many tolerations") {
    Json t = {{"tolerations", Json::array()}};
    for (int i = 0; i < 65; ++i)
      t["tolerations"].push_back({{"key", "k" + std::to_string(i)}, {"operator", "Exists"}});
    return t;
  }
  return Json::parse(c.tmpl);
}

void expect_agreement(const Case& c, bool strict) {
  const Json obj = model_with(template_of(c), c.scheduling);
  Json seen = obj;  // what the operator reads: the object as stored (pruned) unless kubectl refused it
  if (!strict) infergate::testing::prune_unknown_fields(seen, schema());
  const std::vector<std::string> crd = crd_refusals(obj, strict);
  const std::vector<std::string> op = operator_refusals(strict ? obj : seen);
  const std::string where = std::string(c.name) + (strict ? " (kubectl, strict)" : " (pruned)") +
                            "\n  CRD refuses: " + join(crd) + "\n  operator refuses: " + join(op);
  if (!strict && crd.empty() && op.empty()) return;  // what was wrong was an unknown field, now pruned
  switch (c.verdict) {
    case Verdict::kAccepted: EXPECT_TRUE(crd.empty() && op.empty()) << where; break;
    case Verdict::kCrdOnly:
      EXPECT_FALSE(crd.empty()) << where;
      EXPECT_TRUE(op.empty()) << where;
      break;
    case Verdict::kRefused:
      ASSERT_FALSE(crd.empty()) << where;
      ASSERT_FALSE(op.empty()) << where;
      for (const auto& o : op) {
        EXPECT_TRUE(std::any_of(crd.begin(), crd.end(), [&](const std::string& f) { return related(f, o); }))
            << "the operator's " << o << " has no counterpart in the CRD's refusals: " << where;
      }
      for (const auto& f : crd) {
        EXPECT_TRUE(std::any_of(op.begin(), op.end(), [&](const std::string& o) { return related(f, o); }))
            << "the CRD's " << f << " has no counterpart in the operator's refusals: " << where;
      }
      break;
  }
}

TEST(CrdPodTemplate, TheApiServerRefusesWhatTheOperatorRefusesNamingTheSameField) {
  for (const Case& c : kCases) expect_agreement(c, true);
}

TEST(CrdPodTemplate, AgreesOnWhatIsLeftOnceAnUnknownFieldIsPruned) {
  for (const Case& c : kCases) expect_agreement(c, false);
}

TEST(CrdPodTemplate, TheOperatorsReservedNamesAndPathsAreTheCrdsToo) {
  // The CRD spells out the operator's reserved volumes and mount points in its rules; a new one in
  // the operator must reach the CRD.
  const std::string crd = schema().dump();
  for (const auto& name : reserved_volume_names())
    EXPECT_NE(crd.find("'" + name + "'"), std::string::npos) << name;
  for (const auto& path : reserved_mount_paths())
    EXPECT_NE(crd.find("'" + path + "'"), std::string::npos) << path;
}

}  // namespace
}  // namespace infergate::op::api
