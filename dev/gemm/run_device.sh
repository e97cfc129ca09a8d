#!/bin/bash
# run_device.sh - one device call for the GEMM engine on one GPU: the GEMM GPU
# tests, the dev benchmark (every configuration the model considers on the
# fitting half, with the model's predictions), loom-bench gemm (loom_gemm vs
# cuBLASLt and cublasGemmEx on the shape set, both halves), a short summary last.
#   bash dev/gemm/run_device.sh        (logs and JSON to $OUT, else /tmp/gemm_out)
# Environment: TEST_S, DEV_S, BENCH_S (time limits, s), BENCH_ARGS (default
# --quick), DEV_SET (default all), REPS (dev bench, default 10).
# Binaries are built on the host and carried in build/ (run(carry: [...]));
# if they do not start on the device, they are rebuilt there (make -j16).
set -o pipefail
OUT=${OUT:-/tmp/gemm_out}; mkdir -p $OUT
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} NCCL_NVLS_ENABLE=0 LOOM_TEST_TIMEOUT_S=${LOOM_TEST_TIMEOUT_S:-200}
export LOOM_COMMIT=${LOOM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader | tee $OUT/gpu.txt
probe=$( { build/tests/loom-test-gpu no_such_test_xyz; build/bin/loom-bench --help; build/dev/gemm/bench_gemm_dev none; } 2>&1 )
if [ ! -x build/dev/gemm/bench_gemm_dev ] || echo "$probe" | grep -qE "error while loading|GLIBC|No such file|cannot execute"; then
  echo "carried binaries do not run here: building"
  t0=$(date +%s)
  make -j16 NVCC="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc --threads 2" build/tests/loom-test-gpu build/bin/loom-bench \
    build/dev/gemm/bench_gemm_dev > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
  echo "build took $(( $(date +%s) - t0 )) s"
fi
t0=$(date +%s)
timeout ${TEST_S:-220} build/tests/loom-test-gpu gemm > $OUT/test.log 2>&1; trc=$?
echo "tests rc=$trc ($(( $(date +%s) - t0 )) s)"
t0=$(date +%s)
REPS=${REPS:-10} timeout ${DEV_S:-120} build/dev/gemm/bench_gemm_dev ${DEV_SET:-all} $OUT/bench_dev.json > $OUT/bench_dev.log 2>&1
echo "dev bench rc=$? ($(( $(date +%s) - t0 )) s)"
t0=$(date +%s)
LOOM_BENCH_RESULTS_DIR=$OUT timeout ${BENCH_S:-100} build/bin/loom-bench gemm ${BENCH_ARGS:---quick} > $OUT/loom_bench.log 2>&1
echo "loom-bench rc=$? ($(( $(date +%s) - t0 )) s)"
echo; echo "== GPU tests (failures, skips, heuristic lines)"
grep -E "^\[ (FAIL|SKIP)|passed, .* failed|FAIL |tuned at first use|other GPU|matched|takes bm" $OUT/test.log | head -30
echo; echo "== dev bench"
sed -n '/^== summary/,$p' $OUT/bench_dev.log | head -45
grep -E "^issue " $OUT/bench_dev.log | grep -E "\*|cuBLASLt" | cut -c1-150 | head -20
echo; echo "== loom-bench gemm"
grep -E "^# (loom-bench|fitting|held-out|copy|[0-9]+ GEMMs|[0-9]+ failure)" $OUT/loom_bench.log
grep -E "MISS" $OUT/loom_bench.log | cut -c1-170 | head -12
