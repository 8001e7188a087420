// CudaBackend: the forward pass of the dense decoder architectures on one or more GPUs with the
// kernels' CUDA ops (cuda_backend.h). The checkpoint is read through a CpuBackend (the same format
// checks, dtype conversion and key smoothing, so both backends start from identical weights), whose
// host views are then sliced per tensor-parallel rank and uploaded once; the CpuBackend is dropped
// after the upload. Every CUDA call's error becomes a Status naming the call.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cpu_backend_internal.h"
#include "infergate/engine/cuda_backend.h"
#include "infergate/engine/device.h"
#include "infergate/engine/tensor_parallel.h"
#include "infergate/kernels/cuda.h"
#include "infergate/runtime/model/model.h"
#include "nccl_group.h"

namespace infergate::runtime::engine {
namespace {

namespace k = infergate::kernels;
namespace kc = infergate::kernels::cuda;

Error cuda_error(cudaError_t e, std::string_view what) {
  (void)cudaGetLastError();  // clear a sticky error so the next call reports its own
  if (e == cudaErrorMemoryAllocation) {
    return resource_exhausted(std::string(what) + ": out of device memory").with_reason("OutOfDeviceMemory");
  }
  return internal_error(std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e))
      .with_reason("CudaError");
}

Error cuda_kernel_error(const k::Status& s, std::string_view what) {
  const std::string msg = std::string(what) + ": " + s.to_string();
  switch (s.code()) {
    case k::StatusCode::kInvalidArgument: return invalid_argument(msg);
    case k::StatusCode::kOutOfRange: return out_of_range(msg);
    case k::StatusCode::kUnsupported: return unimplemented(msg).with_reason("UnsupportedCombination");
    case k::StatusCode::kNoDevice: return unavailable(msg).with_reason("NoDevice");
    case k::StatusCode::kCudaError: return internal_error(msg).with_reason("CudaError");
    case k::StatusCode::kOk: break;
  }
  return internal_error(msg);
}

#define CB_CUDA(expr, what)                                   \
  do {                                                        \
    const cudaError_t cb_e_ = (expr);                         \
    if (cb_e_ != cudaSuccess) return cuda_error(cb_e_, what); \
  } while (0)

#define CB_K(expr, what)                                    \
  do {                                                      \
    ::infergate::kernels::Status cb_k_ = (expr);            \
    if (!cb_k_.ok()) return cuda_kernel_error(cb_k_, what); \
  } while (0)

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

// Device memory from cudaMalloc, freed on its own device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(o.n_), dev_(o.dev_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = o.n_;
      dev_ = o.dev_;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  static Result<DeviceBuffer> alloc(int device, size_t bytes, std::string_view what) {
    DeviceBuffer b;
    b.dev_ = device;
    CB_CUDA(cudaSetDevice(device), "cudaSetDevice");
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 16));
    if (e != cudaSuccess) {
      return cuda_error(e, "cudaMalloc of " + std::to_string(bytes) + " bytes for " + std::string(what) +
                               " on GPU " + std::to_string(device));
    }
    b.p_ = p;
    b.n_ = bytes;
    return b;
  }
  void reset() {
    if (p_) {
      (void)cudaSetDevice(dev_);
      (void)cudaFree(p_);
      p_ = nullptr;
      n_ = 0;
    }
  }
  template <class T = void>
  T* get() const {
    return static_cast<T*>(p_);
  }
  size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
  int dev_ = 0;
};

// A linear layer on one GPU: its (sliced) weight in device memory.
struct DevLinear {
  k::WeightView view;
  const void* packed = nullptr;  // int4 codes in the tensor-core layout, when eligible
  const float* bias = nullptr;
  int64_t rows = 0, cols = 0;
};

struct DevLayer {
  const float* input_norm = nullptr;
  const float* post_attention_norm = nullptr;
  const float* post_self_attn_norm = nullptr;  // GLM-4 only
  const float* post_mlp_norm = nullptr;        // GLM-4 only
  DevLinear q, k, v, o, gate, up, down;
};

// Per-step host description shared by every rank.
struct StepPlan {
  int32_t S = 0;
  int64_t T = 0;
  int64_t rows_out = 0;
  int32_t max_pages = 1;
  int32_t max_q = 0;
  int32_t max_kv = 0;
  bool graph = false;  // a decode step run as the captured graph of (S, max_kv)
  std::vector<int32_t> ids, pos, page_ids, slots, tok_staging, q_start, kv_len, table, staging;
  std::vector<std::pair<int64_t, int64_t>> runs;  // (first token row, rows) copied into the logits rows
};

// Where each array of a step's metadata sits in the rank's device buffer (int32 offsets). For a given
// (S, T, max_pages) the layout is always the same, which is what lets a captured graph be replayed.
struct MetaOffsets {
  size_t ids = 0, pos = 0, page = 0, slot = 0, tok_staging = 0, q_start = 0, kv_len = 0, table = 0,
         staging = 0;
};

