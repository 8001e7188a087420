// libFuzzer target: the safetensors header parser on arbitrary bytes. It must never crash, hang or
// allocate without bound, and whatever it accepts must satisfy the format's invariants.
#include <cstdint>
#include <cstdlib>

#include "infergate/runtime/model/safetensors.h"

namespace m = infergate::runtime::model;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  m::SafetensorsLimits limits;
  limits.max_header_bytes = 1u << 20;  // keeps each input cheap; the checks are the same
  limits.max_tensors = 4096;
  auto r = m::parse_safetensors({data, size}, "fuzz.safetensors", limits);
  if (!r.ok()) {
    if (r.error().reason() != "InvalidSafetensors") std::abort();  // every refusal is classified
    return 0;
  }
  // Accepted: the tensors tile the data section exactly and every size is consistent.
  const m::SafetensorsHeader& h = *r;
  if (h.data_offset + h.data_bytes != size) std::abort();
  uint64_t pos = 0;
  for (const m::TensorInfo& t : h.tensors) {
    if (t.begin != pos || t.end < t.begin || t.end > h.data_bytes) std::abort();
    if (t.num_elements() * m::dtype_size(t.dtype) != t.nbytes()) std::abort();
    pos = t.end;
  }
  if (pos != h.data_bytes) std::abort();
  return 0;
}
