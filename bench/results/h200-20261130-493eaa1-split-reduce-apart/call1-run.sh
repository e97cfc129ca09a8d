#!/usr/bin/env bash
# call 1: split-K reduced apart. GPU tests, 20 narrow shapes (LOOM_DEV_SKR=2), the fitting mid set (SKR=1)
set -u
cd "$(dirname "$0")/../.."
tar xJf build/carry1/all.tar.xz
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}; mkdir -p $O/r
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > $O/r/smi.txt 2>&1
( timeout 150 build/tests/loom-test-gpu split_k; timeout 80 build/tests/loom-test-gpu stream_k ) > $O/r/gpu-test.log 2>&1
echo "gpu-test rc=$?" ; grep -E "^(PASS|FAIL|ok|not ok)|passed|failed|reduced apart" $O/r/gpu-test.log | tail -30
SH="64,768,4096 512,768,4096 2048,768,4096 64,1280,8192 512,1280,8192 2048,1280,8192 64,1024,6144 512,1024,6144 64,1280,4096 512,1280,4096 512,2304,16384 64,3584,4096 512,3584,4096 2048,1024,6144 2048,1280,4096 2048,2304,16384 8192,1280,8192 1024,768,4096 4096,1024,6144 2048,3584,4096"
for s in $SH; do IFS=, read m n k <<< "$s"; LOOM_DEV_SKR=2 timeout 60 build/dev/gemm/bench_gemm_dev shape $m $n $k nk $O/r/shape-$m-$n-$k.json; done > $O/r/dev-narrow.log 2>&1
python3 build/carry1/summ.py $O/r/dev-narrow.log | tee $O/r/narrow-summary.txt
LOOM_DEV_SKR=1 REPS=6 timeout 220 build/dev/gemm/bench_gemm_dev mid $O/r/mid.json > $O/r/dev-mid.log 2>&1; echo "mid rc=$?"
tail -25 $O/r/dev-mid.log
cd $O && tar czf results.tgz r && ls -la results.tgz