// The KV length a captured decode graph is planned for: the next power of two of at least 64 tokens.
// The kernels read each sequence's true length from the metadata, so planning for more is exact; one
// graph then serves every step until the longest sequence crosses the bucket.
int32_t graph_kv_bucket(int32_t max_kv) {
  int32_t b = 64;
  while (b < max_kv && b < (int32_t{1} << 30)) b *= 2;
  return b;
}

}  // namespace

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::shared_ptr<const model::Model> model, CudaBackendOptions options)
      : model_(std::move(model)), options_(options) {}
  ~CudaBackend() override;

  Status load();

  std::string_view name() const override { return "cuda"; }
  const ModelShape& shape() const override { return shape_; }
  WeightFormat weight_format() const override { return options_.weight_format; }
  int64_t weight_bytes() const override;
  Status allocate_kv(const KvSpec& spec, int64_t num_blocks, int32_t max_sequences) override;
  int64_t kv_bytes() const override;
  Status forward(std::span<const SequenceInput> batch, ForwardOutput* out) override;

 private:
  struct Rank {
    int device = 0;
    TpShard shard;
    cudaStream_t stream = nullptr;
    bool count_only = false;  // the sizing pass: count bytes, allocate nothing
    int64_t weight_bytes = 0;
    std::vector<DeviceBuffer> owned;
    k::MatrixSource embed;  // rows shard.vocab of the table
    std::vector<DevLayer> layers;
    const float* final_norm = nullptr;
    const float* inv_freq = nullptr;
    DevLinear lm_head;
    // KV pool, per layer
    std::vector<DeviceBuffer> kv_pages, kv_staging;
    std::vector<k::KvCache> caches;
    int64_t kv_bytes = 0;
    // activations and step metadata (grown on demand)
    DeviceBuffer act, meta, workspace;
    int64_t cap_tokens = 0, cap_rows = 0;
    // Captured decode steps by (sequences, KV bucket). They hold the buffers' addresses: dropped
    // whenever act, meta or workspace is reallocated.
    std::map<std::pair<int32_t, int32_t>, cudaGraphExec_t> graphs;
  };

  Result<const void*> upload(Rank& r, const void* host, size_t bytes, std::string_view what);
  Result<const float*> upload_floats(Rank& r, const std::vector<float>& v, std::string_view what);
  Result<DevLinear> upload_linear(Rank& r, const CpuBackend::Linear& l, TpSplit split, TpRange range,
                                  bool with_bias, std::string_view what);
  Status upload_rank(Rank& r, const CpuBackend& cpu);
  Status ensure_activations(Rank& r, int64_t tokens, int64_t rows);
  Status ensure_step_buffers(Rank& r, const StepPlan& p);
  Status all_reduce(Rank& r, float* data, int64_t count);
  Status run_rank(Rank& r, const StepPlan& p, ForwardOutput* out);
  Result<MetaOffsets> upload_metadata(Rank& r, const StepPlan& p);
  Status run_layers(Rank& r, const StepPlan& p, const MetaOffsets& m);
  Status enqueue_layers(Rank& r, const StepPlan& p, const MetaOffsets& m);
  Status copy_logits(Rank& r, const StepPlan& p, ForwardOutput* out);
  static void drop_graphs(Rank& r);
  struct Activations {
    float *x, *h, *q, *k, *v, *attn, *gate, *up, *act, *sel, *logits;
  };
  // The rank's activation buffer carved up (capacities cap_tokens rows, cap_rows logits rows).
  Activations activations(const Rank& r) const;

  std::shared_ptr<const model::Model> model_;
  CudaBackendOptions options_;
  ModelShape shape_;
  int64_t intermediate_ = 0;
  float eps_ = 1e-6f;
  k::RopeConfig rope_;
  std::vector<Rank> ranks_;
  std::unique_ptr<cuda_detail::NcclGroup> nccl_;
  KvSpec kv_spec_;
  int64_t num_blocks_ = 0;
  int32_t max_sequences_ = 0;
};

void CudaBackend::drop_graphs(Rank& r) {
  for (auto& [key, exec] : r.graphs) (void)cudaGraphExecDestroy(exec);
  r.graphs.clear();
}

CudaBackend::~CudaBackend() {
  for (Rank& r : ranks_) {
    (void)cudaSetDevice(r.device);
    if (r.stream) (void)cudaStreamSynchronize(r.stream);
    drop_graphs(r);
  }
  nccl_.reset();
  for (Rank& r : ranks_) {
    r.kv_pages.clear();
    r.kv_staging.clear();
    r.owned.clear();
    r.act.reset();
    r.meta.reset();
    r.workspace.reset();
    if (r.stream) {
      (void)cudaSetDevice(r.device);
      (void)cudaStreamDestroy(r.stream);
    }
  }
}

int64_t CudaBackend::weight_bytes() const {
  int64_t n = 0;
  for (const Rank& r : ranks_) n += r.weight_bytes;
  return n;
}

int64_t CudaBackend::kv_bytes() const {
  int64_t n = 0;
  for (const Rank& r : ranks_) n += r.kv_bytes;
  return n;
}

Result<const void*> CudaBackend::upload(Rank& r, const void* host, size_t bytes, std::string_view what) {
  r.weight_bytes += static_cast<int64_t>(bytes);
  if (r.count_only) return static_cast<const void*>(nullptr);
  INFERGATE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::alloc(r.device, bytes, what));
  if (bytes > 0)
    CB_CUDA(cudaMemcpy(b.get(), host, bytes, cudaMemcpyHostToDevice), "uploading " + std::string(what));
  const void* p = b.get();
  r.owned.push_back(std::move(b));
  return p;
}

Result<const float*> CudaBackend::upload_floats(Rank& r, const std::vector<float>& v, std::string_view what) {
  if (v.empty()) return static_cast<const float*>(nullptr);
  INFERGATE_ASSIGN_OR_RETURN(const void* p, upload(r, v.data(), v.size() * 4, what));
  return static_cast<const float*>(p);
}

