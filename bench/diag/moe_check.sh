#!/usr/bin/env bash
# moe_check.sh - one device call: the MoE GPU tests, then loom-bench moe
# (every shape, --reps 10, each rank killed after 240 s). From the
# repository root, after bench/pack_build.sh; results under $OUT. (The
# first such run also ran a mutant of the combine, built apart, that the
# tests failed: bench/results/h100x2-20261126-moe-first/.)
#   TESTS   loom-test-gpu filter (default gpu_moe; "none" skips the tests)
#   build/carry/before.tar.xz, when carried: a previous build's
#           build/bin/loom-bench (and COMMIT), run in the same call after
#           this build's, its JSON under $OUT/before (--peer none for both);
#           this build then runs a second time with LOOM_BENCH_HOLD=0
#           (JSON under $OUT/nohold), the harness of builds before that
#           setting
#   TRACE=1 a last quick pass at LOOM_DEBUG=TRACE: the dispatch's and
#           combine's phase stamps of each shape's last call
tar xJf build/carry/build.tar.xz
export NCCL_NVLS_ENABLE=0
out=${OUT:-/tmp}
if [ "${TESTS:-gpu_moe}" != none ]; then
  echo "=== ${TESTS:-gpu_moe}"; timeout 300 build/tests/loom-test-gpu ${TESTS:-gpu_moe} 2>&1 | tail -25
fi
peer=""
if [ -f build/carry/before.tar.xz ]; then
  mkdir -p /tmp/before "$out/before" "$out/nohold" && tar xJf build/carry/before.tar.xz -C /tmp/before
  peer="--peer none"
fi
echo "=== bench ($(cat build/carry/COMMIT 2>/dev/null))"
build/bin/loom-bench moe --reps 10 --timeout 240 $peer --results "$out" 2>&1 | grep "^# moe"
if [ -x /tmp/before/build/bin/loom-bench ]; then
  echo "=== bench, LOOM_BENCH_HOLD=0"
  LOOM_BENCH_HOLD=0 build/bin/loom-bench moe --reps 10 --timeout 240 --peer none --results "$out/nohold" 2>&1 | grep "^# moe"
  echo "=== bench before ($(cat /tmp/before/COMMIT 2>/dev/null))"
  /tmp/before/build/bin/loom-bench moe --reps 10 --timeout 240 --peer none --results "$out/before" 2>&1 | grep "^# moe"
fi
if [ "${TRACE:-0}" = 1 ]; then
  echo "=== phases (LOOM_DEBUG=TRACE)"
  LOOM_DEBUG=TRACE build/bin/loom-bench moe --quick --timeout 240 --peer none --results /tmp 2>&1 | grep -E "^# moe|moe (dispatch|combine) rank"
fi
