// The CUDA MoE ops: routing (moe_route.cuh, one warp per token) and the routed experts (moe_experts.cuh:
// align by expert, the experts' linear layers over their own assignments, the weighted combine).
#include <string>

#include "../moe.h"
#include "../validate.h"
#include "common.cuh"
#include "moe_experts.cuh"
#include "moe_route.cuh"
#include "tuning.h"

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
  return launch_kernel(moe::moe_route_kernel<>, dim3(blocks), dim3(moe::kWarps * 32),
                       moe::route_smem_bytes(r.num_experts), stream, false, "moe_route", a);
}

Status moe_align(const int32_t* experts, int64_t assignments, int32_t num_experts, const MoeAlignment& out,
                 Stream stream) {
  if (num_experts < 1 || num_experts > moe::kMaxAlignExperts) {
    return unsupported("moe_align: " + std::to_string(num_experts) + " experts; 1 to " +
                       std::to_string(moe::kMaxAlignExperts) + " on the GPU");
  }
  if (assignments < 0 || assignments > INT32_MAX) {
    return invalid_argument("moe_align: " + std::to_string(assignments) +
                            " assignments is outside [0, 2^31)");
  }
  if ((assignments > 0 && experts == nullptr) || out.order == nullptr || out.offsets == nullptr ||
      out.active == nullptr || out.num_active == nullptr) {
    return invalid_argument("moe_align: experts or an output array is null");
  }
  moe::AlignArgs a;
  a.experts = experts;
  a.assignments = assignments;
  a.num_experts = num_experts;
  a.order = out.order;
  a.offsets = out.offsets;
  a.active = out.active;
  a.num_active = out.num_active;
  return launch_kernel(moe::moe_align_kernel<>, dim3(1), dim3(moe::kAlignThreads),
                       static_cast<size_t>(moe::align_smem_bytes(num_experts)), stream, tuning().pdl,
                       "moe_align", a);
}

Status moe_expert_linear(View2<const float> x, int32_t x_div, const ExpertWeights& w, const MoeAlignment& al,
                         View2<float> y, Stream stream) {
  const char* op = "moe_expert_linear";
  INFERGATE_K_RETURN_IF_ERROR(validate_weight_layout(w.layout).context(op));
  if (w.views == nullptr || w.num_experts < 1)
    return invalid_argument("moe_expert_linear: no expert weights");
  if (x_div < 1) return invalid_argument("moe_expert_linear: x_div must be positive");
  if (w.layout.cols != x.cols || w.layout.rows != y.cols) {
    return invalid_argument("moe_expert_linear: x is " + shape_str(x.rows, x.cols) + " and y " +
                            shape_str(y.rows, y.cols) + " for experts of " +
                            shape_str(w.layout.rows, w.layout.cols));
  }
  if ((y.rows + x_div - 1) / x_div > x.rows) {
    return invalid_argument("moe_expert_linear: " + std::to_string(y.rows) + " assignments need " +
                            std::to_string((y.rows + x_div - 1) / x_div) + " rows of x, it has " +
                            std::to_string(x.rows));
  }
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(x, x.rows, x.cols, op, "x"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(y, y.rows, y.cols, op, "y"));
  if (al.order == nullptr || al.offsets == nullptr || al.active == nullptr || al.num_active == nullptr) {
    return invalid_argument("moe_expert_linear: the alignment's arrays are null");
  }
  if (y.rows == 0) return ok_status();
  moe::ExpertLinearArgs a;
  a.x = x;
  a.x_div = x_div;
  a.w = w.views;
  a.order = al.order;
  a.offsets = al.offsets;
  a.active = al.active;
  a.num_active = al.num_active;
  a.y = y;
  // At most min(experts, assignments) experts are active; the blocks past *num_active return at once.
  const int64_t slots = y.rows < w.num_experts ? y.rows : w.num_experts;
  const dim3 grid(grid_for(y.cols, moe::kBlockRows), static_cast<unsigned>(slots));
  return launch_kernel(moe::moe_expert_linear_kernel<>, grid, dim3(moe::kLinearWarps * 32), 0, stream,
                       tuning().pdl, op, a);
}

Status moe_combine(View2<const float> y, const float* weights, int32_t top_k, View2<float> out,
                   bool accumulate, Stream stream) {
  if (top_k < 1 || y.rows != out.rows * top_k || y.cols != out.cols) {
    return invalid_argument("moe_combine: y is " + shape_str(y.rows, y.cols) + ", expected " +
                            shape_str(out.rows * top_k, out.cols) + " for top " + std::to_string(top_k));
  }
  if (out.rows > 0 && weights == nullptr) return invalid_argument("moe_combine: weights is null");
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(y, y.rows, y.cols, "moe_combine", "y"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(out, out.rows, out.cols, "moe_combine", "out"));
  const int64_t n = out.rows * out.cols;
  if (n == 0) return ok_status();
  return launch_kernel(moe::moe_combine_kernel<>, dim3(grid_for(n, 256)), dim3(256), 0, stream, tuning().pdl,
                       "moe_combine", y, weights, top_k, out, accumulate);
}

}  // namespace infergate::kernels::cuda
