// The public optimised CPU ops: argument checks (shared with the references), work partitioning over
// the thread pool, and calls into the inner loops of the active instruction set.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#include "infergate/kernels/cpu.h"
#include "mla.h"
#include "rows.h"
#include "thread_pool.h"
#include "validate.h"

namespace infergate::kernels {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Splits [0, n) into blocks of at least `min_block` (a multiple of `align`), about 4 per thread.
int64_t block_size(int64_t n, int64_t min_block, int64_t align) {
  const int64_t threads = cpu_threads();
  int64_t b = std::max(min_block, ceil_div(n, threads * 4));
  return ceil_div(b, align) * align;
}

// Runs fn(begin, end) over blocks of [0, n).
template <class Fn>
void parallel_blocks(int64_t n, int64_t block, Fn&& fn) {
  const int64_t blocks = ceil_div(n, block);
  cpu::pool().run(blocks, [&](int64_t i) { fn(i * block, std::min(n, (i + 1) * block)); });
}

std::vector<float>& thread_scratch(int64_t floats) {
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < floats) scratch.resize(static_cast<size_t>(floats));
  return scratch;
}

}  // namespace

// ==== weights =====================================================================================

Status quantize_weight_cpu(const MatrixSource& src, const WeightLayout& layout, const WeightBuffers& out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_quantize_args(src, layout, out));
  // Each row is independent; a failure is reported for the lowest failing row, as the reference does.
  std::vector<Status> errors(static_cast<size_t>(layout.rows));
  parallel_blocks(layout.rows, block_size(layout.rows, 16, 1), [&](int64_t r0, int64_t r1) {
    std::vector<float>& x = thread_scratch(layout.cols);
    for (int64_t r = r0; r < r1; ++r) {
      errors[static_cast<size_t>(r)] = quantize_weight_row(src, layout, out, r, x.data());
      if (!errors[static_cast<size_t>(r)].ok()) return;
    }
  });
  for (Status& s : errors) {
    if (!s.ok()) return std::move(s);
  }
  return ok_status();
}

Status dequantize_weight_cpu(const WeightView& w, View2<float> out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_weight_view(w, "dequantize_weight"));
  const WeightLayout& l = w.layout;
  if (out.data == nullptr || out.rows != l.rows || out.cols != l.cols || out.row_stride < l.cols) {
    return invalid_argument("dequantize_weight: output view is not " + shape_str(l.rows, l.cols));
  }
  // Memory-bound and rarely on a hot path: the reference's per-element maths, in parallel rows.
  parallel_blocks(l.rows, block_size(l.rows, 16, 1), [&](int64_t r0, int64_t r1) {
    WeightView part = w;
    part.layout.rows = r1 - r0;
    const int64_t row_bytes = weight_row_bytes(l), groups = weight_groups_per_row(l);
    part.data = static_cast<const uint8_t*>(w.data) + r0 * row_bytes;
    if (w.scales != nullptr) part.scales = static_cast<const uint16_t*>(w.scales) + r0 * groups;
    if (w.zeros != nullptr) part.zeros = w.zeros + r0 * groups;
    Status s = dequantize_weight_ref(part, {out.row(r0), r1 - r0, l.cols, out.row_stride});
    (void)s;  // validated above; the parts cannot fail
  });
  return ok_status();
}

Status linear_cpu(View2<const float> x, const WeightView& w, const float* bias, View2<float> y) {
  const LinearOutput out{w, bias, y};
  return linear_multi_cpu(x, &out, 1);
}

