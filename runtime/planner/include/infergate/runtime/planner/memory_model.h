// The capacity planner's memory model: the bytes the runtime allocates, per GPU, for a model's
// weights, its paged KV cache, the activation workspace of one forward step, and the reserves
// around them. KV bytes come only from kernels::kv_page_regions / kv_page_bytes / kv_staging_bytes
// (the functions the engine's block manager sizes its pool with); weight bytes from
// kernels::weight_bytes with the quantizer's own rule for which tensors it compresses
// (model::quantizer_compresses). So the planner and the runtime cannot disagree on a byte.
// docs/capacity-planning.md explains the model and why it differs from the textbook formula.
//
// Everything here is a pure function of its inputs: thread-safe, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/kernels/formats.h"
#include "infergate/runtime/model/config.h"
#include "infergate/runtime/model/dtype.h"
#include "infergate/runtime/model/quant_scheme.h"

namespace infergate::runtime::planner {

namespace model = infergate::runtime::model;

// Tokens per KV block (a page of the pool), as the engine's block manager allocates them.
inline constexpr int32_t kBlockTokens = 16;

inline constexpr int64_t kMiB = int64_t{1} << 20;
inline constexpr int64_t kGiB = int64_t{1} << 30;

// ==== Formats, as the runtime's flags name them =====================================================
// Errors carry the reason "InvalidPlanInput" and a detail "field" naming the flag / field.

enum class WeightFormat { kF16, kBF16, kInt8, kInt4 };
// "fp16" (also "f16", "float16"), "bf16" ("bfloat16"), "int8", "int4".
Result<WeightFormat> parse_weight_format(std::string_view name);
std::string_view weight_format_name(WeightFormat f);  // "fp16", "bf16", "int8", "int4"

// "fp16" ("f16"), "bf16", "fp8" ("fp8-e4m3"), "int8", "int4" (per-token int4 keys and values) and
// "int4-kivi" (per-channel int4 keys, KIVI).
Result<kernels::KvDtype> parse_kv_dtype(std::string_view name);
std::string_view kv_cache_dtype_name(kernels::KvDtype d);  // the canonical names above
// Bytes per cached value in the textbook formula: 2, 2, 1, 1, 0.5, 0.5 (scales not counted).
double textbook_bytes_per_value(kernels::KvDtype d);

// How the runtime holds weights (the engine's CpuBackend, and the CUDA backend after it):
//   - compressed linear weights (int8/int4: what model::quantizer_compresses picks) in the kernels'
//     formats, packed values plus scales (plus zero points for asymmetric int4): kernels::weight_bytes;
//   - other 2-D weights in 16 bits: the requested dtype for fp16/bf16; for int8/int4 the
//     checkpoint's dtype as the quantizer left it (fp32 becomes fp16);
//   - the embedding table in the checkpoint's dtype (a tied lm_head gets a 16-bit copy when that
//     dtype differs from the dense one);
//   - 1-D tensors (norms, biases) in fp32, as the kernels' rmsnorm and bias_add take them.
struct WeightOptions {
  WeightFormat format = WeightFormat::kF16;
  int64_t group_size = 128;  // int4 only: 32, 64 or 128 (the `quantize` default is 128)
  bool symmetric = false;    // int4 only: `quantize` writes asymmetric int4 (zero points) by default
  model::DType scale_dtype = model::DType::kF16;
  bool quantize_lm_head = false;
  // The checkpoint's float dtype; nullopt: the config's torch_dtype, or bf16 when it names none.
  std::optional<model::DType> source_dtype;
};
// The quantizer's scheme for int8/int4 (validated by model::validate_scheme).
Result<model::QuantScheme> quant_scheme(const WeightOptions& w);
// The weight options a compressed directory's config.json fixes (our `quantize` writes
// quantization_config with quant_method "infergate"); nullopt when the config has none of ours.
Result<std::optional<WeightOptions>> weight_options_from_config(const model::ModelConfig& config);

// ==== Tensor parallelism ============================================================================
// With T GPUs, attention heads and MLP / expert columns are split T ways (Megatron style):
// column-parallel layers (q/k/v, gate/up, MLA's q_b/kv_b, embeddings and lm_head by vocabulary)
// split their output rows, row-parallel layers (o_proj, down_proj) their input columns; norms, the
// MoE router and MLA's down-projections (q_a_proj, kv_a_proj_with_mqa) are replicated. When T
// exceeds the KV heads, each GPU holds one KV head (k/v replicated T / kv_heads times).

enum class Split { kReplicated, kRows, kCols };
std::string_view split_name(Split s);  // "replicated", "rows", "cols"

// What a tensor is, for the breakdown.
enum class TensorRole { kEmbedding, kLmHead, kAttention, kMlp, kExperts, kRouter, kNorm };
std::string_view tensor_role_name(TensorRole r);

struct ShardedTensor {
  std::string name;
  std::vector<uint64_t> shape;        // the full tensor
  std::vector<uint64_t> shard_shape;  // on the GPU that holds the most (ceil division)
  Split split = Split::kReplicated;
  TensorRole role = TensorRole::kNorm;
};

// Refuses a T that does not divide the heads, the KV heads (or is not a multiple of them), the MLP
// or expert intermediate size (reason "InvalidPlanInput", field "tensor_parallel").
Status validate_tensor_parallel(const model::ModelConfig& config, int64_t tp);
// Every tensor of model::expected_tensors(config) with its split and its per-GPU shape.
Result<std::vector<ShardedTensor>> shard_tensors(const model::ModelConfig& config, int64_t tp);

// ==== KV cache ======================================================================================

enum class CacheKind {
  kGroupedQuery,  // K and V per KV head: 2 x kv_heads x head_dim values per token per layer
  kLatent,        // multi-head latent attention: kv_lora_rank + qk_rope_head_dim, no heads, no factor 2
};
std::string_view cache_kind_name(CacheKind k);  // "grouped-query", "latent"

// The KV cache of one GPU. Grouped-query: one page holds K and V of the GPU's KV heads for 16
// tokens of one layer, sized by kernels::kv_page_bytes. Latent (MLA): the page holds one row of
// kv_lora_rank + qk_rope_head_dim values per token (the compressed latent and the shared rope key),
// laid out as the K half of a one-head kernels page (kernels::kv_page_regions: data, then its
// scales, each region 16-byte aligned); the latent is replicated on every GPU under TP.
struct KvModel {
  CacheKind kind = CacheKind::kGroupedQuery;
  kernels::KvPageLayout page;  // one layer's page on one GPU
  int64_t layers = 0;
  int64_t values_per_token_per_layer = 0;  // on one GPU
  int64_t page_bytes = 0;                  // one 16-token block of one layer: data + params + alignment
  int64_t page_data_bytes = 0;             // of which K/V (or latent) values
  int64_t page_param_bytes = 0;            // of which scales / zero points
  int64_t staging_bytes_per_layer = 0;     // int4-kivi: fp16 keys of a filling page, per running sequence

