#!/usr/bin/env bash
# fuzz.sh [SECONDS] - fuzzes the door: every op's plan entry (the description's
# checks, and on a valid one the door's host steps) on descriptions built
# from the input, on test comms of 1..64 ranks without a GPU, with libFuzzer
# (clang's) under AddressSanitizer and UBSan, for SECONDS (default 600), from
# tests/host/core/door_corpus. New inputs that cover new code go to
# build/fuzz_door/corpus; a finding stops the run and is saved as
# build/fuzz_door/crash-*: add it to tests/host/core/door_corpus/ once fixed
# (the host suite runs that corpus). Run from the repository root after
# `make` (build/lib/libloom.a).
set -eu
secs=${1:-600}
out=build/fuzz_door
mkdir -p "$out/corpus"
cuda=${CUDA_HOME:-/usr/local/cuda}
# the host code under the sanitizers; the kernels' objects (nvcc's) from libloom.a
srcs="src/core/*.c src/baseline/*.c src/gemm/*.c src/ops/*/*.c src/testing/hooks.c"
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -std=c11 \
  -I. -Iinclude -Isrc -I/usr/local/include -I"$cuda/include" \
  dev/door/fuzz_door.c $srcs build/lib/libloom.a -o "$out/fuzz_door" \
  -L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" -lnccl -lcublasLt -lcublas -lnvrtc -lcudart -lcuda -lpthread -lm -ldl -lstdc++
cp tests/host/core/door_corpus/* "$out/corpus/" 2>/dev/null || true
cd "$out"
./fuzz_door -max_total_time="$secs" -max_len=512 -timeout=10 -rss_limit_mb=2048 corpus