namespace {

// Runs the prepared jobs in one pass over the pool: blocks of output rows, a multiple of 8 (the inner
// loops' row block), about 4 per thread over all the jobs together; a block never spans two jobs.
// int4 jobs read x reordered (linear_prepare): each distinct x is reordered once, into a per-thread
// buffer (the calling thread's: the pool's workers only read it).
// int4 jobs on the integer path (cpu_int_linear) quantize x instead, each distinct x once; the job then
// takes vnni_linear_rows.
void prepare_int8_x(std::vector<cpu::LinearJob>& jobs) {
  int64_t bytes = 0;
  for (cpu::LinearJob& job : jobs) {
    if (!cpu::vnni_linear_applies(job.w.layout)) continue;
    job.xq_stride = cpu::vnni_linear_xq_stride(job.w.layout);
    const int64_t groups = job.w.layout.cols / job.w.layout.group_size;
    bytes += job.m * (job.xq_stride + 8 * groups);  // codes, scales and sums
  }
  thread_local std::vector<uint8_t> buffer;
  if (static_cast<int64_t>(buffer.size()) < bytes) buffer.resize(static_cast<size_t>(bytes));
  uint8_t* at = buffer.data();
  for (size_t i = 0; i < jobs.size(); ++i) {
    cpu::LinearJob& job = jobs[i];
    if (job.xq_stride == 0) continue;
    const int64_t groups = job.w.layout.cols / job.w.layout.group_size;
    const cpu::LinearJob* same = nullptr;  // q/k/v, gate/up: one x, one quantization
    for (size_t j = 0; j < i && same == nullptr; ++j) {
      const cpu::LinearJob& o = jobs[j];
      if (o.xq != nullptr && o.x == job.x && o.m == job.m && o.x_stride == job.x_stride &&
          o.w.layout.cols == job.w.layout.cols && o.w.layout.group_size == job.w.layout.group_size)
        same = &o;
    }
    if (same != nullptr) {
      job.xq = same->xq;
      job.xscale = same->xscale;
      job.xsum = same->xsum;
      continue;
    }
    job.xscale = reinterpret_cast<float*>(at);
    job.xsum = reinterpret_cast<int32_t*>(at + job.m * groups * 4);
    job.xq = reinterpret_cast<int8_t*>(at + job.m * groups * 8);
    at += job.m * (job.xq_stride + 8 * groups);
    if (job.m > 0) cpu::vnni_linear_prepare(job);
  }
}

void run_linear_jobs(std::vector<cpu::LinearJob>& jobs) {
  const cpu::Kernels& k = cpu::active_kernels();
  const int64_t chunk = 2 * k.width;
  if (cpu_int_linear()) prepare_int8_x(jobs);
  int64_t perm_floats = 0;
  for (cpu::LinearJob& job : jobs) {
    if (!is_int4(job.w.layout.format) || job.xq != nullptr) continue;
    job.k_main = job.w.layout.cols / chunk * chunk;
    perm_floats += job.m * job.k_main;  // an upper bound: jobs sharing an x share its reordering
  }
  thread_local std::vector<float> xperm;
  if (static_cast<int64_t>(xperm.size()) < perm_floats) xperm.resize(static_cast<size_t>(perm_floats));
  int64_t at = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    cpu::LinearJob& job = jobs[i];
    if (!is_int4(job.w.layout.format) || job.xq != nullptr) continue;
    // An x an earlier int4 job already reordered (q/k/v, gate/up) shares its buffer.
    const cpu::LinearJob* same = nullptr;
    for (size_t j = 0; j < i && same == nullptr; ++j) {
      const cpu::LinearJob& o = jobs[j];
      if (o.xperm != nullptr && o.x == job.x && o.m == job.m && o.x_stride == job.x_stride &&
          o.k_main == job.k_main)
        same = &o;
    }
    if (same != nullptr) {
      job.xperm = same->xperm;
      continue;
    }
    job.xperm = xperm.data() + at;
    at += job.m * job.k_main;
    k.linear_prepare(job);
  }
  int64_t total = 0;
  for (const cpu::LinearJob& job : jobs) total += job.w.layout.rows;
  const int64_t block = block_size(total, 8, 8);
  struct Block {
    int32_t job;
    int64_t n0, n1;
  };
  std::vector<Block> blocks;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].m == 0) continue;
    const int64_t rows = jobs[i].w.layout.rows;
    for (int64_t n0 = 0; n0 < rows; n0 += block)
      blocks.push_back({static_cast<int32_t>(i), n0, std::min(rows, n0 + block)});
  }
  cpu::pool().run(static_cast<int64_t>(blocks.size()), [&](int64_t b) {
    const Block& bl = blocks[static_cast<size_t>(b)];
    const cpu::LinearJob& job = jobs[static_cast<size_t>(bl.job)];
    if (job.xq != nullptr) {
      cpu::vnni_linear_rows(job, bl.n0, bl.n1);
    } else {
      k.linear_rows(job, bl.n0, bl.n1);
    }
  });
}

