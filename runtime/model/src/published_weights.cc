// Writing and reading the published weight formats' tensors, and describing a model directory.
#include "infergate/runtime/model/published_weights.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "infergate/kernels/ref.h"
#include "infergate/runtime/model/weight_format.h"

namespace infergate::runtime::model {
namespace {

using weights::Family;

Error scheme_error(std::string message) {
  return Error(ErrorCode::kInvalidArgument, std::move(message), "InvalidQuantScheme");
}

Error kernel_error(std::string_view what, const kernels::Status& s) {
  return Error(ErrorCode::kInvalidArgument, std::string(what) + ": " + s.message(), "QuantizationFailed")
      .with_detail("tensor", std::string(what));
}

std::string base_of(std::string_view weight_name) {
  constexpr std::string_view kWeight = ".weight";
  if (weight_name.ends_with(kWeight))
    return std::string(weight_name.substr(0, weight_name.size() - kWeight.size()));
  return std::string(weight_name);
}

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A tensor's bytes copied out of the mapping (published files need not align their tensors).
template <class T>
Result<std::vector<T>> tensor_copy(const Checkpoint& ckpt, const weights::TensorHeader& t) {
  const Checkpoint::Entry* e = ckpt.find(t.name);
  if (e == nullptr) return not_found("tensor " + t.name + " is not in the checkpoint");
  std::span<const uint8_t> d = ckpt.data(*e);
  std::vector<T> out(d.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), d.data(), out.size() * sizeof(T));
  return out;
}

// Reads tensor bytes out of the mapped shards for the description's value checks.
class CheckpointReader : public weights::TensorReader {
 public:
  explicit CheckpointReader(const Checkpoint& c) : ckpt_(c) {}
  Status read(const weights::TensorHeader& t, uint64_t offset, std::span<uint8_t> out) override {
    const Checkpoint::Entry* e = ckpt_.find(t.name);
    if (e == nullptr) return not_found("tensor " + t.name + " is not in the checkpoint");
    std::span<const uint8_t> d = ckpt_.data(*e);
    if (offset > d.size() || out.size() > d.size() - offset)
      return out_of_range("read past tensor " + t.name);
    std::memcpy(out.data(), d.data() + offset, out.size());
    return ok_status();
  }

 private:
  const Checkpoint& ckpt_;
};

}  // namespace

Result<kernels::PublishedLayout> published_layout(const weights::Scheme& s, uint64_t rows, uint64_t cols) {
  kernels::PublishedLayout l;
  switch (s.family) {
    case Family::kFp8Block: l.format = kernels::PublishedFormat::kFp8Block; break;
    case Family::kFp8Channel: l.format = kernels::PublishedFormat::kFp8Channel; break;
    case Family::kCtInt4: l.format = kernels::PublishedFormat::kCtInt4; break;
    case Family::kAwqInt4: l.format = kernels::PublishedFormat::kAwqInt4; break;
    case Family::kGptqInt4: l.format = kernels::PublishedFormat::kGptqInt4; break;
    default: return scheme_error(std::string(weights::family_name(s.family)) + " is not a published format");
  }
  l.rows = static_cast<int64_t>(rows);
  l.cols = static_cast<int64_t>(cols);
  const bool int4 =
      s.family == Family::kCtInt4 || s.family == Family::kAwqInt4 || s.family == Family::kGptqInt4;
  l.group_size = int4 ? static_cast<int32_t>(s.group_size) : 0;
  if (s.family == Family::kFp8Block) {
    l.block_rows = static_cast<int32_t>(s.block[0]);
    l.block_cols = static_cast<int32_t>(s.block[1]);
  }
  l.symmetric = s.family == Family::kAwqInt4 ? false : s.symmetric;
  l.act_order = s.act_order;
  l.gptq_v2 = s.gptq_v2;
  l.scale_ue8m0 = s.family == Family::kFp8Block && s.scale_ue8m0;
  switch (s.scale_dtype) {
    case weights::Dtype::kF32: l.scale = kernels::PublishedScale::kF32; break;
    case weights::Dtype::kF16: l.scale = kernels::PublishedScale::kF16; break;
    case weights::Dtype::kBF16: l.scale = kernels::PublishedScale::kBF16; break;
    default:
      return scheme_error("scales are stored as F32, F16 or BF16, not " +
                          std::string(weights::dtype_name(s.scale_dtype)));
  }
  kernels::Status k = kernels::validate_published_layout(l);
  if (!k.ok()) {
    return scheme_error("[" + std::to_string(rows) + ", " + std::to_string(cols) + "] in " +
                        std::string(weights::family_name(s.family)) + ": " + k.message());
  }
  return l;
}

std::vector<int32_t> act_order_groups(const float* w, uint64_t rows, uint64_t cols, int64_t group_size) {
  std::vector<double> energy(cols, 0.0);
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) energy[c] += static_cast<double>(w[r * cols + c]) * w[r * cols + c];
  }
  std::vector<uint64_t> order(cols);
  std::iota(order.begin(), order.end(), uint64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) { return energy[a] > energy[b]; });
  std::vector<int32_t> g_idx(cols);
  for (uint64_t i = 0; i < cols; ++i)
    g_idx[order[i]] = static_cast<int32_t>(i / static_cast<uint64_t>(group_size));
  return g_idx;
}

