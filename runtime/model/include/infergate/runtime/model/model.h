// A loaded model directory: configuration, tokenizer, generation defaults, and the weights as typed
// views into the mapped checkpoint (no copy). This is what the engine opens.
//
// Guarantees: open() refuses pickle weights, symlinks (unless allowed), bad configs and tokenizers,
// and (with check_tensors) any tensor the architecture needs that is missing or has the wrong shape or
// dtype (reason "MissingTensor" / "TensorShapeMismatch" / "TensorDtypeMismatch", naming the tensor).
// With a LoadHasher, every file read is handed to it exactly once, as it is read (files.h). A Model is
// immutable after open and safe to share between threads; views stay valid while the Model lives.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/runtime/model/checkpoint.h"
#include "infergate/runtime/model/config.h"
#include "infergate/runtime/model/files.h"
#include "infergate/runtime/model/tokenizer.h"
#include "infergate/runtime/model/weight_format.h"

namespace infergate::runtime::model {

// One tensor's bytes in the mapping.
struct TensorView {
  std::string_view name;
  DType dtype = DType::kF32;
  std::span<const uint64_t> shape;
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;

  uint64_t num_elements() const;
  // Whether data is aligned for its element type (safetensors does not promise it; files written by
  // the reference serializer and ours are aligned).
  bool aligned() const;
  template <class T>
  const T* as() const {
    return reinterpret_cast<const T*>(data);
  }
};

// A linear layer's weight of logical shape [rows (out), cols (in)], dense or quantized.
struct WeightView {
  WeightFormat format = WeightFormat::kDense;
  uint64_t rows = 0, cols = 0;
  TensorView dense;  // kDense: F16 / BF16 / F32 [rows, cols]
  // Quantized (weight_format.h): qweight, scales, and zeros for asymmetric int4 (else zeros.data == nullptr).
  QuantScheme scheme;
  TensorView qweight, scales, zeros;
};

// The kernels' view of a linear weight (F16/BF16 dense, or quantized), for the kernels' GEMV/GEMM.
// F32 dense weights have no kernels format and are refused (reason "UnsupportedWeightDtype").
Result<kernels::WeightView> kernel_weight_view(const WeightView& w);

// generation_config.json (every field optional).
struct GenerationConfig {
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<int64_t> max_new_tokens;
  std::optional<double> repetition_penalty;
};
Result<GenerationConfig> parse_generation_config(std::string_view json_text,
                                                 std::string_view file_name = "generation_config.json");

// quantization.json, as the quantizer writes it (docs/model-artifacts.md).
struct QuantizationRecord {
  QuantScheme scheme;
  std::string tool_version;
  // Logical weight name ("...q_proj.weight") -> its logical shape [rows, cols].
  std::map<std::string, std::pair<uint64_t, uint64_t>, std::less<>> quantized;
  std::vector<std::string> unquantized;  // tensors copied as they were
};
Result<QuantizationRecord> parse_quantization_record(std::string_view json_text,
                                                     std::string_view file_name = "quantization.json");

struct ModelOptions {
  bool refuse_symlinks = true;
  LoadHasher* hasher = nullptr;  // not owned
  bool check_tensors = true;
  SafetensorsLimits limits;
};

class Model {
 public:
  static Result<Model> open(const std::filesystem::path& dir, const ModelOptions& options = {});

  const std::filesystem::path& path() const { return path_; }
  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const TokenizerConfig& tokenizer_config() const { return tokenizer_config_; }
  const GenerationConfig& generation_config() const { return generation_config_; }
  // Present for checkpoints written by `infergate-runtime quantize`.
  const std::optional<QuantizationRecord>& quantization() const { return quantization_; }
  // The weight format of the quantized linear layers (kDense for an uncompressed checkpoint).
  WeightFormat weight_format() const {
    return quantization_ ? quantization_->scheme.format : WeightFormat::kDense;
  }

  // Any stored tensor by its checkpoint name.
  Result<TensorView> tensor(std::string_view name) const;
  // A linear layer's weight by its logical name ("model.layers.0.mlp.up_proj.weight"), dense or quantized.
  Result<WeightView> weight(std::string_view name) const;
  bool has_tensor(std::string_view name) const { return checkpoint_.find(name) != nullptr; }
  std::vector<std::string> tensor_names() const { return checkpoint_.tensor_names(); }
  // Bytes of all tensors (what the weights occupy in memory when mapped).
  uint64_t tensor_bytes() const { return checkpoint_.tensor_bytes(); }
  // The files read while opening, relative to the directory, in the order read.
  const std::vector<std::string>& files_read() const { return files_read_; }

 private:
  Status check_tensors() const;

  std::filesystem::path path_;
  ModelConfig config_;
  Tokenizer tokenizer_;
  TokenizerConfig tokenizer_config_;
  GenerationConfig generation_config_;
  std::optional<QuantizationRecord> quantization_;
  Checkpoint checkpoint_;
  std::vector<std::string> files_read_;
};

}  // namespace infergate::runtime::model
