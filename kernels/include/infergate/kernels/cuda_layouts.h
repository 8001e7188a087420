// Data layouts private to the CUDA tensor-core kernels, written as __host__ __device__ index
// functions so that the host packer, the device packer and the CPU tests share one definition.
//
// mma.sync m16n8k16 fragments (PTX ISA, "Matrix fragments for mma.m16n8k16"), lane = 4 * g + c:
//   A (16 x 16, row-major), four 32-bit registers of two fp16 each:
//     reg0 = (row g,   cols 2c, 2c+1)   reg1 = (row g+8, cols 2c, 2c+1)
//     reg2 = (row g,   cols 2c+8, 2c+9) reg3 = (row g+8, cols 2c+8, 2c+9)
//   B (16 x 8, "col"), two registers: reg0 = (rows 2c, 2c+1; col g), reg1 = (rows 2c+8, 2c+9; col g)
//   C/D (16 x 8 fp32): d0 = (row g, col 2c), d1 = (row g, col 2c+1), d2 = (row g+8, col 2c),
//     d3 = (row g+8, col 2c+1)
#pragma once

#include <cstdint>

#include "infergate/kernels/numeric.h"

namespace infergate::kernels {

// ---- int4 weights for the tensor-core GEMV ----
// W [N, K] (N % 16 == 0, K % 64 == 0) is cut into row tiles of 16 rows and k blocks of 64 columns
// (four k16 tiles). For row tile rt and k block kb, the 32 lanes' 16 bytes are stored together
// (512 contiguous bytes, read with one 16-byte load per lane):
//   byte offset = ((rt * (K / 64) + kb) * 32 + lane) * 16 + 4 * kt      (kt: k16 tile 0..3)
// Inside that 32-bit word, nibble position p (bits 4p..4p+3) holds the A-fragment element
//   j = p % 4 (the register), e = p / 4 (low / high half of the register):
//   row = 16 rt + g + 8 * (j & 1),   col = 64 kb + 16 kt + 2c + e + 8 * (j >> 1)
// so that (w >> 4j) & 0x000F000F puts register j's two codes in the two halves of a word.

inline constexpr int kInt4MmaRows = 16;
inline constexpr int kInt4MmaCols = 64;

INFERGATE_HD int64_t int4_mma_word_offset(int64_t cols, int64_t rt, int64_t kb, int lane, int kt) {
  return ((rt * (cols / kInt4MmaCols) + kb) * 32 + lane) * 16 + 4 * kt;
}

// Where element (r, k) of W lives: the byte offset of its 32-bit word and its nibble position.
INFERGATE_HD void int4_mma_locate(int64_t cols, int64_t r, int64_t k, int64_t* word_offset, int* nibble) {
  const int64_t rt = r / 16, kb = k / 64;
  const int rr = static_cast<int>(r % 16), kt = static_cast<int>((k % 64) / 16),
            col = static_cast<int>(k % 16);
  const int g = rr % 8, c = (col % 8) / 2, e = col % 2;
  const int j = (rr >= 8 ? 1 : 0) + (col >= 8 ? 2 : 0);
  *word_offset = int4_mma_word_offset(cols, rt, kb, 4 * g + c, kt);
  *nibble = j + 4 * e;
}

// The element (r, k) held at nibble position p of the word for (rt, kb, lane, kt).
INFERGATE_HD void int4_mma_element(int64_t rt, int64_t kb, int lane, int kt, int p, int64_t* r, int64_t* k) {
  const int j = p % 4, e = p / 4, g = lane / 4, c = lane % 4;
  *r = rt * 16 + g + 8 * (j & 1);
  *k = kb * 64 + kt * 16 + 2 * c + e + 8 * (j >> 1);
}

}  // namespace infergate::kernels
