// The CUDA backend (runtime/engine/cuda, built when CUDA is on): the forward pass of backend.h on
// one or more GPUs with the kernels' CUDA ops.
//   - Weights are uploaded once in their compressed form (int8 / int4 with scales and zero points,
//     fp16 / bf16 dense), never expanded; int4 layers the tensor-core GEMV can run also get their
//     codes rearranged for it (kernels::cuda::pack_int4_for_mma), which doubles their code bytes.
//   - The paged KV pool is plain cudaMalloc memory in the chosen dtype, one pool per layer, sized by
//     the same arithmetic as the CPU path (block_manager.h).
//   - Only the wanted rows' logits are copied back to the host.
//   - Decode steps run as captured CUDA graphs (CudaBackendOptions::cuda_graphs).
//   - Tensor parallelism (`tensor_parallel` T > 1): ranks 0..T-1 on GPUs first_device..+T-1, one
//     host thread each per step, heads and MLP columns split as tensor_parallel.h says, partial sums
//     all-reduced with NCCL (loaded with dlopen at run time: libnccl.so.2 must be on the library
//     path only when T > 1). T = 1 runs the same code with the all-reduce a no-op.
// Memory is checked before any allocation: weights that do not fit refuse with ResourceExhausted,
// reason "ModelDoesNotFit"; a KV pool that does not fit, reason "KvDoesNotFit" (details: bytes
// needed, bytes free, the device).
#pragma once

#include <cstdint>
#include <memory>

#include "infergate/common/result.h"
#include "infergate/engine/backend.h"

namespace infergate::runtime::engine {

struct CudaBackendOptions {
  WeightFormat weight_format = WeightFormat::kF16;  // fp16, bf16, int8, int4 (fp32 is the CPU reference's)
  int32_t tensor_parallel = 1;
  int32_t first_device = 0;
  bool smooth_keys = false;  // as CpuBackendOptions::smooth_keys (same folding, same logits)
  bool int4_mma = true;      // also hold the tensor-core layout of eligible int4 layers
  // Decode steps (one token per sequence) replay a CUDA graph captured once per (batch size, KV-length
  // bucket: the next power of two of at least 64 tokens), one launch instead of ~10 per layer; a graph
  // is dropped when the buffers it captured are reallocated. false: every step launches its kernels.
  bool cuda_graphs = true;
  // Device bytes kept free beyond weights and KV for activations, the attention workspace and the
  // CUDA context's growth (the planner's reserves cover the same ground).
  int64_t headroom_bytes = int64_t{256} << 20;
};

// Refuses: no GPU or a build without CUDA (Unavailable, "NoDevice"); fewer GPUs than T ("NoDevice");
// T > 1 without NCCL ("NcclUnavailable"); a T that does not split the model ("InvalidTensorParallel");
// fp32 weights ("UnsupportedCombination"); what make_cpu_backend refuses (the checkpoint is read
// through it); weights that do not fit ("ModelDoesNotFit").
Result<std::unique_ptr<Backend>> make_cuda_backend(std::shared_ptr<const model::Model> model,
                                                   const CudaBackendOptions& options);

}  // namespace infergate::runtime::engine
