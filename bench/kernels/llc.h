// What the CPU benchmarks cycle through so that each call reads from memory.
#pragma once

#include <unistd.h>

#include <cstdint>

namespace infergate::kernels {

// Twice the last-level cache (sysconf; 48 MiB if it does not say): copies of a working set that
// together fill this are cycled through, so each call reads from memory even where one call's working
// set would fit in the cache.
inline int64_t twice_llc() {
  static const int64_t bytes = [] {
    const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return 2 * (llc > 0 ? static_cast<int64_t>(llc) : int64_t{48} << 20);
  }();
  return bytes;
}

}  // namespace infergate::kernels
