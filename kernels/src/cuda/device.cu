// Device discovery for the CUDA ops: how many GPUs, what they are, and the cached properties the
// launchers size grids with.
#include <mutex>
#include <vector>

#include "common.cuh"
#include "tuning.h"

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

int blocks_per_sm(const void* kernel, int threads, size_t smem) {
  struct Entry {
    int dev;
    const void* kernel;
    int threads;
    size_t smem;
    int blocks;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  static std::vector<std::pair<int, const void*>> raised;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) (void)cudaGetLastError();
  const int max_smem = device_info().max_smem_per_block;
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : cache) {
    if (e.dev == dev && e.kernel == kernel && e.threads == threads && e.smem == smem) return e.blocks;
  }
  bool done = false;
  for (const auto& r : raised) done = done || (r.first == dev && r.second == kernel);
  if (!done) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem) != cudaSuccess)
      (void)cudaGetLastError();
    raised.emplace_back(dev, kernel);
  }
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem) != cudaSuccess) {
    (void)cudaGetLastError();
    blocks = 1;
  }
  if (blocks < 1) blocks = 1;
  cache.push_back({dev, kernel, threads, smem, blocks});
  return blocks;
}

Tuning& tuning() {
  static Tuning t;
  return t;
}

}  // namespace infergate::kernels::cuda
