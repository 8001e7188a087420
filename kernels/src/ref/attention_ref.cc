// Scalar reference of paged attention: every page is dequantized with kv_read_page_ref (the format
// specification), then causal softmax attention is computed in double.
#include <algorithm>
#include <cmath>
#include <vector>

#include "infergate/kernels/ref.h"
#include "validate.h"

namespace infergate::kernels {

Status attention_ref(const KvCache& cache, const AttentionBatch& b, View3<const float> q, View3<float> out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_attention(cache, b, q, out, /*host_arrays=*/true, "attention"));
  const KvPageLayout& l = cache.layout;
  const int64_t hk = l.num_kv_heads, d = l.head_dim, p = l.page_size;
  const int64_t group = b.num_q_heads / hk;
  for (int32_t s = 0; s < b.num_seqs; ++s) {
    const int64_t kv_len = b.kv_len[s];
    const int64_t q0 = b.q_start[s], q_len = b.q_start[s + 1] - q0;
    // The whole sequence as fp32 [hk, kv_len, d].
    std::vector<float> keys(static_cast<size_t>(hk * kv_len * d)), values(keys.size());
    for (int64_t pi = 0; pi * p < kv_len; ++pi) {
      const int32_t filled = static_cast<int32_t>(std::min(p, kv_len - pi * p));
      View3<float> kv{keys.data() + pi * p * d, hk, filled, d, kv_len * d, d};
      View3<float> vv{values.data() + pi * p * d, hk, filled, d, kv_len * d, d};
      const int32_t staging = l.dtype == KvDtype::kInt4Kivi ? b.staging_ids[s] : -1;
      INFERGATE_K_RETURN_IF_ERROR(kv_read_page_ref(
          cache, b.block_table[int64_t{s} * b.max_pages_per_seq + pi], filled, staging, kv, vv));
    }
    std::vector<double> score(static_cast<size_t>(kv_len)), acc(static_cast<size_t>(d));
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t visible = kv_len - q_len + i + 1;  // positions 0 .. kv_len - q_len + i
      for (int64_t hq = 0; hq < b.num_q_heads; ++hq) {
        const int64_t h = hq / group;
        const float* qv = q.at(q0 + i, hq);
        double mx = -INFINITY;
        for (int64_t t = 0; t < visible; ++t) {
          const float* kt = keys.data() + (h * kv_len + t) * d;
          double dot = 0.0;
          for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(qv[c]) * kt[c];
          score[t] = dot * b.scale;
          mx = std::max(mx, score[t]);
        }
        double sum = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t t = 0; t < visible; ++t) {
          const double e = std::exp(score[t] - mx);
          sum += e;
          const float* vt = values.data() + (h * kv_len + t) * d;
          for (int64_t c = 0; c < d; ++c) acc[c] += e * vt[c];
        }
        float* o = out.at(q0 + i, hq);
        for (int64_t c = 0; c < d; ++c) o[c] = static_cast<float>(acc[c] / sum);
      }
    }
  }
  return ok_status();
}

}  // namespace infergate::kernels
