#!/usr/bin/env bash
# ab_suite.sh - one loom-bench suite in two builds, one after the other on
# the same GPU, for a before/after table (bench/compare_builds.py).
#
#   bash bench/diag/ab_suite.sh BEFORE_DIR AFTER_DIR OUTDIR FIRST SUITE [ARGS...]
#
# BEFORE_DIR / AFTER_DIR: bench/build_before.sh-style folders holding
# bin/loom-bench (and COMMIT). FIRST: "before" or "after", which build runs
# first (alternate it from suite to suite). JSON to OUTDIR/before and
# OUTDIR/after, logs beside them. Neither build runs its PyTorch peers
# (LOOM_BENCH_PEERS points nowhere): the two runs time loom and its own
# baselines only.
set -u
before=${1:?usage}; after=${2:?usage}; out=${3:?usage}; first=${4:?usage}; suite=${5:?usage}
shift 5
one() { # NAME DIR ARGS...: the suite in the build of DIR
  local name=$1 dir=$2 rc
  shift 2
  mkdir -p "$out/$name"
  env -C "$dir" LOOM_BENCH_RESULTS_DIR="$out/$name" LOOM_BENCH_PEERS=/nonexistent \
    "$dir/bin/loom-bench" "$suite" "$@" > "$out/$name/$suite.log" 2>&1
  rc=$?
  echo "$suite $name ($(cat "$dir/COMMIT" 2>/dev/null || echo ?)) rc=$rc"
}
if [ "$first" = before ]; then
  one before "$before" "$@"; one after "$after" "$@"
else
  one after "$after" "$@"; one before "$before" "$@"
fi
