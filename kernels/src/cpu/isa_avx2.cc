// The CPU inner loops compiled for AVX2 with FMA and F16C. Everything
// after the target pragma is in this file's own namespace; the shared headers are included before it,
// so no inline function of theirs is compiled for this instruction set (only called from it).
#include <cmath>
#include <cstdint>

#include "cpu_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace infergate::kernels::cpu {
namespace isa_avx2 {
#include "simd_avx2.inc"
// The generic loops.
#include "kernels_impl.inc"
}  // namespace isa_avx2
}  // namespace infergate::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace infergate::kernels::cpu {
const Kernels& avx2_kernels() { return isa_avx2::kKernels; }
}  // namespace infergate::kernels::cpu

#else  // not x86-64: never selected (cpu_isa_detected() is scalar there)

namespace infergate::kernels::cpu {
const Kernels& avx2_kernels() { return scalar_kernels(); }
}  // namespace infergate::kernels::cpu

#endif
