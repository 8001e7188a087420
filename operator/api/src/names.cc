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
  return Json{
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
      {"scheduling",
       {{"nodeSelector", c.scheduling.node_selector},
        {"tolerations", c.scheduling.tolerations},
        {"runtimeClassName", c.scheduling.runtime_class_name}}},
  };
}

std::string short_hash(std::string_view data, size_t hex_chars) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  std::string hex = hex_encode(std::span<const uint8_t>(md, len));
  return hex.substr(0, std::min(hex_chars, hex.size()));
}

std::string revision(const PodConfig& config) { return short_hash(canonical_json(config).dump()); }

ReleaseConfig release_config(const PodConfig& config) {
  ReleaseConfig r;
  r.serving = config.serving;
  r.engine = config.engine.kind;
  r.artifact_path = config.artifact.path;
  r.revision = revision(config);
  r.summary = summarize(config.serving);
  return r;
}

}  // namespace infergate::op::api
