// spec.podTemplate: the placement knobs a platform team needs reach the pod configuration, and nothing
// in it can override what verification rests on.
#include "infergate/operator/api/pod_template.h"

#include <gtest/gtest.h>

#include "api/testdata.h"
#include "infergate/operator/api/names.h"

namespace infergate::op::api {
namespace {

Result<InferenceModel> with_template(const Json& tmpl) {
  Json j = testing::valid_model();
  j["spec"]["podTemplate"] = tmpl;
  return parse_inference_model(j);
}

std::string errors_of(const Json& tmpl) {
  Json j = testing::valid_model();
  j["spec"]["podTemplate"] = tmpl;
  std::string out;
  for (const auto& e : validate_spec(j["spec"], nullptr)) out += e.path + ": " + e.message + "\n";
  return out;
}

TEST(PodTemplate, CarriesThePlacementKnobsIntoThePodConfiguration) {
  auto m = with_template(Json::parse(R"({
    "imagePullSecrets": [{"name": "regcred"}],
    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                   "whenUnsatisfiable": "ScheduleAnyway"}],
    "priorityClassName": "inference-high", "runtimeClassName": "nvidia", "serviceAccountName": "serving",
    "env": [{"name": "HF_HOME", "value": "/tmp/hf"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
    "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "10Gi"}}],
    "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]})"));
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  const SchedulingSpec& s = m->spec.scheduling;
  EXPECT_EQ(s.image_pull_secrets, std::vector<std::string>{"regcred"});
  EXPECT_EQ(s.node_selector.at("nvidia.com/gpu.product"), "NVIDIA-H200");
  EXPECT_EQ(s.priority_class_name, "inference-high");
  EXPECT_EQ(s.service_account_name, "serving");
  EXPECT_EQ(s.env.size(), 2u);
  // Part of what defines the pods: it has a revision, and reads back from status as it was.
  PodConfig pc = pod_config(m->spec);
  auto back = pod_config_from_json(canonical_json(pc));
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(revision(*back), revision(pc));
  EXPECT_NE(revision(pc), revision(pod_config(parse_inference_model(testing::valid_model())->spec)));
}

TEST(PodTemplate, AnEmptyTemplateKeepsTheRevisionItHadBefore) {
  auto plain = parse_inference_model(testing::valid_model());
  auto empty = with_template(Json::object());
  ASSERT_TRUE(plain.ok() && empty.ok());
  EXPECT_EQ(revision(pod_config(plain->spec)), revision(pod_config(empty->spec)));
}

TEST(PodTemplate, CannotReplaceOrShadowTheOperatorsVolumesAndMounts) {
  EXPECT_NE(errors_of(Json::parse(R"({"volumes": [{"name": "model-artifacts", "emptyDir": {}}]})"))
                .find("spec.podTemplate.volumes[0].name: \"model-artifacts\" is the operator's own volume"),
            std::string::npos);
  for (const char* path : {"/models", "/models/glm", "/etc/infergate", "/", "/tmp", "/dev/termination-log"}) {
    Json t = Json::parse(R"({"volumes": [{"name": "x", "emptyDir": {}}], "volumeMounts": [{"name": "x"}]})");
    t["volumeMounts"][0]["mountPath"] = path;
    EXPECT_NE(errors_of(t).find("spec.podTemplate.volumeMounts[0].mountPath: would cover"), std::string::npos)
        << path;
  }
  EXPECT_NE(errors_of(Json::parse(R"({"volumeMounts": [{"name": "nope", "mountPath": "/x"}]})"))
                .find("must name a volume"),
            std::string::npos);
}

TEST(PodTemplate, RefusesVolumeTypesTheRestrictedStandardForbids) {
  const std::string e = errors_of(Json::parse(R"({"volumes": [{"name": "host", "hostPath": {"path": "/var"}},
                                                              {"name": "n", "nfs": {"server": "s", "path": "/"}}]})"));
  EXPECT_NE(e.find("spec.podTemplate.volumes[0].hostPath: not a volume type the restricted"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("spec.podTemplate.volumes[1].nfs"), std::string::npos) << e;
}

TEST(PodTemplate, HasNoWayToTouchSecurityContextsHostNamespacesOrTheInitContainer) {
  const std::string e = errors_of(Json::parse(
      R"({"securityContext": {"runAsUser": 0}, "hostNetwork": true, "initContainers": [],
          "automountServiceAccountToken": true, "containers": []})"));
  for (const char* f :
       {"securityContext", "hostNetwork", "initContainers", "automountServiceAccountToken", "containers"})
    EXPECT_NE(e.find(std::string("spec.podTemplate.") + f + ": not a field"), std::string::npos) << f << "\n"
                                                                                                 << e;
}

TEST(PodTemplate, ChecksEnvTolerationsAndSpreadFieldByField) {
  const std::string e = errors_of(Json::parse(R"({
    "env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}, {"name": "INFERGATE_X", "value": "1"},
            {"name": "B"}, {"name": "C", "valueFrom": {"secretKeyRef": {}, "fieldRef": {}}}],
    "tolerations": [{"key": "k", "operator": "Maybe"}],
    "topologySpreadConstraints": [{"maxSkew": 0, "whenUnsatisfiable": "Sometimes"}],
    "priorityClassName": "Not_A_Name"})"));
  for (const char* want :
       {"env[1].name: \"A\" is given twice", "env[2].name: INFERGATE_ variables",
        "env[3]: exactly one of value or valueFrom", "env[4].valueFrom: exactly one source",
        "tolerations[0].operator", "topologySpreadConstraints[0].maxSkew",
        "topologySpreadConstraints[0].topologyKey", "topologySpreadConstraints[0].whenUnsatisfiable",
        "spec.podTemplate.priorityClassName: not a valid object name"})
    EXPECT_NE(e.find(want), std::string::npos) << want << "\n" << e;
}

TEST(PodTemplate, ChecksTolerationsAndSpreadsAcrossFieldsAsThePodApiDoes) {
  const std::string e = errors_of(Json::parse(R"({
    "tolerations": [{"key": "gpu", "operator": "Exists", "value": "h200"}, {"value": "x"},
                    {"key": "gpu", "effect": "NoSchedule", "tolerationSeconds": 60},
                    {"key": "bad key!", "operator": "Exists"}, {"key": "k", "operator": 1}],
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2},
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "nodeTaintsPolicy": "Maybe"}],
    "volumes": [{"name": "x", "emptyDir": {}}],
    "volumeMounts": [{"name": "x", "mountPath": "/etc/"}, {"name": "x", "mountPath": "/etc/"}]})"));
  for (const char* want :
       {"tolerations[0].value: must be empty when operator is Exists",
        "tolerations[1].operator: must be Exists when key is empty",
        "tolerations[2].effect: must be NoExecute when tolerationSeconds is set",
        "tolerations[3].key: not a valid taint key", "tolerations[4].operator: expected a string",
        "topologySpreadConstraints[0].minDomains: can only be used with whenUnsatisfiable DoNotSchedule",
        "topologySpreadConstraints[1]: a second constraint for topologyKey zone",
        "topologySpreadConstraints[1].nodeTaintsPolicy: must be Honor or Ignore",
        "volumeMounts[0].mountPath: would cover /etc/infergate/trust",
        "volumeMounts[1]: a second mount at /etc/"})
    EXPECT_NE(e.find(want), std::string::npos) << want << "\n" << e;
  // The older spec.scheduling.tolerations are checked the same way.
  Json j = testing::valid_model();
  j["spec"]["scheduling"] =
      Json::parse(R"({"tolerations": [{"key": "gpu", "operator": "Exists", "value": "v"}]})");
  auto m = parse_inference_model(j);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(
      m.error().message().find("spec.scheduling.tolerations[0].value: must be empty when operator is Exists"),
      std::string::npos)
      << m.error().message();
}

