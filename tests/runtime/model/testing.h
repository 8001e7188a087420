// Helpers shared by the runtime/model tests: temporary directories, hand-built safetensors bytes,
// running our binary and the system Python.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/fs.h"
#include "infergate/common/subprocess.h"

namespace infergate::runtime::model::testing {

// A fresh temporary directory, removed at the end of the test.
TempDir temp_dir();

// The bytes of a safetensors file with exactly this header text (no padding) and data.
std::string safetensors_bytes(std::string_view header, std::string_view data);
// The same with an explicit (possibly lying) header length.
std::string safetensors_bytes_with_length(uint64_t length, std::string_view header, std::string_view data);

void write_bytes(const std::filesystem::path& path, std::string_view bytes);
std::string read_bytes(const std::filesystem::path& path);

// Runs infergate-runtime with the arguments; captures output.
CommandResult run_runtime(const std::vector<std::string>& args);
// Runs /usr/bin/python3 with the arguments.
CommandResult run_python(const std::vector<std::string>& args);
// tests/runtime/model/<name>
std::filesystem::path source_file(std::string_view name);

// Every regular file under `dir` as relative path -> content.
std::vector<std::pair<std::string, std::string>> tree(const std::filesystem::path& dir);

}  // namespace infergate::runtime::model::testing

#include <functional>

#include "infergate/runtime/model/safetensors_writer.h"
#include "infergate/runtime/model/test_model.h"

namespace infergate::runtime::model::testing {

// A small model of `arch` written into `dir` (f16, 2 layers, hidden 64, vocab 400, seed 7).
TestModelOptions small_model(const std::filesystem::path& dir, Architecture arch = Architecture::kLlama);
void make_small_model(const TestModelOptions& o);

// Rewrites a safetensors file through `edit`, which may change, drop or add tensors.
struct OwnedTensor {
  TensorSpec spec;
  std::vector<uint8_t> bytes;
};
void rewrite_safetensors(const std::filesystem::path& path,
                         const std::function<void(std::vector<OwnedTensor>&)>& edit);

}  // namespace infergate::runtime::model::testing
