#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, the binaries scripts/gpu-build.sh made:
#   1. the CUDA test suite (every CUDA op against its CPU reference);
#   2. the CUDA benchmarks (HBM bandwidth of each op as a fraction of the peak: back-to-back launches in
#      a CUDA graph over inputs four times the L2, and single launches after an L2 flush);
# and prints a short table last. The kernel part is bounded to about 4 minutes (it takes well under one).
# GPU_CHECK_BIN_DIR overrides where the binaries are (default .gpu/bin).
# Exit status: 0 every test passed, 1 a test or a benchmarked op failed, 2 no GPU here,
# 3 the binaries are missing (run scripts/gpu-build.sh first). Missed performance targets are
# reported in the table, not in the exit status.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bin=${GPU_CHECK_BIN_DIR:-.gpu/bin}
for b in kernels_cuda_tests kernels_cuda_bench; do
  if [ ! -x "$bin/$b" ]; then
    echo "gpu-check: $bin/$b is missing: run scripts/gpu-build.sh first" >&2
    exit 3
  fi
done
# Full logs stay in GPU_CHECK_LOG_DIR when it is set (e.g. to bring them back from the GPU machine).
if [ -n "${GPU_CHECK_LOG_DIR:-}" ]; then
  logs=$GPU_CHECK_LOG_DIR
  mkdir -p "$logs"
else
  logs=$(mktemp -d)
  trap 'rm -rf "$logs"' EXIT
fi

if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null | sed 's/^/gpu-check: /'
fi

# ---- kernels: tests ----
start=$(date +%s)
timeout 150 "$bin/kernels_cuda_tests" --gtest_color=no >"$logs/tests.log" 2>&1
test_rc=$?
passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$logs/tests.log" | grep -oE '[0-9]+$' || echo 0)
skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$logs/tests.log" | grep -oE '[0-9]+' || echo 0)
failed_names=$(grep -E '^\[  FAILED  \] [A-Za-z]' "$logs/tests.log" | sed -E 's/^\[  FAILED  \] //; s/ \(.*//' | sort -u)
if [ "$test_rc" = 124 ]; then failed_names="$failed_names (timed out after 150 s)"; fi

# ---- kernels: benchmarks ----
timeout 90 "$bin/kernels_cuda_bench" >"$logs/bench.log" 2>&1
bench_rc=$?
elapsed=$(( $(date +%s) - start ))

if [ "$bench_rc" = 2 ]; then
  echo "gpu-check: $(head -1 "$logs/bench.log")"
  echo "gpu-check: tests ran on the CPU only: $passed passed, $skipped skipped (they need a GPU)"
  exit 2
fi

echo
echo "== kernels: CUDA tests (${elapsed}s with benchmarks) =="
if [ -z "$failed_names" ] && [ "$test_rc" = 0 ]; then
  echo "PASS  $passed passed, $skipped skipped"
else
  echo "FAIL  $passed passed; failed:"
  echo "$failed_names" | sed 's/^/  /'
  echo "  (first failure details:)"
  grep -m 20 -E 'Failure|differ|got|Expected' "$logs/tests.log" | sed 's/^/    /'
fi
echo
echo "== kernels: HBM bandwidth ($(head -1 "$logs/bench.log")) =="
sed -n '/^stream: /,$p' "$logs/bench.log"
if [ "$bench_rc" = 124 ]; then echo "benchmarks timed out after 90 s"; fi

status=0
if [ "$test_rc" != 0 ] || [ -n "$failed_names" ]; then status=1; fi
if [ "$bench_rc" != 0 ]; then status=1; fi
exit $status
