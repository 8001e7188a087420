// A hardened safetensors reader. Layout (huggingface/safetensors): 8-byte little-endian header length
// N, N bytes of UTF-8 JSON (an object: name -> {dtype, shape, data_offsets [begin, end)} plus an
// optional "__metadata__" of string -> string), then the data; offsets are relative to the data.
//
// Guarantees: a file is accepted only if the header length is within the cap and the file, the
// header is valid UTF-8 and a JSON object of exactly that schema (no unknown keys, no nesting beyond
// it), tensor names are unique and at most max_tensors, every shape x dtype size is computed without
// overflow and equals its byte span, and the spans cover the data exactly (in order, no gap, no
// overlap, nothing after). Nothing proportional to a number read from the file is allocated before
// that number is checked. Every error names the file and, where there is one, the tensor, and carries
// the reason word "InvalidSafetensors" plus a detail "problem" saying which check failed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/runtime/model/dtype.h"
#include "infergate/runtime/model/files.h"

namespace infergate::runtime::model {

struct SafetensorsLimits {
  uint64_t max_header_bytes = 100'000'000;  // as the reference implementation
  size_t max_tensors = 1u << 18;            // entries per file (DeepSeek-V3's shards hold about 600)
  size_t max_rank = 8;
  size_t max_name_bytes = 4096;
  size_t max_metadata_entries = 4096;
};

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;

  uint64_t nbytes() const { return end - begin; }
  uint64_t num_elements() const;
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;  // N
  uint64_t data_offset = 0;   // 8 + N: where the data section starts in the file
  uint64_t data_bytes = 0;
  std::vector<TensorInfo> tensors;  // in data order
  std::vector<std::pair<std::string, std::string>> metadata;
};

// Reads the 8-byte length prefix and checks it against the limit and the file size.
Result<uint64_t> safetensors_header_length(std::span<const uint8_t> prefix, uint64_t file_size,
                                           std::string_view file_name, const SafetensorsLimits& limits = {});
// Parses and validates the JSON header of a file whose data section has `data_bytes` bytes.
Result<SafetensorsHeader> parse_safetensors_header(std::span<const uint8_t> header_json, uint64_t data_bytes,
                                                   std::string_view file_name,
                                                   const SafetensorsLimits& limits = {});
// Validates a whole file held in memory (the fuzz target's entry point).
Result<SafetensorsHeader> parse_safetensors(std::span<const uint8_t> file, std::string_view file_name,
                                            const SafetensorsLimits& limits = {});
// Reads and validates only the header of a file on disk, with pread (no mapping); the quantizer
// streams tensors from it.
Result<SafetensorsHeader> read_safetensors_header(int fd, uint64_t file_size, std::string_view file_name,
                                                  const SafetensorsLimits& limits = {});

// A validated, mapped safetensors file. Immutable after open; safe to share between threads.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const ModelDirectory& dir, std::string_view name,
                                      const SafetensorsLimits& limits = {});
  // The same, read through `hasher` (one of the directory hasher's concurrent() ones).
  static Result<SafetensorsFile> open(const ModelDirectory& dir, std::string_view name,
                                      const SafetensorsLimits& limits, LoadHasher* hasher);
  // Opens a file by path, outside a model directory (tools and tests).
  static Result<SafetensorsFile> open_path(const std::filesystem::path& path,
                                           const SafetensorsLimits& limits = {});

  const std::string& name() const { return name_; }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const TensorInfo* find(std::string_view tensor) const;
  // The tensor's bytes inside the mapping.
  std::span<const uint8_t> data(const TensorInfo& t) const;
  bool copied() const { return file_.copied(); }

 private:
  std::string name_;
  MappedFile file_;
  SafetensorsHeader header_;
  std::unordered_map<std::string_view, size_t> index_;
};

// The error every validation failure returns (exposed for the loader's cross-file checks).
Error safetensors_error(std::string_view file, std::string_view tensor, std::string_view problem,
                        std::string message);

}  // namespace infergate::runtime::model
