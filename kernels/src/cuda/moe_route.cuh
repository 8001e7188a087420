// MoE routing on the GPU (moe_route_ref's rule, ref.h), written on the shared primitives so that the
// CPU emulator runs it in the test suite: one warp per token. The lanes compute the scores and the
// biased selection scores into shared memory, lane g scores group g (the sum of its two best), the
// kept groups and then the top_k experts are chosen by repeated warp arg-max (ties to the lower
// index, as the reference), and lane 0 writes the weights.
#pragma once

#include "prims.cuh"

namespace infergate::kernels::cuda::moe {

constexpr int kMaxExperts = 1024;
constexpr int kMaxGroups = 32;  // one lane per group
constexpr int kWarps = 4;       // tokens per block
// Shared memory per warp: scores and selection scores, 2 x num_experts floats.
inline size_t route_smem_bytes(int32_t num_experts) { return size_t{kWarps} * 2 * num_experts * 4; }

struct RouteArgs {
  const float* logits = nullptr;  // [tokens, num_experts], row_stride apart
  int64_t row_stride = 0;
  int64_t tokens = 0;
  int32_t num_experts = 0, top_k = 0, num_groups = 1, topk_groups = 1;
  bool softmax = false, normalize = true;
  float scaling = 1.0f;
  const float* bias = nullptr;  // [num_experts] or null
  int32_t* experts = nullptr;   // [tokens, top_k]
  float* weights = nullptr;     // [tokens, top_k]
};

// The better of (v, i) and (w, j): the larger value, ties to the lower index.
INFERGATE_DEV void better(float& v, int& i, float w, int j) {
  if (w > v || (w == v && j < i)) {
    v = w;
    i = j;
  }
}
INFERGATE_DEV void warp_argmax(float& v, int& i) {
  for (int m = 16; m >= 1; m >>= 1) {
    const float w = prim::shfl_xor(v, m);
    const int j = static_cast<int>(prim::shfl_u32(static_cast<uint32_t>(i), prim::lane_id() ^ m));
    better(v, i, w, j);
  }
}

template <int = 0>
__global__ void moe_route_kernel(RouteArgs a) {
  const int lane = prim::lane_id(), warp = prim::warp_id();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (t >= a.tokens) return;  // the whole warp: every lane has the same token
  const int E = a.num_experts;
  float* s = reinterpret_cast<float*>(prim::dynamic_smem()) + static_cast<int64_t>(warp) * 2 * E;
  float* c = s + E;
  const float* l = a.logits + t * a.row_stride;
  if (a.softmax) {
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = l[e] > mx ? l[e] : mx;
    for (int m = 16; m >= 1; m >>= 1) {
      const float o = prim::shfl_xor(mx, m);
      mx = o > mx ? o : mx;
    }
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) sum += (s[e] = expf(l[e] - mx));
    for (int m = 16; m >= 1; m >>= 1) sum += prim::shfl_xor(sum, m);
    for (int e = lane; e < E; e += 32) s[e] /= sum;
  } else {
    for (int e = lane; e < E; e += 32) s[e] = 1.0f / (1.0f + expf(-l[e]));
  }
  for (int e = lane; e < E; e += 32) c[e] = s[e] + (a.bias != nullptr ? a.bias[e] : 0.0f);
  prim::sync_warp();
  if (a.num_groups > 1) {
    const int per = E / a.num_groups;
    float gscore = -INFINITY;
    if (lane < a.num_groups) {
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int e = lane * per; e < (lane + 1) * per; ++e) {
        if (c[e] > b1) {
          b2 = b1;
          b1 = c[e];
        } else if (c[e] > b2) {
          b2 = c[e];
        }
      }
      gscore = b1 + b2;
    }
    bool kept = false;
    for (int k = 0; k < a.topk_groups; ++k) {
      float v = kept ? -INFINITY : gscore;
      int i = kept || lane >= a.num_groups ? kMaxGroups : lane;
      warp_argmax(v, i);
      if (i == lane) kept = true;
    }
    prim::sync_warp();
    for (int g = 0; g < a.num_groups; ++g) {
      const bool keep = prim::shfl_u32(kept ? 1u : 0u, g) != 0;
      if (!keep) {
        for (int e = g * per + lane; e < (g + 1) * per; e += 32) c[e] = -INFINITY;
      }
    }
    prim::sync_warp();
  }
  int chosen[32];  // top_k <= 32 (checked on the host); every lane keeps the list
  for (int k = 0; k < a.top_k; ++k) {
    float v = -INFINITY;
    int i = kMaxExperts;
    for (int e = lane; e < E; e += 32) better(v, i, c[e], e);
    warp_argmax(v, i);
    chosen[k] = i;
    prim::sync_warp();
    if (lane == (i & 31)) c[i] = -INFINITY;  // its owner takes it out of the race
    prim::sync_warp();
  }
  if (lane == 0) {
    float sum = 0.0f;
    for (int k = 0; k < a.top_k; ++k) sum += s[chosen[k]];
    const float norm = a.normalize ? 1.0f / (sum + 1e-20f) : 1.0f;
    for (int k = 0; k < a.top_k; ++k) {
      a.experts[t * a.top_k + k] = chosen[k];
      a.weights[t * a.top_k + k] = s[chosen[k]] * norm * a.scaling;
    }
  }
}

}  // namespace infergate::kernels::cuda::moe
