// What a release's safetensors files say about their tensors, read from the headers only: name, dtype,
// shape and where the bytes are. Layout (huggingface/safetensors): an 8-byte little-endian length N,
// N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {...}}, then the
// data; offsets are relative to the data.
//
// Guarantees: nothing proportional to a number read from the file is allocated before it is checked
// against the limits; every entry has a known dtype, a shape of at most max_rank non-negative
// dimensions, and a byte span equal to shape x dtype size (computed without overflow) that lies inside
// the data section. (The runtime's loader checks more at load: spans that cover the data exactly.)
// Errors carry the reason word "InvalidSafetensors" and the details "file" and, where there is one,
// "tensor".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/weights/dtype.h"

namespace infergate::weights {

inline constexpr std::string_view kInvalidSafetensors = "InvalidSafetensors";

struct HeaderLimits {
  uint64_t max_header_bytes = 100'000'000;  // as the reference implementation
  size_t max_tensors = 1u << 18;
  size_t max_rank = 8;
  size_t max_name_bytes = 4096;
};

struct TensorHeader {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<uint64_t> shape;
  std::string file;     // the shard that holds it, as the caller named it
  uint64_t offset = 0;  // of the first byte, from the start of the file
  uint64_t bytes = 0;

  uint64_t elements() const;
};

// Parses a header's JSON; `data_offset` is 8 + N and `data_bytes` the size of the data section.
// Tensors come back in header order (JSON object order); "__metadata__" is skipped.
Result<std::vector<TensorHeader>> parse_safetensors_header(std::string_view json, uint64_t data_offset,
                                                           uint64_t data_bytes, std::string_view file,
                                                           const HeaderLimits& limits = {});

// Reads and parses the header of an open file with pread (the file's size from fstat).
Result<std::vector<TensorHeader>> read_safetensors_header(int fd, std::string_view file,
                                                          const HeaderLimits& limits = {});

}  // namespace infergate::weights
