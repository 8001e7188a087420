// Helpers for the kernels/ suites: seeded random inputs (the seed is printed on failure) and
// comparisons that report the first mismatches with their index, plus a separate no-NaN check.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "infergate/kernels/ref.h"

namespace infergate::kernels::testing {

// The seed of a test: INFERGATE_TEST_SEED when set (to replay a failure), otherwise `fallback`.
inline uint64_t test_seed(uint64_t fallback) {
  if (const char* s = std::getenv("INFERGATE_TEST_SEED"); s != nullptr && *s != '\0') {
    return std::strtoull(s, nullptr, 10);
  }
  return fallback;
}

// A seeded generator; `trace()` goes into SCOPED_TRACE so a failure prints how to replay it.
class Rng {
 public:
  explicit Rng(uint64_t fallback_seed) : seed_(test_seed(fallback_seed)), gen_(seed_) {}
  uint64_t seed() const { return seed_; }
  std::string trace() const {
    return "seed " + std::to_string(seed_) + " (replay: INFERGATE_TEST_SEED=" + std::to_string(seed_) + ")";
  }
  float normal(float stddev = 1.0f) { return std::normal_distribution<float>(0.0f, stddev)(gen_); }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  int64_t index(int64_t lo, int64_t hi_inclusive) {
    return std::uniform_int_distribution<int64_t>(lo, hi_inclusive)(gen_);
  }
  uint32_t bits() { return static_cast<uint32_t>(gen_()); }
  std::vector<float> normals(size_t n, float stddev = 1.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = normal(stddev);
    return v;
  }
  std::mt19937_64& engine() { return gen_; }

 private:
  uint64_t seed_;
  std::mt19937_64 gen_;
};

// |got - want| <= atol + rtol * |want| for every element; prints up to 8 mismatches and their count.
inline ::testing::AssertionResult all_close(const float* got, const float* want, size_t n, float atol,
                                            float rtol) {
  size_t bad = 0;
  std::ostringstream msg;
  for (size_t i = 0; i < n; ++i) {
    const float g = got[i], w = want[i];
    const bool same_nonfinite = !std::isfinite(w) && (std::isnan(w) ? std::isnan(g) : g == w);
    if (same_nonfinite) continue;
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      if (bad < 8)
        msg << "\n  [" << i << "] got " << g << " want " << w << " (diff " << std::fabs(g - w) << ")";
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << n << " elements differ beyond atol " << atol << " rtol " << rtol << msg.str();
}
inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<float>& want,
                                            float atol, float rtol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  }
  return all_close(got.data(), want.data(), got.size(), atol, rtol);
}

// Every element equal bit for bit.
inline ::testing::AssertionResult bit_equal(const float* got, const float* want, size_t n) {
  size_t bad = 0;
  std::ostringstream msg;
  for (size_t i = 0; i < n; ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    if (a != b) {
      if (bad < 8) {
        msg << "\n  [" << i << "] got " << got[i] << " (0x" << std::hex << a << ") want " << want[i] << " (0x"
            << b << ")" << std::dec;
      }
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << n << " elements are not bit-identical" << msg.str();
}

// No NaN and no infinity anywhere.
inline ::testing::AssertionResult all_finite(const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return ::testing::AssertionFailure() << "element " << i << " is " << x[i];
  }
  return ::testing::AssertionSuccess();
}
inline ::testing::AssertionResult all_finite(const std::vector<float>& x) {
  return all_finite(x.data(), x.size());
}

}  // namespace infergate::kernels::testing

#include "infergate/kernels/cpu.h"

namespace infergate::kernels::testing {

// Runs fn once per instruction set this CPU has (scalar, avx2, avx512), with that set active, then
// restores the best one. The active set goes into the failure trace.
template <class Fn>
void for_each_isa(Fn&& fn) {
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(cpu_isa_detected())) continue;
    ASSERT_TRUE(set_cpu_isa(isa).ok());
    SCOPED_TRACE(std::string("isa ") + cpu_isa_name(isa));
    fn(isa);
  }
  ASSERT_TRUE(set_cpu_isa(cpu_isa_detected()).ok());
}

// A quantized weight in host memory: rows of N(0, 0.05) (+0.02 for int4-asym, so the zero points vary)
// quantized by quantize_weight_ref into `l`.
struct HostWeight {
  WeightLayout layout;
  std::vector<uint8_t> data, zeros;
  std::vector<uint16_t> scales;
  std::vector<float> source;  // the values that were quantized
  WeightView view() const {
    return {layout, data.data(), scales.empty() ? nullptr : scales.data(),
            zeros.empty() ? nullptr : zeros.data()};
  }
};
inline HostWeight make_host_weight(Rng& rng, const WeightLayout& l) {
  HostWeight w;
  w.layout = l;
  const WeightBytes b = weight_bytes(l);
  w.data.resize(static_cast<size_t>(b.data));
  w.scales.resize(static_cast<size_t>(b.scales / 2));
  w.zeros.resize(static_cast<size_t>(b.zeros));
  w.source = rng.normals(static_cast<size_t>(l.rows * l.cols), 0.05f);
  if (l.format == WeightFormat::kInt4Asym) {
    for (auto& x : w.source) x += 0.02f;
  }
  EXPECT_TRUE(quantize_weight_ref({w.source.data(), SourceDtype::kF32, l.rows, l.cols, l.cols}, l,
                                  {w.data.data(), w.scales.empty() ? nullptr : w.scales.data(),
                                   w.zeros.empty() ? nullptr : w.zeros.data()})
                  .ok());
  return w;
}

}  // namespace infergate::kernels::testing
