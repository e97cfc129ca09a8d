#!/usr/bin/env bash
# gpu_test_split.sh - make gpu-test (every test of loom-test-gpu) on a machine of two or more GPUs in less
# wall time, in three parts:
#   two     the two-GPU tests (names with "_w2" or "_2gpu", the one-GPU worlds' apart), every GPU visible;
#   worlds  the one-GPU worlds (W ranks as threads on one GPU), in one-GPU lanes, one job a GPU at a time;
#   rest    every other test, in one-GPU lanes, REST_SLOTS jobs a GPU at a time (default 1; their time is
#           mostly their CPU references, so more than one job a GPU shortens the part).
# bench/diag/lanes.sh runs the lanes; JOB_TESTS names a job. Then the counts, the failures, and the names of
# the parts asked for that never finished.
#
#   bash bench/diag/gpu_test_split.sh OUTDIR [W2_LIMIT_S] [LANES_DEADLINE_S]
#
# Defaults: 600 s for the two-GPU part, 1200 s for the lanes (both lane parts, from the first's start);
# PARTS (default "two,worlds,rest"), LOOM_TEST_GPU (default build/tests/loom-test-gpu), JOB_TESTS
# (default 6). On one GPU the two-GPU part is skipped (named).
set -u
export LC_ALL=C # one order for sort and comm
out=${1:?usage: gpu_test_split.sh OUTDIR [W2_LIMIT_S] [LANES_DEADLINE_S]}
w2_limit=${2:-600} lanes_deadline=${3:-1200}
T=${LOOM_TEST_GPU:-build/tests/loom-test-gpu}
per=${JOB_TESTS:-6} parts=,${PARTS:-two,worlds,rest},
two_gpu='_w2,_2gpu,!world' # the two-GPU tests' filter (loom-test-gpu's forms)
mkdir -p "$out"
"$T" --list > /dev/null || { echo "gpu_test_split: $T --list failed" >&2; exit 1; }
# each part's names (a filter with no match lists nothing)
"$T" --list "$two_gpu" > "$out/two-names.txt"
"$T" --list world > "$out/worlds-names.txt"
"$T" --list '!_w2,!_2gpu,!world' > "$out/rest-names.txt"
: > "$out/all-names.txt"
for p in two worlds rest; do
  case $parts in *,$p,*) cat "$out/$p-names.txt" >> "$out/all-names.txt" ;; esac
done
sort -u -o "$out/all-names.txt" "$out/all-names.txt"
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
case $parts in *,two,*)
  if [ "$gpus" -ge 2 ]; then
    timeout "$w2_limit" "$T" "$two_gpu" > "$out/two-gpu.log" 2>&1
    echo "two-GPU part rc=$?"
  else
    echo "two-GPU part: skipped ($gpus GPU visible)"
  fi ;;
esac
# NAMEFILE PREFIX -> a job file of JOB_TESTS names a job on stdout
jobs_of() {
  awk -v per="$per" -v t="$T" -v pre="$2" '
    { names[NR] = $0 }
    END {
      for (i = 1; i <= NR; i += per) {
        f = ""
        for (j = i; j < i + per && j <= NR; ++j) f = f (f == "" ? "" : ",") "=" names[j]
        printf "%s-%03d %d %s %c%s%c\n", pre, (i - 1) / per, 900, t, 39, f, 39
      }
    }' "$1"
}
t0=$(date +%s)
case $parts in *,worlds,*)
  jobs_of "$out/worlds-names.txt" worlds > "$out/worlds-jobs.txt"
  LANE_SLOTS=1 bash "$(dirname "$0")/lanes.sh" "$out/worlds-jobs.txt" "$out" "$lanes_deadline" > /dev/null ;;
esac
case $parts in *,rest,*)
  left=$(( lanes_deadline - ($(date +%s) - t0) ))
  jobs_of "$out/rest-names.txt" rest > "$out/rest-jobs.txt"
  LANE_SLOTS=${REST_SLOTS:-1} bash "$(dirname "$0")/lanes.sh" "$out/rest-jobs.txt" "$out" $(( left > 0 ? left : 0 )) > /dev/null ;;
esac
# counts, failures, and what never finished
cat "$out"/two-gpu.log "$out"/worlds-*.log "$out"/rest-*.log 2>/dev/null > "$out/all.log"
ok=$(grep -c '^\[  OK  \]' "$out/all.log") fail=$(grep -c '^\[ FAIL \]' "$out/all.log") skip=$(grep -c '^\[ SKIP \]' "$out/all.log")
echo "make gpu-test (split, parts ${parts:1:-1}): $ok passed, $fail failed, $skip skipped"
grep '^\[ FAIL \]' "$out/all.log"
grep -E '^\[(  OK  | FAIL | SKIP )\] ' "$out/all.log" | cut -c10- | sed 's/: .*//' | sort -u > "$out/finished.txt"
comm -23 "$out/all-names.txt" "$out/finished.txt" > "$out/unfinished.txt"
echo "not finished (never started, or cut by a limit): $(wc -l < "$out/unfinished.txt") of $(wc -l < "$out/all-names.txt")"
head -20 "$out/unfinished.txt"
