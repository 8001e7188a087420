// The CUDA KV-cache ops: checks and launches of kv_write.cuh's kernels (page writes, quantizing on
// the way in, and page reads).
#include "../mla.h"
#include "../validate.h"
#include "common.cuh"
#include "kv_write.cuh"

namespace infergate::kernels::cuda {

using kvw::kWarpsPerBlock;

Status kv_append(const KvCache& cache, const KvAppend& a, Stream stream) {
  const int64_t tokens = a.k.dim0;
  INFERGATE_K_RETURN_IF_ERROR(validate_kv_append(cache, a, tokens, /*host_arrays=*/false, "kv_append"));
  if (tokens == 0) return ok_status();
  const KvPageLayout& l = cache.layout;
  if (l.dtype == KvDtype::kInt4Kivi && l.page_size > 64) {
    return unsupported("kv_append: the CUDA int4-kivi path supports pages of up to 64 tokens (got " +
                       std::to_string(l.page_size) + ")");
  }
  const int64_t items = tokens * l.num_kv_heads;
  const unsigned blocks = grid_for(items, kWarpsPerBlock);
  if (l.dtype == KvDtype::kInt4Kivi) {
    INFERGATE_K_RETURN_IF_ERROR(launch_kernel(kvw::kivi_seal_kernel<>, dim3(blocks),
                                              dim3(kWarpsPerBlock * 32), 0, stream, false,
                                              "kv_append (kivi seal)", cache, a, tokens));
  }
  return launch_kernel(kvw::kv_append_kernel<>, dim3(blocks), dim3(kWarpsPerBlock * 32), 0, stream, false,
                       "kv_append", cache, a, tokens);
}

Status kv_read_page(const KvCache& cache, int32_t page_id, int32_t filled, int32_t staging_id, View3<float> k,
                    View3<float> v, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(validate_kv_cache(cache, false, "kv_read_page"));
  const KvPageLayout& l = cache.layout;
  if (page_id < 0 || page_id >= cache.num_pages) {
    return out_of_range("kv_read_page: page id " + std::to_string(page_id) + " is outside the pool of " +
                        std::to_string(cache.num_pages));
  }
  if (filled < 0 || filled > l.page_size) return out_of_range("kv_read_page: filled is outside the page");
  if (l.dtype == KvDtype::kInt4Kivi && filled < l.page_size &&
      (staging_id < 0 || staging_id >= cache.num_staging)) {
    return out_of_range("kv_read_page: a filling int4-kivi page needs its staging window");
  }
  INFERGATE_K_RETURN_IF_ERROR(validate_view3(k, l.num_kv_heads, filled, l.head_dim, "kv_read_page", "k"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view3(v, l.num_kv_heads, filled, l.head_dim, "kv_read_page", "v"));
  const int64_t n = int64_t{l.num_kv_heads} * filled * l.head_dim;
  if (n == 0) return ok_status();
  return launch_kernel(kvw::kv_read_page_kernel<>, dim3(grid_for(n, 256)), dim3(256), 0, stream, false,
                       "kv_read_page", cache, page_id, filled, staging_id, k, v);
}

Status latent_append(const LatentCache& cache, View2<const float> rows, const int32_t* page_ids,
                     const int32_t* slots, Stream stream) {
  INFERGATE_K_RETURN_IF_ERROR(
      validate_latent_append(cache, rows, page_ids, slots, "latent_append", /*host_arrays=*/false));
  if (rows.rows == 0) return ok_status();
  return launch_kernel(kvw::latent_append_kernel<>, dim3(grid_for(rows.rows, kWarpsPerBlock)),
                       dim3(kWarpsPerBlock * 32), 0, stream, false, "latent_append", cache, rows, page_ids,
                       slots);
}

}  // namespace infergate::kernels::cuda
