#!/usr/bin/env bash
# lanes.sh - one-GPU jobs spread over the GPUs present: each GPU runs one
# job at a time (CUDA_VISIBLE_DEVICES set to it; LANE_SLOTS jobs at a time,
# default 1, for jobs that leave the GPU idle, such as tests whose time is
# their CPU reference) and takes the next job of the list when its job ends,
# so W = 1 benchmarks of one device call run side by side on a machine of
# several GPUs. No job starts after the deadline; each job runs under its
# own timeout.
#
#   bash bench/diag/lanes.sh JOBFILE OUTDIR [DEADLINE_S]
#
# JOBFILE: one job a line, "NAME TIMEOUT_S COMMAND..." (# comments and
# blank lines skipped); longest first balances best. Each job's stdout and
# stderr go to OUTDIR/NAME.log; a line "NAME gpu G rc R start S end E" per
# job goes to OUTDIR/lanes.txt (seconds from the start), and to stdout.
set -u
jobs=${1:?usage: lanes.sh JOBFILE OUTDIR [DEADLINE_S]}
out=${2:?usage: lanes.sh JOBFILE OUTDIR [DEADLINE_S]}
deadline=${3:-100000}
mkdir -p "$out"
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tr -d ' ')
[ -n "$gpus" ] || { echo "lanes.sh: no GPU found (nvidia-smi)" >&2; exit 1; }
grep -vE '^\s*(#|$)' "$jobs" > "$out/.queue"
echo 0 > "$out/.next"
t0=$(date +%s)

# The next job's line, or nothing: one taker at a time (flock on the queue).
take() {
  (
    flock 9
    local i line
    i=$(cat "$out/.next")
    line=$(sed -n "$((i + 1))p" "$out/.queue")
    [ -n "$line" ] && echo $((i + 1)) > "$out/.next"
    echo "$line"
  ) 9> "$out/.lock"
}

lane() {
  local g=$1 line name lim cmd s rc
  while :; do
    [ $(( $(date +%s) - t0 )) -ge "$deadline" ] && return
    line=$(take)
    [ -n "$line" ] || return
    read -r name lim cmd <<< "$line"
    s=$(( $(date +%s) - t0 ))
    [ $(( s + lim )) -gt "$deadline" ] && lim=$(( deadline - s ))
    CUDA_VISIBLE_DEVICES=$g timeout "$lim" bash -c "$cmd" > "$out/$name.log" 2>&1
    rc=$?
    echo "$name gpu $g rc $rc start $s end $(( $(date +%s) - t0 ))" | tee -a "$out/lanes.txt"
  done
}

slots=${LANE_SLOTS:-1}
for g in $gpus; do for ((s = 0; s < slots; ++s)); do lane "$g" & done; done
wait
rm -f "$out/.queue" "$out/.next" "$out/.lock"