Result<DevLinear> CudaBackend::upload_linear(Rank& r, const CpuBackend::Linear& l, TpSplit split,
                                             TpRange range, bool with_bias, std::string_view what) {
  if (l.f32) {
    return unimplemented(std::string(what) + ": fp32 weights are the CPU reference path")
        .with_reason("UnsupportedCombination");
  }
  const bool whole = split == TpSplit::kRows ? (range.begin == 0 && range.end == l.rows)
                                             : (range.begin == 0 && range.end == l.cols);
  HostWeight sliced;
  const k::WeightView* hv = &l.view;
  if (!whole) {
    auto s = slice_weight(l.view, split, range);
    if (!s.ok()) return std::move(s).error().context(std::string(what));
    sliced = std::move(*s);
    hv = &sliced.view;
  }
  DevLinear d;
  d.view.layout = hv->layout;
  d.rows = hv->layout.rows;
  d.cols = hv->layout.cols;
  const k::WeightBytes wb = k::weight_bytes(hv->layout);
  INFERGATE_ASSIGN_OR_RETURN(d.view.data, upload(r, hv->data, static_cast<size_t>(wb.data), what));
  if (wb.scales > 0) {
    INFERGATE_ASSIGN_OR_RETURN(d.view.scales, upload(r, hv->scales, static_cast<size_t>(wb.scales), what));
  }
  if (wb.zeros > 0) {
    INFERGATE_ASSIGN_OR_RETURN(const void* z, upload(r, hv->zeros, static_cast<size_t>(wb.zeros), what));
    d.view.zeros = static_cast<const uint8_t*>(z);
  }
  if (options_.int4_mma && k::is_int4(hv->layout.format) && kc::int4_mma_eligible(hv->layout)) {
    std::vector<uint8_t> packed;
    if (!r.count_only) {  // the sizing pass only counts the bytes
      packed.resize(static_cast<size_t>(wb.data));
      CB_K(kc::pack_int4_for_mma_host(*hv, packed.data()), std::string(what) + ": int4 packing");
    }
    INFERGATE_ASSIGN_OR_RETURN(d.packed, upload(r, packed.data(), static_cast<size_t>(wb.data), what));
  }
  if (with_bias && !l.bias.empty()) {
    std::vector<float> b = l.bias;
    if (split == TpSplit::kRows) {
      b.assign(l.bias.begin() + range.begin, l.bias.begin() + range.end);
    }
    INFERGATE_ASSIGN_OR_RETURN(d.bias, upload_floats(r, b, what));
  }
  return d;
}

Status CudaBackend::upload_rank(Rank& r, const CpuBackend& cpu) {
  const TpShard& s = r.shard;
  const bool first = s.rank == 0;  // row-parallel biases are added once
  // Embedding rows of this rank's vocabulary slice, in the checkpoint's dtype.
  const k::MatrixSource& e = cpu.embedding();
  const size_t elem = e.dtype == k::SourceDtype::kF32 ? 4 : 2;
  const auto* base =
      static_cast<const uint8_t*>(e.data) + static_cast<size_t>(s.vocab.begin * e.row_stride) * elem;
  if (e.row_stride != e.cols) return internal_error("embedding table is not contiguous");
  INFERGATE_ASSIGN_OR_RETURN(
      const void* emb, upload(r, base, static_cast<size_t>(s.vocab.size() * e.cols) * elem, "embedding"));
  r.embed = {emb, e.dtype, s.vocab.size(), e.cols, e.cols};
  INFERGATE_ASSIGN_OR_RETURN(r.inv_freq, upload_floats(r, cpu.inv_freq(), "rope"));
  r.weight_bytes -= static_cast<int64_t>(cpu.inv_freq().size() * 4);  // a table, not a weight
  INFERGATE_ASSIGN_OR_RETURN(r.final_norm, upload_floats(r, cpu.final_norm(), "model.norm"));
  const int64_t I = intermediate_;
  r.layers.clear();
  for (size_t i = 0; i < cpu.layers().size(); ++i) {
    const CpuBackend::Layer& L = cpu.layers()[i];
    const std::string p = "layer " + std::to_string(i) + " ";
    DevLayer d;
    INFERGATE_ASSIGN_OR_RETURN(d.input_norm, upload_floats(r, L.input_norm, p + "input_layernorm"));
    INFERGATE_ASSIGN_OR_RETURN(d.post_attention_norm, upload_floats(r, L.post_attention_norm, p + "norm"));
    INFERGATE_ASSIGN_OR_RETURN(d.post_self_attn_norm, upload_floats(r, L.post_self_attn_norm, p + "norm"));
    INFERGATE_ASSIGN_OR_RETURN(d.post_mlp_norm, upload_floats(r, L.post_mlp_norm, p + "norm"));
    INFERGATE_ASSIGN_OR_RETURN(d.q, upload_linear(r, L.q, TpSplit::kRows, s.q_rows, true, p + "q_proj"));
    INFERGATE_ASSIGN_OR_RETURN(d.k, upload_linear(r, L.k, TpSplit::kRows, s.kv_rows, true, p + "k_proj"));
    INFERGATE_ASSIGN_OR_RETURN(d.v, upload_linear(r, L.v, TpSplit::kRows, s.kv_rows, true, p + "v_proj"));
    INFERGATE_ASSIGN_OR_RETURN(d.o, upload_linear(r, L.o, TpSplit::kCols, s.q_rows, first, p + "o_proj"));
    if (L.fused) {
      // gate_up [2I, H] = [gate; up]: each rank takes its rows of both halves, held as two layers.
      INFERGATE_ASSIGN_OR_RETURN(d.gate,
                                 upload_linear(r, L.gate_up, TpSplit::kRows, s.mlp, false, p + "gate"));
      INFERGATE_ASSIGN_OR_RETURN(d.up, upload_linear(r, L.gate_up, TpSplit::kRows,
                                                     {I + s.mlp.begin, I + s.mlp.end}, false, p + "up"));
    } else {
      INFERGATE_ASSIGN_OR_RETURN(d.gate,
                                 upload_linear(r, L.gate, TpSplit::kRows, s.mlp, true, p + "gate_proj"));
      INFERGATE_ASSIGN_OR_RETURN(d.up, upload_linear(r, L.up, TpSplit::kRows, s.mlp, true, p + "up_proj"));
    }
    INFERGATE_ASSIGN_OR_RETURN(d.down,
                               upload_linear(r, L.down, TpSplit::kCols, s.mlp, first, p + "down_proj"));
    r.layers.push_back(d);
  }
  INFERGATE_ASSIGN_OR_RETURN(r.lm_head,
                             upload_linear(r, cpu.lm_head(), TpSplit::kRows, s.vocab, false, "lm_head"));
  return ok_status();
}

