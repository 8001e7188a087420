// The part of the CUDA runtime API that the kernels' launchers (kernels/src/cuda/*.cu) and the CUDA
// backend (runtime/engine/cuda/) call, over emulated devices, for the host build of both (targets that
// put this directory before the CUDA toolkit's on their include path and define INFERGATE_CUDA_EMU).
//
// - Devices: emu::set_devices() sets how many there are and what each has (memory, SMs, opt-in shared
//   memory); cudaSetDevice / cudaGetDevice keep a current device per host thread, as the driver does.
// - Device memory is host memory; each allocation belongs to a device and counts against its
//   capacity, so cudaMemGetInfo and out-of-memory behave as they would (cudaErrorMemoryAllocation).
//   Freeing a pointer that no cudaMalloc returned is cudaErrorInvalidValue.
// - Streams are in order and synchronous: a kernel runs to completion on the emulator (cuda_emu.h)
//   inside cudaLaunchKernelEx, copies complete before cudaMemcpyAsync returns.
// - Launches are checked as the driver checks them: at most 1024 threads per block, non-empty grid,
//   dynamic shared memory above 48 KB only after cudaFuncSetAttribute raised the kernel's limit, never
//   above the device's opt-in maximum.
// - Stream capture (CUDA graphs): launches on a capturing stream are recorded instead of run;
//   cudaGraphLaunch replays them in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_emu.h"

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoDevice = 100,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaLaunchAttributeID { cudaLaunchAttributeProgrammaticStreamSerialization = 4 };
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1 };
inline constexpr unsigned cudaStreamNonBlocking = 1;

struct cudaDeviceProp {
  char name[256];
  int major, minor;
  int multiProcessorCount;
  size_t totalGlobalMem;
};

namespace emu {

struct Launch {  // one recorded kernel launch (stream capture)
  std::function<void()> run;
};

}  // namespace emu

struct CUstream_st {
  int device = 0;
  bool capturing = false;
  std::vector<emu::Launch> captured;
};
using cudaStream_t = CUstream_st*;

struct CUgraph_st {
  std::vector<emu::Launch> launches;
};
using cudaGraph_t = CUgraph_st*;
struct CUgraphExec_st {
  std::vector<emu::Launch> launches;
};
using cudaGraphExec_t = CUgraphExec_st*;

struct cudaLaunchAttributeValue {
  int programmaticStreamSerializationAllowed;
};
struct cudaLaunchAttribute {
  cudaLaunchAttributeID id;
  cudaLaunchAttributeValue val;
};
struct cudaLaunchConfig_t {
  dim3 gridDim;
  dim3 blockDim;
  size_t dynamicSmemBytes;
  cudaStream_t stream;
  cudaLaunchAttribute* attrs;
  unsigned numAttrs;
};

namespace emu {

struct DeviceSpec {
  size_t memory = size_t{1} << 30;
  int sms = 4;
  int max_smem_optin = 227 * 1024;
};

struct Runtime {
  std::mutex mu;
  std::vector<DeviceSpec> devices = std::vector<DeviceSpec>(4);
  std::vector<size_t> used = std::vector<size_t>(4, 0);
  std::map<const void*, std::pair<int, size_t>> allocations;  // pointer -> (device, bytes)
  std::map<const void*, int> smem_limit;                      // kernel -> raised dynamic smem limit
  uint64_t launches = 0;                                      // kernels run (replays included)
  uint64_t graph_launches = 0;                                // cudaGraphLaunch calls
};
inline Runtime& runtime() {
  static Runtime r;
  return r;
}
inline thread_local int g_device = 0;
inline thread_local cudaError_t g_last_error = cudaSuccess;

// n devices like `spec`. Only between tests: every allocation must have been freed.
inline void set_devices(int n, const DeviceSpec& spec = {}) {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  r.devices.assign(static_cast<size_t>(n), spec);
  r.used.assign(static_cast<size_t>(n), 0);
}
inline size_t bytes_in_use(int device) {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  return device < static_cast<int>(r.used.size()) ? r.used[static_cast<size_t>(device)] : 0;
}
inline uint64_t launches_run() {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.launches;
}
inline uint64_t graph_launches() {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.graph_launches;
}
inline cudaError_t fail(cudaError_t e) {
  g_last_error = e;
  return e;
}

}  // namespace emu

inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
  }
  return "cudaErrorUnknown";
}
inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
  }
  return "unknown error";
}
inline cudaError_t cudaGetLastError() { return std::exchange(emu::g_last_error, cudaSuccess); }
inline cudaError_t cudaPeekAtLastError() { return emu::g_last_error; }

// ---- devices ----
inline cudaError_t cudaGetDeviceCount(int* n) {
  emu::Runtime& r = emu::runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  *n = static_cast<int>(r.devices.size());
  return *n == 0 ? emu::fail(cudaErrorNoDevice) : cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) {
  int n = 0;
  (void)cudaGetDeviceCount(&n);
  if (d < 0 || d >= n) return emu::fail(cudaErrorInvalidDevice);
  emu::g_device = d;
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = emu::g_device;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  emu::Runtime& r = emu::runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  if (d < 0 || d >= static_cast<int>(r.devices.size())) return emu::fail(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "emulated device %d", d);
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = r.devices[static_cast<size_t>(d)].sms;
  p->totalGlobalMem = r.devices[static_cast<size_t>(d)].memory;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, d) != cudaSuccess) return cudaErrorInvalidDevice;
  emu::Runtime& r = emu::runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  *v = a == cudaDevAttrMultiProcessorCount ? p.multiProcessorCount
                                           : r.devices[static_cast<size_t>(d)].max_smem_optin;
  return cudaSuccess;
}

// ---- memory ----
inline cudaError_t cudaMalloc(void** p, size_t bytes) {
  emu::Runtime& r = emu::runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto d = static_cast<size_t>(emu::g_device);
  if (d >= r.devices.size()) return emu::fail(cudaErrorInvalidDevice);
  const size_t rounded = (bytes + 255) / 256 * 256;
  if (r.used[d] + rounded > r.devices[d].memory) {
    *p = nullptr;
    return emu::fail(cudaErrorMemoryAllocation);
  }
  *p = ::operator new (rounded, std::align_val_t{256});
  std::memset(*p, 0xCD, rounded);  // device memory starts as garbage, not zeros
  r.used[d] += rounded;
  r.allocations[*p] = {static_cast<int>(d), rounded};
  return cudaSuccess;
}
template <class T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
inline cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  emu::Runtime& r = emu::runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto it = r.allocations.find(p);
  if (it == r.allocations.end()) return emu::fail(cudaErrorInvalidValue);
  r.used[static_cast<size_t>(it->second.first)] -= it->second.second;
  r.allocations.erase(it);
  ::operator delete (p, std::align_val_t{256});
  return cudaSuccess;
}
template <class T>
cudaError_t cudaMallocAsync(T** p, size_t bytes, cudaStream_t) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  emu::Runtime& r = emu::runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto d = static_cast<size_t>(emu::g_device);
  if (d >= r.devices.size()) return emu::fail(cudaErrorInvalidDevice);
  *total = r.devices[d].memory;
  *free_bytes = r.devices[d].memory - r.used[d];
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  if (n > 0 && (dst == nullptr || src == nullptr)) return emu::fail(cudaErrorInvalidValue);
  if (n > 0) std::memmove(dst, src, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind k, cudaStream_t s) {
  if (s != nullptr && s->capturing) return emu::fail(cudaErrorStreamCaptureUnsupported);
  return cudaMemcpy(dst, src, n, k);
}
inline cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                     size_t height, cudaMemcpyKind, cudaStream_t s) {
  if (s != nullptr && s->capturing) return emu::fail(cudaErrorStreamCaptureUnsupported);
  if (width > dpitch || width > spitch) return emu::fail(cudaErrorInvalidValue);
  if (width * height > 0 && (dst == nullptr || src == nullptr)) return emu::fail(cudaErrorInvalidValue);
  for (size_t r = 0; r < height; ++r)
    std::memmove(static_cast<uint8_t*>(dst) + r * dpitch, static_cast<const uint8_t*>(src) + r * spitch,
                 width);
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* p, int v, size_t n) {
  if (n > 0 && p == nullptr) return emu::fail(cudaErrorInvalidValue);
  if (n > 0) std::memset(p, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) {
  if (s != nullptr && s->capturing) return emu::fail(cudaErrorStreamCaptureUnsupported);
  return cudaMemset(p, v, n);
}

// ---- streams and graphs ----
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new CUstream_st{};
  (*s)->device = emu::g_device;
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  return s != nullptr && s->capturing ? emu::fail(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}
inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (s == nullptr || s->capturing) return emu::fail(cudaErrorInvalidValue);
  s->capturing = true;
  s->captured.clear();
  return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  if (s == nullptr || !s->capturing) return emu::fail(cudaErrorInvalidValue);
  s->capturing = false;
  *g = new CUgraph_st{std::move(s->captured)};
  s->captured.clear();
  return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long = 0) {
  *e = new CUgraphExec_st{g->launches};
  return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
  if (s != nullptr && s->capturing) return emu::fail(cudaErrorStreamCaptureUnsupported);
  {
    emu::Runtime& r = emu::runtime();
    std::lock_guard<std::mutex> lock(r.mu);
    ++r.graph_launches;
  }
  for (const emu::Launch& l : e->launches) l.run();
  return cudaSuccess;
}

