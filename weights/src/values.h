// The value checks of describe_weights (done through the caller's TensorReader): weight_shape, scales,
// g_idx. Internal to the weights library.
#pragma once

#include <array>
#include <cstdint>

#include "infergate/common/result.h"
#include "infergate/weights/description.h"

namespace infergate::weights::detail {

// weight_shape's two values (I32 or I64), each at most 2^31.
Result<std::array<uint64_t, 2>> read_weight_shape(TensorReader& reader, const TensorHeader& t);

// Every scale finite and not negative (and a power of two for ue8m0); every g_idx in range, giving each
// group as many columns as column order would (and equal to k / G for GPTQ without desc_act, where
// engines disagree on whether to read it).
Status check_values(TensorReader& reader, const Scheme& scheme, const WeightDescription& d);

}  // namespace infergate::weights::detail
