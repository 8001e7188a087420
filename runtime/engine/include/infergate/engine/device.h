// Where the forward pass runs: `--device cpu|cuda|auto` on every runtime command that loads a model.
// `auto` picks CUDA when this build has the CUDA backend and a GPU is visible, else the CPU; `cuda`
// without a usable GPU is refused (reason "NoDevice"), never silently served on the CPU.
#pragma once

#include <string>
#include <string_view>

#include "infergate/common/result.h"

namespace infergate::runtime::engine {

enum class Device : uint8_t { kCpu, kCuda };

std::string_view device_name(Device d);  // "cpu", "cuda"

// True when this binary was built with the CUDA backend (INFERGATE_CUDA on and nvcc found).
bool cuda_backend_built();
// GPUs the CUDA backend can use (0 without the backend, a driver or a device); never fails.
int cuda_device_count();
// "NVIDIA H200, sm_90, 132 SMs, 139 GiB", or why there is none.
std::string cuda_device_description();

// Resolves a --device value: "cpu", "cuda" or "auto" (case-sensitive). Unknown names are refused
// (InvalidArgument, reason "UnknownDevice"); "cuda" in a build without the CUDA backend or on a
// machine without a GPU is refused (Unavailable, reason "NoDevice", the message saying which).
Result<Device> resolve_device(std::string_view name);

}  // namespace infergate::runtime::engine
