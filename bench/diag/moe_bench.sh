#!/usr/bin/env bash
# moe_bench.sh - one device call: loom-bench moe with its PyTorch peer
# (every shape, --reps 10, ranks killed after 300 s). From the repository
# root, after bench/pack_build.sh; results under $OUT.
tar xJf build/carry/build.tar.xz
export NCCL_NVLS_ENABLE=0
python3 -c 'import torch; print("torch", torch.__version__)' 2>&1 | tail -1
build/bin/loom-bench moe --reps 10 --timeout 300 --results "${OUT:-/tmp}" 2>&1 | tail -60
