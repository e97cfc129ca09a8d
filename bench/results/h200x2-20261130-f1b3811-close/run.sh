#!/usr/bin/env bash
# run.sh N: device call N of this folder: its jobs (callN-jobs.txt) spread over the GPUs present by
# bench/diag/lanes.sh, under a 550 s deadline; then the tables (hook-idle per TP; loom-bench gemm's summaries)
set -u
n=${1:?usage: run.sh N}
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
tar xJf build/carry/build.tar.xz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 LD_LIBRARY_PATH=$PWD/build/lib
export O=${OUT:-/tmp/out}/r
mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit --format=csv > $O/machine.txt 2>&1
bash bench/diag/lanes.sh "$here/call$n-jobs.txt" $O ${DEADLINE:-550}
for d in $O/*/; do
  for j in $d/ag_gemm-*.json $d/gemm_rs-*.json; do
    [ -f "$j" ] && python3 bench/diag/hook_idle_table.py "$j" > $O/hook-idle-$(basename $d).txt 2>&1 &&
      { echo "== $(basename $d)"; tail -4 $O/hook-idle-$(basename $d).txt; }
  done
done
for l in $O/gemm-*.log; do [ -f "$l" ] && { echo "== $(basename $l)"; grep -E "^# (fitting|held-out|new families|all)" "$l" | head -12; }; done
cd ${OUT:-/tmp/out} && tar czf results.tgz r && ls -la results.tgz
