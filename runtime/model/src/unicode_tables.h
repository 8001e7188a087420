// The generated Unicode tables (unicode_tables.cc, from tools/gen_unicode_tables.py). Internal:
// use unicode.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace infergate::runtime::model::unicode_data {

struct Range {
  uint32_t lo, hi;  // inclusive
};
struct ClassRange {
  uint32_t lo, hi;  // inclusive
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp, first, second;  // second == 0 for a singleton
};
struct Composition {
  uint32_t first, second, composite;  // sorted by (first, second)
};

extern const char kUnicodeVersion[];
extern const Range kLetterRanges[];
extern const size_t kLetterRangesSize;
extern const Range kNumberRanges[];
extern const size_t kNumberRangesSize;
extern const ClassRange kCombiningClasses[];
extern const size_t kCombiningClassesSize;
extern const Decomposition kDecompositions[];  // sorted by cp
extern const size_t kDecompositionsSize;
extern const Composition kCompositions[];
extern const size_t kCompositionsSize;

}  // namespace infergate::runtime::model::unicode_data
