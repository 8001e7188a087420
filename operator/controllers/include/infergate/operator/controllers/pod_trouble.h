// Why a workload's pods do not run, in the platform's own words: creation refused (admission: Pod
// Security, quota, LimitRange), no node with room (Unschedulable, the resource named), an image that
// cannot be pulled, a serving container that keeps crashing (kCrashLoopRestarts restarts within
// kCrashLoopWindow, PodState::recent_restarts; with its last termination), a config error. Pure: read from
// the observed WorkloadState, so a stage and stable's own condition can say why, and a stage can fail at once
// on what no amount of waiting heals.
#pragma once

#include <optional>
#include <string>

#include "infergate/operator/platform/platform.h"

namespace infergate::op::controllers {

struct PodTrouble {
  // Kubernetes' word: FailedCreate, Unschedulable, ImagePullBackOff, ErrImagePull, InvalidImageName,
  // ErrImageNeverPull, CreateContainerConfigError, CrashLoopBackOff, OOMKilled, RunContainerError.
  std::string reason;
  // "pod glm-canary-7d-0: Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu."; for
  // FailedCreate the API server's refusal. Stable words only (no restart counts, no back-off times),
  // so an unchanged trouble never rewrites a status.
  std::string message;
  // Whether waiting can fix it without a change to the spec or the cluster's policy: a node may free
  // up, an image registry may come back, a missing Secret may be created. A refused pod, an invalid
  // image name, a container that crashes on start do not heal.
  bool heals = false;
};

// The first trouble of `workload`'s pods of `revision` ("" = any revision), most fundamental first:
// creation refused, then per pod (by name) scheduling, the agent's container, the serving container.
// nullopt when every pod runs or is on its way (ContainerCreating, PodInitializing).
std::optional<PodTrouble> workload_trouble(const platform::WorkloadState& workload,
                                           const std::string& revision);

// A hint for refusals people meet on a first cluster (NFS under the restricted Pod Security
// Standard), appended to the message; "" when there is none.
std::string trouble_hint(const PodTrouble& trouble);

}  // namespace infergate::op::controllers
