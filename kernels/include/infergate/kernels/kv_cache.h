// Views of one layer's paged KV cache and of a batch of tokens to append to it. The caller (the
// engine's block manager) owns the memory and decides which page and slot each token goes to.
#pragma once

#include <cstdint>

#include "infergate/kernels/formats.h"
#include "infergate/kernels/tensor.h"

namespace infergate::kernels {

// One layer's page pool. Page p is pages + p * kv_page_bytes(layout); staging window s (kInt4Kivi
// only) is staging + s * kv_staging_bytes(layout). Host memory for the CPU ops, device memory for
// the CUDA ones.
struct KvCache {
  KvPageLayout layout;
  uint8_t* pages = nullptr;
  int64_t num_pages = 0;
  uint8_t* staging = nullptr;  // kInt4Kivi: one window per running sequence
  int64_t num_staging = 0;
  // kFp8E4M3: per-head scales [num_kv_heads] for K and V (calibrated; null means 1.0). They are
  // copied into every page on append, so that a page stays self-contained.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;

  INFERGATE_HD uint8_t* page(int64_t p) const { return pages + p * kv_page_bytes(layout); }
  INFERGATE_HD uint8_t* staging_window(int64_t s) const { return staging + s * kv_staging_bytes(layout); }
};

// One layer's latent page pool (formats.h, kv_latent_page_regions): layout.num_kv_heads is 1 and
// layout.head_dim the latent width plus the rope width. Page p is pages + p * kv_latent_page_bytes.
struct LatentCache {
  KvPageLayout layout;
  uint8_t* pages = nullptr;
  int64_t num_pages = 0;
  const float* scale = nullptr;  // kFp8E4M3: the one scale (null means 1.0), copied into every page

  INFERGATE_HD uint8_t* page(int64_t p) const { return pages + p * kv_latent_page_bytes(layout); }
};

// T new tokens to write into the cache, quantizing on the way in.
// Contract: pages fill in slot order starting at slot 0, and within one call the tokens of one page
// are contiguous and in slot order (the engine appends each sequence's chunk as one run). For
// kInt4Kivi the key of a token goes to its sequence's staging window; writing slot page_size-1
// "seals" the page: its keys are quantized per channel from the window into the page.
struct KvAppend {
  View3<const float> k;                  // [T, num_kv_heads, head_dim]
  View3<const float> v;                  // [T, num_kv_heads, head_dim]
  const int32_t* page_ids = nullptr;     // [T]
  const int32_t* slots = nullptr;        // [T], 0 .. page_size-1
  const int32_t* staging_ids = nullptr;  // [T], kInt4Kivi only: the token's sequence's window
};

}  // namespace infergate::kernels
