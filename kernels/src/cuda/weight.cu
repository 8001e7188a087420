// CUDA weight quantization (bit-identical to the reference: the same __host__ __device__ maths from
// formats.h, IEEE division and rounding on both sides), dequantization, and the int4 repacking for
// the tensor-core GEMV.
#include <climits>
#include <cstring>
#include <vector>

#include "../rows.h"
#include "../validate.h"
#include "common.cuh"
#include "infergate/kernels/cuda_layouts.h"
#include "weight_element.cuh"

namespace infergate::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float source_value(const MatrixSource& s, int64_t r, int64_t c) {
  const int64_t i = r * s.row_stride + c;
  switch (s.dtype) {
    case SourceDtype::kF32: return static_cast<const float*>(s.data)[i];
    case SourceDtype::kF16: return fp16_to_float(static_cast<const uint16_t*>(s.data)[i]);
    case SourceDtype::kBF16: return bf16_to_float(static_cast<const uint16_t*>(s.data)[i]);
  }
  return 0.0f;
}

__device__ __forceinline__ float block_reduce(float v, bool is_max, float* smem) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xFFFFFFFFu, v, o);
    v = is_max ? fmaxf(v, other) : fminf(v, other);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? smem[lane] : (is_max ? -INFINITY : INFINITY);
    for (int o = 16; o > 0; o >>= 1) {
      const float other = __shfl_xor_sync(0xFFFFFFFFu, v, o);
      v = is_max ? fmaxf(v, other) : fminf(v, other);
    }
    if (lane == 0) smem[0] = v;
  }
  __syncthreads();
  const float r = smem[0];
  __syncthreads();
  return r;
}

// One block per row. A row that the reference would refuse (non-finite weight, fp16 overflow, a
// scale the scale dtype cannot hold) records its index in *bad_row (atomicMin); the launcher then
// reproduces the reference's message on the host.
__global__ void quantize_weight_kernel(MatrixSource src, WeightLayout l, WeightBuffers out, int* bad_row) {
  __shared__ float smem[32];
  __shared__ uint16_t scale_bits;
  __shared__ int32_t zero;
  const int64_t r = blockIdx.x, k_in = l.cols;
  bool bad = false;
  for (int64_t c = threadIdx.x; c < k_in; c += blockDim.x) {
    const float x = source_value(src, r, c);
    if (!isfinite(x) || (l.format == WeightFormat::kF16 && fabsf(x) > kFp16Max)) bad = true;
  }
  if (__syncthreads_or(bad)) {
    if (threadIdx.x == 0) atomicMin(bad_row, static_cast<int>(r));
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
        if (threadIdx.x == 0) atomicMin(bad_row, static_cast<int>(r));
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
        const int64_t c0 = g * l.group_size, c1 = min(k_in, c0 + l.group_size);
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
          if (threadIdx.x == 0) atomicMin(bad_row, static_cast<int>(r));
          return;
        }
        if (threadIdx.x == 0) {
          scale_bits = scale_round_up(wanted, l.scale_dtype);
          scales[r * groups + g] = scale_bits;
          const float inv0 = safe_inverse(scale_to_float(scale_bits, l.scale_dtype));
          zero = asym ? static_cast<int32_t>(clamp_float(round_half_even(-lo * inv0), 0.0f, 15.0f)) : 8;
          if (asym) out.zeros[r * groups + g] = static_cast<uint8_t>(zero);
        }
        __syncthreads();
        const float inv = safe_inverse(scale_to_float(scale_bits, l.scale_dtype));
        const int32_t z = zero;
        // Bytes of this group (groups start at even columns, so no byte is shared with another group).
        for (int64_t b = c0 / 2 + threadIdx.x; b < (c1 + 1) / 2; b += blockDim.x) {
          const int64_t c = 2 * b;
          uint32_t v = quantize_int4(source_value(src, r, c), inv, z);
          if (c + 1 < c1) v |= quantize_int4(source_value(src, r, c + 1), inv, z) << 4;
          row[b] = static_cast<uint8_t>(v);
        }
        __syncthreads();
      }
      return;
    }
  }
}

__global__ void dequantize_weight_kernel(WeightView w, View2<float> out) {
  const WeightLayout& l = w.layout;
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= l.rows * l.cols) return;
  const int64_t r = i / l.cols, c = i % l.cols;
  out.at(r, c) = weight_element(w, r, c);
}

// One thread per packed 32-bit word: gathers its eight codes from the row-major data.
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

Status validate_dequantize(const WeightView& w, View2<float> out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_weight_view(w, "dequantize_weight"));
  const WeightLayout& l = w.layout;
  if (out.data == nullptr || out.rows != l.rows || out.cols != l.cols || out.row_stride < l.cols) {
    return invalid_argument("dequantize_weight: output view is not " + shape_str(l.rows, l.cols));
  }
  return ok_status();
}

}  // namespace

