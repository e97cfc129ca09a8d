#!/usr/bin/env bash
# moe_check.sh - one device call: the MoE GPU tests, then loom-bench moe
# (every shape, --reps 10, each rank killed after 240 s). From the
# repository root, after bench/pack_build.sh; results under $OUT. (The
# first such run also ran a mutant of the combine, built apart, that the
# tests failed: bench/results/h100x2-20261126-moe-first/.)
tar xJf build/carry/build.tar.xz
export NCCL_NVLS_ENABLE=0
echo "=== gpu_moe"; timeout 200 build/tests/loom-test-gpu gpu_moe 2>&1 | tail -25
echo "=== bench"; build/bin/loom-bench moe --reps 10 --timeout 240 --results "${OUT:-/tmp}" 2>&1 | tail -45
