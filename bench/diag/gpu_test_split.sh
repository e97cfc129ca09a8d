#!/usr/bin/env bash
# gpu_test_split.sh - make gpu-test (every test of loom-test-gpu) on a machine of two or more GPUs in less
# wall time: the two-GPU tests (names ending "_w2", the one-GPU worlds' apart) first with every GPU
# visible, then every other test in one-GPU lanes (bench/diag/lanes.sh: each GPU runs a job at a time),
# JOB_TESTS names a job. Then the counts of each part, the failures, and the names that never ran.
#
#   bash bench/diag/gpu_test_split.sh OUTDIR [W2_LIMIT_S] [LANES_DEADLINE_S]
#
# Defaults: 600 s for the two-GPU part, 1200 s for the lanes; LOOM_TEST_GPU (default
# build/tests/loom-test-gpu), JOB_TESTS (default 6). On one GPU the two-GPU part is skipped (named).
set -u
export LC_ALL=C # one order for sort and comm
out=${1:?usage: gpu_test_split.sh OUTDIR [W2_LIMIT_S] [LANES_DEADLINE_S]}
w2_limit=${2:-600} lanes_deadline=${3:-1200}
T=${LOOM_TEST_GPU:-build/tests/loom-test-gpu}
per=${JOB_TESTS:-6}
mkdir -p "$out"
"$T" --list > "$out/all-names.txt" || { echo "gpu_test_split: $T --list failed" >&2; exit 1; }
sort -o "$out/all-names.txt" "$out/all-names.txt"
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
if [ "$gpus" -ge 2 ]; then
  timeout "$w2_limit" "$T" '_w2,!world' > "$out/two-gpu.log" 2>&1
  echo "two-GPU part rc=$?"
else
  echo "two-GPU part: skipped ($gpus GPU visible)"
fi
# the rest: the worlds (one GPU each, whatever their W) and every name without "_w2"
{ "$T" --list world; "$T" --list '!_w2,!world'; } | sort -u > "$out/one-gpu-names.txt"
awk -v per="$per" -v t="$T" '
  { names[NR] = $0 }
  END {
    for (i = 1; i <= NR; i += per) {
      f = ""
      for (j = i; j < i + per && j <= NR; ++j) f = f (f == "" ? "" : ",") "=" names[j]
      printf "job-%03d %d %s %c%s%c\n", (i - 1) / per, 900, t, 39, f, 39
    }
  }' "$out/one-gpu-names.txt" > "$out/jobs.txt"
bash "$(dirname "$0")/lanes.sh" "$out/jobs.txt" "$out" "$lanes_deadline" > /dev/null
# counts, failures, and what never started
cat "$out"/two-gpu.log "$out"/job-*.log 2>/dev/null > "$out/all.log"
ok=$(grep -c '^\[  OK  \]' "$out/all.log") fail=$(grep -c '^\[ FAIL \]' "$out/all.log") skip=$(grep -c '^\[ SKIP \]' "$out/all.log")
echo "make gpu-test (split): $ok passed, $fail failed, $skip skipped"
grep '^\[ FAIL \]' "$out/all.log"
grep -E '^\[(  OK  | FAIL | SKIP )\] ' "$out/all.log" | cut -c10- | sed 's/: .*//' | sort -u > "$out/finished.txt"
comm -23 "$out/all-names.txt" "$out/finished.txt" > "$out/unfinished.txt"
echo "not finished (never started, or cut by a limit): $(wc -l < "$out/unfinished.txt") of $(wc -l < "$out/all-names.txt")"
head -20 "$out/unfinished.txt"
