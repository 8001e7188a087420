// Classifying why pods do not run.
#include "infergate/operator/controllers/pod_trouble.h"

#include <set>

#include "infergate/operator/controllers/restart_history.h"

namespace infergate::op::controllers {
namespace {

// Waiting reasons that are progress, not trouble.
bool benign(const std::string& reason) {
  return reason.empty() || reason == "ContainerCreating" || reason == "PodInitializing";
}

bool heals(const std::string& reason) {
  static const std::set<std::string> kHeal = {"Unschedulable", "ImagePullBackOff", "ErrImagePull",
                                              "CreateContainerConfigError", "ContainerCreating"};
  return kHeal.count(reason) > 0;
}

std::string clip(const std::string& s) { return s.size() > 512 ? s.substr(0, 509) + "..." : s; }

std::optional<PodTrouble> pod_trouble(const platform::PodState& p) {
  const std::string who = "pod " + p.name + ": ";
  if (p.unschedulable)
    return PodTrouble{"Unschedulable", who + "Unschedulable: " + clip(p.schedule_message), true};
  if (!benign(p.verify.waiting_reason) && p.verify.waiting_reason != "CrashLoopBackOff") {
    // The agent's image (a failed verification is the verification gate's, not trouble here).
    return PodTrouble{p.verify.waiting_reason,
                      who + "verify: " + p.verify.waiting_reason +
                          (p.verify.waiting_message.empty() ? "" : ": " + clip(p.verify.waiting_message)),
                      heals(p.verify.waiting_reason)};
  }
  // The serving container. A crash loop is judged on restarts within a window (restart_history.h),
  // not over the pod's lifetime, and described by how it last ended (its reason, exit code and own
  // words), which stay the same from one back-off to the next; the back-off message does not. Fewer
  // restarts than that are the kubelet restarting a container, which is no trouble yet (the
  // CrashLoopBackOff wait between them included).
  if (p.recent_restarts >= kCrashLoopRestarts) {
    const std::string reason = p.last_termination_reason == "OOMKilled" ? "OOMKilled" : "CrashLoopBackOff";
    std::string msg = who + reason;
    if (!p.last_termination_reason.empty() || p.last_exit_code != 0) {
      msg += " (last exit: " +
             (p.last_termination_reason.empty() ? std::string("Error") : p.last_termination_reason) +
             ", code " + std::to_string(p.last_exit_code) + ")";
    }
    if (!p.message.empty()) msg += ": " + clip(p.message);
    return PodTrouble{reason, msg, false};
  }
  if (!benign(p.waiting_reason) && p.waiting_reason != "CrashLoopBackOff") {
    return PodTrouble{p.waiting_reason,
                      who + p.waiting_reason + (p.message.empty() ? "" : ": " + clip(p.message)),
                      heals(p.waiting_reason)};
  }
  return std::nullopt;
}

}  // namespace

std::optional<PodTrouble> workload_trouble(const platform::WorkloadState& w, const std::string& revision) {
  if (!w.exists) return std::nullopt;
  if (!w.failure_reason.empty()) {
    // A refused pod never heals, except a quota that other pods may give back.
    const bool quota = w.failure_message.find("exceeded quota") != std::string::npos;
    return PodTrouble{w.failure_reason, clip(w.failure_message), quota};
  }
  for (const auto& p : w.pods) {
    if (p.deleting || p.ready || (!revision.empty() && p.revision != revision)) continue;
    if (auto t = pod_trouble(p)) return t;
  }
  return std::nullopt;
}

std::string trouble_hint(const PodTrouble& t) {
  if (t.reason == "FailedCreate" && t.message.find("restricted volume type \"nfs\"") != std::string::npos) {
    return "; NFS volumes are not allowed under the restricted Pod Security Standard: use a "
           "PersistentVolumeClaim bound to an NFS PersistentVolume "
           "(spec.artifact.volume.persistentVolumeClaim), "
           "or run the namespace at pod-security.kubernetes.io/enforce=baseline";
  }
  return "";
}

}  // namespace infergate::op::controllers
