// The stage planner: from the configuration that serves (status.stable) to the one the spec asks for,
// the ordered stages that each change one thing (DESIGN.md "Rollout semantics"). Pure: no I/O, no
// clock; the same inputs give the same stages and the same revisions, which is what makes a restarted
// operator pick up the stage it was running.
#pragma once

#include <string>
#include <vector>

#include "infergate/operator/api/enums.h"
#include "infergate/operator/api/names.h"

namespace infergate::op::rollout {

// What each stage changes:
//   artifact  a new release of the same weight format: artifact volume, path and trust, the engine
//             (kind, image, args) and the operator's images (agent, default runtime): a new runtime
//             or agent release is proved the same way as a new model release
//   weights   the weight format, with the artifact that holds it and the engine's quantization/model file
//   kvCache   the KV-cache dtype
//   capacity  context length, concurrency, resources and scheduling (what limits and places the pods)
struct Stage {
  api::StageName name = api::StageName::kWeights;
  api::PodConfig from;   // the configuration before this stage (stable plus the stages before it)
  api::PodConfig to;     // from plus this stage's one change
  std::string revision;  // api::revision(to): the hash that names the canary and its failure
  std::string change;    // for people: "weightFormat fp16 -> int8, artifact.path m/fp16 -> m/int8"
};

// The order stages run in: `order` as given, then the stages it leaves out. An unlisted artifact stage
// goes first (a new release of the current formats is proved before the formats change), the other
// unlisted ones last, in the default order weights, kvCache, capacity.
std::vector<api::StageName> effective_order(const std::vector<api::StageName>& order);

// The stages from `stable` to `desired`, in effective_order(order); empty when nothing differs.
// Applying every stage's change to `stable` in order gives exactly `desired`.
std::vector<Stage> plan_stages(const api::PodConfig& stable, const api::PodConfig& desired,
                               const std::vector<api::StageName>& order);

// Whether failed revisions recorded while the spec asked for `failed_for` still hold back a rollout
// to `desired_revision`: they do until the spec changes (a different desired revision).
bool failures_apply(const std::string& failed_for, const std::string& desired_revision);

}  // namespace infergate::op::rollout