TEST(PodTemplate, TheOlderSchedulingFieldsAreOneOrTheOther) {
  Json j = testing::valid_model();
  j["spec"]["scheduling"] = {{"nodeSelector", {{"a", "b"}}}};
  j["spec"]["podTemplate"] = {{"nodeSelector", {{"c", "d"}}}};
  auto m = parse_inference_model(j);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("spec.scheduling.nodeSelector: also set in spec.podTemplate"),
            std::string::npos);
}

TEST(Resources, CountsAMigSliceAsOneGpuAndRefusesSeveral) {
  Json j = testing::valid_model();
  j["spec"]["resources"] = {{"limits", {{"nvidia.com/mig-3g.40gb", "1"}}}};
  auto m = parse_inference_model(j);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_EQ(m->spec.resources.gpus(), 1);
  EXPECT_TRUE(m->spec.resources.mig());
  EXPECT_EQ(m->spec.resources.gpu_resource_name(), "nvidia.com/mig-3g.40gb");
  j["spec"]["resources"]["limits"]["nvidia.com/mig-3g.40gb"] = "2";
  m = parse_inference_model(j);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("one MIG slice per pod"), std::string::npos);
  j["spec"]["resources"]["limits"] = {{"nvidia.com/mig-1g.10gb", "1"}, {"nvidia.com/gpu", "1"}};
  EXPECT_FALSE(parse_inference_model(j).ok());
}

}  // namespace
}  // namespace infergate::op::api
