// The publisher's weight compressor: reads a checkpoint (HF layout, dense F16/BF16/F32) and writes a
// compressed one in which the architecture's linear layers are int8 or int4 (weight_format.h), with
// config.json's quantization_config and a quantization.json record (docs/model-artifacts.md).
//
// Guarantees: streams tensor by tensor in row blocks (peak memory is a few blocks, not the model);
// deterministic (same input and options, same bytes, whatever the thread count); refuses a non-empty
// output unless forced; writes into a hidden staging directory beside the output and renames it at
// the end, so an interrupted run leaves nothing that looks finished. Embeddings, norms, biases, the
// MoE router and lm_head stay as they are unless asked. Pickle weights and already-quantized inputs
// are refused. Symlinks in the input are followed (a publisher's Hugging Face cache is made of them).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include "infergate/common/result.h"
#include "infergate/runtime/model/config.h"
#include "infergate/runtime/model/quant_scheme.h"
#include "infergate/runtime/model/weight_format.h"

namespace infergate::runtime::model {

struct QuantizeProgress {
  size_t tensor_index = 0;  // 0-based, of tensor_count
  size_t tensor_count = 0;
  std::string_view tensor;
  uint64_t bytes_done = 0;  // input bytes processed so far, of bytes_total
  uint64_t bytes_total = 0;
};

struct QuantizeOptions {
  std::filesystem::path model;
  std::filesystem::path out;
  QuantScheme scheme;
  bool force = false;
  bool quantize_lm_head = false;
  int threads = 0;  // 0: the machine's cores, at most 8
  std::function<void(const QuantizeProgress&)> progress;
  const std::atomic<bool>* cancel = nullptr;  // set (e.g. by SIGINT) to stop between blocks
};

struct QuantizeReport {
  uint64_t input_bytes = 0;   // tensor bytes read
  uint64_t output_bytes = 0;  // tensor bytes written
  size_t tensors_quantized = 0;
  size_t tensors_copied = 0;
  double max_rel_error = 0;       // over quantized tensors: max |x - q(x)| / max |x|
  double mean_rms_rel_error = 0;  // mean over quantized tensors of ||x - q(x)|| / ||x||
  double seconds = 0;
  uint64_t peak_rss_bytes = 0;  // the process's peak resident set (getrusage), after the run
};

Result<QuantizeReport> quantize_model(const QuantizeOptions& options);

// "quantize" tool version written into quantization.json.
std::string_view quantize_tool_version();

}  // namespace infergate::runtime::model
