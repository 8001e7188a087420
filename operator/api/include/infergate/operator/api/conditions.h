// Conditions per the Kubernetes API conventions: one entry per type; lastTransitionTime moves only
// when the status flips; reason and message may change without a transition.
#pragma once

#include <string_view>
#include <vector>

#include "infergate/common/clock.h"
#include "infergate/operator/api/inference_model.h"

namespace infergate::op::api {

// The condition types an InferenceModel carries (DESIGN.md).
namespace condition {
inline constexpr std::string_view kReady = "Ready";
inline constexpr std::string_view kVerified = "Verified";
inline constexpr std::string_view kProgressing = "Progressing";
inline constexpr std::string_view kRolledBack = "RolledBack";
inline constexpr std::string_view kCapacityFits = "CapacityFits";
// Whether stable's own pods run (False: why not, in the platform's words), kept apart from a stage's
// canary trouble and from Ready (which counts ready replicas).
inline constexpr std::string_view kStableHealthy = "StableHealthy";
inline constexpr std::string_view kTrue = "True";
inline constexpr std::string_view kFalse = "False";
inline constexpr std::string_view kUnknown = "Unknown";
}  // namespace condition

// A condition of this generation (lastTransitionTime is set_condition's to decide).
Condition make_condition(std::string_view type, std::string_view status, std::string reason,
                         std::string message, int64_t generation);

// Sets (adds or replaces) the condition of `c.type`. When the status is unchanged the previous
// lastTransitionTime is kept; otherwise it becomes `now`. Returns true when the status flipped (or
// the condition is new): the moments worth an Event.
bool set_condition(std::vector<Condition>& conditions, Condition c, WallTime now);

// Removes the condition of this type; returns whether one was there.
bool remove_condition(std::vector<Condition>& conditions, std::string_view type);

}  // namespace infergate::op::api
