#!/usr/bin/env bash
# The whole test suite from a fresh clone: installs dependencies, builds everything (the CUDA sources
# too when nvcc exists), and runs every CTest label. GPU tests skip themselves where no GPU exists.
# Then, for the whole suite (no arguments), the sanitizer job: the unit tests of the code that reads
# untrusted bytes under ASan + UBSan, and every libFuzzer target for a bounded time (scripts/fuzz.sh;
# INFERGATE_FUZZ_SECONDS per target, default 30; 0 skips it).
# The build is scripts/configure.sh's, shared with scripts/demo.sh. INFERGATE_WERROR=ON makes compiler
# warnings errors in both builds (CI sets it; a user need not).
# Usage: scripts/test.sh [extra ctest arguments, e.g. -L unit]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
jobs=$(nproc)

./scripts/install-deps.sh
./scripts/configure.sh build
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" "$@"
fuzz_seconds=${INFERGATE_FUZZ_SECONDS:-30}
if [ $# -eq 0 ] && [ "$fuzz_seconds" != 0 ]; then
  ./scripts/fuzz.sh "$fuzz_seconds"
fi
