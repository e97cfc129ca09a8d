#!/usr/bin/env bash
# fuzz.sh [SECONDS] - fuzzes the language (parser, checker, printer,
# transformations, interpreter) with libFuzzer (clang's, from the
# distribution's clang package) under AddressSanitizer and UBSan, for
# SECONDS (default 600), from tests/host/lang/fuzz_corpus and the examples.
# New inputs that cover new code go to build/fuzz_lang/corpus; a finding
# stops the run and is saved as build/fuzz_lang/crash-*: add it to
# tests/host/lang/fuzz_corpus/ once fixed (the host suite runs that corpus).
# Run from the repository root after `make` (libloom.a).
set -eu
secs=${1:-600}
out=build/fuzz_lang
mkdir -p "$out/corpus"
cuda=${CUDA_HOME:-/usr/local/cuda}
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -std=c11 \
  -I. -Iinclude -Isrc -I/usr/local/include -I"$cuda/include" \
  dev/lang/fuzz_lang.c src/lang/*.c build/lib/libloom.a -o "$out/fuzz_lang" \
  -L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" -lnccl -lcublasLt -lcublas -lnvrtc -lcudart -lpthread -lm -ldl -lstdc++
cp tests/host/lang/fuzz_corpus/* examples/lang/*.loom "$out/corpus/" 2>/dev/null || true
cd "$out"
./fuzz_lang -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 corpus
