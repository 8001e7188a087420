// Writes safetensors files in a streaming way: the header is laid out from the tensor specs up front,
// then each tensor's bytes are written at their offset (in any order, in as many pieces as wanted),
// so a writer never holds more than the piece it is given.
//
// Layout matches the reference serializer: tensors ordered by dtype size (largest first), then name,
// so every tensor starts aligned to its element size; the header is padded with spaces to a multiple
// of 8 bytes. The same specs and bytes always give the same file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "infergate/common/fs.h"
#include "infergate/common/result.h"
#include "infergate/runtime/model/dtype.h"

namespace infergate::runtime::model {

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
};

class SafetensorsWriter {
 public:
  // Creates (or truncates) `path` and reserves its full size. Refuses duplicate or empty names,
  // names that are not UTF-8, and sizes that overflow.
  static Result<SafetensorsWriter> create(const std::filesystem::path& path, std::vector<TensorSpec> tensors,
                                          const std::map<std::string, std::string>& metadata = {});

  // Writes `bytes` at `offset` within tensor `name`.
  Status write(std::string_view name, std::span<const uint8_t> bytes, uint64_t offset = 0);
  // Checks that every tensor received exactly its size in bytes, then fsyncs and closes the file.
  Status finish();

  uint64_t file_size() const { return file_size_; }
  // The header JSON as written (for tests).
  const std::string& header() const { return header_; }

 private:
  struct Slot {
    uint64_t begin = 0, size = 0, written = 0;
  };
  std::filesystem::path path_;
  UniqueFd fd_;
  std::string header_;
  uint64_t data_offset_ = 0;
  uint64_t file_size_ = 0;
  std::unordered_map<std::string, Slot> slots_;
};

// Convenience: a whole file from in-memory tensors.
struct TensorData {
  TensorSpec spec;
  std::span<const uint8_t> bytes;
};
Status write_safetensors(const std::filesystem::path& path, const std::vector<TensorData>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace infergate::runtime::model
