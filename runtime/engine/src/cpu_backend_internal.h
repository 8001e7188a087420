// The CPU backend's class (private to the engine library; tests use it through make_cpu_backend).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/engine/backend.h"
#include "infergate/kernels/cpu.h"
#include "infergate/kernels/kv_cache.h"
#include "infergate/kernels/ops.h"
#include "infergate/kernels/ref.h"
#include "infergate/runtime/model/model.h"

namespace infergate::runtime::engine {

// The op table: optimised CPU kernels, or the scalar references.
struct Ops {
  kernels::Status (*linear)(kernels::View2<const float>, const kernels::WeightView&, const float*,
                            kernels::View2<float>);
  // Several products of one x (q/k/v, gate/up) at once.
  kernels::Status (*linear_multi)(kernels::View2<const float>, const kernels::LinearOutput*, int64_t);
  // Products with their own inputs (a MoE layer's experts) at once.
  kernels::Status (*linear_grouped)(const kernels::LinearProduct*, int64_t);
  kernels::Status (*rmsnorm)(kernels::View2<const float>, const float*, float, kernels::View2<float>);
  kernels::Status (*rope)(const kernels::RopeConfig&, const float*, const int32_t*, kernels::View3<float>,
                          kernels::View3<float>);
  kernels::Status (*silu_mul)(kernels::View2<const float>, kernels::View2<const float>,
                              kernels::View2<float>);
  kernels::Status (*add)(kernels::View2<const float>, kernels::View2<const float>, kernels::View2<float>);
  kernels::Status (*embedding)(const kernels::MatrixSource&, const int32_t*, int64_t, kernels::View2<float>);
  kernels::Status (*kv_append)(const kernels::KvCache&, const kernels::KvAppend&);
  kernels::Status (*attention)(const kernels::KvCache&, const kernels::AttentionBatch&,
                               kernels::View3<const float>, kernels::View3<float>);
  kernels::Status (*latent_append)(const kernels::LatentCache&, kernels::View2<const float>, const int32_t*,
                                   const int32_t*);
  kernels::Status (*mla_attention)(const kernels::LatentCache&, const kernels::AttentionBatch&,
                                   kernels::View3<const float>, int32_t, kernels::View3<float>);
};

// A kernels status as an engine error naming the op.
inline Error kernel_error(const kernels::Status& s, std::string_view what) {
  ErrorCode code = ErrorCode::kInternal;
  if (s.code() == kernels::StatusCode::kInvalidArgument) code = ErrorCode::kInvalidArgument;
  if (s.code() == kernels::StatusCode::kOutOfRange) code = ErrorCode::kOutOfRange;
  if (s.code() == kernels::StatusCode::kUnsupported) code = ErrorCode::kUnimplemented;
  return Error(code, std::string(what) + ": " + s.to_string());
}

#define ENGINE_K(expr, what)                                       \
  do {                                                             \
    ::infergate::kernels::Status engine_k_s_ = (expr);             \
    if (!engine_k_s_.ok()) return kernel_error(engine_k_s_, what); \
  } while (0)

// Refuses rope scaling the engine cannot apply exactly: default, llama3 and YaRN whose cos/sin factor
// is 1 (mscale == mscale_all_dim, as DeepSeek-V3 and Kimi K2 publish) run (UnsupportedRopeScaling).
Status check_rope_scaling(const model::ModelConfig& c);
// Element i of a float tensor (F16, BF16 or F32) as fp32.
float tensor_element(const model::TensorView& t, uint64_t i);
// Key smoothing's factor for a channel of size `magnitude` in a head whose median channel is
// `median`: 2^-e when it stands 2^e (rounded, e >= 1, at most 12) above, else 1. Powers of two keep
// the rescaling exact.
float smoothing_factor(double magnitude, double median);
// MLA's softmax scale: 1 / sqrt(qk_nope + qk_rope), times mscale(factor, mscale_all_dim)^2 under YaRN.
float mla_softmax_scale(const model::ModelConfig& c);

// 64-byte aligned, zeroed host memory.
// Checks one sequence of a forward batch against the model and the KV pool (new tokens, positions
// within max_position, block table long enough and in range, staging slot, token ids in the
// vocabulary); `s` is its index in the batch, for the message. Shared by every backend.
Status validate_sequence_input(const SequenceInput& in, int32_t s, const ModelShape& shape,
                               int64_t num_blocks, int32_t max_sequences);

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

struct Ops;

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::shared_ptr<const model::Model> model, const CpuBackendOptions& options);
  Status load();

  std::string_view name() const override { return "cpu"; }
  const ModelShape& shape() const override { return shape_; }
  WeightFormat weight_format() const override { return options_.weight_format; }
  int64_t weight_bytes() const override { return weight_bytes_; }
  Status allocate_kv(const KvSpec& spec, int64_t num_blocks, int32_t max_sequences) override;
  int64_t kv_bytes() const override { return kv_bytes_; }
  Status forward(std::span<const SequenceInput> batch, ForwardOutput* out) override;
  // Key channels rescaled by smooth_keys (0 when off or when no channel stands out).
  int64_t smoothed_channels() const { return smoothed_channels_; }

  // A linear layer: a kernels weight (fp16/bf16/int8/int4) or, on the fp32 path, fp32 rows.
  struct Linear {
    kernels::WeightView view;
    const float* f32 = nullptr;
    int64_t rows = 0, cols = 0;
    std::vector<float> bias;
  };
  // One SwiGLU MLP: down(silu(gate x) * up x). A routed or shared expert.
  struct Expert {
    Linear gate, up, down;
  };
  // A routed-expert MLP (GLM-4.5): the router [experts, hidden] (dense, its logits in fp32), the
  // selection rule, the experts and the shared expert.
  struct Moe {
    Linear router;
    std::vector<float> selection_bias;  // e_score_correction_bias; empty when the config has none
    kernels::MoeRouting routing;        // routing.bias is set from selection_bias when used
    std::vector<Expert> experts;
    Expert shared;  // shared.down.rows == 0: none
  };
  // Multi-head latent attention (DeepSeek-V3, Kimi K2): the query's low-rank path (or a plain q_proj),
  // the joint latent + rope-key projection, the two norms, and kv_b_proj re-laid out per head at load
  // (dense, in the activations' float dtype): W_UK^T [kv_lora, nope], folded into the query, and
  // W_UV [v, kv_lora], applied to the attention's latent output.
  struct Mla {
    Linear q_a, q_b, q;  // q_a and q_b when q_lora_rank > 0, else q
    std::vector<float> q_a_norm, kv_a_norm;
    Linear kv_a;  // [kv_lora + rope, hidden]
    std::vector<Linear> uk_t, uv;
  };
  struct Layer {
    std::vector<float> input_norm, post_attention_norm, post_self_attn_norm, post_mlp_norm;
    std::vector<float> q_norm, k_norm;  // per-head RMSNorm weights [head_dim] (use_qk_norm); else empty
    Linear q, k, v, o, gate, up, gate_up, down;
    bool fused = false;
    std::optional<Moe> moe;  // set on routed-expert layers, which have no dense MLP
    std::optional<Mla> mla;  // set for multi-head latent attention (then q/k/v are unused)
  };

  // The loaded weights as host views (mapped or owned by this backend), for the CUDA backend, which
  // loads the checkpoint through a CpuBackend (same validation, conversion and key smoothing) and
  // uploads these.
  const std::vector<Layer>& layers() const { return layers_; }
  const kernels::MatrixSource& embedding() const { return embed_; }
  const std::vector<float>& final_norm() const { return final_norm_; }
  const Linear& lm_head() const { return lm_head_; }
  const kernels::RopeConfig& rope() const { return rope_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  float rms_eps() const { return eps_; }

 private:
  Result<std::vector<float>> vector_f32(std::string_view name, int64_t expect) const;
  Result<Linear> load_linear(std::string_view name, int64_t rows, int64_t cols, bool bias);
  // Multiplies row n of l (and its bias) by factor[n] (powers of two: exact), copying what is mapped.
  Status scale_rows(Linear& l, const std::vector<float>& factor);
  Status smooth_keys(Layer& L, std::string_view prefix);
  Result<Expert> load_expert(const std::string& prefix, int64_t width, bool bias);
  Result<Moe> load_moe(const std::string& prefix);
  Status linear(const Linear& l, const float* x, int64_t t, float* y);
  // linear() over rows x_stride / y_stride floats apart.
  Status linear_strided(const Linear& l, const float* x, int64_t x_stride, int64_t t, float* y,
                        int64_t y_stride);
  // One forward step's bookkeeping, shared by the layers.
  struct Step {
    std::span<const SequenceInput> batch;
    std::vector<int32_t> q_start, kv_len, staging, ids, pos, page_ids, slots, tok_staging, table;
    int32_t max_pages = 1;
    int64_t tokens = 0, rows_out = 0;
    kernels::AttentionBatch attention;
  };
  Status plan_step(std::span<const SequenceInput> batch, Step* st);
  // The attention block of a layer on h_ (normalised input), its output (after o_proj) into h_.
  Status gqa_attention(const Layer& L, int32_t layer, const Step& st);
  Status mla_attention(const Layer& L, int32_t layer, const Step& st);
  Result<Mla> load_mla(const std::string& prefix);
  // An owned dense copy of fp32 values [rows, cols] in `target` (fp16, bf16 or fp32), counted as held.
  Result<Linear> dense_linear(const std::vector<float>& w, int64_t rows, int64_t cols, model::DType target);
  Status allocate_latent(const KvSpec& spec, int64_t num_blocks);
  void mla_attention_f32(int32_t layer, const Step& st, const float* q, float* out);
  // y [t, H] = the layer's MLP of h [t, H] (dense, fused gate_up, or routed experts). y != h.
  Status mlp(const Layer& L, const float* h, int64_t t, float* y);
  Status swiglu(const Linear& gate, const Linear& up, const Linear& down, const float* x, int64_t t,
                float* y);
  // Routes each of the t tokens, runs every chosen expert once over the tokens routed to it, and adds
  // the weighted results to the shared expert's.
  Status moe_mlp(const Moe& m, const float* h, int64_t t, float* y);
  // y = x W^T (+ b) for products with their own inputs, in one pass over the kernels' thread pool.
  struct Product {
    const Linear* l;
    const float* x;
    int64_t rows;
    float* y;
    int64_t x_stride = 0, y_stride = 0;  // 0: rows of l->cols / l->rows floats, back to back
  };
  Status grouped(std::span<const Product> products);
  // y = x W^T (+ b) for up to kMaxLinears weights of the same input (q/k/v, gate/up): one pass over
  // the kernels' thread pool instead of one per weight (each result the same as linear()'s).
  struct LinearTo {
    const Linear* l;
    float* y;
  };
  static constexpr int64_t kMaxLinears = 4;
  Status linears(const float* x, int64_t t, std::initializer_list<LinearTo> outs);
  Status kv_write_f32(int32_t layer, const float* k, const float* v, int64_t t, const int32_t* pages,
                      const int32_t* slots);
  void attention_f32(int32_t layer, std::span<const SequenceInput> batch, const std::vector<int32_t>& q_start,
                     const float* q, float* out);

  std::shared_ptr<const model::Model> model_;
  CpuBackendOptions options_;
  const Ops* ops_ = nullptr;
  ModelShape shape_;
  float eps_ = 1e-6f;
  kernels::RopeConfig rope_;
  std::vector<float> inv_freq_;
  kernels::MatrixSource embed_;
  std::vector<Layer> layers_;
  std::vector<float> final_norm_;
  Linear lm_head_;
  std::vector<AlignedBuffer> owned_;  // converted weights
  int64_t owned_bytes_ = 0;
  int64_t weight_bytes_ = 0;
  int64_t smoothed_channels_ = 0;

  KvSpec kv_spec_;
  int64_t num_blocks_ = 0;
  int32_t max_sequences_ = 0;
  std::vector<AlignedBuffer> kv_pages_, kv_staging_;  // per layer
  std::vector<kernels::KvCache> caches_;
  std::vector<float> k_scale_;
  int64_t kv_bytes_ = 0;

  int64_t mlp_width_ = 0;         // the widest MLP (dense, expert or shared): the workspaces' size
  float attention_scale_ = 1.0f;  // softmax scale: 1/sqrt(head_dim); MLA: 1/sqrt(nope + rope) x mscale^2
  std::vector<kernels::LatentCache> latent_caches_;  // MLA, per layer
  Step step_;
  std::vector<float> q_a_, ckv_, q_abs_, latent_out_;  // MLA workspaces

  std::vector<float> x_, h_, q_, k_, v_, attn_, mlp_, act_, mlp_out_;
  // Routing workspaces: router logits [T, experts], chosen experts and weights [T, top_k], and the
  // tokens grouped by expert (gathered inputs and the expert's outputs).
  std::vector<float> router_logits_, route_weights_, expert_x_, expert_y_, expert_gu_, expert_act_;
  std::vector<int32_t> route_experts_, expert_offsets_, expert_rows_, expert_fill_;
  std::vector<Product> products_;
  std::vector<kernels::LinearProduct> grouped_;
};

}  // namespace infergate::runtime::engine