Status quantize_weight(const MatrixSource& src, const WeightLayout& layout, const WeightBuffers& out,
                       Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_quantize_args(src, layout, out));
  int* bad = nullptr;
  cudaError_t e = cudaMallocAsync(&bad, sizeof(int), stream);
  if (e != cudaSuccess) return cuda_error(e, "quantize_weight: allocating the error slot");
  const int none = INT_MAX;
  e = cudaMemcpyAsync(bad, &none, sizeof none, cudaMemcpyHostToDevice, stream);
  if (e == cudaSuccess) {
    quantize_weight_kernel<<<static_cast<unsigned>(layout.rows), kThreads, 0, stream>>>(src, layout, out,
                                                                                        bad);
    e = cudaGetLastError();
  }
  int first_bad = INT_MAX;
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(&first_bad, bad, sizeof first_bad, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  (void)cudaFreeAsync(bad, stream);
  if (e != cudaSuccess) return cuda_error(e, "quantize_weight");
  if (first_bad == INT_MAX) return ok_status();
  // Reproduce the reference's message for the first refused row from a host copy of it.
  std::vector<uint8_t> row(static_cast<size_t>(src.cols * (src.dtype == SourceDtype::kF32 ? 4 : 2)));
  const size_t esize = src.dtype == SourceDtype::kF32 ? 4 : 2;
  e = cudaMemcpy(
      row.data(),
      static_cast<const uint8_t*>(src.data) + static_cast<size_t>(first_bad) * src.row_stride * esize,
      row.size(), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return cuda_error(e, "quantize_weight: reading back a refused row");
  WeightLayout one = layout;
  one.rows = 1;
  const WeightBytes b = weight_bytes(one);
  std::vector<uint8_t> d(static_cast<size_t>(b.data)), s(static_cast<size_t>(b.scales) + 2),
      z(static_cast<size_t>(b.zeros) + 1);
  std::vector<float> scratch(static_cast<size_t>(src.cols));
  MatrixSource host{row.data(), src.dtype, 1, src.cols, src.cols};
  Status st = quantize_weight_row(host, one, {d.data(), s.data(), z.data()}, 0, scratch.data());
  if (st.ok())
    return Status(StatusCode::kCudaError, "quantize_weight: the device refused row " +
                                              std::to_string(first_bad) + " but the reference accepts it");
  // The message names row 0 of the copy: put the real row back.
  std::string msg = st.message();
  const std::string from = "row 0", to = "row " + std::to_string(first_bad);
  if (const size_t at = msg.find(from); at != std::string::npos) msg.replace(at, from.size(), to);
  return Status(st.code(), msg);
}

Status dequantize_weight(const WeightView& w, View2<float> out, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_dequantize(w, out));
  const int64_t n = w.layout.rows * w.layout.cols;
  dequantize_weight_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(w, out);
  return check_launch("dequantize_weight");
}

bool int4_mma_eligible(const WeightLayout& l) {
  return is_int4(l.format) && l.rows % kInt4MmaRows == 0 && l.cols % kInt4MmaCols == 0 &&
         validate_weight_layout(l).ok();
}

Status pack_int4_for_mma(const WeightView& w, void* packed, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_weight_view(w, "pack_int4_for_mma"));
  if (!int4_mma_eligible(w.layout)) {
    return invalid_argument(
        "pack_int4_for_mma: needs an int4 weight with rows % 16 == 0 and cols % 64 == 0, got " +
        std::string(weight_format_name(w.layout.format)) + " " + shape_str(w.layout.rows, w.layout.cols));
  }
  if (packed == nullptr) return invalid_argument("pack_int4_for_mma: output is null");
  const int64_t words = w.layout.rows * w.layout.cols / 8;
  pack_int4_kernel<<<grid_for(words, kThreads), kThreads, 0, stream>>>(w, static_cast<uint32_t*>(packed));
  return check_launch("pack_int4_for_mma");
}

Status pack_int4_for_mma_host(const WeightView& w, void* packed) {
  INFERGATE_K_RETURN_IF_ERROR(validate_weight_view(w, "pack_int4_for_mma"));
  if (!int4_mma_eligible(w.layout)) {
    return invalid_argument("pack_int4_for_mma: needs an int4 weight with rows % 16 == 0 and cols % 64 == 0");
  }
  if (packed == nullptr) return invalid_argument("pack_int4_for_mma: output is null");
  const WeightLayout& l = w.layout;
  auto* out = static_cast<uint8_t*>(packed);
  std::memset(out, 0, static_cast<size_t>(weight_bytes(l).data));
  const auto* data = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < l.rows; ++r) {
    for (int64_t k = 0; k < l.cols; ++k) {
      int64_t off;
      int nib;
      int4_mma_locate(l.cols, r, k, &off, &nib);
      uint32_t word;
      std::memcpy(&word, out + off, 4);
      word |= int4_get(data + r * weight_row_bytes(l), k) << (4 * nib);
      std::memcpy(out + off, &word, 4);
    }
  }
  return ok_status();
}

}  // namespace infergate::kernels::cuda
