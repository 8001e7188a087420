// What the CUDA launchers share on the host: error conversion at the launch boundary, the device's
// properties, and the one launch helper every kernel goes through. (Device code is written on
// prims.cuh.) With INFERGATE_CUDA_EMU, <cuda_runtime.h> is the emulated runtime of
// tests/kernels/emu/include, and the same launchers run the kernels on the CPU emulator.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

#include "infergate/kernels/cuda.h"
#include "infergate/kernels/formats.h"
#include "infergate/kernels/status.h"

namespace infergate::kernels::cuda {

// A CUDA error as a Status naming the op.
inline Status cuda_error(cudaError_t e, const char* what) {
  return Status(StatusCode::kCudaError,
                std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
// After a launch: the launch's own error (bad configuration, no device), if any.
inline Status check_launch(const char* op) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? ok_status() : cuda_error(e, op);
}

struct DeviceInfo {
  int sm_count = 0;
  int max_smem_per_block = 0;  // opt-in limit
};
// Properties of the current device (queried once per device).
const DeviceInfo& device_info();

// Blocks of `kernel` resident per SM with `threads` threads and `smem` bytes of dynamic shared memory
// (cached per kernel and size; at least 1). Also raises the kernel's dynamic shared-memory limit to the
// device's opt-in maximum, once, so launches above 48 KB are allowed.
int blocks_per_sm(const void* kernel, int threads, size_t smem);

// kernel<<<grid, block, smem, stream>>>(args...), checked. With `pdl` the launch carries
// cudaLaunchAttributeProgrammaticStreamSerialization: the kernel may start while its predecessor in
// the stream is still running, so it must pass griddepcontrol.wait (prim::grid_dep_wait) before it
// reads anything an earlier kernel writes, and write nothing before it.
template <class... Params, class... Args>
Status launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Stream stream, bool pdl,
                     const char* op, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = pdl ? attr : nullptr;
  cfg.numAttrs = pdl ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return cuda_error(e, op);
  }
  return check_launch(op);
}

inline unsigned grid_for(int64_t n, int block) { return static_cast<unsigned>((n + block - 1) / block); }

}  // namespace infergate::kernels::cuda