Status CudaBackend::load() {
  if (options_.weight_format == WeightFormat::kF32) {
    return unimplemented(
               "the CUDA backend serves fp16, bf16, int8 and int4 weights; fp32 is the CPU reference")
        .with_reason("UnsupportedCombination");
  }
  const model::ModelConfig& mc = model_->config();
  if (mc.moe || mc.qk_norm) {
    return unimplemented("the CUDA backend does not run " +
                         std::string(model::architecture_name(mc.architecture)) +
                         " yet (routed experts and per-head q/k norms run on the CPU backend)")
        .with_reason("UnsupportedArchitecture");
  }
  const int32_t T = options_.tensor_parallel;
  const int available = cuda_device_count();
  if (available == 0) {
    return unavailable("no usable GPU: " + cuda_device_description()).with_reason("NoDevice");
  }
  if (T < 1 || options_.first_device < 0 || options_.first_device + T > available) {
    return unavailable("--tensor-parallel " + std::to_string(T) + " from GPU " +
                       std::to_string(options_.first_device) + " needs " + std::to_string(T) +
                       " GPUs; this machine has " + std::to_string(available))
        .with_reason("NoDevice")
        .with_detail("gpus", std::to_string(available));
  }
  // Read, validate and (for fp16/bf16) convert the checkpoint through the CPU backend.
  CpuBackendOptions co;
  co.weight_format = options_.weight_format;
  co.smooth_keys = options_.smooth_keys;
  auto cpu = std::make_unique<CpuBackend>(model_, co);
  INFERGATE_RETURN_IF_ERROR(cpu->load());
  shape_ = cpu->shape();
  intermediate_ = model_->config().intermediate_size;
  eps_ = cpu->rms_eps();
  rope_ = cpu->rope();
  INFERGATE_RETURN_IF_ERROR(validate_tp(shape_, intermediate_, T));

  ranks_.resize(static_cast<size_t>(T));
  std::vector<int> devices;
  for (int32_t i = 0; i < T; ++i) {
    Rank& r = ranks_[static_cast<size_t>(i)];
    r.device = options_.first_device + i;
    devices.push_back(r.device);
    INFERGATE_ASSIGN_OR_RETURN(r.shard, tp_shard(shape_, intermediate_, T, i));
  }
  // Size every rank's weights first (nothing allocated) and refuse before uploading what cannot fit.
  for (Rank& r : ranks_) {
    r.count_only = true;
    INFERGATE_RETURN_IF_ERROR(upload_rank(r, *cpu));
    r.count_only = false;
    const int64_t need = r.weight_bytes;
    r.weight_bytes = 0;
    CB_CUDA(cudaSetDevice(r.device), "cudaSetDevice");
    size_t free_b = 0, total_b = 0;
    CB_CUDA(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    if (need + options_.headroom_bytes > static_cast<int64_t>(free_b)) {
      return resource_exhausted("the weights need " + gib(need) + " on GPU " + std::to_string(r.device) +
                                " (plus " + gib(options_.headroom_bytes) + " headroom); " +
                                gib(static_cast<int64_t>(free_b)) + " of " +
                                gib(static_cast<int64_t>(total_b)) + " are free")
          .with_reason("ModelDoesNotFit")
          .with_detail("needed_bytes", std::to_string(need))
          .with_detail("free_bytes", std::to_string(free_b))
          .with_detail("device", std::to_string(r.device));
    }
  }
  for (Rank& r : ranks_) {
    CB_CUDA(cudaSetDevice(r.device), "cudaSetDevice");
    CB_CUDA(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    INFERGATE_RETURN_IF_ERROR(upload_rank(r, *cpu));
  }
  if (T > 1) {
    auto g = cuda_detail::NcclGroup::create(devices);
    if (!g.ok()) return std::move(g).error().context("--tensor-parallel " + std::to_string(T));
    nccl_ = std::move(*g);
  }
  return ok_status();
}

Status CudaBackend::allocate_kv(const KvSpec& spec, int64_t num_blocks, int32_t max_sequences) {
  if (spec.num_layers != shape_.num_layers || spec.num_kv_heads != shape_.num_kv_heads ||
      spec.head_dim != shape_.head_dim || spec.block_tokens != kBlockTokens) {
    return invalid_argument("KV spec does not match the model (layers, KV heads, head_dim, 16-token blocks)");
  }
  const auto kd = kernel_kv_dtype(spec.dtype);
  if (!kd) {
    return unimplemented("the CUDA backend has no " + std::string(kv_cache_dtype_name(spec.dtype)) +
                         " KV cache (fp32 is the CPU reference's)")
        .with_reason("UnsupportedCombination");
  }
  if (num_blocks < 1 || num_blocks > INT32_MAX || max_sequences < 1) {
    return invalid_argument("allocate_kv: blocks must be in 1..2^31-1 (block ids are int32) and slots >= 1");
  }
  kv_spec_ = spec;
  num_blocks_ = num_blocks;
  max_sequences_ = max_sequences;
  for (Rank& r : ranks_) {
    r.kv_pages.clear();
    r.kv_staging.clear();
    r.caches.clear();
    r.kv_bytes = 0;
  }
  for (Rank& r : ranks_) {
    KvSpec local = spec;
    local.num_kv_heads = static_cast<int32_t>(r.shard.kv_heads.size());
    INFERGATE_ASSIGN_OR_RETURN(KvBytes b, engine::kv_bytes(local));
    INFERGATE_ASSIGN_OR_RETURN(int64_t need, kv_pool_bytes(local, num_blocks, max_sequences));
    CB_CUDA(cudaSetDevice(r.device), "cudaSetDevice");
    size_t free_b = 0, total_b = 0;
    CB_CUDA(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    if (need + options_.headroom_bytes > static_cast<int64_t>(free_b)) {
      return resource_exhausted("the KV cache (" + std::to_string(num_blocks) + " blocks of " +
                                std::string(kv_cache_dtype_name(spec.dtype)) + ") needs " + gib(need) +
                                " on GPU " + std::to_string(r.device) + " (plus " +
                                gib(options_.headroom_bytes) + " headroom); " +
                                gib(static_cast<int64_t>(free_b)) + " are free after the weights")
          .with_reason("KvDoesNotFit")
          .with_detail("needed_bytes", std::to_string(need))
          .with_detail("free_bytes", std::to_string(free_b))
          .with_detail("device", std::to_string(r.device));
    }
    const int64_t staging_per_layer = b.staging_bytes / spec.num_layers * max_sequences;
    for (int32_t l = 0; l < spec.num_layers; ++l) {
      INFERGATE_ASSIGN_OR_RETURN(
          DeviceBuffer pages,
          DeviceBuffer::alloc(r.device, static_cast<size_t>(b.page_bytes * num_blocks), "KV pages"));
      CB_CUDA(cudaMemset(pages.get(), 0, pages.size()), "cudaMemset KV pages");
      DeviceBuffer staging;
      if (staging_per_layer > 0) {
        INFERGATE_ASSIGN_OR_RETURN(
            staging, DeviceBuffer::alloc(r.device, static_cast<size_t>(staging_per_layer), "KV staging"));
        CB_CUDA(cudaMemset(staging.get(), 0, staging.size()), "cudaMemset KV staging");
      }
      k::KvCache c;
      c.layout = {*kd, spec.block_tokens, local.num_kv_heads, spec.head_dim};
      c.pages = pages.get<uint8_t>();
      c.num_pages = num_blocks;
      c.staging = staging_per_layer > 0 ? staging.get<uint8_t>() : nullptr;
      c.num_staging = staging_per_layer > 0 ? max_sequences : 0;
      c.k_scale = nullptr;  // fp8: 1.0 per head, as the CPU backend (no calibration data)
      c.v_scale = nullptr;
      r.caches.push_back(c);
      r.kv_pages.push_back(std::move(pages));
      r.kv_staging.push_back(std::move(staging));
    }
    r.kv_bytes = need;
  }
  return ok_status();
}

Status CudaBackend::ensure_activations(Rank& r, int64_t tokens, int64_t rows) {
  if (tokens <= r.cap_tokens && rows <= r.cap_rows) return ok_status();
  auto grow = [](int64_t need, int64_t have) {
    int64_t n = std::max<int64_t>(have, 16);
    while (n < need) n *= 2;
    return n;
  };
  const int64_t Tc = grow(tokens, r.cap_tokens), Rc = grow(rows, r.cap_rows);
  const int64_t H = shape_.hidden, D = shape_.head_dim;
  const int64_t qd = r.shard.heads.size() * D, kvd = r.shard.kv_heads.size() * D, I = r.shard.mlp.size();
  const int64_t floats = Tc * (2 * H + 2 * qd + 2 * kvd + 3 * I) + Rc * (H + r.shard.vocab.size());
  drop_graphs(r);
  INFERGATE_ASSIGN_OR_RETURN(r.act,
                             DeviceBuffer::alloc(r.device, static_cast<size_t>(floats) * 4, "activations"));
  r.cap_tokens = Tc;
  r.cap_rows = Rc;
  return ok_status();
}

Status CudaBackend::all_reduce(Rank& r, float* data, int64_t count) {
  if (!nccl_) return ok_status();  // T = 1: the sum over one rank
  return nccl_->all_reduce_sum(r.shard.rank, data, static_cast<size_t>(count), r.stream);
}

CudaBackend::Activations CudaBackend::activations(const Rank& r) const {
  const int64_t H = shape_.hidden, D = shape_.head_dim, Tc = r.cap_tokens;
  const int64_t qd = r.shard.heads.size() * D, kvd = r.shard.kv_heads.size() * D, I = r.shard.mlp.size();
  Activations a;
  a.x = r.act.get<float>();
  a.h = a.x + Tc * H;
  a.q = a.h + Tc * H;
  a.k = a.q + Tc * qd;
  a.v = a.k + Tc * kvd;
  a.attn = a.v + Tc * kvd;
  a.gate = a.attn + Tc * qd;
  a.up = a.gate + Tc * I;
  a.act = a.up + Tc * I;
  a.sel = a.act + Tc * I;
  a.logits = a.sel + r.cap_rows * H;
  return a;
}

Status CudaBackend::ensure_step_buffers(Rank& r, const StepPlan& p) {
  INFERGATE_RETURN_IF_ERROR(ensure_activations(r, p.T, std::max<int64_t>(p.rows_out, 1)));
  const size_t meta_bytes = static_cast<size_t>(5 * p.T + 3 * p.S + 1 + int64_t{p.S} * p.max_pages) * 4;
  if (meta_bytes > r.meta.size()) {
    drop_graphs(r);
    INFERGATE_ASSIGN_OR_RETURN(r.meta, DeviceBuffer::alloc(r.device, meta_bytes * 2, "step metadata"));
  }
  const size_t ws_need = kc::attention_workspace_bytes(
      p.S, static_cast<int32_t>(r.shard.heads.size()), static_cast<int32_t>(r.shard.kv_heads.size()),
      static_cast<int32_t>(shape_.head_dim), p.max_q, p.max_kv);
  if (ws_need > r.workspace.size()) {
    drop_graphs(r);
    INFERGATE_ASSIGN_OR_RETURN(r.workspace, DeviceBuffer::alloc(r.device, ws_need, "attention workspace"));
  }
  return ok_status();
}

Result<MetaOffsets> CudaBackend::upload_metadata(Rank& r, const StepPlan& p) {
  std::vector<int32_t> host;
  host.reserve(r.meta.size() / 4);
  auto put = [&](const std::vector<int32_t>& v) {
    const size_t at = host.size();
    host.insert(host.end(), v.begin(), v.end());
    return at;
  };
  MetaOffsets m;
  m.ids = host.size();
  for (int32_t id : p.ids)
    host.push_back(id - static_cast<int32_t>(r.shard.vocab.begin));  // outside: zero rows
  m.pos = put(p.pos);
  m.page = put(p.page_ids);
  m.slot = put(p.slots);
  m.tok_staging = put(p.tok_staging);
  m.q_start = put(p.q_start);
  m.kv_len = put(p.kv_len);
  m.table = put(p.table);
  m.staging = put(p.staging);
  if (host.size() * 4 > r.meta.size()) return internal_error("step metadata outgrew its buffer");
  CB_CUDA(cudaMemcpyAsync(r.meta.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice, r.stream),
          "uploading step metadata");
  return m;
}

Status CudaBackend::run_rank(Rank& r, const StepPlan& p, ForwardOutput* out) {
  CB_CUDA(cudaSetDevice(r.device), "cudaSetDevice");
  INFERGATE_RETURN_IF_ERROR(ensure_step_buffers(r, p));
  INFERGATE_ASSIGN_OR_RETURN(const MetaOffsets m, upload_metadata(r, p));
  INFERGATE_RETURN_IF_ERROR(run_layers(r, p, m));
  INFERGATE_RETURN_IF_ERROR(copy_logits(r, p, out));
  CB_CUDA(cudaStreamSynchronize(r.stream), "forward step");
  return ok_status();
}

// A decode step replays the graph captured for its (sequences, KV bucket), capturing it the first
// time; every other step launches the kernels itself.
Status CudaBackend::run_layers(Rank& r, const StepPlan& p, const MetaOffsets& m) {
  if (!p.graph) return enqueue_layers(r, p, m);
  const std::pair<int32_t, int32_t> key{p.S, p.max_kv};
  auto it = r.graphs.find(key);
  if (it == r.graphs.end()) {
    CB_CUDA(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    Status enqueued = enqueue_layers(r, p, m);
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(r.stream, &graph);
    if (!enqueued.ok()) {
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      return std::move(enqueued).error().context("capturing the decode step");
    }
    CB_CUDA(ended, "cudaStreamEndCapture (decode step)");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    CB_CUDA(made, "cudaGraphInstantiate (decode step)");
    it = r.graphs.emplace(key, exec).first;
  }
  CB_CUDA(cudaGraphLaunch(it->second, r.stream), "cudaGraphLaunch (decode step)");
  return ok_status();
}

// Embedding and every layer, enqueued on the rank's stream (and nothing else: no host work that a
// replayed graph would skip).
Status CudaBackend::enqueue_layers(Rank& r, const StepPlan& p, const MetaOffsets& m) {
  const int64_t T = p.T, S = p.S, H = shape_.hidden, D = shape_.head_dim;
  const int64_t Hq = r.shard.heads.size(), Hk = r.shard.kv_heads.size(), I = r.shard.mlp.size();
  const int32_t* meta = r.meta.get<int32_t>();
  const Activations a = activations(r);
  float *x = a.x, *h = a.h, *q = a.q, *kk = a.k, *vv = a.v, *attn = a.attn, *gate = a.gate, *up = a.up,
        *act = a.act;
  const cudaStream_t st = r.stream;
  auto linear = [&](const DevLinear& l, const float* in, float* o) -> Status {
    CB_K(kc::linear(k::contiguous<const float>(in, T, l.cols), l.view, l.packed, l.bias,
                    k::contiguous(o, T, l.rows), st),
         "linear");
    return ok_status();
  };

  CB_K(kc::embedding(r.embed, meta + m.ids, T, k::contiguous(x, T, H), st), "embedding");
  INFERGATE_RETURN_IF_ERROR(all_reduce(r, x, T * H));  // each rank wrote its vocabulary's rows
  k::AttentionBatch ab;
  ab.num_seqs = static_cast<int32_t>(S);
  ab.num_q_heads = static_cast<int32_t>(Hq);
  ab.scale = 1.0f / std::sqrt(static_cast<float>(D));
  ab.q_start = meta + m.q_start;
  ab.kv_len = meta + m.kv_len;
  ab.block_table = meta + m.table;
  ab.max_pages_per_seq = p.max_pages;
  ab.staging_ids = meta + m.staging;
  for (size_t li = 0; li < r.layers.size(); ++li) {
    const DevLayer& L = r.layers[li];
    CB_K(kc::rmsnorm(k::contiguous<const float>(x, T, H), L.input_norm, eps_, k::contiguous(h, T, H), st),
         "input_layernorm");
    INFERGATE_RETURN_IF_ERROR(linear(L.q, h, q));
    INFERGATE_RETURN_IF_ERROR(linear(L.k, h, kk));
    INFERGATE_RETURN_IF_ERROR(linear(L.v, h, vv));
    CB_K(kc::rope(rope_, r.inv_freq, meta + m.pos, k::contiguous(q, T, Hq, D), k::contiguous(kk, T, Hk, D),
                  st),
         "rope");
    k::KvAppend app;
    app.k = k::contiguous<const float>(kk, T, Hk, D);
    app.v = k::contiguous<const float>(vv, T, Hk, D);
    app.page_ids = meta + m.page;
    app.slots = meta + m.slot;
    app.staging_ids = meta + m.tok_staging;
    CB_K(kc::kv_append(r.caches[li], app, st), "kv_append");
    CB_K(kc::attention(r.caches[li], ab, p.max_q, p.max_kv, k::contiguous<const float>(q, T, Hq, D),
                       k::contiguous(attn, T, Hq, D), r.workspace.get(), r.workspace.size(), st),
         "attention");
    INFERGATE_RETURN_IF_ERROR(linear(L.o, attn, h));
    INFERGATE_RETURN_IF_ERROR(all_reduce(r, h, T * H));
    if (L.post_self_attn_norm) {
      CB_K(kc::rmsnorm(k::contiguous<const float>(h, T, H), L.post_self_attn_norm, eps_,
                       k::contiguous(h, T, H), st),
           "post_self_attn_layernorm");
    }
    CB_K(kc::add(k::contiguous<const float>(x, T, H), k::contiguous<const float>(h, T, H),
                 k::contiguous(x, T, H), st),
         "residual");
    CB_K(kc::rmsnorm(k::contiguous<const float>(x, T, H), L.post_attention_norm, eps_, k::contiguous(h, T, H),
                     st),
         "post_attention_layernorm");
    INFERGATE_RETURN_IF_ERROR(linear(L.gate, h, gate));
    INFERGATE_RETURN_IF_ERROR(linear(L.up, h, up));
    CB_K(kc::silu_mul(k::contiguous<const float>(gate, T, I), k::contiguous<const float>(up, T, I),
                      k::contiguous(act, T, I), st),
         "silu_mul");
    INFERGATE_RETURN_IF_ERROR(linear(L.down, act, h));
    INFERGATE_RETURN_IF_ERROR(all_reduce(r, h, T * H));
    if (L.post_mlp_norm) {
      CB_K(
          kc::rmsnorm(k::contiguous<const float>(h, T, H), L.post_mlp_norm, eps_, k::contiguous(h, T, H), st),
          "post_mlp_layernorm");
    }
    CB_K(kc::add(k::contiguous<const float>(x, T, H), k::contiguous<const float>(h, T, H),
                 k::contiguous(x, T, H), st),
         "residual");
  }
  return ok_status();
}

// The wanted rows' logits (this rank's vocabulary columns), normed and projected, copied to the host.
Status CudaBackend::copy_logits(Rank& r, const StepPlan& p, ForwardOutput* out) {
  if (p.rows_out == 0) return ok_status();
  const int64_t H = shape_.hidden, V = r.shard.vocab.size();
  const Activations a = activations(r);
  float *x = a.x, *sel = a.sel, *logits = a.logits;
  const cudaStream_t st = r.stream;
  int64_t at = 0;
  for (const auto& [first, n] : p.runs) {
    CB_CUDA(cudaMemcpyAsync(sel + at * H, x + first * H, static_cast<size_t>(n * H) * 4,
                            cudaMemcpyDeviceToDevice, st),
            "gathering rows");
    at += n;
  }
  const int64_t R = p.rows_out;
  CB_K(kc::rmsnorm(k::contiguous<const float>(sel, R, H), r.final_norm, eps_, k::contiguous(sel, R, H), st),
       "norm");
  CB_K(kc::linear(k::contiguous<const float>(sel, R, H), r.lm_head.view, r.lm_head.packed, nullptr,
                  k::contiguous(logits, R, V), st),
       "lm_head");
  CB_CUDA(cudaMemcpy2DAsync(out->logits.data() + r.shard.vocab.begin, static_cast<size_t>(shape_.vocab) * 4,
                            logits, static_cast<size_t>(V) * 4, static_cast<size_t>(V) * 4,
                            static_cast<size_t>(R), cudaMemcpyDeviceToHost, st),
          "copying logits");
  return ok_status();
}

Status CudaBackend::forward(std::span<const SequenceInput> batch, ForwardOutput* out) {
  if (ranks_.empty() || ranks_[0].caches.empty()) return failed_precondition("forward before allocate_kv");
  if (batch.empty()) return invalid_argument("forward: empty batch");
  StepPlan p;
  p.S = static_cast<int32_t>(batch.size());
  p.q_start.assign(batch.size() + 1, 0);
  p.kv_len.resize(batch.size());
  p.staging.resize(batch.size());
  // The CPU backend's validation: nothing reaches the device unchecked (the kernels skip out-of-range
  // ids rather than report them).
  for (int32_t s = 0; s < p.S; ++s) {
    const SequenceInput& in = batch[static_cast<size_t>(s)];
    INFERGATE_RETURN_IF_ERROR(validate_sequence_input(in, s, shape_, num_blocks_, max_sequences_));
    const int64_t n = static_cast<int64_t>(in.tokens.size());
    const int64_t end = in.start_position + n;
    p.q_start[static_cast<size_t>(s) + 1] = p.q_start[static_cast<size_t>(s)] + static_cast<int32_t>(n);
    p.kv_len[static_cast<size_t>(s)] = static_cast<int32_t>(end);
    p.staging[static_cast<size_t>(s)] = in.slot;
    p.max_pages = std::max<int32_t>(p.max_pages, static_cast<int32_t>(blocks_for_tokens(end)));
    p.max_q = std::max<int32_t>(p.max_q, static_cast<int32_t>(n));
    p.max_kv = std::max<int32_t>(p.max_kv, static_cast<int32_t>(end));
  }
  p.T = p.q_start.back();
  if (options_.cuda_graphs && p.max_q == 1) {  // a decode step: one token per sequence
    p.graph = true;
    p.max_kv = graph_kv_bucket(p.max_kv);
    p.max_pages = std::max<int32_t>(p.max_pages, static_cast<int32_t>(blocks_for_tokens(p.max_kv)));
  }
  const size_t T = static_cast<size_t>(p.T);
  p.ids.resize(T);
  p.pos.resize(T);
  p.page_ids.resize(T);
  p.slots.resize(T);
  p.tok_staging.resize(T);
  p.table.assign(static_cast<size_t>(p.S) * static_cast<size_t>(p.max_pages), 0);
  out->vocab = shape_.vocab;
  out->row_start.assign(batch.size() + 1, 0);
  for (int32_t s = 0; s < p.S; ++s) {
    const SequenceInput& in = batch[static_cast<size_t>(s)];
    const int64_t first = p.q_start[static_cast<size_t>(s)];
    for (int64_t i = 0; i < static_cast<int64_t>(in.tokens.size()); ++i) {
      const size_t r = static_cast<size_t>(first + i);
      const int64_t pos = in.start_position + i;
      p.ids[r] = in.tokens[static_cast<size_t>(i)];
      p.pos[r] = static_cast<int32_t>(pos);
      p.page_ids[r] = in.block_table[static_cast<size_t>(pos / kBlockTokens)];
      p.slots[r] = static_cast<int32_t>(pos % kBlockTokens);
      p.tok_staging[r] = in.slot;
    }
    const int64_t np = blocks_for_tokens(p.kv_len[static_cast<size_t>(s)]);
    for (int64_t i = 0; i < np; ++i) {
      p.table[static_cast<size_t>(s) * static_cast<size_t>(p.max_pages) + static_cast<size_t>(i)] =
          in.block_table[static_cast<size_t>(i)];
    }
    out->row_start[static_cast<size_t>(s)] = p.rows_out;
    const int64_t n = static_cast<int64_t>(in.tokens.size());
    if (in.logits == LogitsWanted::kAll) {
      p.runs.emplace_back(first, n);
      p.rows_out += n;
    } else if (in.logits == LogitsWanted::kLast) {
      p.runs.emplace_back(first + n - 1, 1);
      p.rows_out += 1;
    }
  }
  out->row_start[batch.size()] = p.rows_out;
  out->logits.assign(static_cast<size_t>(p.rows_out * shape_.vocab), 0.0f);
  if (ranks_.size() == 1) return run_rank(ranks_[0], p, out);
  // One host thread per GPU: NCCL's collectives from one process need every rank enqueued
  // concurrently. Ranks write disjoint column ranges of out->logits.
  std::vector<Status> status(ranks_.size(), ok_status());
  std::vector<std::thread> threads;
  threads.reserve(ranks_.size());
  for (size_t i = 0; i < ranks_.size(); ++i) {
    threads.emplace_back([&, i] { status[i] = run_rank(ranks_[i], p, out); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < status.size(); ++i) {
    if (!status[i].ok()) return std::move(status[i]).error().context("rank " + std::to_string(i));
  }
  return ok_status();
}

Result<std::unique_ptr<Backend>> make_cuda_backend(std::shared_ptr<const model::Model> model,
                                                   const CudaBackendOptions& options) {
  if (!model) return invalid_argument("make_cuda_backend: no model");
  auto b = std::make_unique<CudaBackend>(std::move(model), options);
  INFERGATE_RETURN_IF_ERROR(b->load());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace infergate::runtime::engine