cpu::LinearJob linear_job(View2<const float> x, const WeightView& w, const float* bias, View2<float> y) {
  cpu::LinearJob job;
  job.x = x.data;
  job.x_stride = x.row_stride;
  job.m = x.rows;
  job.w = w;
  job.bias = bias;
  job.y = y.data;
  job.y_stride = y.row_stride;
  return job;
}

}  // namespace

Status linear_multi_cpu(View2<const float> x, const LinearOutput* outs, int64_t count) {
  if (count < 0 || (count > 0 && outs == nullptr)) {
    return invalid_argument("linear_multi: " + std::to_string(count) + " outputs at " +
                            (outs == nullptr ? "null" : "an address"));
  }
  for (int64_t i = 0; i < count; ++i) {
    const std::string op = count == 1 ? "linear" : "linear_multi[" + std::to_string(i) + "]";
    INFERGATE_K_RETURN_IF_ERROR(validate_linear(x, outs[i].w, outs[i].y, op.c_str()));
  }
  if (x.rows == 0 || count == 0) return ok_status();
  std::vector<cpu::LinearJob> jobs;
  jobs.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) jobs.push_back(linear_job(x, outs[i].w, outs[i].bias, outs[i].y));
  run_linear_jobs(jobs);
  return ok_status();
}

Status linear_grouped_cpu(const LinearProduct* products, int64_t count) {
  if (count < 0 || (count > 0 && products == nullptr)) {
    return invalid_argument("linear_grouped: " + std::to_string(count) + " products at " +
                            (products == nullptr ? "null" : "an address"));
  }
  for (int64_t i = 0; i < count; ++i) {
    const std::string op = "linear_grouped[" + std::to_string(i) + "]";
    INFERGATE_K_RETURN_IF_ERROR(validate_linear(products[i].x, products[i].w, products[i].y, op.c_str()));
  }
  std::vector<cpu::LinearJob> jobs;
  jobs.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const LinearProduct& p = products[i];
    jobs.push_back(linear_job(p.x, p.w, p.bias, p.y));
  }
  run_linear_jobs(jobs);
  return ok_status();
}

// ==== KV cache ====================================================================================

Status kv_append_cpu(const KvCache& cache, const KvAppend& a) {
  const int64_t tokens = a.k.dim0;
  INFERGATE_K_RETURN_IF_ERROR(validate_kv_append(cache, a, tokens, /*host_arrays=*/true, "kv_append"));
  // Parallel over KV heads: every byte a (token, head) writes belongs to its head (the fp8 per-head
  // scale, kivi's per-head window and seal included), and tokens keep their order within a head.
  cpu::pool().run(cache.layout.num_kv_heads, [&](int64_t h) {
    for (int64_t i = 0; i < tokens; ++i) kv_write_token_head(cache, a, i, h);
  });
  return ok_status();
}

Status latent_append_cpu(const LatentCache& cache, View2<const float> rows, const int32_t* page_ids,
                         const int32_t* slots) {
  INFERGATE_K_RETURN_IF_ERROR(validate_latent_append(cache, rows, page_ids, slots, "latent_append"));
  // Rows are independent: each token's row and its parameters are its own bytes (fp8's one scale is
  // the same value from every writer).
  parallel_blocks(rows.rows, block_size(rows.rows, 4, 1), [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) latent_write_row(cache, rows.row(i), page_ids[i], slots[i]);
  });
  return ok_status();
}

