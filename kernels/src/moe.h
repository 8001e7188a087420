// Pieces of MoE routing shared by the reference and the CUDA launcher (ref.h: moe_route_ref).
#pragma once

#include "infergate/kernels/ref.h"

namespace infergate::kernels {

// The routing's checks (expert count, top_k, groups, scaling) and logits' shape; `op` names the caller.
Status validate_moe_routing(const MoeRouting& r, View2<const float> logits, const char* op);

}  // namespace infergate::kernels
