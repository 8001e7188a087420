// Names, labels and revision hashes.
#include "infergate/operator/api/names.h"

#include <openssl/evp.h>

#include "infergate/common/encoding.h"

namespace infergate::op::api {

std::string_view to_string(Track t) { return t == Track::kStable ? "stable" : "canary"; }

std::string workload_name(std::string_view model, Track track) {
  return track == Track::kStable ? std::string(model) : std::string(model) + "-canary";
}

std::string endpoint_name(std::string_view model) { return std::string(model); }

std::string track_endpoint_name(std::string_view model, Track track) {
  return std::string(model) + "-" + std::string(to_string(track));
}

std::string quality_job_name(std::string_view model, std::string_view revision) {
  return std::string(model) + "-q-" + std::string(revision);
}

PodConfig pod_config(const InferenceModelSpec& spec) {
  return PodConfig{spec.artifact, spec.engine, spec.serving, spec.resources, spec.scheduling};
}

PodConfig pod_config(const InferenceModelSpec& spec, const Images& images) {
  PodConfig c = pod_config(spec);
  c.images = images;
  return c;
}

const Images& images_of(const PodConfig& config, const Images& images) {
  return config.images.agent.empty() ? images : config.images;
}

Json canonical_json(const PodConfig& c) {
  Json volume;
  if (c.artifact.volume.kind == VolumeSource::Kind::kPersistentVolumeClaim) {
    volume = {{"persistentVolumeClaim", {{"claimName", c.artifact.volume.claim_name}}}};
  } else {
    volume = {{"nfs", {{"server", c.artifact.volume.nfs_server}, {"path", c.artifact.volume.nfs_path}}}};
  }
  Json trust = {{"publicKeySecretRef", c.artifact.trust.public_key_secret},
                {"expectName", c.artifact.trust.expect_name}};
  if (c.artifact.trust.min_version) trust["minVersion"] = *c.artifact.trust.min_version;
  // Written only when set, so that objects made before these fields existed keep their hash.
  if (!c.artifact.trust.formats.empty()) trust["formats"] = c.artifact.trust.formats;
  if (!c.artifact.trust.identities.empty()) {
    Json ids = Json::array();
    for (const auto& id : c.artifact.trust.identities)
      ids.push_back({{"subject", id.subject}, {"issuer", id.issuer}});
    trust["identities"] = std::move(ids);
  }
  Json scheduling = {{"nodeSelector", c.scheduling.node_selector},
                     {"tolerations", c.scheduling.tolerations},
                     {"runtimeClassName", c.scheduling.runtime_class_name}};
  // spec.podTemplate's other fields, only when set: a configuration without them keeps the revision
  // it had before they existed (no stage for an operator upgrade).
  const SchedulingSpec& t = c.scheduling;
  if (!t.affinity.empty()) scheduling["affinity"] = t.affinity;
  if (!t.topology_spread.empty()) scheduling["topologySpreadConstraints"] = t.topology_spread;
  if (!t.priority_class_name.empty()) scheduling["priorityClassName"] = t.priority_class_name;
  if (!t.service_account_name.empty()) scheduling["serviceAccountName"] = t.service_account_name;
  if (!t.image_pull_secrets.empty()) scheduling["imagePullSecrets"] = t.image_pull_secrets;
  if (!t.env.empty()) scheduling["env"] = t.env;
  if (!t.volumes.empty()) scheduling["volumes"] = t.volumes;
  if (!t.volume_mounts.empty()) scheduling["volumeMounts"] = t.volume_mounts;
  Json out{
      {"artifact", {{"volume", volume}, {"path", c.artifact.path}, {"trust", trust}}},
      {"engine",
       {{"kind", to_string(c.engine.kind)},
        {"image", c.engine.image},
        {"args", c.engine.args},
        {"quantization", c.engine.quantization},
        {"modelFile", c.engine.model_file}}},
      {"serving",
       {{"weightFormat", to_string(c.serving.weight_format)},
        {"kvCacheDtype", to_string(c.serving.kv_cache_dtype)},
        {"maxContextLength", c.serving.max_context_length},
        {"maxConcurrency", c.serving.max_concurrency}}},
      {"resources", {{"requests", c.resources.requests}, {"limits", c.resources.limits}}},
      {"scheduling", scheduling},
  };
  if (!c.images.agent.empty()) {
    out["images"] = {
        {"agent", c.images.agent}, {"runtime", c.images.runtime}, {"runtimeCuda", c.images.runtime_cuda}};
  }
  return out;
}

namespace {

Result<std::map<std::string, std::string>> string_map(const Json& obj, const char* key,
                                                      const std::string& path) {
  std::map<std::string, std::string> out;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return out;
  if (!it->is_object()) return invalid_argument(path + "." + key + ": expected an object");
  for (const auto& [k, v] : it->items()) {
    if (!v.is_string()) return invalid_argument(path + "." + key + "." + k + ": expected a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

}  // namespace

Result<PodConfig> pod_config_from_json(const Json& j) {
  const std::string p = "podConfig";
  if (!j.is_object()) return invalid_argument(p + ": expected an object");
  PodConfig c;
  const Json& a = j.contains("artifact") ? j["artifact"] : Json::object();
  const Json& vol = a.contains("volume") ? a["volume"] : Json::object();
  if (vol.contains("nfs")) {
    c.artifact.volume.kind = VolumeSource::Kind::kNfs;
    INFERGATE_ASSIGN_OR_RETURN(c.artifact.volume.nfs_server,
                               json_string(vol["nfs"], "server", p + ".artifact.volume.nfs"));
    INFERGATE_ASSIGN_OR_RETURN(c.artifact.volume.nfs_path,
                               json_string(vol["nfs"], "path", p + ".artifact.volume.nfs"));
  } else if (vol.contains("persistentVolumeClaim")) {
    INFERGATE_ASSIGN_OR_RETURN(
        c.artifact.volume.claim_name,
        json_string(vol["persistentVolumeClaim"], "claimName", p + ".artifact.volume.persistentVolumeClaim"));
  } else {
    return invalid_argument(p + ".artifact.volume: neither persistentVolumeClaim nor nfs");
  }
  INFERGATE_ASSIGN_OR_RETURN(c.artifact.path, json_string(a, "path", p + ".artifact"));
  const Json& t = a.contains("trust") ? a["trust"] : Json::object();
  INFERGATE_ASSIGN_OR_RETURN(c.artifact.trust.public_key_secret,
                             json_string_or(t, "publicKeySecretRef", "", p + ".artifact.trust"));
  INFERGATE_ASSIGN_OR_RETURN(c.artifact.trust.expect_name,
                             json_string_or(t, "expectName", "", p + ".artifact.trust"));
  if (t.contains("minVersion")) {
    INFERGATE_ASSIGN_OR_RETURN(int64_t v, json_int(t, "minVersion", p + ".artifact.trust"));
    c.artifact.trust.min_version = v;
  }
  for (const auto& f : t.value("formats", Json::array())) {
    if (!f.is_string()) return invalid_argument(p + ".artifact.trust.formats: expected strings");
    c.artifact.trust.formats.push_back(f.get<std::string>());
  }
  for (const auto& id : t.value("identities", Json::array())) {
    INFERGATE_ASSIGN_OR_RETURN(std::string subject,
                               json_string(id, "subject", p + ".artifact.trust.identities"));
    INFERGATE_ASSIGN_OR_RETURN(std::string issuer,
                               json_string(id, "issuer", p + ".artifact.trust.identities"));
    c.artifact.trust.identities.push_back({std::move(subject), std::move(issuer)});
  }
  const Json& e = j.contains("engine") ? j["engine"] : Json::object();
  INFERGATE_ASSIGN_OR_RETURN(std::string kind, json_string_or(e, "kind", "bundled", p + ".engine"));
  INFERGATE_ASSIGN_OR_RETURN(c.engine.kind, parse_engine_kind(kind, p + ".engine.kind"));
  INFERGATE_ASSIGN_OR_RETURN(c.engine.image, json_string_or(e, "image", "", p + ".engine"));
  if (auto args = e.find("args"); args != e.end() && args->is_array()) {
    for (const auto& x : *args) {
      if (!x.is_string()) return invalid_argument(p + ".engine.args: expected strings");
      c.engine.args.push_back(x.get<std::string>());
    }
  }
  INFERGATE_ASSIGN_OR_RETURN(c.engine.quantization, json_string_or(e, "quantization", "", p + ".engine"));
  INFERGATE_ASSIGN_OR_RETURN(c.engine.model_file, json_string_or(e, "modelFile", "", p + ".engine"));
  const Json& s = j.contains("serving") ? j["serving"] : Json::object();
  INFERGATE_ASSIGN_OR_RETURN(std::string wf, json_string(s, "weightFormat", p + ".serving"));
  INFERGATE_ASSIGN_OR_RETURN(c.serving.weight_format, parse_weight_format(wf, p + ".serving.weightFormat"));
  INFERGATE_ASSIGN_OR_RETURN(std::string kv, json_string(s, "kvCacheDtype", p + ".serving"));
  INFERGATE_ASSIGN_OR_RETURN(c.serving.kv_cache_dtype, parse_kv_cache_dtype(kv, p + ".serving.kvCacheDtype"));
  INFERGATE_ASSIGN_OR_RETURN(c.serving.max_context_length, json_int(s, "maxContextLength", p + ".serving"));
  INFERGATE_ASSIGN_OR_RETURN(c.serving.max_concurrency, json_int(s, "maxConcurrency", p + ".serving"));
  const Json& r = j.contains("resources") ? j["resources"] : Json::object();
  INFERGATE_ASSIGN_OR_RETURN(c.resources.requests, string_map(r, "requests", p + ".resources"));
  INFERGATE_ASSIGN_OR_RETURN(c.resources.limits, string_map(r, "limits", p + ".resources"));
  const Json& sc = j.contains("scheduling") ? j["scheduling"] : Json::object();
  INFERGATE_ASSIGN_OR_RETURN(c.scheduling.node_selector, string_map(sc, "nodeSelector", p + ".scheduling"));
  if (auto tol = sc.find("tolerations"); tol != sc.end() && tol->is_array()) c.scheduling.tolerations = *tol;
  INFERGATE_ASSIGN_OR_RETURN(c.scheduling.runtime_class_name,
                             json_string_or(sc, "runtimeClassName", "", p + ".scheduling"));
  // What canonical_json wrote (and parse_pod_template validated before): read back as it was.
  auto json_of = [&](const char* key, Json& out, bool array) {
    auto it = sc.find(key);
    if (it != sc.end() && (array ? it->is_array() : it->is_object())) out = *it;
  };
  json_of("affinity", c.scheduling.affinity, false);
  json_of("topologySpreadConstraints", c.scheduling.topology_spread, true);
  json_of("env", c.scheduling.env, true);
  json_of("volumes", c.scheduling.volumes, true);
  json_of("volumeMounts", c.scheduling.volume_mounts, true);
  INFERGATE_ASSIGN_OR_RETURN(c.scheduling.priority_class_name,
                             json_string_or(sc, "priorityClassName", "", p + ".scheduling"));
  INFERGATE_ASSIGN_OR_RETURN(c.scheduling.service_account_name,
                             json_string_or(sc, "serviceAccountName", "", p + ".scheduling"));
  if (auto ips = sc.find("imagePullSecrets"); ips != sc.end() && ips->is_array()) {
    for (const auto& x : *ips) {
      if (x.is_string()) c.scheduling.image_pull_secrets.push_back(x.get<std::string>());
    }
  }
  if (auto im = j.find("images"); im != j.end() && im->is_object()) {
    INFERGATE_ASSIGN_OR_RETURN(c.images.agent, json_string(*im, "agent", p + ".images"));
    INFERGATE_ASSIGN_OR_RETURN(c.images.runtime, json_string_or(*im, "runtime", "", p + ".images"));
    INFERGATE_ASSIGN_OR_RETURN(c.images.runtime_cuda, json_string_or(*im, "runtimeCuda", "", p + ".images"));
  }
  return c;
}

std::string short_hash(std::string_view data, size_t hex_chars) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  std::string hex = hex_encode(std::span<const uint8_t>(md, len));
  return hex.substr(0, std::min(hex_chars, hex.size()));
}

std::string revision(const PodConfig& config) { return short_hash(dump_json(canonical_json(config))); }

ReleaseConfig release_config(const PodConfig& config) {
  ReleaseConfig r;
  r.serving = config.serving;
  r.engine = config.engine.kind;
  r.artifact_path = config.artifact.path;
  r.revision = revision(config);
  r.summary = summarize(config.serving);
  r.pod_config = canonical_json(config);
  return r;
}

}  // namespace infergate::op::api
