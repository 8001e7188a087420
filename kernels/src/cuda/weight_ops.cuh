// Weight quantization (bit-identical to quantize_weight_ref: the same host/device maths from formats.h,
// IEEE division and rounding on both sides), dequantization (bit-identical to dequantize_weight_ref)
// and the int4 repacking for the tensor-core GEMV, on the GPU, written on the shared primitives so that
// the CPU emulator runs them against the references. Launchers: weight.cu.
#pragma once

#include <cstdint>

#include "infergate/kernels/cuda_layouts.h"
#include "infergate/kernels/formats.h"
#include "infergate/kernels/numeric.h"
#include "infergate/kernels/ref.h"
#include "infergate/kernels/tensor.h"
#include "prims.cuh"
#include "weight_element.cuh"

namespace infergate::kernels::cuda::wq {

constexpr int kThreads = 256;

INFERGATE_DEV float source_value(const MatrixSource& s, int64_t r, int64_t c) {
  const int64_t i = r * s.row_stride + c;
  switch (s.dtype) {
    case SourceDtype::kF32: return static_cast<const float*>(s.data)[i];
    case SourceDtype::kF16: return fp16_to_float(static_cast<const uint16_t*>(s.data)[i]);
    case SourceDtype::kBF16: return bf16_to_float(static_cast<const uint16_t*>(s.data)[i]);
  }
  return 0.0f;
}

// The max (or min) of v over the block; smem: one float per warp.
INFERGATE_DEV float block_reduce(float v, bool is_max, float* smem) {
  v = is_max ? prim::warp_max(v) : prim::warp_min(v);
  const int lane = prim::lane_id(), warp = prim::warp_id();
  if (lane == 0) smem[warp] = v;
  prim::sync_block();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? smem[lane] : (is_max ? -INFINITY : INFINITY);
    v = is_max ? prim::warp_max(v) : prim::warp_min(v);
    if (lane == 0) smem[0] = v;
  }
  prim::sync_block();
  const float r = smem[0];
  prim::sync_block();
  return r;
}

// Dynamic shared memory of quantize_weight_kernel: the reduction's 32 floats, the group's scale bits and
// zero point, and the block's refusal flag.
struct QuantizeSmem {
  float reduce[32];
  uint16_t scale_bits;
  int32_t zero;
  int32_t refused;
};

