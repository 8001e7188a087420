// Token ids for benchmark prompts: a fixed xorshift walk over the first 250 ids of the vocabulary (so
// the same on every model size), one stream per seed. Shared by engine_bench and bench/peer's
// peer_probe, so that both time the same kind of prompt.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace infergate::bench {

inline std::vector<int32_t> synthetic_prompt(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out.push_back(static_cast<int32_t>(x % static_cast<uint64_t>(std::min<int64_t>(vocab, 250))));
  }
  return out;
}

}  // namespace infergate::bench
