#!/usr/bin/env bash
# world_chase.sh - one device call that chases the one-GPU world's failures
# (docs/world.md): the hardware-queue probe, the host-call probe's graph
# rows, one failing case of a world test under several settings, each in
# its own log under $OUT (default /tmp/world_chase), a table last.
#
#   bash bench/diag/world_chase.sh [step ...]
# steps (default: all of them, in this order):
#   queues     dev/world/queues_probe under CUDA_DEVICE_MAX_CONNECTIONS 8 and 32
#   graphrows  host_calls_probe's graph and device-to-device copy rows
#   agcase     gpu_world_tp_ag_gemm_matches_reference_w8's copy-engine graph
#              case alone (LOOM_TEST_CASES=$AGCASE, default 13) under: the
#              default settings, 32 connections, 32 connections at 25 % and
#              100 % of the SMs; step times on (LOOM_TEST_STEP_TIMES=1)
#   pipeline   gpu_world_lang_pipeline_w8 under the default connections
# Binaries come built (build/, e.g. from a carried archive); nothing is built.
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/world_chase}
mkdir -p "$out"
steps=${*:-"queues graphrows agcase pipeline"}
table="$out/table.txt"
: > "$table"
t=build/tests/loom-test-gpu
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

row() { printf '| %s | %s | %s |\n' "$1" "$2" "$3" | tee -a "$table"; }

# run NAME TIMEOUT ENV... -- ARGS: one test process, its log, a table row
run() {
  local name=$1 tmo=$2
  shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local t0=$SECONDS
  env "${envs[@]}" timeout "$tmo" "$t" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  row "$name" "rc=$rc ($(grep -Eo '[0-9]+ passed, [0-9]+ failed' "$out/$name.log" | tail -1))" "$((SECONDS - t0)) s"
}

for s in $steps; do
  case $s in
    queues)
      for c in 8 32; do
        n=40
        [ "$c" = 32 ] && n=72
        CUDA_DEVICE_MAX_CONNECTIONS=$c timeout 120 build/dev/world/queues_probe 200 $n > "$out/queues_$c.txt" 2>&1
        row "queues_probe, $c connections" "rc=$?" "$(awk -F'|' '/ of /{split($3,a," "); if (a[1] != a[3]) n++} END {print n+0}' "$out/queues_$c.txt") busy rows where a spin expired"
      done ;;
    graphrows)
      timeout 60 build/dev/world/host_calls_probe 1000 "copy node" > "$out/graphrows.txt" 2>&1
      timeout 60 build/dev/world/host_calls_probe 1000 "D2D" >> "$out/graphrows.txt" 2>&1
      row "host_calls_probe graph rows" "rc=$?" "" ;;
    agcase)
      c=${AGCASE:-13}
      common=(LOOM_TEST_CASES=$c LOOM_TEST_TIMEOUT_MS=3000 LOOM_TEST_STEP_TIMES=1)
      f=gpu_world_tp_ag_gemm_matches_reference_w8
      run ag_default 90 "${common[@]}" -- "$f"
      run ag_conn32 90 "${common[@]}" CUDA_DEVICE_MAX_CONNECTIONS=32 -- "$f"
      run ag_conn32_sm25 90 "${common[@]}" CUDA_DEVICE_MAX_CONNECTIONS=32 LOOM_WORLD_SM_PERCENT=25 -- "$f"
      run ag_conn32_sm100 90 "${common[@]}" CUDA_DEVICE_MAX_CONNECTIONS=32 LOOM_WORLD_SM_PERCENT=100 -- "$f"
      run ag_w4_default 90 "${common[@]}" -- gpu_world_tp_ag_gemm_matches_reference_w4 ;;
    pipeline)
      run pipeline_w8_default 150 LOOM_TEST_STEP_TIMES=1 -- gpu_world_lang_pipeline_w8 ;;
    *) echo "world_chase: unknown step $s" >&2; exit 2 ;;
  esac
done
echo "--- $table"
cat "$table"