// One block per row. A row that the reference would refuse (non-finite weight, fp16 overflow, a
// scale the scale dtype cannot hold) records its index in *bad_row (an atomic min); the launcher then
// reproduces the reference's message on the host.
template <int = 0>
__global__ void quantize_weight_kernel(MatrixSource src, WeightLayout l, WeightBuffers out,
                                       int32_t* bad_row) {
  QuantizeSmem& sh = *reinterpret_cast<QuantizeSmem*>(prim::dynamic_smem());
  float* smem = sh.reduce;
  uint16_t& scale_bits = sh.scale_bits;
  int32_t& zero = sh.zero;
  const int64_t r = blockIdx.x, k_in = l.cols;
  if (threadIdx.x == 0) sh.refused = 0;
  prim::sync_block();
  bool bad = false;
  for (int64_t c = threadIdx.x; c < k_in; c += blockDim.x) {
    const float x = source_value(src, r, c);
    if (!prim::is_finite(x) || (l.format == WeightFormat::kF16 && fabsf(x) > kFp16Max)) bad = true;
  }
  if (bad) prim::atomic_add(&sh.refused, 1);
  prim::sync_block();
  if (sh.refused != 0) {
    if (threadIdx.x == 0) prim::atomic_min(bad_row, static_cast<int32_t>(r));
    return;
  }
  uint8_t* row = static_cast<uint8_t*>(out.data) + r * weight_row_bytes(l);
  auto* scales = static_cast<uint16_t*>(out.scales);
  switch (l.format) {
    case WeightFormat::kF16:
    case WeightFormat::kBF16:
      for (int64_t c = threadIdx.x; c < k_in; c += blockDim.x) {
        const float x = source_value(src, r, c);
        reinterpret_cast<uint16_t*>(row)[c] =
            l.format == WeightFormat::kF16 ? fp16_from_float(x) : bf16_from_float(x);
      }
      return;
    case WeightFormat::kInt8: {
      float amax = 0.0f;
      for (int64_t c = threadIdx.x; c < k_in; c += blockDim.x)
        amax = fmaxf(amax, fabsf(source_value(src, r, c)));
      amax = block_reduce(amax, true, smem);
      const float wanted = amax / 127.0f;
      if (!(wanted <= scale_max(l.scale_dtype))) {
        if (threadIdx.x == 0) prim::atomic_min(bad_row, static_cast<int32_t>(r));
        return;
      }
      const uint16_t bits = scale_round_up(wanted, l.scale_dtype);
      if (threadIdx.x == 0) scales[r] = bits;
      const float inv = safe_inverse(scale_to_float(bits, l.scale_dtype));
      for (int64_t c = threadIdx.x; c < k_in; c += blockDim.x) {
        reinterpret_cast<int8_t*>(row)[c] = quantize_int8(source_value(src, r, c), inv);
      }
      return;
    }
    case WeightFormat::kInt4Sym:
    case WeightFormat::kInt4Asym: {
      const bool asym = l.format == WeightFormat::kInt4Asym;
      const int64_t groups = weight_groups_per_row(l);
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t c0 = g * l.group_size, c1 = prim::min64(k_in, c0 + l.group_size);
        float lo = 0.0f, hi = 0.0f;  // asym: min(0, x), max(0, x); sym: amax in hi
        for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
          const float x = source_value(src, r, c);
          if (asym) {
            lo = fminf(lo, x);
            hi = fmaxf(hi, x);
          } else {
            hi = fmaxf(hi, fabsf(x));
          }
        }
        hi = block_reduce(hi, true, smem);
        if (asym) lo = block_reduce(lo, false, smem);
        const float wanted = asym ? (hi - lo) / 15.0f : hi / 7.0f;
        if (!(wanted <= scale_max(l.scale_dtype))) {
          if (threadIdx.x == 0) prim::atomic_min(bad_row, static_cast<int32_t>(r));
          return;
        }
        if (threadIdx.x == 0) {
          scale_bits = scale_round_up(wanted, l.scale_dtype);
          scales[r * groups + g] = scale_bits;
          const float inv0 = safe_inverse(scale_to_float(scale_bits, l.scale_dtype));
          zero = asym ? static_cast<int32_t>(clamp_float(round_half_even(-lo * inv0), 0.0f, 15.0f)) : 8;
          if (asym) out.zeros[r * groups + g] = static_cast<uint8_t>(zero);
        }
        prim::sync_block();
        const float inv = safe_inverse(scale_to_float(scale_bits, l.scale_dtype));
        const int32_t z = zero;
        // Bytes of this group (groups start at even columns, so no byte is shared with another group).
        for (int64_t b = c0 / 2 + threadIdx.x; b < (c1 + 1) / 2; b += blockDim.x) {
          const int64_t c = 2 * b;
          uint32_t v = quantize_int4(source_value(src, r, c), inv, z);
          if (c + 1 < c1) v |= quantize_int4(source_value(src, r, c + 1), inv, z) << 4;
          row[b] = static_cast<uint8_t>(v);
        }
        prim::sync_block();
      }
      return;
    }
  }
}

template <int = 0>
__global__ void dequantize_weight_kernel(WeightView w, View2<float> out) {
  const WeightLayout& l = w.layout;
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= l.rows * l.cols) return;
  const int64_t r = i / l.cols, c = i % l.cols;
  out.at(r, c) = weight_element(w, r, c);
}

// One thread per packed 32-bit word: gathers its eight codes from the row-major data.
template <int = 0>
__global__ void pack_int4_kernel(WeightView w, uint32_t* packed) {
  const WeightLayout& l = w.layout;
  const int64_t words = l.rows * l.cols / 8;
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= words) return;
  const int kt = static_cast<int>(i % 4), lane = static_cast<int>((i / 4) % 32);
  const int64_t block = i / 128, k_blocks = l.cols / kInt4MmaCols;
  const int64_t rt = block / k_blocks, kb = block % k_blocks;
  const uint8_t* data = static_cast<const uint8_t*>(w.data);
  const int64_t row_bytes = weight_row_bytes(l);
  uint32_t v = 0;
  for (int p = 0; p < 8; ++p) {
    int64_t r, k;
    int4_mma_element(rt, kb, lane, kt, p, &r, &k);
    v |= int4_get(data + r * row_bytes, k) << (4 * p);
  }
  packed[i] = v;
}

}  // namespace infergate::kernels::cuda::wq