Result<std::vector<TensorSpec>> published_part_specs(std::string_view weight_name, uint64_t rows,
                                                     uint64_t cols, const weights::Scheme& s) {
  INFERGATE_ASSIGN_OR_RETURN(kernels::PublishedLayout l,
                             published_layout(s, rows, cols).context(std::string(weight_name)));
  const kernels::PublishedShapes sh = kernels::published_shapes(l);
  const std::string base = base_of(weight_name);
  const DType scale_dt = s.scale_dtype;
  auto dims = [](const int64_t(&d)[2]) { return std::vector<uint64_t>{uint64_t(d[0]), uint64_t(d[1])}; };
  std::vector<TensorSpec> specs;
  switch (s.family) {
    case Family::kFp8Block:
    case Family::kFp8Channel:
      specs.push_back({base + ".weight", DType::kF8E4M3, dims(sh.data)});
      specs.push_back({base + (s.family == Family::kFp8Block ? ".weight_scale_inv" : ".weight_scale"),
                       scale_dt, dims(sh.scales)});
      break;
    case Family::kCtInt4:
      specs.push_back({base + ".weight_packed", DType::kI32, dims(sh.data)});
      specs.push_back({base + ".weight_scale", scale_dt, dims(sh.scales)});
      specs.push_back({base + ".weight_shape", DType::kI64, {2}});
      if (!l.symmetric) specs.push_back({base + ".weight_zero_point", DType::kI32, dims(sh.zeros)});
      if (l.act_order) specs.push_back({base + ".weight_g_idx", DType::kI32, {cols}});
      break;
    case Family::kAwqInt4:
      specs.push_back({base + ".qweight", DType::kI32, dims(sh.data)});
      specs.push_back({base + ".qzeros", DType::kI32, dims(sh.zeros)});
      specs.push_back({base + ".scales", scale_dt, dims(sh.scales)});
      break;
    case Family::kGptqInt4:  // AutoGPTQ stores g_idx always (k / G without activation order)
      specs.push_back({base + ".qweight", DType::kI32, dims(sh.data)});
      specs.push_back({base + ".qzeros", DType::kI32, dims(sh.zeros)});
      specs.push_back({base + ".scales", scale_dt, dims(sh.scales)});
      specs.push_back({base + ".g_idx", DType::kI32, {cols}});
      break;
    default: break;
  }
  return specs;
}

Result<std::vector<QuantizedPart>> quantize_published_linear(std::string_view weight_name, const float* w,
                                                             uint64_t rows, uint64_t cols,
                                                             const weights::Scheme& s) {
  INFERGATE_ASSIGN_OR_RETURN(std::vector<TensorSpec> specs, published_part_specs(weight_name, rows, cols, s));
  INFERGATE_ASSIGN_OR_RETURN(kernels::PublishedLayout l,
                             published_layout(s, rows, cols).context(std::string(weight_name)));
  const kernels::PublishedBytes b = kernels::published_bytes(l);
  std::vector<uint8_t> data(static_cast<size_t>(b.data)), scales(static_cast<size_t>(b.scales));
  std::vector<int32_t> zeros(static_cast<size_t>(b.zeros / 4));
  std::vector<int32_t> g_idx;
  if (l.act_order) {
    g_idx = act_order_groups(w, rows, cols, s.group_size);
  } else if (s.family == Family::kGptqInt4) {
    g_idx.resize(cols);
    for (uint64_t c = 0; c < cols; ++c)
      g_idx[c] = s.group_size > 0 ? static_cast<int32_t>(c / static_cast<uint64_t>(s.group_size)) : 0;
  }
  kernels::MatrixSource src{w, kernels::SourceDtype::kF32, l.rows, l.cols, l.cols};
  kernels::PublishedBuffers out{data.data(), scales.data(), zeros.empty() ? nullptr : zeros.data(),
                                l.act_order ? g_idx.data() : nullptr};
  kernels::Status k = kernels::quantize_published_ref(src, l, out);
  if (!k.ok()) return kernel_error(weight_name, k);

  std::vector<QuantizedPart> parts;
  for (TensorSpec& spec : specs) {
    const std::string_view suffix = std::string_view(spec.name).substr(spec.name.rfind('.') + 1);
    std::vector<uint8_t> bytes;
    if (suffix == "weight" || suffix == "weight_packed" || suffix == "qweight") {
      bytes = std::move(data);
    } else if (suffix == "weight_scale_inv" || suffix == "weight_scale" || suffix == "scales") {
      bytes = std::move(scales);
    } else if (suffix == "weight_zero_point" || suffix == "qzeros") {
      bytes = bytes_of(zeros);
    } else if (suffix == "weight_g_idx" || suffix == "g_idx") {
      bytes = bytes_of(g_idx);
    } else if (suffix == "weight_shape") {
      bytes = bytes_of(std::vector<int64_t>{int64_t(rows), int64_t(cols)});
    }
    parts.push_back({std::move(spec), std::move(bytes)});
  }
  return parts;
}

