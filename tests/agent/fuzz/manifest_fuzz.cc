// Fuzzes the SHA256SUMS parser: it must never crash, and whatever it accepts must survive a write
// and a re-parse unchanged (the writer and the parser agree on every accepted manifest).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "infergate/common/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = infergate::Manifest::parse(text);
  if (!m.ok()) return 0;
  std::string written = m->to_text();
  auto again = infergate::Manifest::parse(written);
  if (!again.ok() || again->entries() != m->entries() || again->to_text() != written) std::abort();
  for (const auto& e : m->entries()) {
    if (m->find(e.path) != &e) std::abort();
  }
  return 0;
}
