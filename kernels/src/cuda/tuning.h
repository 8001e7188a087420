// Internal knobs of the CUDA launchers, for the benchmark and the tests only (not part of the public
// API): which kernel generation runs, pipeline depths, and whether launches use programmatic
// dependent launch. The defaults are what the engine gets. Changing them while ops run on other
// threads is not supported.
#pragma once

namespace infergate::kernels::cuda {

struct Tuning {
  // Decode attention (max_q_len == 1) on the streaming kernel (attention_decode.cuh) where it
  // applies; false forces the general kernel.
  bool attention_decode = true;
  // cp.async stages per warp in the decode kernel; 0 chooses by KV dtype.
  int attention_stages = 0;
  // Resident blocks per SM assumed when splitting decode attention; 0 asks the occupancy API.
  int attention_blocks_per_sm = 0;
  // The shortest automatic decode split, in 16-token chunks (measured on an H200: 32 chunks, 8 per
  // warp, beat 4 at batch 1 x 16k tokens, 25.8 vs 29.5 us; larger batches do not split that finely).
  int attention_min_split_chunks = 32;
  // int4 packed GEMV, as <warps per block, steps in flight, blocks per SM for the register budget, row
  // tiles per step, weights through a cp.async shared-memory ring (else a register ring)>: 0 or 1 =
  // <8, 4, 2, 2, registers> where blocks get two or more row tiles, else <8, 8, 2, 1, ring>;
  // 2 = <8, 8, 2, 2, ring>; 3 = <16, 4, 2, 2, ring>; 4 = <8, 6, 2, 2, ring>.
  int gemv_variant = 0;
  // The older one-block-per-row-tile int4 tensor-core GEMV instead of the streaming one.
  bool gemv_legacy_mma = false;
  // Launch the streaming kernels with cudaLaunchAttributeProgrammaticStreamSerialization.
  bool pdl = true;
};

Tuning& tuning();

}  // namespace infergate::kernels::cuda