Result<weights::WeightDescription> describe_checkpoint(const ModelDirectory& dir, const Checkpoint& ckpt,
                                                       weights::ReleaseMetadata* metadata) {
  weights::ReleaseMetadata& m = *metadata;
  m = weights::ReleaseMetadata{};
  if (dir.exists("config.json")) {
    INFERGATE_ASSIGN_OR_RETURN(std::string text, dir.read("config.json", 16u << 20));
    m.config_json = std::move(text);
  }
  if (dir.exists("quantization.json")) {
    INFERGATE_ASSIGN_OR_RETURN(std::string text, dir.read("quantization.json", 64u << 20));
    m.quantization_json = std::move(text);
  }
  for (const SafetensorsFile& shard : ckpt.shards()) {
    for (const TensorInfo& t : shard.tensors()) {
      weights::TensorHeader h;
      h.name = t.name;
      h.dtype = t.dtype;
      h.shape = t.shape;
      h.file = shard.name();
      h.offset = shard.header().data_offset + t.begin;
      h.bytes = t.nbytes();
      m.tensors.push_back(std::move(h));
    }
  }
  CheckpointReader reader(ckpt);
  weights::DescribeOptions o;
  o.reader = &reader;
  return weights::describe_weights(m, o);
}

Result<std::vector<float>> dequantize_described(const Checkpoint& ckpt, const weights::QuantizedLinear& q,
                                                const weights::Scheme& s) {
  std::vector<float> out(static_cast<size_t>(q.rows * q.cols));
  const weights::Part* data = q.part(weights::PartRole::kData);
  const weights::Part* scale = q.part(weights::PartRole::kScale);
  const weights::Part* zeros = q.part(weights::PartRole::kZeros);
  const weights::Part* g_idx = q.part(weights::PartRole::kGIdx);
  if (data == nullptr || scale == nullptr)
    return invalid_argument(q.module + ": not a complete quantized linear");
  if (s.family == Family::kInfergateInt8 || s.family == Family::kInfergateInt4) {
    QuantScheme ours;
    ours.format = s.family == Family::kInfergateInt8 ? WeightFormat::kInt8 : WeightFormat::kInt4;
    ours.group_size = s.group_size;
    ours.symmetric = s.symmetric;
    ours.scale_dtype = s.scale_dtype;
    INFERGATE_ASSIGN_OR_RETURN(auto d, tensor_copy<uint8_t>(ckpt, *data->tensor));
    INFERGATE_ASSIGN_OR_RETURN(auto sc, tensor_copy<uint8_t>(ckpt, *scale->tensor));
    std::vector<uint8_t> z;
    if (zeros != nullptr) {
      INFERGATE_ASSIGN_OR_RETURN(z, tensor_copy<uint8_t>(ckpt, *zeros->tensor));
    }
    INFERGATE_RETURN_IF_ERROR(
        dequantize_rows(d.data(), sc.data(), z.empty() ? nullptr : z.data(), q.rows, q.cols, ours, out.data())
            .context(q.module));
    return out;
  }
  INFERGATE_ASSIGN_OR_RETURN(kernels::PublishedLayout l,
                             published_layout(s, q.rows, q.cols).context(q.module));
  std::vector<int32_t> d;
  std::vector<uint8_t> d8;
  if (s.family == Family::kFp8Block || s.family == Family::kFp8Channel) {
    INFERGATE_ASSIGN_OR_RETURN(d8, tensor_copy<uint8_t>(ckpt, *data->tensor));
  } else {
    INFERGATE_ASSIGN_OR_RETURN(d, tensor_copy<int32_t>(ckpt, *data->tensor));
  }
  INFERGATE_ASSIGN_OR_RETURN(auto sc, tensor_copy<uint8_t>(ckpt, *scale->tensor));
  std::vector<int32_t> z, gi;
  if (zeros != nullptr) {
    INFERGATE_ASSIGN_OR_RETURN(z, tensor_copy<int32_t>(ckpt, *zeros->tensor));
  }
  if (g_idx != nullptr) {
    INFERGATE_ASSIGN_OR_RETURN(gi, tensor_copy<int32_t>(ckpt, *g_idx->tensor));
  }
  kernels::PublishedView v;
  v.layout = l;
  v.data = d8.empty() ? static_cast<const void*>(d.data()) : static_cast<const void*>(d8.data());
  v.scales = sc.data();
  v.zeros = z.empty() ? nullptr : z.data();
  v.g_idx = gi.empty() ? nullptr : gi.data();
  kernels::Status k = kernels::dequantize_published_ref(
      v, kernels::contiguous(out.data(), static_cast<int64_t>(q.rows), static_cast<int64_t>(q.cols)));
  if (!k.ok()) return kernel_error(q.module, k);
  return out;
}

}  // namespace infergate::runtime::model
