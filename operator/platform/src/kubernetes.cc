// KubernetesPlatform: Deployments, Services, Pods, Secrets (metadata only), Events, status.
#include "infergate/operator/platform/kubernetes.h"

#include <algorithm>

#include "infergate/common/log.h"
#include "infergate/http/client.h"

namespace infergate::op::platform {
namespace {

constexpr std::string_view kVerifyContainer = "verify";
constexpr std::string_view kRuntimeContainer = "runtime";
constexpr std::string_view kCheckContainer = "check";
constexpr std::string_view kJobLabel = "serving.infergate.dev/job";
constexpr int64_t kNonRootUid = 65532;  // the distroless "nonroot" user

Json owner_reference(const ModelRef& m) {
  return Json::array({{{"apiVersion", std::string(api::kApiVersion)},
                       {"kind", std::string(api::kKind)},
                       {"name", m.name},
                       {"uid", m.uid},
                       {"controller", true},
                       {"blockOwnerDeletion", true}}});
}

// The metadata of an object the model owns: its name and labels, the template hash it was rendered
// from (and any further annotations), and the model as its controlling owner.
Json owned_metadata(const ModelRef& model, const std::string& name,
                    const std::map<std::string, std::string>& labels, const std::string& hash,
                    Json annotations = Json::object()) {
  annotations[std::string(api::annotations::kTemplateHash)] = hash;
  return {{"name", name},
          {"namespace", model.namespace_},
          {"labels", labels},
          {"annotations", std::move(annotations)},
          {"ownerReferences", owner_reference(model)}};
}

// "restricted" Pod Security Standard, plus a read-only root filesystem.
Json container_security() {
  return {{"allowPrivilegeEscalation", false},
          {"capabilities", {{"drop", {"ALL"}}}},
          {"privileged", false},
          {"readOnlyRootFilesystem", true},
          {"runAsNonRoot", true},
          {"seccompProfile", {{"type", "RuntimeDefault"}}}};
}

Json env_json(const std::map<std::string, std::string>& env) {
  Json out = Json::array();
  for (const auto& [k, v] : env) out.push_back({{"name", k}, {"value", v}});
  return out;
}

Json resources_json(const api::Resources& r) {
  Json out = Json::object();
  if (!r.requests.empty()) out["requests"] = r.requests;
  if (!r.limits.empty()) out["limits"] = r.limits;
  return out;
}

Json artifact_volume(const api::ArtifactSpec& a) {
  if (a.volume.kind == api::VolumeSource::Kind::kNfs) {
    return {{"name", "model-artifacts"},
            {"nfs", {{"server", a.volume.nfs_server}, {"path", a.volume.nfs_path}, {"readOnly", true}}}};
  }
  return {{"name", "model-artifacts"},
          {"persistentVolumeClaim", {{"claimName", a.volume.claim_name}, {"readOnly", true}}}};
}

Json container_json(std::string_view name, const api::ContainerCommand& c) {
  Json j = {{"name", std::string(name)}, {"image", c.image}, {"args", c.args}};
  if (!c.command.empty()) j["command"] = c.command;
  if (!c.env.empty()) j["env"] = env_json(c.env);
  j["securityContext"] = container_security();
  j["terminationMessagePath"] = "/dev/termination-log";
  return j;
}

const Json* find_named(const Json& list, std::string_view name) {
  if (!list.is_array()) return nullptr;
  for (const auto& item : list) {
    if (item.is_object() && item.value("name", "") == name) return &item;
  }
  return nullptr;
}

std::string str(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

int integer(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_number_integer() ? it->get<int>() : 0;
}

const Json& member(const Json& obj, const char* key) {
  static const Json empty = Json::object();
  auto it = obj.find(key);
  return it != obj.end() && it->is_object() ? *it : empty;
}

// obj[key] when it is an array (a reference into obj, never a temporary), else an empty array.
const Json& list_member(const Json& obj, const char* key) {
  static const Json empty = Json::array();
  auto it = obj.find(key);
  return it != obj.end() && it->is_array() ? *it : empty;
}

std::string annotation(const Json& obj, std::string_view key) {
  const Json& a = member(member(obj, "metadata"), "annotations");
  auto it = a.find(std::string(key));
  return it != a.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string selector_string(const std::map<std::string, std::string>& labels) {
  std::string s;
  for (const auto& [k, v] : labels) s += (s.empty() ? "" : ",") + k + "=" + v;
  return s;
}

// Placement and pod-level fields of spec.podTemplate (validated by api::parse_pod_template). The
// security context, the init container and automountServiceAccountToken stay as rendered.
void apply_pod_template(const api::SchedulingSpec& t, Json& pod_spec) {
  if (!t.node_selector.empty()) pod_spec["nodeSelector"] = t.node_selector;
  if (!t.tolerations.empty()) pod_spec["tolerations"] = t.tolerations;
  if (!t.runtime_class_name.empty()) pod_spec["runtimeClassName"] = t.runtime_class_name;
  if (!t.affinity.empty()) pod_spec["affinity"] = t.affinity;
  if (!t.topology_spread.empty()) pod_spec["topologySpreadConstraints"] = t.topology_spread;
  if (!t.priority_class_name.empty()) pod_spec["priorityClassName"] = t.priority_class_name;
  if (!t.service_account_name.empty()) pod_spec["serviceAccountName"] = t.service_account_name;
  for (const auto& s : t.image_pull_secrets) pod_spec["imagePullSecrets"].push_back({{"name", s}});
}

}  // namespace

api::Layout kubernetes_layout() { return api::Layout{}; }

namespace {

void keep_only(Json& obj, std::initializer_list<const char*> keys) {
  if (!obj.is_object()) return;
  Json kept = Json::object();
  for (const char* k : keys) {
    auto it = obj.find(k);
    if (it != obj.end()) kept[k] = std::move(*it);
  }
  obj = std::move(kept);
}

void trim_metadata(Json& obj) {
  if (auto m = obj.find("metadata"); m != obj.end() && m->is_object()) {
    keep_only(*m, {"name", "namespace", "uid", "resourceVersion", "generation", "labels", "annotations",
                   "ownerReferences", "deletionTimestamp", "finalizers", "creationTimestamp"});
  }
}

}  // namespace

void trim_deployment(Json& d) {
  trim_metadata(d);
  if (auto spec = d.find("spec"); spec != d.end()) keep_only(*spec, {"replicas", "selector", "strategy"});
  keep_only(d, {"apiVersion", "kind", "metadata", "spec", "status"});
}

void trim_pod(Json& p) {
  trim_metadata(p);
  if (auto spec = p.find("spec"); spec != p.end() && spec->is_object()) {
    Json containers = Json::array();
    if (auto cs = spec->find("containers"); cs != spec->end() && cs->is_array()) {
      for (auto& c : *cs) {
        if (c.is_object()) keep_only(c, {"name", "ports"});
        containers.push_back(std::move(c));
      }
    }
    *spec = Json{{"containers", std::move(containers)}};
  }
  keep_only(p, {"apiVersion", "kind", "metadata", "spec", "status"});
}

void trim_owned(Json& o) {
  trim_metadata(o);
  if (auto spec = o.find("spec"); spec != o.end())
    keep_only(*spec, {"selector", "ports", "type", "clusterIP"});
  keep_only(o, {"apiVersion", "kind", "metadata", "spec", "status"});
}

std::vector<std::string> model_index_values(const Json& object) {
  std::string model = client::object_label(object, api::labels::kModel);
  if (model.empty()) return {};
  return {client::object_namespace(object) + "/" + model};
}

// The init step: the agent verifies the tree (fast, early refusal: the pod never starts serving)
// and installs itself into the shared emptyDir for the serving container.
Json verify_container(const WorkloadSpec& spec, const api::Layout& layout) {
  Json verify =
      container_json(kVerifyContainer, api::agent_install_command(spec.verify, api::kAgentInstallDir));
  verify["terminationMessagePolicy"] = "File";  // the agent's JSON verdict, nothing else
  verify["volumeMounts"] =
      Json::array({{{"name", "model-artifacts"}, {"mountPath", layout.model_root}, {"readOnly", true}},
                   {{"name", "trust-keys"}, {"mountPath", layout.trust_dir}, {"readOnly", true}},
                   {{"name", "infergate-agent"}, {"mountPath", std::string(api::kAgentInstallDir)}}});
  verify["resources"] = {{"requests", {{"cpu", "500m"}, {"memory", "128Mi"}}},
                         {"limits", {{"memory", "512Mi"}}}};
  return verify;
}

// The serving container: the engine, started through the installed agent, which verifies the tree
// again before every start of the engine (a restarted container included).
Json serving_container(const WorkloadSpec& spec, const api::Layout& layout) {
  Json runtime = container_json(
      kRuntimeContainer, api::agent_wrapped(spec.verify, spec.engine.container, api::kAgentInstallDir));
  // The agent's JSON verdict when it refuses; the engine's last log lines when it crashes.
  runtime["terminationMessagePolicy"] = "FallbackToLogsOnError";
  runtime["ports"] =
      Json::array({{{"name", "http"}, {"containerPort", spec.engine.port}, {"protocol", "TCP"}}});
  auto probe = [](const std::string& path, int period, int failures) {
    return Json{{"httpGet", {{"path", path}, {"port", "http"}}},
                {"periodSeconds", period},
                {"timeoutSeconds", 3},
                {"failureThreshold", failures}};
  };
  runtime["readinessProbe"] = probe(spec.engine.readiness_path, 5, 3);
  runtime["livenessProbe"] = probe(spec.engine.liveness_path, 10, 6);
  // Loading (and re-hashing) a large model takes minutes: the startup probe allows an hour.
  runtime["startupProbe"] = probe(spec.engine.liveness_path, 10, 360);
  Json res = resources_json(spec.resources);
  if (!res.empty()) runtime["resources"] = res;
  // spec.podTemplate's env and mounts go to the serving container only, after the operator's own.
  for (const auto& e : spec.scheduling.env) runtime["env"].push_back(e);
  Json mounts = Json::array(
      {{{"name", "model-artifacts"}, {"mountPath", layout.model_root}, {"readOnly", true}},
       {{"name", "trust-keys"}, {"mountPath", layout.trust_dir}, {"readOnly", true}},
       {{"name", "infergate-agent"}, {"mountPath", std::string(api::kAgentInstallDir)}, {"readOnly", true}},
       {{"name", "tmp"}, {"mountPath", "/tmp"}}});
  if (spec.engine.needs_shared_memory) mounts.push_back({{"name", "dshm"}, {"mountPath", "/dev/shm"}});
  for (const auto& m : spec.scheduling.volume_mounts) mounts.push_back(m);
  runtime["volumeMounts"] = mounts;
  return runtime;
}

Json pod_volumes(const WorkloadSpec& spec) {
  Json volumes = Json::array(
      {artifact_volume(spec.artifact),
       {{"name", "trust-keys"}, {"secret", {{"secretName", spec.trust_secret}, {"defaultMode", 0444}}}},
       // The agent with its libraries (a few MiB), installed by the init container.
       {{"name", "infergate-agent"}, {"emptyDir", {{"sizeLimit", "256Mi"}}}},
       {{"name", "tmp"}, {"emptyDir", Json::object()}}});
  if (spec.engine.needs_shared_memory) {
    volumes.push_back({{"name", "dshm"}, {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", "8Gi"}}}});
  }
  for (const auto& v : spec.scheduling.volumes) volumes.push_back(v);
  return volumes;
}

Json render_deployment(const ModelRef& model, const WorkloadSpec& spec) {
  const std::string hash = spec.template_hash();
  std::map<std::string, std::string> selector = {
      {std::string(api::labels::kModel), model.name},
      {std::string(api::labels::kTrack), std::string(api::to_string(spec.track))}};
  std::map<std::string, std::string> pod_labels = spec.labels;
  for (const auto& [k, v] : selector) pod_labels[k] = v;
  pod_labels[std::string(api::labels::kRevision)] = spec.revision;
  const api::Layout layout = kubernetes_layout();
  Json verify = verify_container(spec, layout);
  Json runtime = serving_container(spec, layout);
  Json volumes = pod_volumes(spec);
  Json pod_spec = {{"automountServiceAccountToken", false},
                   {"enableServiceLinks", false},
                   {"terminationGracePeriodSeconds", 60},
                   {"securityContext",
                    {{"runAsNonRoot", true},
                     {"runAsUser", kNonRootUid},
                     {"runAsGroup", kNonRootUid},
                     {"fsGroup", kNonRootUid},
                     {"seccompProfile", {{"type", "RuntimeDefault"}}}}},
                   {"initContainers", Json::array({verify})},
                   {"containers", Json::array({runtime})},
                   {"volumes", volumes}};
  apply_pod_template(spec.scheduling, pod_spec);

  return Json{
      {"apiVersion", "apps/v1"},
      {"kind", "Deployment"},
      {"metadata", owned_metadata(model, spec.name, spec.labels, hash,
                                  {{std::string(api::annotations::kRevision), spec.revision}})},
      {"spec",
       {{"replicas", spec.replicas},
        {"selector", {{"matchLabels", selector}}},
        // surge: never lose serving capacity during an update (add the new pod before removing an old
        // one); without: never hold more pods, and so GPUs, than replicas (remove one first).
        {"strategy",
         {{"type", "RollingUpdate"},
          {"rollingUpdate", {{"maxSurge", spec.surge ? 1 : 0}, {"maxUnavailable", spec.surge ? 0 : 1}}}}},
        {"template",
         {{"metadata",
           {{"labels", pod_labels}, {"annotations", {{std::string(api::annotations::kTemplateHash), hash}}}}},
          {"spec", pod_spec}}}}}};
}

Json render_service(const ModelRef& model, const EndpointSpec& spec) {
  return Json{
      {"apiVersion", "v1"},
      {"kind", "Service"},
      {"metadata", owned_metadata(model, spec.name, spec.labels, spec.hash())},
      {"spec",
       {{"type", "ClusterIP"},
        {"selector", spec.selector},
        {"ports",
         Json::array(
             {{{"name", "http"}, {"port", spec.port}, {"targetPort", "http"}, {"protocol", "TCP"}}})}}}};
}

Json render_disruption_budget(const ModelRef& model, const DisruptionBudgetSpec& spec) {
  return Json{{"apiVersion", "policy/v1"},
              {"kind", "PodDisruptionBudget"},
              {"metadata", owned_metadata(model, spec.name, spec.labels, spec.hash())},
              {"spec",
               {{"maxUnavailable", spec.max_unavailable},
                {"selector", {{"matchLabels", spec.selector}}},
                {"unhealthyPodEvictionPolicy", "AlwaysAllow"}}}};
}

PodState pod_state(const Json& pod) {
  PodState p;
  const Json& meta = member(pod, "metadata");
  const Json& status = member(pod, "status");
  p.name = str(meta, "name");
  p.revision = client::object_label(pod, api::labels::kRevision);
  p.deleting = meta.contains("deletionTimestamp");
  std::string phase = str(status, "phase");
  p.phase = phase == "Running"                    ? PodState::Phase::kRunning
            : phase == "Succeeded"                ? PodState::Phase::kSucceeded
            : phase == "Failed"                   ? PodState::Phase::kFailed
            : phase == "Pending" || phase.empty() ? PodState::Phase::kPending
                                                  : PodState::Phase::kUnknown;
  for (const auto& cond : list_member(status, "conditions")) {
    if (!cond.is_object()) continue;
    const std::string type = cond.value("type", "");
    if (type == "Ready") p.ready = cond.value("status", "") == "True";
    if (type == "PodScheduled" && cond.value("status", "") == "False" &&
        cond.value("reason", "") == "Unschedulable") {
      p.unschedulable = true;
      p.schedule_message = str(cond, "message");
    }
  }
  std::string ip = str(status, "podIP");
  if (const Json* v = find_named(list_member(status, "initContainerStatuses"), kVerifyContainer)) {
    const Json& state = member(*v, "state");
    const Json& last = member(*v, "lastState");
    p.verify.restarts = integer(*v, "restartCount");
    auto from_terminated = [&](const Json& t) {
      p.verify.exit_code = integer(t, "exitCode");
      p.verify.termination_message = str(t, "message");
      p.verify.phase = p.verify.exit_code == 0 ? VerifyState::Phase::kSucceeded : VerifyState::Phase::kFailed;
    };
    if (state.contains("terminated")) {
      from_terminated(member(state, "terminated"));
    } else if (state.contains("running")) {
      p.verify.phase = VerifyState::Phase::kRunning;
      // A restarted verifier failed before: keep that verdict visible while it retries.
      if (last.contains("terminated") && integer(member(last, "terminated"), "exitCode") != 0) {
        from_terminated(member(last, "terminated"));
      }
    } else if (state.contains("waiting")) {
      p.verify.waiting_reason = str(member(state, "waiting"), "reason");
      p.verify.waiting_message = str(member(state, "waiting"), "message");
      if (last.contains("terminated")) from_terminated(member(last, "terminated"));
    }
  }
  auto time_of = [](const std::string& text) -> std::optional<WallTime> {
    if (text.empty()) return std::nullopt;
    auto t = parse_rfc3339(text);
    return t.ok() ? std::optional<WallTime>(*t) : std::nullopt;
  };
  p.started_at = time_of(str(status, "startTime"));
  if (const Json* r = find_named(list_member(status, "containerStatuses"), kRuntimeContainer)) {
    p.restarts = integer(*r, "restartCount");
    const Json& state = member(*r, "state");
    const Json& last = member(*r, "lastState");
    if (state.contains("waiting")) {
      p.waiting_reason = str(member(state, "waiting"), "reason");
      p.message = str(member(state, "waiting"), "message");
    }
    if (last.contains("terminated")) {
      const Json& t = member(last, "terminated");
      p.last_termination_reason = str(t, "reason");
      p.last_exit_code = integer(t, "exitCode");
      p.last_terminated_at = time_of(str(t, "finishedAt"));
      if (!str(t, "message").empty())
        p.message = str(t, "message");  // why the runtime exited (its own words)
    }
  }
  if (!ip.empty()) {
    int port = 0;
    const Json& spec = member(pod, "spec");
    if (const Json* rc = find_named(list_member(spec, "containers"), kRuntimeContainer)) {
      if (const Json* hp = find_named(list_member(*rc, "ports"), "http"))
        port = integer(*hp, "containerPort");
    }
    p.address = port ? ip + ":" + std::to_string(port) : ip;
  }
  return p;
}

Json render_job(const ModelRef& model, const JobSpec& spec) {
  Json check = container_json(kCheckContainer, spec.container);
  check["terminationMessagePolicy"] = "File";  // the check's JSON result, nothing else
  check["resources"] = {{"requests", {{"cpu", "500m"}, {"memory", "256Mi"}}},
                        {"limits", {{"memory", "2Gi"}}}};
  check["volumeMounts"] = Json::array({{{"name", "tmp"}, {"mountPath", "/tmp"}}});
  std::map<std::string, std::string> pod_labels = spec.labels;
  pod_labels[std::string(kJobLabel)] = spec.name;
  Json pod_spec = {{"automountServiceAccountToken", false},
                   {"enableServiceLinks", false},
                   {"restartPolicy", "Never"},
                   {"securityContext",
                    {{"runAsNonRoot", true},
                     {"runAsUser", kNonRootUid},
                     {"runAsGroup", kNonRootUid},
                     {"seccompProfile", {{"type", "RuntimeDefault"}}}}},
                   {"containers", Json::array({check})},
                   {"volumes", Json::array({{{"name", "tmp"}, {"emptyDir", Json::object()}}})}};
  return Json{{"apiVersion", "batch/v1"},
              {"kind", "Job"},
              {"metadata", owned_metadata(model, spec.name, spec.labels, spec.hash())},
              {"spec",
               {{"backoffLimit", 0},
                {"activeDeadlineSeconds", spec.deadline_seconds},
                {"template", {{"metadata", {{"labels", pod_labels}}}, {"spec", pod_spec}}}}}};
}

JobState job_state(const Json& job, const std::vector<const Json*>& pods) {
  JobState j;
  j.exists = true;
  j.hash = annotation(job, api::annotations::kTemplateHash);
  const Json& status = member(job, "status");
  bool complete = false, failed = false;
  for (const auto& c : list_member(status, "conditions")) {
    if (!c.is_object() || c.value("status", "") != "True") continue;
    const std::string type = c.value("type", "");
    if (type == "Complete") complete = true;
    if (type == "Failed") {
      failed = true;
      j.reason = str(c, "reason");
      j.message = str(c, "message");
      if (auto t = parse_rfc3339(str(c, "lastTransitionTime")); t.ok()) j.failed_at = *t;
    }
  }
  if (integer(status, "active") > 0) j.phase = JobState::Phase::kRunning;
  // The newest pod that got anywhere tells how the check itself ended.
  for (const Json* p : pods) {
    const Json& pst = member(*p, "status");
    const Json* c = find_named(list_member(pst, "containerStatuses"), kCheckContainer);
    if (!c) continue;
    const Json& state = member(*c, "state");
    if (state.contains("terminated")) {
      const Json& t = member(state, "terminated");
      j.terminated = true;
      j.exit_code = integer(t, "exitCode");
      j.termination_message = str(t, "message");
      if (j.reason.empty() && j.exit_code != 0) j.reason = str(t, "reason");
    } else if (state.contains("waiting") && !j.terminated) {
      std::string why = str(member(state, "waiting"), "reason");
      if (!why.empty() && why != "ContainerCreating" && why != "PodInitializing") {
        j.reason = why;
        j.message = str(member(state, "waiting"), "message");
      }
    } else if (state.contains("running") && j.phase == JobState::Phase::kPending) {
      j.phase = JobState::Phase::kRunning;
    }
  }
  if (complete) j.phase = JobState::Phase::kSucceeded;
  if (failed) j.phase = JobState::Phase::kFailed;
  return j;
}

WorkloadState workload_state(const Json& d, const std::vector<const Json*>& pods) {
  WorkloadState w;
  w.exists = true;
  w.template_hash = annotation(d, api::annotations::kTemplateHash);
  w.revision = annotation(d, api::annotations::kRevision);
  const Json& spec = member(d, "spec");
  const Json& status = member(d, "status");
  w.replicas = spec.contains("replicas") ? integer(spec, "replicas") : 1;
  w.updated_replicas = integer(status, "updatedReplicas");
  w.ready_replicas = integer(status, "readyReplicas");
  w.available_replicas = integer(status, "availableReplicas");
  int64_t generation = member(d, "metadata").value("generation", int64_t{0});
  int64_t observed = status.value("observedGeneration", int64_t{0});
  w.observed_current = observed >= generation;
  // The ReplicaSet's refusal to create a pod, as the Deployment controller copies it.
  for (const auto& c : list_member(status, "conditions")) {
    if (c.is_object() && c.value("type", "") == "ReplicaFailure" && c.value("status", "") == "True") {
      w.failure_reason = str(c, "reason");
      w.failure_message = str(c, "message");
    }
  }
  // maxSurge 0 (an integer or "0%") is the no-surge strategy; anything else, or none, surges.
  const Json& surge = member(member(spec, "strategy"), "rollingUpdate").value("maxSurge", Json(1));
  w.surge = !(surge == Json(0) || surge == Json("0") || surge == Json("0%"));
  for (const Json* p : pods) w.pods.push_back(pod_state(*p));
  std::sort(w.pods.begin(), w.pods.end(),
            [](const PodState& a, const PodState& b) { return a.name < b.name; });
  return w;
}

KubernetesPlatform::KubernetesPlatform(client::Client& client, cache::InformerCache& cache, Clock& clock,
                                       std::chrono::nanoseconds trust_ttl)
    : client_(client), cache_(cache), clock_(clock), trust_ttl_(trust_ttl) {}

Result<WorkloadState> KubernetesPlatform::observe_workload(const ModelRef& model,
                                                           const std::string& workload) {
  cache::Object d = cache_.get_object(client::kinds::deployment(), model.namespace_, workload);
  if (!d) return WorkloadState{};
  std::map<std::string, std::string> match;
  for (const auto& [k, v] : member(member(member(*d, "spec"), "selector"), "matchLabels").items()) {
    if (v.is_string()) match[k] = v.get<std::string>();
  }
  std::vector<cache::Object> pods;
  if (!match.empty()) {
    INFERGATE_ASSIGN_OR_RETURN(
        pods, cache_.list_indexed(client::kinds::pod(), model.namespace_, std::string(kModelIndex),
                                  model.key(), selector_string(match)));
  }
  std::vector<const Json*> ptrs;
  for (const auto& p : pods) ptrs.push_back(p.get());
  return workload_state(*d, ptrs);
}

Result<EndpointState> KubernetesPlatform::observe_endpoint(const ModelRef& model,
                                                           const std::string& endpoint) {
  cache::Object s = cache_.get_object(client::kinds::service(), model.namespace_, endpoint);
  EndpointState e;
  e.url = "http://" + endpoint + "." + model.namespace_ + ".svc:80";
  if (!s) return e;
  e.exists = true;
  e.hash = annotation(*s, api::annotations::kTemplateHash);
  return e;
}

Result<std::vector<std::string>> KubernetesPlatform::list_workloads(const ModelRef& model) {
  INFERGATE_ASSIGN_OR_RETURN(
      auto ds, cache_.list_indexed(client::kinds::deployment(), model.namespace_, std::string(kModelIndex),
                                   model.key(), std::string(api::labels::kModel) + "=" + model.name));
  std::vector<std::string> names;
  for (const auto& d : ds) names.push_back(client::object_name(*d));
  std::sort(names.begin(), names.end());
  return names;
}

Result<TrustState> KubernetesPlatform::check_trust(const ModelRef& model, const api::TrustSpec& trust) {
  const std::string key = model.namespace_ + "/" + trust.public_key_secret;
  const MonoTime now = clock_.mono_now();
  {
    std::lock_guard lock(trust_mu_);
    auto it = trust_seen_.find(key);
    if (it != trust_seen_.end() && now - it->second < trust_ttl_) return TrustState::kPresent;
  }
  auto s = client_.get(client::kinds::secret(), model.namespace_, trust.public_key_secret, {true});
  std::lock_guard lock(trust_mu_);
  if (s.ok()) {
    if (trust_seen_.size() > 65536) trust_seen_.clear();
    trust_seen_[key] = now;
    return TrustState::kPresent;
  }
  trust_seen_.erase(key);
  if (client::is_not_found(s.error())) return TrustState::kMissing;
  if (s.error().code() == ErrorCode::kPermissionDenied) return TrustState::kForbidden;
  return std::move(s).error().context("checking the trust key Secret");
}

Status KubernetesPlatform::apply_workload(const ModelRef& model, const WorkloadSpec& spec) {
  Json d = render_deployment(model, spec);
  auto r = client_.patch(client::kinds::deployment(), model.namespace_, spec.name, client::PatchType::kApply,
                         d, {std::string(kFieldManager), true, ""});
  if (!r.ok()) return std::move(r).error();
  return ok_status();
}

Status KubernetesPlatform::scale_workload(const ModelRef& model, const std::string& workload,
                                          int32_t replicas) {
  auto r = client_.patch(client::kinds::deployment(), model.namespace_, workload, client::PatchType::kMerge,
                         {{"spec", {{"replicas", replicas}}}});
  if (!r.ok()) return std::move(r).error();
  return ok_status();
}

Status KubernetesPlatform::delete_workload(const ModelRef& model, const std::string& workload) {
  Status st = client_.remove(client::kinds::deployment(), model.namespace_, workload);
  if (!st.ok() && !client::is_not_found(st.error())) return st;
  return ok_status();
}

Status KubernetesPlatform::apply_endpoint(const ModelRef& model, const EndpointSpec& spec) {
  auto r = client_.patch(client::kinds::service(), model.namespace_, spec.name, client::PatchType::kApply,
                         render_service(model, spec), {std::string(kFieldManager), true, ""});
  if (!r.ok()) return std::move(r).error();
  return ok_status();
}

Result<DisruptionBudgetState> KubernetesPlatform::observe_disruption_budget(const ModelRef& model,
                                                                            const std::string& name) {
  cache::Object b = cache_.get_object(client::kinds::pod_disruption_budget(), model.namespace_, name);
  DisruptionBudgetState s;
  if (!b) return s;
  s.exists = true;
  s.hash = annotation(*b, api::annotations::kTemplateHash);
  return s;
}

Status KubernetesPlatform::apply_disruption_budget(const ModelRef& model, const DisruptionBudgetSpec& spec) {
  auto r = client_.patch(client::kinds::pod_disruption_budget(), model.namespace_, spec.name,
                         client::PatchType::kApply, render_disruption_budget(model, spec),
                         {std::string(kFieldManager), true, ""});
  if (!r.ok()) return std::move(r).error();
  return ok_status();
}

Status KubernetesPlatform::cleanup(const ModelRef& model) {
  // The garbage collector removes owned objects too; deleting them here keeps clusters without one
  // (and the time before it runs) tidy. Only objects still labelled for this model name are touched,
  // and only if no live InferenceModel of that name owns them.
  std::string selector = std::string(api::labels::kModel) + "=" + model.name;
  for (const auto* kind : {&client::kinds::deployment(), &client::kinds::service(), &client::kinds::job(),
                           &client::kinds::pod_disruption_budget()}) {
    INFERGATE_ASSIGN_OR_RETURN(
        auto objs,
        cache_.list_indexed(*kind, model.namespace_, std::string(kModelIndex), model.key(), selector));
    for (const auto& o : objs) {
      if (member(*o, "metadata").contains("deletionTimestamp")) continue;
      client::DeleteOptions opts;
      opts.precondition_uid = client::object_uid(*o);
      Status st = client_.remove(*kind, model.namespace_, client::object_name(*o), opts);
      if (!st.ok() && !client::is_not_found(st.error()) && !client::is_conflict(st.error())) return st;
    }
  }
  return ok_status();
}

Status KubernetesPlatform::apply_job(const ModelRef& model, const JobSpec& spec) {
  if (cache_.get_object(client::kinds::job(), model.namespace_, spec.name)) return ok_status();
  auto r = client_.create(client::kinds::job(), render_job(model, spec));
  if (!r.ok() && !client::is_already_exists(r.error())) return std::move(r).error();
  return ok_status();
}

Result<JobState> KubernetesPlatform::observe_job(const ModelRef& model, const std::string& job) {
  cache::Object j = cache_.get_object(client::kinds::job(), model.namespace_, job);
  if (!j) return JobState{};
  INFERGATE_ASSIGN_OR_RETURN(
      auto pods, cache_.list_indexed(client::kinds::pod(), model.namespace_, std::string(kModelIndex),
                                     model.key(), std::string(kJobLabel) + "=" + job));
  std::vector<const Json*> ptrs;
  for (const auto& p : pods) ptrs.push_back(p.get());
  return job_state(*j, ptrs);
}

Status KubernetesPlatform::delete_job(const ModelRef& model, const std::string& job) {
  client::DeleteOptions opts;
  opts.propagation_policy = "Background";  // its pod goes too
  Status st = client_.remove(client::kinds::job(), model.namespace_, job, opts);
  if (!st.ok() && !client::is_not_found(st.error())) return st;
  return ok_status();
}

std::string KubernetesPlatform::pod_url(const ModelRef&, const PodState& pod) {
  return pod.address.empty() ? "" : "http://" + pod.address;
}

Result<HttpResponse> KubernetesPlatform::http_get(const ModelRef&, const std::string& url,
                                                  std::chrono::milliseconds timeout) {
  http::ClientRequest request;
  request.timeout = timeout;
  request.max_body = kMaxScrapeBytes;
  INFERGATE_ASSIGN_OR_RETURN(http::ClientResponse r, http::fetch(url, request));
  return HttpResponse{r.status, std::move(r.body)};
}

Result<std::optional<Json>> KubernetesModelStore::get(const std::string& ns, const std::string& name) {
  cache::Object o = cache_.get_object(client::kinds::inference_model(), ns, name);
  const std::string key = ns + "/" + name;
  std::lock_guard lock(mu_);
  auto it = written_.find(key);
  if (it != written_.end()) {
    if (o && client::object_resource_version(*o) == it->second.base_resource_version) {
      return std::optional<Json>(it->second.object);  // the cache has not seen our write yet
    }
    written_.erase(it);  // caught up (or changed by someone else): the cache is the truth again
  }
  if (!o) return std::optional<Json>();
  return std::optional<Json>(*o);
}

Result<std::optional<Json>> KubernetesModelStore::get_fresh(const std::string& ns, const std::string& name) {
  {
    std::lock_guard lock(mu_);
    written_.erase(ns + "/" + name);
  }
  auto o = client_.get(client::kinds::inference_model(), ns, name);
  if (o.ok()) return std::optional<Json>(std::move(*o));
  if (client::is_not_found(o.error())) return std::optional<Json>();
  return std::move(o).error();
}

Result<Json> KubernetesModelStore::write_status(const Json& base, const Json& status) {
  Json obj = base;
  obj["status"] = status;
  auto written = client_.update_status(client::kinds::inference_model(), obj);
  if (!written.ok()) return written;
  cache::Object cached = cache_.get_object(client::kinds::inference_model(), client::object_namespace(base),
                                           client::object_name(base));
  std::lock_guard lock(mu_);
  // Remember our write only while the cache still shows the very version we wrote over. If it has
  // moved on (to our write, or past it: someone changed the spec meanwhile), the cache is the truth;
  // remembering our answer then would hide the newer object until the next change.
  if (cached && client::object_resource_version(*cached) == client::object_resource_version(base)) {
    Json stored = *written;
    cache::strip_managed_fields(stored);
    if (written_.size() > 65536) written_.clear();
    written_[client::object_key(base)] = Written{client::object_resource_version(base), std::move(stored)};
  } else {
    written_.erase(client::object_key(base));
  }
  return written;
}

KubernetesEventRecorder::KubernetesEventRecorder(client::Writer& writer, Clock& clock, std::string instance)
    : writer_(writer), clock_(clock), instance_(std::move(instance)) {
  thread_ = std::thread([this] { run(); });
}

KubernetesEventRecorder::~KubernetesEventRecorder() {
  flush();
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void KubernetesEventRecorder::emit(const ModelRef& model, const EventRecord& event) {
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= 10000) {
      log::warn("event queue full, dropping an event", {{"model", model.key()}, {"reason", event.reason}});
      return;
    }
    queue_.push_back(Item{model, event, clock_.wall_now()});
  }
  cv_.notify_one();
}

void KubernetesEventRecorder::flush() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

size_t KubernetesEventRecorder::written() const {
  std::lock_guard lock(mu_);
  return written_;
}

void KubernetesEventRecorder::run() {
  for (;;) {
    Item item;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    write(item);
    {
      std::lock_guard lock(mu_);
      busy_ = false;
      ++written_;
    }
    idle_cv_.notify_all();
  }
}

void KubernetesEventRecorder::write(const Item& item) {
  const std::string type = item.event.type == EventRecord::Type::kWarning ? "Warning" : "Normal";
  std::string message = item.event.message.substr(0, 1024);
  const std::string key = item.model.uid + "|" + type + "|" + item.event.reason + "|" + message;
  const std::string at = format_rfc3339(item.at);
  std::optional<Seen> seen;
  {
    std::lock_guard lock(mu_);
    if (auto it = seen_.find(key);
        it != seen_.end() && item.at - it->second.last < std::chrono::minutes(10)) {
      seen = it->second;
    }
  }
  if (seen) {
    auto r = writer_.patch(client::kinds::event(), item.model.namespace_, seen->name,
                           client::PatchType::kMerge, {{"count", seen->count + 1}, {"lastTimestamp", at}});
    if (r.ok()) {
      std::lock_guard lock(mu_);
      seen_[key] = Seen{seen->name, seen->count + 1, item.at};
      return;
    }
    // The event may have expired on the server: write a new one below.
  }
  std::string name;
  {
    std::lock_guard lock(mu_);
    name = item.model.name + "." + api::short_hash(key + at + std::to_string(++counter_), 16);
    if (seen_.size() > 4096) seen_.clear();
  }
  Json ev = {{"apiVersion", "v1"},
             {"kind", "Event"},
             {"metadata", {{"name", name}, {"namespace", item.model.namespace_}}},
             {"involvedObject",
              {{"apiVersion", std::string(api::kApiVersion)},
               {"kind", std::string(api::kKind)},
               {"name", item.model.name},
               {"namespace", item.model.namespace_},
               {"uid", item.model.uid}}},
             {"reason", item.event.reason},
             {"message", message},
             {"type", type},
             {"source", {{"component", "infergate-operator"}}},
             {"reportingComponent", "infergate-operator"},
             {"reportingInstance", instance_},
             {"firstTimestamp", at},
             {"lastTimestamp", at},
             {"count", 1}};
  auto r = writer_.create(client::kinds::event(), ev);
  if (!r.ok()) {
    log::warn("cannot record an event",
              {{"model", item.model.key()}, {"reason", item.event.reason}, {"error", r.error().to_string()}});
    return;
  }
  std::lock_guard lock(mu_);
  seen_[key] = Seen{name, 1, item.at};
}

}  // namespace infergate::op::platform
