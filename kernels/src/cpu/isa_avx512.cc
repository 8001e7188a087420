// The CPU inner loops compiled for AVX-512 (F, BW, VL, DQ) with FMA and F16C. Everything
// after the target pragma is in this file's own namespace; the shared headers are included before it,
// so no inline function of theirs is compiled for this instruction set (only called from it).
#include <cmath>
#include <cstdint>

#include "cpu_kernels.h"

#if defined(__x86_64__)
// GCC 12 warns "__Y may be / is used uninitialized" inside its own AVX-512 headers (the intrinsics
// start from _mm512_undefined_ps by design; which of the two it says depends on inlining); the warning
// is about the header, not this code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#endif

namespace infergate::kernels::cpu {
namespace isa_avx512 {
#include "simd_avx512.inc"
// The generic loops.
#include "kernels_impl.inc"
}  // namespace isa_avx512
}  // namespace infergate::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace infergate::kernels::cpu {
const Kernels& avx512_kernels() { return isa_avx512::kKernels; }
}  // namespace infergate::kernels::cpu

#else  // not x86-64: never selected (cpu_isa_detected() is scalar there)

namespace infergate::kernels::cpu {
const Kernels& avx512_kernels() { return scalar_kernels(); }
}  // namespace infergate::kernels::cpu

#endif