Status mla_attention_cpu(const LatentCache& cache, const AttentionBatch& batch, View3<const float> q,
                         int32_t value_dim, View3<float> out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_mla_attention(cache, batch, q, value_dim, out, "mla_attention"));
  if (batch.num_seqs == 0) return ok_status();
  const int64_t tokens = batch.q_start[batch.num_seqs], heads = batch.num_q_heads;
  // Units: one query token x a block of heads. Every unit dequantizes its token's visible rows once
  // for all its heads, so heads split only as far as it takes to give every thread work.
  const int64_t split =
      std::clamp<int64_t>((2 * cpu_threads() + tokens - 1) / std::max<int64_t>(tokens, 1), 1, heads);
  const int64_t per = (heads + split - 1) / split;
  struct Unit {
    int32_t seq;
    int64_t row, a0, a1;
  };
  std::vector<Unit> units;
  for (int32_t s = 0; s < batch.num_seqs; ++s) {
    for (int64_t r = 0; r < batch.q_start[s + 1] - batch.q_start[s]; ++r) {
      for (int64_t a = 0; a < heads; a += per) units.push_back({s, r, a, std::min(heads, a + per)});
    }
  }
  // int8 / int4 latent pages take the integer path where the CPU has it (cpu.h, cpu_int_attention).
  const bool int_path = cpu_int_attention() && cpu::vnni_mla_applies(cache.layout, value_dim);
  const auto unit_fn = int_path ? cpu::vnni_mla_unit : cpu::active_kernels().mla_unit;
  cpu::MlaJob job{&cache, &batch, q, value_dim, out};
  const int64_t scratch = int_path ? cpu::vnni_mla_scratch_floats(cache.layout.head_dim, per)
                                   : cpu::mla_scratch_floats(cache.layout.head_dim, value_dim, per);
  cpu::pool().run(static_cast<int64_t>(units.size()), [&](int64_t i) {
    const Unit& u = units[static_cast<size_t>(i)];
    unit_fn(job, u.seq, u.row, u.a0, u.a1, thread_scratch(scratch).data());
  });
  return ok_status();
}

Status kv_read_page_cpu(const KvCache& cache, int32_t page_id, int32_t filled, int32_t staging_id,
                        View3<float> k, View3<float> v) {
  INFERGATE_K_RETURN_IF_ERROR(validate_kv_read(cache, page_id, filled, staging_id, k, v));
  const KvPageLayout& l = cache.layout;
  const cpu::Kernels& kern = cpu::active_kernels();
  const uint8_t* page = cache.page(page_id);
  const bool staged = l.dtype == KvDtype::kInt4Kivi && filled < l.page_size;
  cpu::pool().run(l.num_kv_heads, [&](int64_t h) {
    const uint16_t* window = staged ? reinterpret_cast<const uint16_t*>(cache.staging_window(staging_id)) +
                                          h * l.page_size * l.head_dim
                                    : nullptr;
    kern.kv_rows(l, page, true, h, 0, filled, window, k.at(h, 0), k.stride1);
    kern.kv_rows(l, page, false, h, 0, filled, nullptr, v.at(h, 0), v.stride1);
  });
  return ok_status();
}

// ==== attention ===================================================================================

