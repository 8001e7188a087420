// The CUDA MoE ops: routing (moe_route.cuh, one warp per token).
#include "../moe.h"
#include "common.cuh"
#include "moe_route.cuh"

namespace infergate::kernels::cuda {

Status moe_route(const MoeRouting& r, View2<const float> logits, int32_t* experts, float* weights,
                 Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_moe_routing(r, logits, "moe_route"));
  if (r.num_experts > moe::kMaxExperts || r.num_groups > moe::kMaxGroups || r.top_k > 32) {
    return unsupported("moe_route: at most " + std::to_string(moe::kMaxExperts) + " experts, " +
                       std::to_string(moe::kMaxGroups) + " groups and top 32 on the GPU");
  }
  if (logits.rows == 0) return ok_status();
  if (experts == nullptr || weights == nullptr)
    return invalid_argument("moe_route: experts or weights is null");
  moe::RouteArgs a;
  a.logits = logits.data;
  a.row_stride = logits.row_stride;
  a.tokens = logits.rows;
  a.num_experts = r.num_experts;
  a.top_k = r.top_k;
  a.num_groups = r.num_groups;
  a.topk_groups = r.topk_groups;
  a.softmax = r.softmax;
  a.normalize = r.normalize;
  a.scaling = r.scaling;
  a.bias = r.bias;
  a.experts = experts;
  a.weights = weights;
  const auto blocks = static_cast<unsigned>((logits.rows + moe::kWarps - 1) / moe::kWarps);
  moe::moe_route_kernel<><<<blocks, moe::kWarps * 32, moe::route_smem_bytes(r.num_experts), stream>>>(a);
  return check_launch("moe_route");
}

}  // namespace infergate::kernels::cuda
