// The CPU inner loops compiled as plain C++ (one lane): the portable fallback.
#include <cmath>
#include <cstdint>

#include "cpu_kernels.h"

namespace infergate::kernels::cpu {
namespace isa_scalar {
#include "simd_scalar.inc"
// The generic loops.
#include "kernels_impl.inc"
}  // namespace isa_scalar

const Kernels& scalar_kernels() { return isa_scalar::kKernels; }

}  // namespace infergate::kernels::cpu