Status attention_cpu(const KvCache& cache, const AttentionBatch& b, View3<const float> q, View3<float> out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_attention(cache, b, q, out, /*host_arrays=*/true, "attention"));
  const KvPageLayout& l = cache.layout;
  const int64_t group = b.num_q_heads / l.num_kv_heads, dim = l.head_dim;
  const int64_t threads = cpu_threads();
  // Decode over int8 / int4 KV takes the integer path where the CPU has it (cpu.h).
  const bool int_path = cpu_int_attention();

  // Units without splitting: (sequence, KV heads, tile of up to 16 query rows). A sequence whose rows
  // fit one tile (decode) takes all its KV heads in one unit (cpu_kernels.h, AttnUnit).
  struct Tile {
    int32_t seq, kv_head, num_heads, row0, nrows, kv_visible;
  };
  std::vector<Tile> tiles;
  for (int32_t s = 0; s < b.num_seqs; ++s) {
    const int64_t q_len = b.q_start[s + 1] - b.q_start[s], rows = q_len * group;
    cpu::AttnUnit probe;
    probe.nrows = static_cast<int32_t>(rows);
    probe.num_heads = std::min(l.num_kv_heads, cpu::kAttnMaxHeads);
    const bool multi = rows <= cpu::kAttnMaxRows && int_path && cpu::vnni_decode_applies(l, group, probe);
    const int32_t heads_per_tile = multi ? probe.num_heads : 1;
    for (int32_t h = 0; h < l.num_kv_heads; h += heads_per_tile) {
      const int32_t nh = std::min(heads_per_tile, l.num_kv_heads - h);
      for (int64_t r0 = 0; r0 < rows; r0 += cpu::kAttnMaxRows) {
        const int64_t nrows = std::min<int64_t>(cpu::kAttnMaxRows, rows - r0);
        const int64_t last_token = (r0 + nrows - 1) / group;
        const int64_t visible = b.kv_len[s] - q_len + last_token + 1;
        tiles.push_back(
            {s, h, nh, static_cast<int32_t>(r0), static_cast<int32_t>(nrows), static_cast<int32_t>(visible)});
      }
    }
  }
  // Split long KV ranges into pieces (flash-decoding) when a tile holds more than its share of the
  // work (KV tokens x heads): pieces of at least 512 tokens, about 4 per thread over the batch, so a
  // few long sequences do not leave threads idle. A caller's split size splits every tile.
  int64_t work = 0;
  for (const Tile& t : tiles) work += int64_t{t.kv_visible} * t.num_heads;
  const int64_t share = threads > 1 ? std::max<int64_t>(1, ceil_div(work, 4 * threads)) : 0;
  auto piece_tokens = [&](const Tile& t) -> int64_t {
    int64_t split = b.split_tokens;
    if (split == 0 && share > 0 && int64_t{t.kv_visible} * t.num_heads > share) {
      split = std::max<int64_t>(512,
                                ceil_div(t.kv_visible, ceil_div(int64_t{t.kv_visible} * t.num_heads, share)));
    }
    return split > 0 ? ceil_div(split, l.page_size) * l.page_size : 0;
  };

  std::vector<cpu::AttnUnit> units;
  struct Merge {
    size_t tile;
    size_t first_unit;
    size_t count;
  };
  std::vector<Merge> merges;
  std::vector<int64_t> partial_offset;  // per unit, -1 when it writes out directly
  int64_t partial_floats = 0;
  for (size_t ti = 0; ti < tiles.size(); ++ti) {
    const Tile& t = tiles[ti];
    const int64_t split = piece_tokens(t);
    const int64_t pieces = split > 0 ? std::max<int64_t>(1, ceil_div(t.kv_visible, split)) : 1;
    if (pieces > 1) merges.push_back({ti, units.size(), static_cast<size_t>(pieces)});
    for (int64_t p = 0; p < pieces; ++p) {
      cpu::AttnUnit u;
      u.seq = t.seq;
      u.kv_head = t.kv_head;
      u.num_heads = t.num_heads;
      u.row0 = t.row0;
      u.nrows = t.nrows;
      u.kv0 = static_cast<int32_t>(pieces > 1 ? p * split : 0);
      u.kv1 =
          static_cast<int32_t>(pieces > 1 ? std::min<int64_t>(t.kv_visible, (p + 1) * split) : t.kv_visible);
      units.push_back(u);
      partial_offset.push_back(pieces > 1 ? partial_floats : -1);
      if (pieces > 1) partial_floats += int64_t{t.num_heads} * t.nrows * (dim + 2);
    }
  }
  std::vector<float> partials(static_cast<size_t>(partial_floats));
  for (size_t i = 0; i < units.size(); ++i) {
    if (partial_offset[i] >= 0) units[i].partial = partials.data() + partial_offset[i];
  }

  const cpu::Kernels& kern = cpu::active_kernels();
  cpu::AttnJob job{&cache, &b, q, out};
  // Only units the integer path takes have more than one head (built so above).
  int32_t max_heads = 1;
  for (const cpu::AttnUnit& u : units) max_heads = std::max(max_heads, u.num_heads);
  const int64_t scratch =
      int_path ? std::max(cpu::attention_scratch_floats(dim), cpu::vnni_decode_scratch_floats(dim, max_heads))
               : cpu::attention_scratch_floats(dim);
  cpu::pool().run(static_cast<int64_t>(units.size()), [&](int64_t i) {
    std::vector<float>& s = thread_scratch(scratch);
    const cpu::AttnUnit& u = units[static_cast<size_t>(i)];
    if (int_path && cpu::vnni_decode_applies(l, group, u)) {
      cpu::vnni_decode_unit(job, u, s.data());
    } else {
      kern.attention_unit(job, u, s.data());
    }
  });

  // Merge the partial softmax states of split tiles: m = max m_i, l = sum l_i e^(m_i - m),
  // o = sum o_i e^(m_i - m) / l.
  cpu::pool().run(static_cast<int64_t>(merges.size()), [&](int64_t mi) {
    const Merge& m = merges[static_cast<size_t>(mi)];
    const Tile& t = tiles[m.tile];
    const int64_t q0 = b.q_start[t.seq];
    for (int64_t h = 0; h < t.num_heads; ++h) {
      for (int64_t r = 0; r < t.nrows; ++r) {
        const int64_t at = (h * t.nrows + r) * (dim + 2);
        float mx = -INFINITY;
        for (size_t i = 0; i < m.count; ++i) mx = std::max(mx, units[m.first_unit + i].partial[at + dim]);
        const int64_t row = t.row0 + r, token = row / group, hq = (t.kv_head + h) * group + row % group;
        float* dst = out.at(q0 + token, hq);
        std::fill(dst, dst + dim, 0.0f);
        float total = 0.0f;
        for (size_t i = 0; i < m.count; ++i) {
          const float* p = units[m.first_unit + i].partial + at;
          if (p[dim + 1] == 0.0f) continue;  // the piece saw nothing of this row
          const float w = std::exp(p[dim] - mx);
          total += p[dim + 1] * w;
          for (int64_t c = 0; c < dim; ++c) dst[c] += p[c] * w;
        }
        const float inv = 1.0f / total;
        for (int64_t c = 0; c < dim; ++c) dst[c] *= inv;
      }
    }
  });
  return ok_status();
}

