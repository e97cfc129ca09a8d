#!/usr/bin/env bash
# moe_world_check.sh - the MoE one-GPU world's intermittent failure (docs/world.md, "The MoE worlds'
# intermittent failure"), checked after its fixes: the W = 8 layer suite under the conditions that failed
# (the first process on a fresh machine's GPUs; device memory filled with 0xff first), with the combine's
# world cap (LOOM_MOE_WORLD_COMB_PER_SM=1, the default) and without it (0), at SM shares of 25, 50 and
# 100 %; then the whole MoE world suite under 0xff. One-GPU lanes (bench/diag/lanes.sh); waits bounded at
# 8 s so that a failing run is short. Then a line per variant: runs, passed.
#
#   bash bench/diag/moe_world_check.sh OUTDIR [DEADLINE_S]     (default 400)
#
# Run it first on a fresh machine: the first two jobs are each GPU's first process.
set -u
out=${1:?usage: moe_world_check.sh OUTDIR [DEADLINE_S]}
deadline=${2:-400}
T=${LOOM_TEST_GPU:-build/tests/loom-test-gpu}
M==gpu_world_moe_mlp_matches_reference_w8
mkdir -p "$out"
jobs=$out/moe-world-jobs.txt
: > "$jobs"
add() { # VARIANT COUNT ENV...
  local v=$1 n=$2 i
  shift 2
  for ((i = 1; i <= n; ++i)); do echo "$v-$i 90 LOOM_TEST_TIMEOUT_MS=8000 $* $T $M" >> "$jobs"; done
}
add fresh-cap1 2 ""
add p255-cap1 4 LOOM_TEST_POISON_DEVICE=255
add p255-cap0 4 LOOM_TEST_POISON_DEVICE=255 LOOM_MOE_WORLD_COMB_PER_SM=0
add p255-cap0-share25 2 LOOM_TEST_POISON_DEVICE=255 LOOM_MOE_WORLD_COMB_PER_SM=0 LOOM_WORLD_SM_PERCENT=25
add p255-cap0-share100 2 LOOM_TEST_POISON_DEVICE=255 LOOM_MOE_WORLD_COMB_PER_SM=0 LOOM_WORLD_SM_PERCENT=100
add p255-cap1-share100 2 LOOM_TEST_POISON_DEVICE=255 LOOM_WORLD_SM_PERCENT=100
echo "suite-p255-1 240 LOOM_TEST_POISON_DEVICE=255 $T gpu_world_moe" >> "$jobs"
bash "$(dirname "$0")/lanes.sh" "$jobs" "$out" "$deadline" > /dev/null
for v in $(sed 's/-[0-9]* .*//' "$jobs" | uniq); do
  runs=0 ok=0
  for l in "$out/$v"-[0-9]*.log; do
    [ -f "$l" ] || continue
    runs=$((runs + 1))
    grep -q ' 0 failed' "$l" && ! grep -q '^\[ FAIL' "$l" && ok=$((ok + 1))
  done
  echo "$v: $ok of $runs passed"
done
