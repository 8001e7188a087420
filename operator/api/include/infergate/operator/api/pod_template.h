// spec.podTemplate: what a platform team needs to place and dress the serving pods (image pull
// Secrets, node selection, tolerations, affinity, topology spread, priority and runtime classes, a
// service account, extra env and volumes), validated so that none of it can override what
// verification rests on: the agent's init container is never touched, the reserved volumes
// (model-artifacts, trust-keys, tmp, dshm) and their mount points cannot be replaced or shadowed,
// only restricted Pod Security volume types are accepted, and there is no way to set a security
// context, a host namespace or a service-account token mount.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "infergate/common/json.h"
#include "infergate/operator/api/inference_model.h"

namespace infergate::op::api {

// The volumes and mount points the pods the operator renders reserve for themselves.
const std::set<std::string>& reserved_volume_names();
const std::vector<std::string>& reserved_mount_paths();

// Reads spec.podTemplate into `out`; every problem is returned with its field path
// ("spec.podTemplate.volumes[0]") and reason InvalidSpec. It refuses what the CRD's schema and CEL
// rules refuse at the first level of the template (tests/operator/crd_pod_template_test.cc holds the
// two to that); what lies deeper in the core types it passes on (affinity terms, label selectors,
// volume sources, env sources) the CRD and the API server's Pod validation check.
std::vector<FieldError> parse_pod_template(const Json& tmpl, SchedulingSpec* out);

// A list of tolerations (spec.podTemplate.tolerations, spec.scheduling.tolerations) checked as the
// Pod API checks them; `path` names the list.
std::vector<FieldError> check_tolerations(const Json& list, const std::string& path);

}  // namespace infergate::op::api