  int64_t page_padding_bytes() const { return page_bytes - page_data_bytes - page_param_bytes; }
  int64_t block_bytes() const { return page_bytes * layers; }                 // one block, all layers
  int64_t staging_bytes() const { return staging_bytes_per_layer * layers; }  // per running sequence
  double bytes_per_token() const { return static_cast<double>(block_bytes()) / kBlockTokens; }
  // Blocks a sequence of `tokens` tokens holds: ceil(tokens / 16).
  static int64_t blocks_for(int64_t tokens) { return (tokens + kBlockTokens - 1) / kBlockTokens; }
  // Bytes `sequences` sequences of `tokens` tokens hold: their blocks plus their staging windows.
  int64_t bytes_for(int64_t sequences, int64_t tokens) const {
    return sequences * (blocks_for(tokens) * block_bytes() + staging_bytes());
  }
};

Result<KvModel> kv_model(const model::ModelConfig& config, kernels::KvDtype dtype, int64_t tp = 1);

// ==== Weights =======================================================================================

struct WeightBreakdown {
  int64_t parameters = 0;        // elements on this GPU
  int64_t model_parameters = 0;  // elements of the whole model (model::parameter_count)
  int64_t tensors = 0;
  int64_t tensors_compressed = 0;
  // By storage: compressed tensors' packed values, scales and zero points; dense tensors' bytes.
  int64_t packed = 0;
  int64_t scales = 0;
  int64_t zeros = 0;
  int64_t dense = 0;
  // By role (each tensor counted once, all of its parts).
  int64_t embeddings = 0;
  int64_t lm_head = 0;
  int64_t attention = 0;
  int64_t mlp = 0;      // dense MLP layers
  int64_t experts = 0;  // routed and shared experts, all resident
  int64_t router = 0;
  int64_t norms = 0;  // norms (biases count with their layer)
  int64_t total() const { return packed + scales + zeros + dense; }
};

// Bytes of the weights on the GPU that holds the most.
Result<WeightBreakdown> weight_bytes(const model::ModelConfig& config, const WeightOptions& w,
                                     int64_t tp = 1);

// ==== Activation workspace ==========================================================================
// The runtime's activations are fp32 (the kernels' ops take float views). One forward step holds,
// per token in flight: the residual and its normed copy (2 x hidden), q, k and v (or MLA's q and
// latent), the attention output, the MLP's gate, up and their product (for MoE: the experts each
// token is routed to, the shared experts and the router logits), and the projection output; plus
// the logits of one position per sequence (concurrency x vocab). Tokens in flight in one step:
// max(prefill chunk, concurrency).

struct WorkspaceOptions {
  int64_t prefill_chunk_tokens = 2048;
};

struct Workspace {
  int64_t step_tokens = 0;
  int64_t floats_per_token = 0;
  int64_t activations = 0;  // step_tokens x floats_per_token x 4
  int64_t logits = 0;       // concurrency x vocab x 4
  int64_t total() const { return activations + logits; }
};

Workspace activation_workspace(const model::ModelConfig& config, int64_t concurrency,
                               const WorkspaceOptions& options, int64_t tp = 1);

// ==== Reserves ======================================================================================
// Memory the runtime cannot use for weights or KV, per GPU. Defaults (docs/capacity-planning.md):
//   CUDA context      512 MiB  driver context, loaded kernel modules, cuBLAS workspace
//   CUDA graphs       512 MiB  private pools of the captured decode-step graphs
//   NCCL            1,024 MiB  with T > 1 (communicator buffers, channels per peer), else 0
//   fragmentation        2 %   of the GPU's usable memory (allocator rounding, one pool per layer)

struct ReserveOptions {
  std::optional<int64_t> cuda_context;
  std::optional<int64_t> cuda_graphs;
  std::optional<int64_t> nccl;
  std::optional<double> fragmentation_fraction;
};

inline constexpr int64_t kDefaultCudaContextReserve = 512 * kMiB;
inline constexpr int64_t kDefaultCudaGraphReserve = 512 * kMiB;
inline constexpr int64_t kDefaultNcclReserve = 1024 * kMiB;
inline constexpr double kDefaultFragmentationFraction = 0.02;

struct Reserves {
  int64_t cuda_context = 0;
  int64_t cuda_graphs = 0;
  int64_t nccl = 0;
  double fragmentation_fraction = 0;
  int64_t fragmentation = 0;
  int64_t total() const { return cuda_context + cuda_graphs + nccl + fragmentation; }
};

// Refuses negative sizes and fractions outside [0, 0.5) (field named).
Result<Reserves> reserves(const ReserveOptions& options, int64_t gpu_memory_bytes, int64_t tp);

}  // namespace infergate::runtime::planner
