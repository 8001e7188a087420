#!/usr/bin/env bash
# The CPU side of scripts/gpu-check.sh: missing binaries exit 3 naming gpu-build.sh; on a machine
# without a GPU the check exits 2 with "no GPU" (and runs nothing for long). Skips (77) with a GPU,
# where the check itself is the test.
# Usage: gpu_check_script_test.sh <repo root> <dir holding the four GPU binaries>
set -uo pipefail
root=$1
bin=$2
out=$(GPU_CHECK_BIN_DIR=/nonexistent "$root/scripts/gpu-check.sh" 2>&1)
rc=$?
if [ "$rc" != 3 ] || ! grep -q "run scripts/gpu-build.sh first" <<<"$out"; then
  echo "FAIL: missing binaries gave exit $rc: $out"
  exit 1
fi
"$bin/engine_cuda_bench" >/dev/null 2>&1
if [ $? != 2 ]; then
  echo "a GPU is present: scripts/gpu-check.sh is the test there"
  exit 77
fi
out=$(GPU_CHECK_BIN_DIR="$bin" timeout 300 "$root/scripts/gpu-check.sh" 2>&1)
rc=$?
if [ "$rc" != 2 ] || ! grep -q "gpu-check: no GPU" <<<"$out"; then
  echo "FAIL: without a GPU gpu-check.sh gave exit $rc:"
  echo "$out"
  exit 1
fi
echo "PASS: exit 2, $(grep -m1 'no GPU' <<<"$out")"