// ==== element-wise ================================================================================

Status rmsnorm_cpu(View2<const float> x, const float* w, float eps, View2<float> y) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(x, x.rows, x.cols, "rmsnorm", "x"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(y, x.rows, x.cols, "rmsnorm", "y"));
  if (w == nullptr && x.cols > 0) return invalid_argument("rmsnorm: weight is null");
  if (!(eps >= 0.0f)) return invalid_argument("rmsnorm: eps must be >= 0");
  const cpu::Kernels& k = cpu::active_kernels();
  parallel_blocks(x.rows, block_size(x.rows, 4, 1),
                  [&](int64_t r0, int64_t r1) { k.rmsnorm_rows(x, w, eps, y, r0, r1); });
  return ok_status();
}

Status rope_cpu(const RopeConfig& c, const float* inv_freq, const int32_t* positions, View3<float> q,
                View3<float> k) {
  INFERGATE_K_RETURN_IF_ERROR(validate_rope(c, q, k, "rope"));
  if (q.dim0 > 0 && (inv_freq == nullptr || positions == nullptr)) {
    return invalid_argument("rope: inv_freq or positions is null");
  }
  const int64_t half = c.rotary_dim / 2;
  const bool split = c.style == RopeStyle::kHalfSplit;
  parallel_blocks(q.dim0, block_size(q.dim0, 4, 1), [&](int64_t t0, int64_t t1) {
    std::vector<float>& cs = thread_scratch(2 * half);
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(positions[t]) * inv_freq[i];
        cs[i] = std::cos(angle);
        cs[half + i] = std::sin(angle);
      }
      for (View3<float>* v : {&q, &k}) {
        for (int64_t h = 0; h < v->dim1; ++h) {
          float* x = v->at(t, h);
          for (int64_t i = 0; i < half; ++i) {
            const int64_t a = split ? i : 2 * i, bb = split ? i + half : 2 * i + 1;
            const float xa = x[a], xb = x[bb];
            x[a] = xa * cs[i] - xb * cs[half + i];
            x[bb] = xb * cs[i] + xa * cs[half + i];
          }
        }
      }
    }
  });
  return ok_status();
}

