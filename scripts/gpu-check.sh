#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, the binaries scripts/gpu-build.sh made:
#   1. the CUDA test suite (every CUDA op against its CPU reference);
#   2. the CUDA benchmarks (HBM bandwidth of each op as a fraction of the peak: back-to-back launches in
#      a CUDA graph over inputs four times the L2, and single launches after an L2 flush);
#   3. the runtime's CUDA backend tests (its logits against the CPU backend's for every weight format x
#      KV dtype, greedy and batched generation, the memory checks);
#   4. the decode benchmark (tokens/s at batch 1, 8, 64 for fp16/int8/int4 weights x fp16/fp8/int8 KV on
#      a generated ~1B-parameter model, with the HBM bandwidth achieved);
# and prints a short table last. Every part has its own timeout; all four together are bounded to 8
# minutes (kernels 120 + 60 s, runtime tests 90 s, decode 200 s).
# GPU_CHECK_BIN_DIR overrides where the binaries are (default .gpu/bin).
# Exit status: 0 every test passed, 1 a test or a benchmarked op failed, 2 no GPU here,
# 3 the binaries are missing (run scripts/gpu-build.sh first). Missed performance targets are
# reported in the table, not in the exit status.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
bin=${GPU_CHECK_BIN_DIR:-.gpu/bin}
for b in kernels_cuda_tests kernels_cuda_bench runtime_cuda_tests engine_cuda_bench; do
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
timeout 120 "$bin/kernels_cuda_tests" --gtest_color=no >"$logs/tests.log" 2>&1
test_rc=$?
passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$logs/tests.log" | grep -oE '[0-9]+$' || echo 0)
skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$logs/tests.log" | grep -oE '[0-9]+' || echo 0)
failed_names=$(grep -E '^\[  FAILED  \] [A-Za-z]' "$logs/tests.log" | sed -E 's/^\[  FAILED  \] //; s/ \(.*//' | sort -u)
if [ "$test_rc" = 124 ]; then failed_names="$failed_names (timed out after 120 s)"; fi

# ---- kernels: benchmarks ----
timeout 60 "$bin/kernels_cuda_bench" >"$logs/bench.log" 2>&1
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
if [ "$bench_rc" = 124 ]; then echo "benchmarks timed out after 60 s"; fi

# ---- runtime: the CUDA backend's tests ----
start=$(date +%s)
timeout 90 "$bin/runtime_cuda_tests" --gtest_color=no >"$logs/runtime_tests.log" 2>&1
rt_rc=$?
rt_passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$logs/runtime_tests.log" | grep -oE '[0-9]+$' || echo 0)
rt_skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$logs/runtime_tests.log" | grep -oE '[0-9]+' || echo 0)
rt_failed=$(grep -E '^\[  FAILED  \] [A-Za-z]' "$logs/runtime_tests.log" | sed -E 's/^\[  FAILED  \] //; s/ \(.*//' | sort -u)
if [ "$rt_rc" = 124 ]; then rt_failed="$rt_failed (timed out after 90 s)"; fi
echo
echo "== runtime: CUDA backend vs CPU backend ($(( $(date +%s) - start ))s) =="
if [ -z "$rt_failed" ] && [ "$rt_rc" = 0 ]; then
  echo "PASS  $rt_passed passed, $rt_skipped skipped"
else
  echo "FAIL  $rt_passed passed; failed:"
  echo "$rt_failed" | sed 's/^/  /'
  echo "  (first failure details:)"
  grep -m 20 -E 'Failure|Expected|Which is|error' "$logs/runtime_tests.log" | sed 's/^/    /'
fi
echo "  measured agreement (CUDA vs CPU, per weights x KV x path):"
grep -E '^\[ measured \]' "$logs/runtime_tests.log" | sed 's/^\[ measured \] /    /' | head -60

# ---- runtime: decode benchmark ----
start=$(date +%s)
timeout 200 "$bin/engine_cuda_bench" >"$logs/decode.log" 2>&1
dec_rc=$?
echo
echo "== runtime: decode tokens/s and HBM bandwidth ($(( $(date +%s) - start ))s) =="
sed -n '/^decode: /,$p' "$logs/decode.log"
if [ "$dec_rc" = 124 ]; then echo "decode benchmark timed out after 200 s"; fi
if [ "$dec_rc" != 0 ] && [ "$dec_rc" != 124 ]; then
  echo "decode benchmark failed (exit $dec_rc):"
  tail -5 "$logs/decode.log" | sed 's/^/  /'
fi

status=0
if [ "$test_rc" != 0 ] || [ -n "$failed_names" ]; then status=1; fi
if [ "$bench_rc" != 0 ]; then status=1; fi
if [ "$rt_rc" != 0 ] || [ -n "$rt_failed" ]; then status=1; fi
if [ "$dec_rc" != 0 ]; then status=1; fi
exit $status
