// Whether an installed InferenceModel CRD can hold what this operator writes. Helm installs crds/
// once and never upgrades it, so a newer operator can meet an older schema; the API server would
// then prune every status field the schema does not declare and the operator would rewrite status on
// every reconcile. The operator checks this at start and refuses to run against such a CRD.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/json.h"

namespace infergate::op::api {

inline constexpr std::string_view kCrdName = "inferencemodels.serving.infergate.dev";

// What is missing from `crd` (a CustomResourceDefinition object) for this operator, as field paths
// ("status.stage.failureReason"), or a sentence when the version or the status subresource is not
// served; empty when nothing is. Every field the status this operator writes can carry is checked
// (a status with every optional part set), so the check follows the code without a list to keep.
std::vector<std::string> crd_schema_gaps(const Json& crd);

}  // namespace infergate::op::api