Status silu_mul_cpu(View2<const float> gate, View2<const float> up, View2<float> out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(gate, gate.rows, gate.cols, "silu_mul", "gate"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(up, gate.rows, gate.cols, "silu_mul", "up"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(out, gate.rows, gate.cols, "silu_mul", "out"));
  const cpu::Kernels& k = cpu::active_kernels();
  parallel_blocks(gate.rows, block_size(gate.rows, 1, 1),
                  [&](int64_t r0, int64_t r1) { k.silu_mul_rows(gate, up, out, r0, r1); });
  return ok_status();
}

Status add_cpu(View2<const float> a, View2<const float> b, View2<float> out) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(a, a.rows, a.cols, "add", "a"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(b, a.rows, a.cols, "add", "b"));
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(out, a.rows, a.cols, "add", "out"));
  const cpu::Kernels& k = cpu::active_kernels();
  parallel_blocks(a.rows, block_size(a.rows, 4, 1),
                  [&](int64_t r0, int64_t r1) { k.add_rows(a, b, out, r0, r1); });
  return ok_status();
}

Status bias_add_cpu(View2<float> y, const float* bias) {
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(y, y.rows, y.cols, "bias_add", "y"));
  if (bias == nullptr && y.cols > 0) return invalid_argument("bias_add: bias is null");
  const cpu::Kernels& k = cpu::active_kernels();
  parallel_blocks(y.rows, block_size(y.rows, 4, 1),
                  [&](int64_t r0, int64_t r1) { k.bias_add_rows(y, bias, r0, r1); });
  return ok_status();
}

Status embedding_cpu(const MatrixSource& table, const int32_t* ids, int64_t tokens, View2<float> out) {
  if (table.data == nullptr || table.rows < 1 || table.cols < 1 || table.row_stride < table.cols) {
    return invalid_argument("embedding: the table is empty or its row stride is below its width");
  }
  INFERGATE_K_RETURN_IF_ERROR(validate_view2(out, tokens, table.cols, "embedding", "out"));
  if (tokens > 0 && ids == nullptr) return invalid_argument("embedding: ids is null");
  for (int64_t t = 0; t < tokens; ++t) {
    if (ids[t] < 0 || ids[t] >= table.rows) {
      return out_of_range("embedding: token " + std::to_string(t) + " has id " + std::to_string(ids[t]) +
                          ", outside the vocabulary of " + std::to_string(table.rows));
    }
  }
  parallel_blocks(tokens, block_size(tokens, 1, 1), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* dst = out.row(t);
      const int64_t base = int64_t{ids[t]} * table.row_stride;
      switch (table.dtype) {
        case SourceDtype::kF32:
          std::copy_n(static_cast<const float*>(table.data) + base, table.cols, dst);
          break;
        case SourceDtype::kF16:
          for (int64_t c = 0; c < table.cols; ++c)
            dst[c] = fp16_to_float(static_cast<const uint16_t*>(table.data)[base + c]);
          break;
        case SourceDtype::kBF16:
          for (int64_t c = 0; c < table.cols; ++c)
            dst[c] = bf16_to_float(static_cast<const uint16_t*>(table.data)[base + c]);
          break;
      }
    }
  });
  return ok_status();
}

}  // namespace infergate::kernels
