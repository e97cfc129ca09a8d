#!/usr/bin/env bash
# device_call.sh FOLDER N: device call N of a bench/results folder, on the
# device machine from the repository root: the carried binaries unpacked
# (build/carry/build.tar.xz); FOLDER/callN-jobs.txt's one-GPU jobs spread
# over the GPUs present by bench/diag/lanes.sh under a deadline (DEADLINE,
# default 550 s); then FOLDER/callN-after.sh (steps that need every GPU);
# then the tables (hook-idle per TP, loom-bench gemm's summaries,
# before/after, GPU test counts) and $OUT/results.tgz. Jobs and after-steps
# see O ($OUT/r), where their outputs go. The after-steps stop at TOTAL
# (default 570 s) after the start, so that the tables and the archive are
# made before the device tool's limit (it returns few loose files).
set -u
here=$(cd "${1:?usage: device_call.sh FOLDER N}" && pwd)
n=${2:?usage: device_call.sh FOLDER N}
cd "$here/../../.."
start=$(date +%s)
export CALL_START=$start # after-steps may budget their own limits from it
tar xJf build/carry/build.tar.xz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 LD_LIBRARY_PATH=$PWD/build/lib
export O=${OUT:-/tmp/out}/r
mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/machine.txt 2>&1
bash bench/diag/lanes.sh "$here/call$n-jobs.txt" $O ${DEADLINE:-550}
# then what needs every GPU at once (callN-after.sh, when there is one)
left=$(( ${TOTAL:-570} - ($(date +%s) - start) - 15 ))
[ -f "$here/call$n-after.sh" ] && { timeout $(( left > 10 ? left : 10 )) bash "$here/call$n-after.sh";
                                   echo "after-steps rc=$? (limit ${left} s)"; }
[ -d $O/ab/before ] && python3 bench/compare_builds.py $O/ab/before $O/ab/after --json $O/compare_builds.json > $O/compare_builds.txt 2>&1 &&
  tail -30 $O/compare_builds.txt
for l in $O/t-*.log $O/w2-*.log; do
  [ -f "$l" ] && echo "$(basename $l .log): $(grep -E 'passed, ' "$l" | tr '\n' ' ')$(grep -E '^\[ FAIL' "$l" | tr '\n' ' ')"
done
for d in $O/*/; do
  for j in $d/ag_gemm-*.json $d/gemm_rs-*.json; do
    [ -f "$j" ] && python3 bench/diag/hook_idle_table.py "$j" > $O/hook-idle-$(basename $d).txt 2>&1 &&
      { echo "== $(basename $d)"; tail -4 $O/hook-idle-$(basename $d).txt; }
  done
done
for l in $O/gemm-*.log; do [ -f "$l" ] && { echo "== $(basename $l)"; grep -E "^# (fitting|held-out|new families|all)" "$l" | head -12; }; done
cd ${OUT:-/tmp/out} && tar czf results.tgz r && ls -la results.tgz
