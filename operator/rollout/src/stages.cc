// The stage planner.
#include "infergate/operator/rollout/stages.h"

#include <algorithm>

namespace infergate::op::rollout {
namespace {

using api::StageName;

bool same_artifact(const api::ArtifactSpec& a, const api::ArtifactSpec& b) {
  return api::canonical_json(api::PodConfig{a, {}, {}, {}, {}})["artifact"] ==
         api::canonical_json(api::PodConfig{b, {}, {}, {}, {}})["artifact"];
}

bool same_engine_release(const api::EngineSpec& a, const api::EngineSpec& b) {
  return a.kind == b.kind && a.image == b.image && a.args == b.args;
}

void note(std::string& change, const std::string& what, const std::string& from, const std::string& to) {
  if (from == to) return;
  if (!change.empty()) change += ", ";
  change += what + " " + (from.empty() ? "\"\"" : from) + " -> " + (to.empty() ? "\"\"" : to);
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

std::string kv(const std::map<std::string, std::string>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += (s.empty() ? "" : ",") + k + "=" + v;
  return "{" + s + "}";
}

// Applies one stage's change from `desired` onto `c`, describing it; returns whether anything changed.
bool apply(StageName stage, const api::PodConfig& desired, api::PodConfig& c, std::string& change) {
  const api::PodConfig before = c;
  switch (stage) {
    case StageName::kWeights:
      if (c.serving.weight_format == desired.serving.weight_format) break;
      note(change, "weightFormat", std::string(api::to_string(c.serving.weight_format)),
           std::string(api::to_string(desired.serving.weight_format)));
      note(change, "artifact.path", c.artifact.path, desired.artifact.path);
      note(change, "engine.quantization", c.engine.quantization, desired.engine.quantization);
      note(change, "engine.modelFile", c.engine.model_file, desired.engine.model_file);
      c.serving.weight_format = desired.serving.weight_format;
      c.artifact = desired.artifact;
      c.engine.quantization = desired.engine.quantization;
      c.engine.model_file = desired.engine.model_file;
      break;
    case StageName::kArtifact:
      // A new release of the weight format that serves; a weight-format change carries its own artifact.
      if (c.serving.weight_format == desired.serving.weight_format) {
        if (!same_artifact(c.artifact, desired.artifact)) {
          note(change, "artifact.path", c.artifact.path, desired.artifact.path);
          if (c.artifact.path == desired.artifact.path)
            change += (change.empty() ? "" : ", ") + std::string("artifact volume/trust");
          c.artifact = desired.artifact;
        }
        if (c.engine.quantization != desired.engine.quantization ||
            c.engine.model_file != desired.engine.model_file) {
          note(change, "engine.quantization", c.engine.quantization, desired.engine.quantization);
          note(change, "engine.modelFile", c.engine.model_file, desired.engine.model_file);
          c.engine.quantization = desired.engine.quantization;
          c.engine.model_file = desired.engine.model_file;
        }
      }
      if (!same_engine_release(c.engine, desired.engine)) {
        note(change, "engine.kind", std::string(api::to_string(c.engine.kind)),
             std::string(api::to_string(desired.engine.kind)));
        note(change, "engine.image", c.engine.image, desired.engine.image);
        note(change, "engine.args", join(c.engine.args), join(desired.engine.args));
        c.engine.kind = desired.engine.kind;
        c.engine.image = desired.engine.image;
        c.engine.args = desired.engine.args;
      }
      // The operator's images (a new operator release): proved like a new runtime release.
      if (c.images != desired.images) {
        note(change, "agent image", c.images.agent, desired.images.agent);
        note(change, "runtime image", c.images.runtime, desired.images.runtime);
        note(change, "runtime-cuda image", c.images.runtime_cuda, desired.images.runtime_cuda);
        c.images = desired.images;
      }
      break;
    case StageName::kKvCache:
      note(change, "kvCacheDtype", std::string(api::to_string(c.serving.kv_cache_dtype)),
           std::string(api::to_string(desired.serving.kv_cache_dtype)));
      c.serving.kv_cache_dtype = desired.serving.kv_cache_dtype;
      break;
    case StageName::kCapacity:
      note(change, "maxContextLength", std::to_string(c.serving.max_context_length),
           std::to_string(desired.serving.max_context_length));
      note(change, "maxConcurrency", std::to_string(c.serving.max_concurrency),
           std::to_string(desired.serving.max_concurrency));
      note(change, "resources.requests", kv(c.resources.requests), kv(desired.resources.requests));
      note(change, "resources.limits", kv(c.resources.limits), kv(desired.resources.limits));
      if (api::canonical_json(api::PodConfig{{}, {}, {}, {}, c.scheduling})["scheduling"] !=
          api::canonical_json(api::PodConfig{{}, {}, {}, {}, desired.scheduling})["scheduling"]) {
        change += (change.empty() ? "" : ", ") + std::string("scheduling");
      }
      c.serving.max_context_length = desired.serving.max_context_length;
      c.serving.max_concurrency = desired.serving.max_concurrency;
      c.resources = desired.resources;
      c.scheduling = desired.scheduling;
      break;
  }
  return api::revision(before) != api::revision(c);
}

}  // namespace

std::vector<StageName> effective_order(const std::vector<StageName>& order) {
  std::vector<StageName> out;
  auto listed = [&](StageName s) { return std::find(order.begin(), order.end(), s) != order.end(); };
  if (!listed(StageName::kArtifact)) out.push_back(StageName::kArtifact);
  for (StageName s : order) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  for (StageName s : {StageName::kWeights, StageName::kKvCache, StageName::kCapacity}) {
    if (!listed(s)) out.push_back(s);
  }
  return out;
}

std::vector<Stage> plan_stages(const api::PodConfig& stable, const api::PodConfig& desired,
                               const std::vector<StageName>& order) {
  std::vector<Stage> stages;
  api::PodConfig current = stable;
  for (StageName name : effective_order(order)) {
    Stage s;
    s.name = name;
    s.from = current;
    if (!apply(name, desired, current, s.change)) continue;
    s.to = current;
    s.revision = api::revision(s.to);
    stages.push_back(std::move(s));
  }
  return stages;
}

bool failures_apply(const std::string& failed_for, const std::string& desired_revision) {
  return !failed_for.empty() && failed_for == desired_revision;
}

}  // namespace infergate::op::rollout
