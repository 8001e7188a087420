// The scalar reference of MoE routing (ref.h): scores, the group limit, top-k and the weights.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "infergate/kernels/ref.h"
#include "moe.h"
#include "validate.h"

namespace infergate::kernels {

Status validate_moe_routing(const MoeRouting& r, View2<const float> logits, const char* op) {
  const std::string o(op);
  if (r.num_experts < 1) return invalid_argument(o + ": num_experts must be at least 1");
  if (r.top_k < 1 || r.top_k > r.num_experts) {
    return invalid_argument(o + ": top_k " + std::to_string(r.top_k) + " is outside [1, num_experts " +
                            std::to_string(r.num_experts) + "]");
  }
  if (r.num_groups < 1 || r.num_experts % r.num_groups != 0) {
    return invalid_argument(o + ": num_groups " + std::to_string(r.num_groups) + " does not divide " +
                            std::to_string(r.num_experts) + " experts");
  }
  const int32_t per_group = r.num_experts / r.num_groups;
  if (r.num_groups > 1 && per_group < 2) {
    return invalid_argument(o + ": a group scores by its two best experts, and groups of " +
                            std::to_string(per_group) + " have fewer");
  }
  if (r.topk_groups < 1 || r.topk_groups > r.num_groups) {
    return invalid_argument(o + ": topk_groups must be in [1, num_groups]");
  }
  if (r.topk_groups * per_group < r.top_k) {
    return invalid_argument(o + ": " + std::to_string(r.topk_groups) + " groups of " +
                            std::to_string(per_group) + " experts cannot hold top_k " +
                            std::to_string(r.top_k));
  }
  if (!(std::isfinite(r.scaling))) return invalid_argument(o + ": scaling is not finite");
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(logits, logits.rows, r.num_experts, op, "logits"));
  return ok_status();
}

Status moe_route_ref(const MoeRouting& r, View2<const float> logits, int32_t* experts, float* weights) {
  INFERGATE_K_RETURN_IF_ERROR(validate_moe_routing(r, logits, "moe_route"));
  if (logits.rows > 0 && (experts == nullptr || weights == nullptr)) {
    return invalid_argument("moe_route: experts or weights is null");
  }
  const int32_t E = r.num_experts, G = r.num_groups, per = E / G, K = r.top_k;
  std::vector<double> s(static_cast<size_t>(E)), c(static_cast<size_t>(E)), gscore(static_cast<size_t>(G));
  std::vector<int32_t> order(static_cast<size_t>(std::max(E, G)));
  std::vector<char> eligible(static_cast<size_t>(E));
  for (int64_t t = 0; t < logits.rows; ++t) {
    const float* l = logits.row(t);
    for (int32_t e = 0; e < E; ++e) {
      if (!std::isfinite(l[e])) {
        return invalid_argument("moe_route: token " + std::to_string(t) + " has a non-finite router logit");
      }
    }
    if (r.softmax) {
      const double mx = *std::max_element(l, l + E);
      double sum = 0;
      for (int32_t e = 0; e < E; ++e) sum += (s[static_cast<size_t>(e)] = std::exp(l[e] - mx));
      for (double& v : s) v /= sum;
    } else {
      for (int32_t e = 0; e < E; ++e)
        s[static_cast<size_t>(e)] = 1.0 / (1.0 + std::exp(-static_cast<double>(l[e])));
    }
    for (int32_t e = 0; e < E; ++e) {
      c[static_cast<size_t>(e)] = s[static_cast<size_t>(e)] + (r.bias ? r.bias[e] : 0.0f);
    }
    // The group limit: keep the topk_groups groups whose two best experts sum highest.
    std::fill(eligible.begin(), eligible.end(), G == 1 ? 1 : 0);
    if (G > 1) {
      for (int32_t g = 0; g < G; ++g) {
        double b1 = -INFINITY, b2 = -INFINITY;
        for (int32_t e = g * per; e < (g + 1) * per; ++e) {
          const double v = c[static_cast<size_t>(e)];
          if (v > b1) {
            b2 = b1;
            b1 = v;
          } else if (v > b2) {
            b2 = v;
          }
        }
        gscore[static_cast<size_t>(g)] = b1 + b2;
      }
      std::iota(order.begin(), order.begin() + G, 0);
      std::stable_sort(order.begin(), order.begin() + G, [&](int32_t a, int32_t b) {
        return gscore[static_cast<size_t>(a)] > gscore[static_cast<size_t>(b)];
      });
      for (int32_t i = 0; i < r.topk_groups; ++i) {
        const int32_t g = order[static_cast<size_t>(i)];
        for (int32_t e = g * per; e < (g + 1) * per; ++e) eligible[static_cast<size_t>(e)] = 1;
      }
    }
    // Top-k of the eligible experts, best first, ties to the lower index.
    std::iota(order.begin(), order.begin() + E, 0);
    std::stable_sort(order.begin(), order.begin() + E, [&](int32_t a, int32_t b) {
      if (eligible[static_cast<size_t>(a)] != eligible[static_cast<size_t>(b)])
        return eligible[static_cast<size_t>(a)] > eligible[static_cast<size_t>(b)];
      return c[static_cast<size_t>(a)] > c[static_cast<size_t>(b)];
    });
    double sum = 0;
    for (int32_t j = 0; j < K; ++j) sum += s[static_cast<size_t>(order[static_cast<size_t>(j)])];
    const double norm = r.normalize ? 1.0 / (sum + 1e-20) : 1.0;
    for (int32_t j = 0; j < K; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      experts[t * K + j] = e;
      weights[t * K + j] = static_cast<float>(s[static_cast<size_t>(e)] * norm * r.scaling);
    }
  }
  return ok_status();
}

}  // namespace infergate::kernels
