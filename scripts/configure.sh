#!/usr/bin/env bash
# The one build configuration the README's two commands share: scripts/demo.sh builds its three
# binaries in it and scripts/test.sh everything else, so a user who runs both compiles each file once.
# Release (-O3), the CUDA sources too when nvcc is found. Warnings are errors only with
# INFERGATE_WERROR=ON in the environment (CI sets it; a user's build never fails on a warning).
# Usage: scripts/configure.sh [build directory, default: build/ in the repository]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DINFERGATE_WERROR="${INFERGATE_WERROR:-OFF}" >/dev/null
