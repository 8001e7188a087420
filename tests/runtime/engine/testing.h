// Helpers shared by the engine tests: generated models in temporary directories, quantized copies,
// engines over them, and running the runtime binary.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/common/subprocess.h"
#include "infergate/engine/engine.h"
#include "infergate/runtime/model/model.h"
#include "infergate/runtime/model/test_model.h"

namespace infergate::runtime::engine::testing {

TempDir temp_dir();

// Writes a test model (failing the test on error) and returns its directory.
std::filesystem::path make_model(const std::filesystem::path& dir, model::TestModelOptions o);
// A small llama-like model: 2 layers, hidden 64, 4 heads, 2 KV heads, vocab 320.
model::TestModelOptions small_options(model::Architecture arch = model::Architecture::kLlama,
                                      uint64_t seed = 3);
// Quantized copy of `src` in `out` (int8 per row, or int4 with group 32, asymmetric unless sym).
std::filesystem::path quantize(const std::filesystem::path& src, const std::filesystem::path& out,
                               model::WeightFormat format, bool symmetric = false, int64_t group = 32);

std::shared_ptr<const model::Model> open_model(const std::filesystem::path& dir);

struct EngineSetup {
  WeightFormat weight_format = WeightFormat::kF16;
  KvCacheDtype kv_dtype = KvCacheDtype::kF16;
  int32_t max_sequences = 4;
  int64_t max_context = 256;
  int64_t num_blocks = 0;
  bool reference_ops = false;
  bool smooth_keys = false;
};
std::unique_ptr<Engine> make_engine(std::shared_ptr<const model::Model> model, const EngineSetup& s);
std::unique_ptr<Engine> make_engine(const std::filesystem::path& dir, const EngineSetup& s);

// Runs infergate-runtime / the system Python with the arguments, capturing output.
CommandResult run_runtime(const std::vector<std::string>& args);
CommandResult run_python(const std::vector<std::string>& args);
bool python_has_numpy();
std::filesystem::path source_file(std::string_view name);

// A copy of the model directory src at dst with its config.json edited.
std::filesystem::path with_config(const std::filesystem::path& src, const std::filesystem::path& dst,
                                  const std::function<void(Json&)>& edit);
// The error load_engine gives for the directory (failing the test if it loads).
Error load_error(const std::filesystem::path& dir, KvCacheDtype kv = KvCacheDtype::kF16);

// Greedy sampling of up to n tokens, past the end-of-sequence tokens.
SamplingParams greedy_params(int32_t n);
// Steps every unfinished sequence in `ids` together until all finish; returns their tokens.
std::vector<std::vector<int32_t>> run_together(Engine& e, const std::vector<SeqId>& ids);

// Greedy generation of n tokens (ids) from a prompt, through generate().
std::vector<int32_t> greedy(Engine& e, const std::vector<int32_t>& prompt, int32_t n);

}  // namespace infergate::runtime::engine::testing
