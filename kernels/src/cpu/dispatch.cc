// Run-time choice of the CPU inner loops: the best instruction set this CPU runs, unless
// INFERGATE_KERNELS_ISA or set_cpu_isa asks for a lower one.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "cpu_kernels.h"
#include "infergate/kernels/cpu.h"

namespace infergate::kernels {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & (1U << 29)) != 0;
}
#endif

CpuIsa detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (avx512) return CpuIsa::kAvx512;
  if (avx2) return CpuIsa::kAvx2;
#endif
  return CpuIsa::kScalar;
}

CpuIsa initial() {
  const CpuIsa best = detect();
  const char* env = std::getenv("INFERGATE_KERNELS_ISA");  // NOLINT(concurrency-mt-unsafe): read once
  if (env == nullptr) return best;
  CpuIsa want = best;
  if (std::strcmp(env, "scalar") == 0) want = CpuIsa::kScalar;
  if (std::strcmp(env, "avx2") == 0) want = CpuIsa::kAvx2;
  return static_cast<int>(want) < static_cast<int>(best) ? want : best;
}

std::atomic<int>& current() {
  static std::atomic<int> isa{static_cast<int>(initial())};
  return isa;
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "unknown";
}

CpuIsa cpu_isa_detected() {
  static const CpuIsa best = detect();
  return best;
}

CpuIsa cpu_isa() { return static_cast<CpuIsa>(current().load(std::memory_order_relaxed)); }

Status set_cpu_isa(CpuIsa isa) {
  if (static_cast<int>(isa) > static_cast<int>(cpu_isa_detected())) {
    return unsupported(std::string("this CPU does not run ") + cpu_isa_name(isa) +
                       " (best: " + cpu_isa_name(cpu_isa_detected()) + ")");
  }
  current().store(static_cast<int>(isa), std::memory_order_relaxed);
  return ok_status();
}

namespace {
std::atomic<bool>& int_attention_enabled() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("INFERGATE_KERNELS_INT_ATTENTION");  // NOLINT(concurrency-mt-unsafe)
    return env == nullptr || std::strcmp(env, "0") != 0;
  }()};
  return on;
}
}  // namespace

void set_cpu_int_attention(bool enabled) {
  int_attention_enabled().store(enabled, std::memory_order_relaxed);
}

bool cpu_int_attention() {
  return int_attention_enabled().load(std::memory_order_relaxed) && cpu_isa() == CpuIsa::kAvx512 &&
         cpu::vnni_decode_available();
}

namespace {
std::atomic<bool>& int_linear_enabled() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("INFERGATE_KERNELS_INT_LINEAR");  // NOLINT(concurrency-mt-unsafe)
    return env == nullptr || std::strcmp(env, "0") != 0;
  }()};
  return on;
}
}  // namespace

void set_cpu_int_linear(bool enabled) { int_linear_enabled().store(enabled, std::memory_order_relaxed); }

bool cpu_int_linear() {
  return int_linear_enabled().load(std::memory_order_relaxed) && cpu_isa() == CpuIsa::kAvx512 &&
         cpu::vnni_decode_available();
}

namespace cpu {
const Kernels& active_kernels() {
  switch (cpu_isa()) {
    case CpuIsa::kAvx512: return avx512_kernels();
    case CpuIsa::kAvx2: return avx2_kernels();
    case CpuIsa::kScalar: break;
  }
  return scalar_kernels();
}
}  // namespace cpu

}  // namespace infergate::kernels
