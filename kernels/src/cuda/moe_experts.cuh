// The routed experts of a MoE layer on the GPU, after moe_route: the routing never leaves the device.
// An "assignment" a = t * top_k + k is token t's k-th chosen expert, experts[a].
//  1. moe_align_kernel (one block): counts the assignments per expert with shared-memory atomics,
//     turns the counts into offsets, lists the experts that have any (the active ones), and scatters
//     the assignment ids into `order` grouped by expert. (Order within an expert is whatever the
//     atomics give: every assignment's result is computed on its own, so it does not change them.)
//  2. moe_expert_linear_kernel: grid (row blocks of N, active experts): the block of active expert
//     i streams its rows of W_e once per 8 of e's assignments; each warp takes one row at a time,
//     lanes 8 consecutive weights each (one scale lookup, one vector load: weight_element.cuh), dotted
//     with the 8 assignments' x rows (read through L1: every warp of the block reads the same ones),
//     then a warp sum per assignment. y[a] = x[a / x_div] W_e^T: x_div = top_k when x holds the tokens
//     (gate / up), 1 when it holds one row per assignment (down).
//  3. moe_combine_kernel: out[t] (+)= sum_k weight[t, k] y[t * top_k + k], in k order.
// At decode (a few assignments per expert) each chosen expert's weights are read once per step and
// the unchosen ones not at all, which is the point of MoE; a prefill with many tokens per expert
// re-reads an expert's rows once per 8 of its tokens (from L2), where a tiled GEMM would not.
#pragma once

#include "infergate/kernels/formats.h"
#include "infergate/kernels/tensor.h"
#include "prims.cuh"
#include "weight_element.cuh"

namespace infergate::kernels::cuda::moe {

constexpr int kAlignThreads = 256;
constexpr int kMaxAlignExperts = 1024;  // counts and cursors in shared memory
constexpr int kLinearWarps = 4;
constexpr int kBlockRows = 32;  // output rows (of N) per block
constexpr int kM = 8;           // assignments per pass over the rows

INFERGATE_HD constexpr int64_t align_smem_bytes(int32_t num_experts) { return int64_t{2} * num_experts * 4; }

struct AlignArgs {
  const int32_t* experts = nullptr;  // [assignments]
  int64_t assignments = 0;
  int32_t num_experts = 0;
  int32_t* order = nullptr;       // [assignments], grouped by expert
  int32_t* offsets = nullptr;     // [num_experts + 1]
  int32_t* active = nullptr;      // [num_experts]: the experts with any assignment, ascending
  int32_t* num_active = nullptr;  // [1]
};

// One block of kAlignThreads. An expert id outside [0, num_experts) is never scattered (moe_route
// writes none; the CPU path refuses them).
template <int = 0>
__global__ void __launch_bounds__(kAlignThreads) moe_align_kernel(AlignArgs a) {
  prim::grid_dep_wait();
  int32_t* count = reinterpret_cast<int32_t*>(prim::dynamic_smem());  // [E], then the cursors
  int32_t* cursor = count + a.num_experts;
  const int tid = static_cast<int>(threadIdx.x);
  for (int32_t e = tid; e < a.num_experts; e += kAlignThreads) count[e] = 0;
  prim::sync_block();
  for (int64_t i = tid; i < a.assignments; i += kAlignThreads) {
    const int32_t e = a.experts[i];
    if (e >= 0 && e < a.num_experts) prim::atomic_add(&count[e], 1);
  }
  prim::sync_block();
  if (tid == 0) {
    int32_t sum = 0, n = 0;
    for (int32_t e = 0; e < a.num_experts; ++e) {
      a.offsets[e] = sum;
      cursor[e] = sum;
      if (count[e] > 0) a.active[n++] = e;
      sum += count[e];
    }
    a.offsets[a.num_experts] = sum;
    *a.num_active = n;
  }
  prim::sync_block();
  for (int64_t i = tid; i < a.assignments; i += kAlignThreads) {
    const int32_t e = a.experts[i];
    if (e >= 0 && e < a.num_experts) a.order[prim::atomic_add(&cursor[e], 1)] = static_cast<int32_t>(i);
  }
  prim::grid_dep_launch();
}

struct ExpertLinearArgs {
  View2<const float> x;            // [tokens or assignments, K]
  int32_t x_div = 1;               // x row of assignment a: a / x_div
  const WeightView* w = nullptr;   // [num_experts], every one [N, K] in the same layout
  const int32_t* order = nullptr;  // moe_align's outputs
  const int32_t* offsets = nullptr;
  const int32_t* active = nullptr;
  const int32_t* num_active = nullptr;
  View2<float> y;  // [assignments, N]
};

// grid (ceil(N / kBlockRows), an upper bound of the active experts), kLinearWarps * 32 threads.
template <int = 0>
__global__ void __launch_bounds__(kLinearWarps * 32) moe_expert_linear_kernel(ExpertLinearArgs a) {
  prim::grid_dep_wait();
  const int32_t slot = static_cast<int32_t>(blockIdx.y);
  if (slot >= *a.num_active) return;  // uniform over the block
  const int32_t e = a.active[slot];
  const WeightView w = a.w[e];
  const int64_t N = a.y.cols, K = a.x.cols, k8 = K / 8 * 8;
  const int64_t n0 = int64_t{blockIdx.x} * kBlockRows, n1 = prim::min64(N, n0 + kBlockRows);
  const int lane = prim::lane_id(), warp = prim::warp_id();
  const int32_t begin = a.offsets[e], end = a.offsets[e + 1];
  for (int32_t c0 = begin; c0 < end; c0 += kM) {
    const int mc = static_cast<int>(prim::min64(kM, end - c0));
    int32_t asg[kM];
    const float* xr[kM];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      asg[m] = m < mc ? a.order[c0 + m] : a.order[c0];
      xr[m] = a.x.row(asg[m] / a.x_div);
    }
    for (int64_t n = n0 + warp; n < n1; n += kLinearWarps) {
      float acc[kM];
#pragma unroll
      for (int m = 0; m < kM; ++m) acc[m] = 0.0f;
      for (int64_t k0 = int64_t{lane} * 8; k0 < k8; k0 += 32 * 8) {
        float wv[8];
        weight_load8(w, n, k0, wv);
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          if (m >= mc) break;
          const float* xk = xr[m] + k0;
          float s = acc[m];
#pragma unroll
          for (int j = 0; j < 8; ++j) s += wv[j] * xk[j];
          acc[m] = s;
        }
      }
      for (int64_t k = k8 + lane; k < K; k += 32) {
        const float wk = weight_element(w, n, k);
        for (int m = 0; m < mc; ++m) acc[m] += wk * xr[m][k];
      }
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        if (m >= mc) break;  // uniform over the warp
        const float s = prim::warp_sum(acc[m]);
        if (lane == 0) a.y.at(asg[m], n) = s;
      }
    }
  }
  prim::grid_dep_launch();
}

// out [T, N] (+)= sum_k weights[t * top_k + k] y[t * top_k + k]; one thread per output element.
template <int = 0>
__global__ void moe_combine_kernel(View2<const float> y, const float* weights, int32_t top_k,
                                   View2<float> out, bool accumulate) {
  prim::grid_dep_wait();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= out.rows * out.cols) return;
  const int64_t t = i / out.cols, n = i % out.cols;
  float s = accumulate ? out.at(t, n) : 0.0f;
  for (int32_t k = 0; k < top_k; ++k) s += weights[t * top_k + k] * y.at(t * top_k + k, n);
  out.at(t, n) = s;
}

}  // namespace infergate::kernels::cuda::moe
