// The launchers of the CUDA linear layer: the kernel for each shape and format (linear_kernels.cuh,
// gemv_stream.cuh), every launch through launch_kernel.
#include <algorithm>

#include "../validate.h"
#include "common.cuh"
#include "gemv_stream.cuh"
#include "infergate/kernels/cuda_layouts.h"
#include "linear_kernels.cuh"
#include "tuning.h"

namespace infergate::kernels::cuda {
namespace {

using lin::kGemvRowsPerWarp;
using lin::kGemvWarps;
using lin::kMmaWarps;
using lin::kTile;

template <WeightFormat F>
Status launch_gemv_format(View2<const float> x, const WeightView& w, const float* bias, View2<float> y,
                          int mb, Stream stream) {
  const dim3 blocks(grid_for(w.layout.rows, kGemvWarps * kGemvRowsPerWarp)), threads(kGemvWarps * 32);
  const bool pdl = tuning().pdl;
  switch (mb) {
    case 1:
      return launch_kernel(lin::gemv_kernel<F, 1>, blocks, threads, 0, stream, pdl, "linear (gemv)", x, w,
                           bias, y);
    case 2:
      return launch_kernel(lin::gemv_kernel<F, 2>, blocks, threads, 0, stream, pdl, "linear (gemv)", x, w,
                           bias, y);
    case 4:
      return launch_kernel(lin::gemv_kernel<F, 4>, blocks, threads, 0, stream, pdl, "linear (gemv)", x, w,
                           bias, y);
    default: break;
  }
  return launch_kernel(lin::gemv_kernel<F, 8>, blocks, threads, 0, stream, pdl, "linear (gemv)", x, w, bias,
                       y);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

Status launch_gemv(View2<const float> x, const WeightView& w, const float* bias, View2<float> y,
                   Stream stream) {
  const WeightLayout& l = w.layout;
  const int mb = x.rows <= 1 ? 1 : (x.rows <= 2 ? 2 : (x.rows <= 4 ? 4 : 8));
  const bool vector_ok = aligned16(w.data) && weight_row_bytes(l) % 16 == 0 && aligned16(x.data) &&
                         (x.rows == 1 || x.row_stride % 4 == 0);
  if (!vector_ok) {
    return launch_kernel(lin::gemv_scalar_kernel<>, dim3(grid_for(l.rows, 8)), dim3(256), 0, stream, false,
                         "linear (scalar gemv)", x, w, bias, y);
  }
  switch (l.format) {
    case WeightFormat::kF16: return launch_gemv_format<WeightFormat::kF16>(x, w, bias, y, mb, stream);
    case WeightFormat::kBF16: return launch_gemv_format<WeightFormat::kBF16>(x, w, bias, y, mb, stream);
    case WeightFormat::kInt8: return launch_gemv_format<WeightFormat::kInt8>(x, w, bias, y, mb, stream);
    case WeightFormat::kInt4Sym: return launch_gemv_format<WeightFormat::kInt4Sym>(x, w, bias, y, mb, stream);
    case WeightFormat::kInt4Asym:
      return launch_gemv_format<WeightFormat::kInt4Asym>(x, w, bias, y, mb, stream);
  }
  return invalid_argument("linear: unknown weight format");
}

template <int RT>
Status launch_mma(View2<const float> x, const WeightView& w, const void* packed, const float* bias,
                  View2<float> y, size_t smem, Stream stream) {
  const auto kernel = lin::gemv_int4_mma_kernel<RT>;
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return cuda_error(e, "linear (int4 mma): raising the shared-memory limit");
  }
  const unsigned blocks = static_cast<unsigned>(w.layout.rows / 16 / RT);
  return launch_kernel(kernel, dim3(blocks), dim3(kMmaWarps * 32), smem, stream, false, "linear (int4 mma)",
                       x, w, static_cast<const uint4*>(packed), bias, y);
}

// The streaming int4 GEMV (gemv_stream.cuh) with its row tiles per block chosen so that the grid is
// one wave of resident blocks. *rt gets that count; *launched = false (nothing launched) when x is too
// wide for shared memory or `only_if_rt` is set and the count differs from it.
template <int WARPS, int P, int MINB, int TPS, bool ASYNC>
Status launch_stream(View2<const float> x, const WeightView& w, const void* packed, const float* bias,
                     View2<float> y, Stream stream, int32_t only_if_rt_at_least, bool* launched) {
  const WeightLayout& l = w.layout;
  const int32_t kb_total = static_cast<int32_t>(l.cols / kInt4MmaCols),
                tiles = static_cast<int32_t>(l.rows / kInt4MmaRows);
  const int32_t groups = static_cast<int32_t>(weight_groups_per_row(l));
  const int32_t m = static_cast<int32_t>(std::min<int64_t>(x.rows, gemv::kMaxM));
  const int32_t nkb = gemv::max_warp_kb(kb_total, WARPS),
                ngroups = gemv::max_warp_groups(kb_total, WARPS, l.group_size);
  const bool asym = l.format == WeightFormat::kInt4Asym;
  const auto kernel = gemv::gemv_int4_stream_kernel<WARPS, P, MINB, TPS, ASYNC>;
  const int32_t ring = ASYNC ? P * TPS * 512 : 0;
  const int64_t max_smem = device_info().max_smem_per_block, sms = device_info().sm_count;
  int32_t rt = 1;
  int64_t smem = gemv::stream_smem(WARPS, m, nkb, ngroups, rt, groups, asym, ring).total;
  for (int iter = 0; iter < 4 && smem <= max_smem; ++iter) {
    const int64_t slots =
        int64_t{blocks_per_sm(reinterpret_cast<const void*>(kernel), WARPS * 32, static_cast<size_t>(smem))} *
        sms;
    const int32_t want = static_cast<int32_t>((tiles + slots - 1) / slots);
    if (want == rt) break;
    rt = want;
    smem = gemv::stream_smem(WARPS, m, nkb, ngroups, rt, groups, asym, ring).total;
  }
  *launched = smem <= max_smem && rt >= only_if_rt_at_least;
  if (!*launched) return ok_status();
  const int flags = aligned16(w.scales) && (!asym || aligned16(w.zeros)) ? gemv::kParamsAligned : 0;
  const dim3 grid(static_cast<unsigned>((tiles + rt - 1) / rt));
  return launch_kernel(kernel, grid, dim3(WARPS * 32), static_cast<size_t>(smem), stream, tuning().pdl,
                       "linear (int4 stream)", x, w, static_cast<const uint4*>(packed), bias, y, rt, flags);
}

Status launch_stream_variant(View2<const float> x, const WeightView& w, const void* packed, const float* bias,
                             View2<float> y, Stream stream, bool* launched) {
  switch (tuning().gemv_variant) {
    case 2: return launch_stream<8, 8, 2, 2, true>(x, w, packed, bias, y, stream, 0, launched);
    case 3: return launch_stream<16, 4, 2, 2, true>(x, w, packed, bias, y, stream, 0, launched);
    case 4: return launch_stream<8, 6, 2, 2, true>(x, w, packed, bias, y, stream, 0, launched);
    default: break;
  }
  // Two row tiles per step from a register ring where every block has at least two (measured fastest on
  // an H200 at 8192 x 8192: 18.5 us against 19.5 for the shared-memory ring); else one tile per step
  // from a shared-memory ring (9.4 us at 4096 x 4096).
  INFERGATE_K_RETURN_IF_ERROR((launch_stream<8, 4, 2, 2, false>(x, w, packed, bias, y, stream, 2, launched)));
  if (*launched) return ok_status();
  return launch_stream<8, 8, 2, 1, true>(x, w, packed, bias, y, stream, 0, launched);
}

}  // namespace

Status linear(View2<const float> x, const WeightView& w, const void* int4_packed, const float* bias,
              View2<float> y, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_linear(x, w, y, "linear"));
  if (x.rows == 0) return ok_status();
  const WeightLayout& l = w.layout;
  if (x.rows > 8) {
    const dim3 grid(grid_for(l.rows, kTile), grid_for(x.rows, kTile));
    return launch_kernel(lin::gemm_tf32_kernel<>, grid, dim3(128), lin::kGemmSmem, stream, false,
                         "linear (tf32 gemm)", x, w, bias, y);
  }
  if (int4_packed != nullptr) {
    if (!int4_mma_eligible(l)) {
      return invalid_argument("linear: a packed int4 weight needs rows % 16 == 0 and cols % 64 == 0");
    }
    if (!tuning().gemv_legacy_mma && aligned16(int4_packed)) {
      bool launched = false;
      INFERGATE_K_RETURN_IF_ERROR(launch_stream_variant(x, w, int4_packed, bias, y, stream, &launched));
      if (launched) return ok_status();
      return launch_gemv(x, w, bias, y, stream);  // x too wide to stage: the CUDA-core path
    }
    const int64_t tiles = l.rows / 16, sms = device_info().sm_count;
    // Enough blocks to cover the GPU a few times over; more row tiles per block when there are
    // plenty (x is staged once per block).
    const int rt = (tiles % 4 == 0 && tiles >= 8 * sms) ? 4 : ((tiles % 2 == 0 && tiles >= 4 * sms) ? 2 : 1);
    const size_t smem = static_cast<size_t>(x.rows) * static_cast<size_t>(l.cols + 8) * sizeof(uint16_t) +
                        8 * sizeof(float) + static_cast<size_t>(kMmaWarps) * 32 * rt * 4 * sizeof(float);
    if (smem <= static_cast<size_t>(device_info().max_smem_per_block)) {
      if (rt == 4) return launch_mma<4>(x, w, int4_packed, bias, y, smem, stream);
      if (rt == 2) return launch_mma<2>(x, w, int4_packed, bias, y, smem, stream);
      return launch_mma<1>(x, w, int4_packed, bias, y, smem, stream);
    }
    // x too wide to stage: the CUDA-core path below.
  }
  return launch_gemv(x, w, bias, y, stream);
}

}  // namespace infergate::kernels::cuda
