// Device discovery for the CUDA ops: how many GPUs, what they are, and the cached properties the
// launchers size grids with.
#include <mutex>

#include "common.cuh"

namespace infergate::kernels::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string device_description() {
  if (device_count() == 0) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    (void)cudaGetLastError();
    return std::string("no CUDA device (") + cudaGetErrorName(e) + ")";
  }
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return "CUDA device properties unavailable";
  }
  return std::string(p.name) + ", sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs, " +
         std::to_string(static_cast<long long>(p.totalGlobalMem >> 30)) + " GiB";
}

Status require_device() {
  if (device_count() == 0) return Status(StatusCode::kNoDevice, device_description());
  return ok_status();
}

const DeviceInfo& device_info() {
  static std::mutex mu;
  static DeviceInfo infos[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    (void)cudaGetLastError();
    dev = 0;
  }
  std::lock_guard<std::mutex> lock(mu);
  DeviceInfo& info = infos[dev];
  if (info.sm_count == 0) {
    int sms = 0, smem = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      sms = 132;  // sized for an H100/H200 when the query fails; launches still check themselves
      smem = 48 * 1024;
    }
    info.sm_count = sms;
    info.max_smem_per_block = smem;
  }
  return info;
}

}  // namespace infergate::kernels::cuda
