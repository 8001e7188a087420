// The GPUs the planner knows by name, with their memory as marketed and as usable (what the driver
// reports as total memory, nvidia-smi's memory.total), and the parser for memory sizes on the
// command line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"

namespace infergate::runtime::planner {

struct GpuSpec {
  std::string name;      // "h200": what --gpu takes
  std::string product;   // "NVIDIA H200"
  std::string marketed;  // "141 GB"
  int64_t usable_bytes;  // memory.total as nvidia-smi reports it (MiB x 2^20)
  std::string aliases;   // other accepted names, comma-separated
};

// H100 80GB, H200 141GB, A100 40GB and 80GB, L40S, RTX 4090.
const std::vector<GpuSpec>& gpu_catalog();

// Looks a GPU up by name or alias, case-insensitively ("h200", "H100-80GB", "rtx4090").
// Unknown: reason "InvalidPlanInput", field "gpu", listing the known names.
Result<GpuSpec> find_gpu(std::string_view name);

// Parses a memory size: a number with an optional unit, B, KB/MB/GB/TB (powers of 1000) or
// KiB/MiB/GiB/TiB (powers of 1024), case-insensitive, e.g. "141GB", "80GiB", "81559MiB", "1.5TB",
// "4096". Zero, negative, non-finite or absurd (> 1 PiB) sizes are refused naming `field`.
Result<int64_t> parse_memory_size(std::string_view text, std::string_view field);

// "140.4 GiB", "512.0 MiB", "16.0 KiB", "80 B": binary units, one decimal.
std::string format_bytes(int64_t bytes);

}  // namespace infergate::runtime::planner
