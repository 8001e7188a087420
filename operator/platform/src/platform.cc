// Hashes of platform-neutral specs.
#include "infergate/operator/platform/platform.h"

namespace infergate::op::platform {
namespace {

Json command_json(const api::ContainerCommand& c) {
  return Json{{"image", c.image}, {"command", c.command}, {"args", c.args}, {"env", c.env}};
}

}  // namespace

std::string WorkloadSpec::template_hash() const {
  Json j = {{"name", name},
            {"track", api::to_string(track)},
            {"revision", revision},
            {"labels", labels},
            {"verify", command_json(verify)},
            {"trustSecret", trust_secret},
            {"engine",
             {{"container", command_json(engine.container)},
              {"port", engine.port},
              {"liveness", engine.liveness_path},
              {"readiness", engine.readiness_path},
              {"shm", engine.needs_shared_memory}}},
            {"pod", api::canonical_json(api::PodConfig{artifact, {}, {}, resources, scheduling})}};
  return api::short_hash(j.dump(), 16);
}

std::string JobSpec::hash() const {
  Json j = {{"name", name},
            {"labels", labels},
            {"container", command_json(container)},
            {"deadline", deadline_seconds}};
  return api::short_hash(j.dump(), 16);
}

std::string DisruptionBudgetSpec::hash() const {
  Json j = {{"name", name}, {"selector", selector}, {"labels", labels}, {"maxUnavailable", max_unavailable}};
  return api::short_hash(j.dump(), 16);
}

std::string EndpointSpec::hash() const {
  Json j = {{"name", name}, {"selector", selector}, {"labels", labels}, {"port", port}};
  return api::short_hash(j.dump(), 16);
}

}  // namespace infergate::op::platform
