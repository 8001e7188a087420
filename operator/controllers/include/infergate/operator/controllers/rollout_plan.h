// The staged rollout as a pure function, around the steady-state plan: the stable workload serves
// status.stable's configuration while each stage runs a canary with one change, gated by verification,
// quality and performance, and then promotes or rolls back (DESIGN.md "Rollout semantics",
// docs/rollout.md). Everything it decides from is in status and in the observations, so a restarted
// operator continues the stage it was in, with the same deterministic names.
#pragma once

#include <optional>

#include "infergate/operator/controllers/steady_state.h"
#include "infergate/operator/rollout/stages.h"

namespace infergate::op::controllers {

// The configuration that serves, from status.stable (nullopt before the first deployment completes),
// with the images it was deployed with; `images` (the operator's) where the status predates them.
std::optional<api::PodConfig> stable_config(const ModelInput& in, const api::Images& images);

// The stage the rollout would run next (or is running): the first of the stages from stable to the
// spec with the operator's `images`; nullopt when there is none (or no stable configuration yet, or
// the spec is invalid).
std::optional<rollout::Stage> next_stage(const ModelInput& in, const api::Images& images);

// The whole plan: the first deployment goes straight to stable (nothing serves yet, nothing to
// compare against); afterwards every change reaches stable only through gated canary stages.
Plan plan_model(const ModelInput& in, const Observed& observed, const PlanContext& ctx);

}  // namespace infergate::op::controllers
