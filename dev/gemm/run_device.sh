#!/bin/bash
# run_device.sh - one device call for the GEMM engine: GEMM GPU tests,
# loom-bench gemm (loom_gemm vs tuned cuBLASLt), the dev benchmark's variants
# (data-parallel / stream-K / split-K, bn 128 / 256, the 64-row decode
# variant for m <= 128), a short table last.
#   dev/gemm/run_device.sh            (logs and JSON to $OUT, else /tmp/gemm_out)
# Binaries are built on the host and carried in build/ (run(carry: ["build"]));
# if they do not start on the device (system libraries), they are rebuilt there.
# ptxas resources and the SASS (HGMMA, LDL/STL) are read on the host
# (bench/NOTES.md says how), so the device time goes to the GPU.
set -o pipefail
OUT=${OUT:-/tmp/gemm_out}; mkdir -p $OUT
export CUDA_VISIBLE_DEVICES=0 NCCL_NVLS_ENABLE=0 LOOM_TEST_TIMEOUT_S=${LOOM_TEST_TIMEOUT_S:-150}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader | tee $OUT/gpu.txt
probe=$( { build/tests/loom-test-gpu no_such_test_xyz; build/bin/loom-bench --help; build/dev/gemm/bench_gemm_dev none; } 2>&1 )
if [ ! -x build/dev/gemm/bench_gemm_dev ] || echo "$probe" | grep -qE "error while loading|GLIBC|No such file|cannot execute"; then
  echo "carried binaries do not run here: building"
  t0=$(date +%s)
  make -j16 build/tests/loom-test-gpu build/bin/loom-bench build/dev/gemm/bench_gemm_dev > $OUT/build.log 2>&1 ||
    { tail -20 $OUT/build.log; exit 1; }
  echo "build took $(( $(date +%s) - t0 )) s"
fi
t0=$(date +%s)
timeout ${TEST_S:-170} build/tests/loom-test-gpu gemm > $OUT/test.log 2>&1; trc=$?
grep -E "^\[ *(OK|FAIL|SKIP)|passed|FAIL|heuristic m=|bit-identical" $OUT/test.log | grep -vE "^\s+ok " | head -40
echo "tests rc=$trc ($(( $(date +%s) - t0 )) s)"
t0=$(date +%s)
LOOM_BENCH_RESULTS_DIR=$OUT timeout ${BENCH_S:-150} build/bin/loom-bench gemm > $OUT/loom_bench.log 2>&1; echo "loom-bench rc=$? ($(( $(date +%s) - t0 )) s)"
t0=$(date +%s)
REPS=${REPS:-8} timeout ${DEV_S:-100} build/dev/gemm/bench_gemm_dev ${SET:-all} $OUT/bench_dev.json > $OUT/bench_dev.log 2>&1; echo "dev bench rc=$? ($(( $(date +%s) - t0 )) s)"
echo "== dev bench (ms; ratio = cuBLASLt/loom heuristic; best = cuBLASLt/best variant)"
grep -E "^(family|flux|llama)" $OUT/bench_dev.log | awk '$2 == "m" || $2 <= 512 {print $1, $2, $5, $7, $10, $11, $12, $13, $14, $15, $16, $17, $19, $20, $21, $22, $24, $27, $28, $29, $30, $31, $32}'
grep -E "m >= 1024|BAD|bad" $OUT/bench_dev.log | head
echo; echo "== loom-bench gemm"
grep -E "^# gemm" $OUT/loom_bench.log | awk '{printf "%s %s %s %s | ", $3, $4, $7, $11} NR % 2 == 0 {print ""}'
grep -E "m >= 1024|m <= 512|failure" $OUT/loom_bench.log