// ---- kernels ----
template <class F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute, int value) {
  emu::Runtime& r = emu::runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto d = static_cast<size_t>(emu::g_device);
  if (d >= r.devices.size() || value < 0 || value > r.devices[d].max_smem_optin)
    return emu::fail(cudaErrorInvalidValue);
  r.smem_limit[reinterpret_cast<const void*>(kernel)] = value;
  return cudaSuccess;
}
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void*, int threads,
                                                                 size_t smem) {
  // An sm_90 SM: 2048 threads, 32 blocks, 228 KB of shared memory (1 KB reserved per block).
  int b = threads > 0 ? 2048 / threads : 0;
  if (b > 32) b = 32;
  const size_t per_block = smem + 1024;
  if (static_cast<int>(228 * 1024 / per_block) < b) b = static_cast<int>(228 * 1024 / per_block);
  *blocks = b;
  return cudaSuccess;
}

template <class... Params, class... Args>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* cfg, void (*kernel)(Params...), Args&&... args) {
  const dim3 g = cfg->gridDim, b = cfg->blockDim;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x * b.y * b.z == 0 || b.x * b.y * b.z > 1024 || g.y > 65535 ||
      g.z > 65535)
    return emu::fail(cudaErrorInvalidConfiguration);
  {
    emu::Runtime& r = emu::runtime();
    std::lock_guard<std::mutex> lock(r.mu);
    const auto it = r.smem_limit.find(reinterpret_cast<const void*>(kernel));
    const size_t limit = it == r.smem_limit.end() ? 48 * 1024 : static_cast<size_t>(it->second);
    if (cfg->dynamicSmemBytes > limit) return emu::fail(cudaErrorInvalidValue);
  }
  // The arguments are converted and copied now, as the driver copies them at launch.
  const size_t smem = cfg->dynamicSmemBytes;
  emu::Launch l{[g, b, smem, kernel, a = std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)] {
    std::apply([&](const auto&... v) { emu::launch(g, b, smem, [&] { kernel(v...); }); }, a);
    emu::Runtime& r = emu::runtime();
    std::lock_guard<std::mutex> lock(r.mu);
    ++r.launches;
  }};
  if (cfg->stream != nullptr && cfg->stream->capturing) {
    cfg->stream->captured.push_back(std::move(l));
  } else {
    l.run();
  }
  return cudaSuccess;
}
