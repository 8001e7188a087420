#!/usr/bin/env bash
# The whole test suite from a fresh clone: installs dependencies, builds everything (the CUDA sources
# too when nvcc exists), and runs every CTest label. GPU tests skip themselves where no GPU exists.
# Usage: scripts/test.sh [extra ctest arguments, e.g. -L unit]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
jobs=$(nproc)

./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" "$@"
