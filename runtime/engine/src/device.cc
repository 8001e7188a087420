// --device resolution, and the CUDA backend's stand-in for builds without CUDA.
#include "infergate/engine/device.h"

#include <string>

#include "infergate/engine/cuda_backend.h"

#if defined(INFERGATE_ENGINE_HAVE_CUDA)
#include "infergate/kernels/cuda.h"
#endif

namespace infergate::runtime::engine {

std::string_view device_name(Device d) { return d == Device::kCuda ? "cuda" : "cpu"; }

#if defined(INFERGATE_ENGINE_HAVE_CUDA)
bool cuda_backend_built() { return true; }
int cuda_device_count() { return kernels::cuda::device_count(); }
std::string cuda_device_description() { return kernels::cuda::device_description(); }
#else
bool cuda_backend_built() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_device_description() {
  return "this build has no CUDA backend (built with INFERGATE_CUDA=OFF)";
}

Result<std::unique_ptr<Backend> > make_cuda_backend(std::shared_ptr<const model::Model>,
                                                    const CudaBackendOptions&) {
  return unavailable("the CUDA backend is not in this build (configure with -DINFERGATE_CUDA=ON)")
      .with_reason("NoDevice");
}
#endif

Result<Device> resolve_device(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "auto") return cuda_device_count() > 0 ? Device::kCuda : Device::kCpu;
  if (name == "cuda") {
    if (!cuda_backend_built()) {
      return unavailable("--device cuda: " + cuda_device_description()).with_reason("NoDevice");
    }
    if (cuda_device_count() == 0) {
      return unavailable("--device cuda: no usable GPU (" + cuda_device_description() + ")")
          .with_reason("NoDevice");
    }
    return Device::kCuda;
  }
  return invalid_argument("--device must be cpu, cuda or auto, not \"" + std::string(name) + "\"")
      .with_reason("UnknownDevice")
      .with_detail("device", std::string(name));
}

}  // namespace infergate::runtime::engine
