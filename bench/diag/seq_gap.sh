#!/usr/bin/env bash
# seq_gap.sh - one device call: loom's sequential path against the
# benchmark's sequential baseline on a few shapes where they differed, with
# the stage trace of loom's calls (LOOM_DEBUG=TRACE), and the fused paths'
# check at one shape (the bench prints the first elements it counts wrong).
# Run from the repository root on the device machine, after unpacking the
# carried build (bench/pack_build.sh); output under ${OUT:-/tmp}.
set -u
export NCCL_NVLS_ENABLE=0
B=build/bin/loom-bench
o=${OUT:-/tmp}
run() { # name, then loom-bench arguments
  local name=$1; shift
  echo "=== $name: $*"
  "$B" "$@" --peer none --no-json > "$o/$name.log" 2>&1
  echo "rc=$?"
  grep -E '^# (ag_gemm|gemm_rs) loom-|rank [0-9]+:' "$o/$name.log" | cut -c1-250 | head -24
}
run check-falcon gemm_rs --layer Falcon-180B/o --tp 4 --m 8192 --set all --quick
for rep in 1 2; do
  run rs-mixtral-$rep gemm_rs --layer Mixtral-8x22B/o --tp 8 --m 512 --set all --reps 60
  run ag-deepseek-$rep ag_gemm --layer DeepSeek-V3/q_b --tp 2 --m 64 --set all --reps 60
done
LOOM_DEBUG=TRACE run trace-rs gemm_rs --layer Mixtral-8x22B/o --tp 8 --m 512 --set all --reps 60
grep SEQUENTIAL "$o/trace-rs.log" | tail -8 | cut -c1-300
LOOM_DEBUG=TRACE run trace-ag ag_gemm --layer DeepSeek-V3/q_b --tp 2 --m 64 --set all --reps 60
grep SEQUENTIAL "$o/trace-ag.log" | tail -8 | cut -c1-300
