#!/usr/bin/env bash
# device.sh - everything one run on a GPU machine does, in one command:
# record the machine, build (or unpack a carried build), then the steps asked
# for: the GPU tests, the loom-bench suites, the GEMM engine's dev benchmark,
# the examples, the Python binding's GPU steps; each step's output in its own
# log, the logs and JSON in one archive in $OUT (when set), a short summary
# last. It assumes nothing of the machine: any number of GPUs, no time limit
# unless one is asked for, the repository as the working directory.
#
#   bash bench/device.sh [filters]
# filters: GPU test-name substrings separated by commas, each run in turn
#   ("gpu_tp,gpu_coll"; "!gemm" excludes; default: the whole GPU suite;
#   "none": no GPU tests).
#
# Environment (all optional):
#   LOOM_PRESET        defaults for a kind of run (each variable below that is
#                      set explicitly wins over the preset):
#                        gemm    the GEMM engine: GPU tests "gemm", the dev
#                                benchmark on every set (LOOM_DEV_GEMM=all),
#                                loom-bench gemm --quick, no examples
#                                (CUDA_VISIBLE_DEVICES=0 for one GPU)
#                        tp-auto AUTO of ag_gemm / gemm_rs on shapes it was not fitted
#                                to: --set $LOOM_TP_SET (held-out) --sample
#                                $LOOM_TP_SAMPLE (60) [--tp $LOOM_TP_SPLIT] --quick,
#                                then bench/tp_auto_check.py's table
#                        python  the Python binding: no C GPU tests and no
#                                suites; the NCCL probe, pytest tests/python/gpu,
#                                examples/python/dlrm_embedding.py --steps 5
#                                under torchrun, the binding's call overhead
#   LOOM_COMMIT        commit being tested (default: the carried build's COMMIT file,
#                      else git rev-parse, else unknown)
#   LOOM_BENCH_SUITES  loom-bench suites, space-separated ("none" to skip; default all)
#   LOOM_BENCH_ARGS    passed to every loom-bench suite, e.g. "--quick"
#   LOOM_BENCH_ARGS_<suite>  passed to that suite only, after LOOM_BENCH_ARGS,
#                      e.g. LOOM_BENCH_ARGS_allreduce="--max-bytes 4M"
#   LOOM_BEFORE        a directory from bench/build_before.sh holding the previous
#                      build's libloom.so.0: the embedding_a2a suite times it side by side
#   LOOM_BEFORE_BENCH  a directory holding a previous build's loom-bench (bin/loom-bench,
#                      and COMMIT): every suite runs in both builds, one after the other
#                      (the order alternating from suite to suite), the previous one's
#                      JSON in before/; bench/compare_builds.py prints them row by row
#                      (compare_builds.txt). Its PyTorch peers are not run.
#   LOOM_MUTANTS_RUN=1 after the GPU tests, the kernels with one wait removed
#                      (tests/gpu/mutants.sh run: each must fail its world test);
#                      carried as mutants.tar.xz beside LOOM_CARRY_TAR
#                      (LOOM_PACK_MUTANTS=1 bench/pack_build.sh), else built here
#   LOOM_DEV_GEMM      run build/dev/gemm/bench_gemm_dev on this set (all, decode, ...;
#                      its JSON is bench_dev.json); LOOM_DEV_REPS its REPS (default 10)
#   LOOM_EXAMPLES=0    skip examples/tp_mlp (run on every GPU when built or carried)
#   LOOM_PYTEST        pytest arguments for the Python GPU tests ("" skips them),
#                      e.g. "tests/python/gpu/test_tp_gpu.py"
#   LOOM_TORCHRUN      Python scripts run with torchrun ("" skips): space-separated
#                      scripts, or "script args; script args" (;-separated, each
#                      with its arguments; one command with arguments needs no ';'),
#                      e.g. "examples/python/tp_mlp.py"
#   LOOM_TORCHRUN_NPROC  processes per torchrun (default: every GPU present)
#   LOOM_PYTHON        Python scripts run with python3, "script args; script args",
#                      e.g. "python/tools/nccl_probe.py --timeout 45"
#   LOOM_PREBUILT=1    use the build/ binaries as they are (carried): no make unless
#                      a carried binary does not start here (then it is rebuilt)
#   LOOM_CARRY_TAR     a tar.xz of build/ binaries (bench/pack_build.sh) unpacked
#                      first; implies LOOM_PREBUILT=1
#   LOOM_MAKE_JOBS     make -j (default: the CPUs present); LOOM_NVCC_THREADS=N
#                      builds with nvcc --threads N
#   LOOM_STEP_TIMEOUT  seconds each step may take (default: no limit): a stuck step
#                      fails alone and the later ones still run. Per kind of step,
#                      overriding it: LOOM_STEP_TIMEOUT_<KIND>, KIND one of TESTS
#                      (each GPU test filter), BENCH (each suite), DEV, EXAMPLES,
#                      PYTEST (also LOOM_PYTEST_TIMEOUT), TORCHRUN, PYTHON. (The GPU
#                      tests also bound each test process: LOOM_TEST_TIMEOUT_S.)
#   LOOM_DEADLINE      seconds from the start after which no step runs (default: none);
#                      each step's limit is cut to what is left, so the archive
#                      comes back before an outside limit of the machine
#   LOOM_TEST_SUMMARY  an extra grep -E pattern for the GPU-test lines of the summary
#   LOOM_BENCH_TAIL    lines of each suite's log in the summary (default 12)
#   OUT                where results.tgz and summary.txt go; LOOM_OUT_FILES=1 also
#                      copies every log and JSON there as loose files
# NCCL_NVLS_ENABLE, TORCH_SYMM_MEM_DISABLE_MULTICAST and NVSHMEM_DISABLE_NVLS
# default to keeping NVLink multicast off (loom never uses it); a value the
# caller set is kept. loom-bench's suites run their PyTorch peers
# (bench/peers/*.py) themselves, in the same job.
set -u
: "${LOOM_STEP_TIMEOUT_PYTEST:=${LOOM_PYTEST_TIMEOUT:-}}"
here=$(pwd)
abs() { case "$1" in /*) echo "$1" ;; *) echo "$here/$1" ;; esac; }
[ -n "${LOOM_CARRY_TAR:-}" ] && LOOM_CARRY_TAR=$(abs "$LOOM_CARRY_TAR")
[ -n "${LOOM_BEFORE:-}" ] && LOOM_BEFORE=$(abs "$LOOM_BEFORE")
[ -n "${LOOM_BEFORE_BENCH:-}" ] && LOOM_BEFORE_BENCH=$(abs "$LOOM_BEFORE_BENCH")
[ -n "${OUT:-}" ] && OUT=$(abs "$OUT")
cd "$(dirname "$0")/.." || exit 1

filters=${1:-}
case "${LOOM_PRESET:-}" in
  "") ;;
  gemm)
    filters=${1:-gemm}
    : "${LOOM_BENCH_SUITES:=gemm}" "${LOOM_BENCH_ARGS=--quick}" "${LOOM_DEV_GEMM=all}" "${LOOM_EXAMPLES:=0}"
    : "${LOOM_TEST_SUMMARY:=FAIL |tuned at first use|other GPU|matched|takes bm}"
    ;;
  python)
    filters=${1:-none}
    : "${LOOM_BENCH_SUITES:=none}" "${LOOM_EXAMPLES:=0}" "${LOOM_PYTEST=tests/python/gpu}"
    : "${LOOM_TORCHRUN=examples/python/dlrm_embedding.py --steps 5;}"
    : "${LOOM_PYTHON=python/tools/nccl_probe.py --timeout 45; python/tools/bench_overhead.py}"
    ;;
  tp-auto)
    # AUTO of AllGather + GEMM and GEMM + ReduceScatter on held-out shapes:
    # LOOM_TP_SET (held-out), LOOM_TP_SAMPLE shapes (60) at --tp LOOM_TP_SPLIT
    # (the shape set's own TP 2, 4, 8 when empty); bench/tp_auto_check.py after
    filters=${1:-none}
    tp_args="--quick --peer none --set ${LOOM_TP_SET:-held-out} --sample ${LOOM_TP_SAMPLE:-60}"
    [ -n "${LOOM_TP_SPLIT:-}" ] && tp_args="$tp_args --tp $LOOM_TP_SPLIT"
    : "${LOOM_BENCH_SUITES:=ag_gemm gemm_rs}" "${LOOM_EXAMPLES:=0}" "${LOOM_PYTEST=}"
    : "${LOOM_BENCH_ARGS_ag_gemm=$tp_args}" "${LOOM_BENCH_ARGS_gemm_rs=$tp_args}"
    ;;
  *) echo "device.sh: LOOM_PRESET=$LOOM_PRESET is unknown (gemm, python or tp-auto)"; exit 2 ;;
esac

# NVLink multicast stays off unless the caller chose otherwise
for v in NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS; do
  case $v in NCCL_NVLS_ENABLE) d=0 ;; *) d=1 ;; esac
  if [ -z "${!v+set}" ]; then
    export "$v=$d"
    echo "device.sh: $v unset: $d for this run (loom never uses NVLink multicast)"
  else
    echo "device.sh: $v=${!v} (the caller's)"
  fi
done
export PYTHONUNBUFFERED=1

out=$(mktemp -d "${TMPDIR:-/tmp}/loom-out.XXXXXX") || exit 1
# the commit the binaries come from: a carried build's (pack_build.sh writes it
# beside the archive; the machine's checkout may not carry git's metadata),
# else the checkout's
carried_commit=""
[ -n "${LOOM_CARRY_TAR:-}" ] && [ -f "$(dirname "$LOOM_CARRY_TAR")/COMMIT" ] &&
  carried_commit=$(cat "$(dirname "$LOOM_CARRY_TAR")/COMMIT")
commit=${LOOM_COMMIT:-${carried_commit:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}}
export LOOM_COMMIT=$commit
start=$(date +%s)
deadline=${LOOM_DEADLINE:-}
summary=$out/summary.txt
note() { echo "$*" | tee -a "$summary"; }
suites=${LOOM_BENCH_SUITES:-all}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
pysteps=""
[ -n "${LOOM_PYTEST:-}${LOOM_TORCHRUN:-}${LOOM_PYTHON:-}" ] && pysteps=1
py=${PYTHON:-python3}

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')  commit: $commit  preset: ${LOOM_PRESET:-none}"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu \
    --format=csv,noheader
  nvidia-smi topo -m 2>/dev/null | head -5
  nvcc --version 2>/dev/null | tail -1
  for h in ${NCCL_HOME:+$NCCL_HOME/include/nccl.h} /usr/include/nccl.h /usr/local/include/nccl.h \
           "${CUDA_HOME:-/usr/local/cuda}/include/nccl.h"; do
    [ -f "$h" ] && { grep -m1 NCCL_VERSION_CODE "$h"; break; }
  done
  if [ -n "$pysteps" ]; then
    "$py" -c 'import sys; print("python", sys.version.split()[0])'
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
    ls -la /usr/lib/x86_64-linux-gnu/libnccl.so* /usr/lib/aarch64-linux-gnu/libnccl.so* \
      "${CUDA_HOME:-/usr/local/cuda}"/lib64/libnccl.so* 2>/dev/null
  fi
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

# ---- build ------------------------------------------------------------------
targets=""
[ "$filters" != none ] && targets="$targets build/tests/loom-test-gpu"
[ "$suites" != none ] && targets="$targets build/bin/loom-bench"
[ -n "${LOOM_DEV_GEMM:-}" ] && targets="$targets build/dev/gemm/bench_gemm_dev"
[ -n "$pysteps" ] && targets="$targets build/lib/libloom.so"
if [ -n "${LOOM_CARRY_TAR:-}" ]; then
  tar -xJf "$LOOM_CARRY_TAR" || { echo "could not unpack LOOM_CARRY_TAR=$LOOM_CARRY_TAR"; exit 1; }
  LOOM_PREBUILT=1
fi
build() {
  local nvcc=() t0=$(date +%s)
  [ -n "${LOOM_NVCC_THREADS:-}" ] && nvcc=(NVCC="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc --threads $LOOM_NVCC_THREADS")
  if ! make -j"${LOOM_MAKE_JOBS:-$(nproc)}" ${nvcc[@]+"${nvcc[@]}"} "$@" >> "$out/build.log" 2>&1; then
    tail -40 "$out/build.log"
    echo "BUILD FAILED"
    exit 1
  fi
  note "build: $(( $(date +%s) - t0 )) s"
}
if [ -z "$targets" ]; then
  echo "nothing to build" > "$out/build.log"
elif [ "${LOOM_PREBUILT:-0}" = 1 ]; then
  for t in $targets; do
    [ -e "$t" ] || { echo "LOOM_PREBUILT=1 but $t is missing: carry it or unset LOOM_PREBUILT"; exit 1; }
  done
  echo "prebuilt binaries: $targets" > "$out/build.log"
  # carried binaries that do not start here (another glibc, a missing
  # library) are rebuilt
  probe=""
  for t in $targets; do
    case $t in
      */loom-test-gpu) probe="$probe$("$t" no_such_test_xyz 2>&1)" ;;
      */loom-bench) probe="$probe$("$t" --help 2>&1)" ;;
      */bench_gemm_dev) probe="$probe$("$t" none 2>&1)" ;;
    esac
  done
  if echo "$probe" | grep -qE "error while loading|GLIBC|No such file|cannot execute"; then
    note "carried binaries do not run here: building"
    build $targets
  fi
else
  build $targets
fi

# the GPUs' clocks, power and clock-limiting reasons once a second while the
# steps run (gpu-clocks.csv): evidence for timings that a slowed GPU explains
fields=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$fields --format=csv,noheader > /dev/null 2>&1 || fields=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu
nvidia-smi --query-gpu=$fields --format=csv,nounits -l 1 > "$out/gpu-clocks.csv" 2>&1 &
smi_pid=$!

# ---- steps ------------------------------------------------------------------
fails=0
# step NAME LIMIT LOG CMD...: runs CMD (under LIMIT seconds unless empty, cut
# to what LOOM_DEADLINE leaves), output to LOG, one summary line
step() {
  local name=$1 lim=$2 log=$3; shift 3
  local t=$(date +%s) rc=0
  if [ -n "$deadline" ]; then
    local left=$(( deadline - (t - start) - 15 ))
    if [ $left -lt 10 ]; then
      fails=$((fails + 1)); note "$name: NOT RUN (LOOM_DEADLINE=$deadline s reached)"; return
    fi
    [ -z "$lim" ] || [ $left -lt $lim ] && lim=$left
  fi
  local from=$(( $( { wc -l < "$log"; } 2>/dev/null || echo 0) + 1 )) # this step's lines only (logs are shared)
  if [ -n "$lim" ]; then
    timeout -k 5 "$lim" "$@" >> "$log" 2>&1 || rc=$?
  else
    "$@" >> "$log" 2>&1 || rc=$?
  fi
  [ -n "$lim" ] && [ $rc = 124 ] && echo "STEP TIMED OUT after $lim s" >> "$log"
  [ $rc != 0 ] && fails=$((fails + 1))
  note "$name: rc=$rc, $(( $(date +%s) - t )) s  ($(tail -n +"$from" "$log" | grep -E 'passed|PASS|FAIL|STEP TIMED OUT|killed, ' | tail -1))"
}
# the limit of a kind of step: LOOM_STEP_TIMEOUT_<KIND>, else LOOM_STEP_TIMEOUT, else none
lim_of() { local v=LOOM_STEP_TIMEOUT_$1; echo "${!v:-${LOOM_STEP_TIMEOUT:-}}"; }
# "a b c" (space-separated scripts) or "a x; b y" (';'-separated command lines)
# LOOM_TORCHRUN / LOOM_PYTHON, one command per line: ';'-separated commands
# with their arguments, else space-separated scripts, unless a word is not
# a script (an option, a value): then the whole value is one command.
split_cmds() {
  case "$1" in
    *';'*) tr ';' '\n' <<< "$1" | sed -e 's/^ *//' -e 's/ *$//' | grep -v '^$' ;;
    *) if tr -s ' ' '\n' <<< "$1" | grep -v '^$' | grep -qv '\.py$'; then
         sed -e 's/^ *//' -e 's/ *$//' <<< "$1"
       else
         tr -s ' ' '\n' <<< "$1" | grep -v '^$'
       fi ;;
  esac
}

if [ "$filters" != none ]; then
  cat "$out/machine.txt" > "$out/gpu-test.log"
  IFS=, read -r -a flist <<< "${filters}"
  [ ${#flist[@]} = 0 ] && flist=("")
  for f in "${flist[@]}"; do
    echo "### filter: ${f:-(all)}" >> "$out/gpu-test.log"
    step "gpu tests ${f:-(all)}" "$(lim_of TESTS)" "$out/gpu-test.log" build/tests/loom-test-gpu $f
  done
fi

# The mutants (tests/gpu/mutants.sh): carried (mutants.tar.xz beside LOOM_CARRY_TAR) or built here
if [ "${LOOM_MUTANTS_RUN:-0}" = 1 ]; then
  mt="$(dirname "${LOOM_CARRY_TAR:-build/carry/x}")/mutants.tar.xz"
  if [ -f "$mt" ]; then tar -xJf "$mt" || echo "could not unpack $mt"
  elif ! ls build/mutants/*/loom-test-gpu > /dev/null 2>&1; then build mutants; fi
  LOOM_MUTANT_LOGS="$out/mutants" step "mutants" "$(lim_of TESTS)" "$out/mutants.log" bash tests/gpu/mutants.sh run
fi

if [ -n "${LOOM_DEV_GEMM:-}" ]; then
  REPS=${LOOM_DEV_REPS:-10} step "dev bench gemm ${LOOM_DEV_GEMM}" "$(lim_of DEV)" "$out/bench_dev.log" \
    build/dev/gemm/bench_gemm_dev "$LOOM_DEV_GEMM" "$out/bench_dev.json"
fi

# One suite of the previous build (LOOM_BEFORE_BENCH), from its own directory
# (so that it finds no PyTorch peers), its JSON in $out/before.
bench_before() {
  if [ ! -d "$out/before" ]; then
    mkdir -p "$out/before"
    echo "before: $(cat "$LOOM_BEFORE_BENCH/COMMIT" 2>/dev/null || echo unknown) ($LOOM_BEFORE_BENCH/bin/loom-bench)" \
      >> "$out/machine.txt"
  fi
  step "loom-bench $1 (before)" "$(lim_of BENCH)" "$out/bench-$1.before.log" \
    env -C "$LOOM_BEFORE_BENCH" LOOM_BENCH_RESULTS_DIR="$out/before" LOOM_BENCH_PEERS=/nonexistent \
    "$LOOM_BEFORE_BENCH/bin/loom-bench" "$1" ${LOOM_BENCH_ARGS:-} $2
}

if [ "$suites" != none ]; then
  export LOOM_BENCH_RESULTS_DIR="$out"
  for s in $suites; do
    extra=""
    if [ "$s" = embedding_a2a ] && [ -n "${LOOM_BEFORE:-}" ]; then
      [ -f "$LOOM_BEFORE/libloom.so.0" ] || { echo "LOOM_BEFORE=$LOOM_BEFORE has no libloom.so.0"; exit 1; }
      extra="--before $LOOM_BEFORE/libloom.so.0"
      echo "before: $(cat "$LOOM_BEFORE/COMMIT" 2>/dev/null || echo unknown) ($LOOM_BEFORE/libloom.so.0)" >> "$out/machine.txt"
    fi
    own_var="LOOM_BENCH_ARGS_$s"
    now_first=$(( ${now_first:-1} ^ 1 ))
    [ -n "${LOOM_BEFORE_BENCH:-}" ] && [ "$now_first" = 0 ] && bench_before "$s" "${!own_var:-}"
    step "loom-bench $s" "$(lim_of BENCH)" "$out/bench-$s.log" \
      build/bin/loom-bench "$s" ${LOOM_BENCH_ARGS:-} ${!own_var:-} $extra
    [ -n "${LOOM_BEFORE_BENCH:-}" ] && [ "$now_first" = 1 ] && bench_before "$s" "${!own_var:-}"
  done
  if [ -n "${LOOM_BEFORE_BENCH:-}" ]; then
    python3 bench/compare_builds.py "$out/before" "$out" --json "$out/compare_builds.json" \
      > "$out/compare_builds.txt" 2>&1
  fi
fi

# charts of every suite's JSON (needs matplotlib)
if [ "$suites" != none ] && ls "$out"/*.json > /dev/null 2>&1; then
  for j in "$out"/*.json; do
    case "$j" in *_torch-*|*/bench_dev.json) continue ;; esac
    "$py" bench/plot.py "$j" --out "$out" >> "$out/plots.log" 2>&1 || true
  done
fi

# the tensor-parallel example (every GPU present), when it was built or carried
if [ "${LOOM_EXAMPLES:-1}" = 1 ] && [ -x build/examples/tp_mlp/tp_mlp ]; then
  LD_LIBRARY_PATH=$PWD/build/lib:${LD_LIBRARY_PATH:-} step "examples/tp_mlp" "$(lim_of EXAMPLES)" \
    "$out/tp_mlp.log" build/examples/tp_mlp/tp_mlp
fi

# the Python binding on the GPUs (libloom from build/lib; JSON into the archive)
export LOOM_LIBRARY=$PWD/build/lib/libloom.so LOOM_BENCH_RESULTS_DIR="$out"
if [ -n "${LOOM_PYTEST:-}" ]; then
  step "pytest ${LOOM_PYTEST}" "$(lim_of PYTEST)" "$out/python-pytest.log" \
    "$py" -m pytest -v -rs -p no:cacheprovider ${LOOM_PYTEST}
fi
while IFS= read -r c; do
  [ -n "$c" ] || continue
  read -r -a argv <<< "$c"
  b=$(basename "${argv[0]}" .py)
  PYTHONPATH=$PWD/python:${PYTHONPATH:-} step "torchrun $c" "$(lim_of TORCHRUN)" "$out/python-$b.log" \
    "$py" -m torch.distributed.run --standalone --nproc_per_node="${LOOM_TORCHRUN_NPROC:-$ngpu}" "${argv[@]}"
done < <(split_cmds "${LOOM_TORCHRUN:-}")
while IFS= read -r c; do
  [ -n "$c" ] || continue
  read -r -a argv <<< "$c"
  b=$(basename "${argv[0]}" .py)
  step "python $c" "$(lim_of PYTHON)" "$out/python-$b.log" "$py" "${argv[@]}"
done < <(split_cmds "${LOOM_PYTHON:-}")

# ---- summary ------------------------------------------------------------------
{
  if [ "$filters" != none ]; then
    echo "=== GPU tests ==="
    grep -E "^### |^\[ (FAIL|SKIP) \]|^    FAIL|passed, .* failed${LOOM_TEST_SUMMARY:+|$LOOM_TEST_SUMMARY}" \
      "$out/gpu-test.log" | tail -60
  fi
  if [ -n "${LOOM_DEV_GEMM:-}" ]; then
    echo "=== dev bench gemm ==="
    sed -n '/^== summary/,$p' "$out/bench_dev.log" | head -45
    grep -E "^issue " "$out/bench_dev.log" | grep -E "\*|cuBLASLt" | cut -c1-150 | head -20
  fi
  if [ "$suites" != none ]; then
    for s in $suites; do
      echo "=== loom-bench $s (tail) ==="
      tail -"${LOOM_BENCH_TAIL:-12}" "$out/bench-$s.log"
      [ "$s" = gemm ] && grep -E "MISS" "$out/bench-$s.log" | cut -c1-170 | head -12
    done
    if [ "${LOOM_PRESET:-}" = tp-auto ] && ls "$out"/ag_gemm-*.json "$out"/gemm_rs-*.json > /dev/null 2>&1; then
      echo "=== AUTO on the selected shapes (bench/tp_auto_check.py) ==="
      python3 bench/tp_auto_check.py "$out"/ag_gemm-*.json "$out"/gemm_rs-*.json 2>&1 | head -40
    fi
    if [ -f "$out/compare_builds.txt" ]; then
      echo "=== previous build against this one (compare_builds.txt, summary) ==="
      sed -n '/^suite *rows/,$p' "$out/compare_builds.txt"
    fi
  fi
  if [ -f "$out/python-nccl_probe.log" ]; then
    echo "=== NCCL probe (summary) ==="
    sed -n '/^libloom alone/,/^torch .* alone/p' "$out/python-nccl_probe.log"
    sed -n '/^=== summary/,$p' "$out/python-nccl_probe.log"
  fi
  if [ -f "$out/python-pytest.log" ]; then
    echo "=== Python GPU tests ==="
    grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed" "$out/python-pytest.log" | tail -25
  fi
  if [ -f "$out/python-dlrm_embedding.log" ]; then
    echo "=== dlrm_embedding (rank 0) ==="
    grep -E "^step|ok  |FAIL|dlrm_embedding" "$out/python-dlrm_embedding.log" | head -20
  fi
  if [ -f "$out/python-bench_overhead.log" ]; then
    echo "=== binding overhead ==="
    sed -n '/^loom binding overhead/,$p' "$out/python-bench_overhead.log"
  fi
} > "$out/tails.txt"
cat "$out/tails.txt"
kill $smi_pid 2>/dev/null
# per GPU: SM clock min / max and the largest power draw seen
awk -F', *' 'NR > 1 && $3 ~ /^[0-9]+$/ { g = $2; if (!(g in lo) || $3 < lo[g]) lo[g] = $3; if ($3 > hi[g]) hi[g] = $3;
  if ($5 + 0 > pw[g]) pw[g] = $5 + 0; n[g]++ }
  END { for (g in n) printf "gpu %s: SM clock %d..%d MHz, power up to %.0f W (%d samples)\n", g, lo[g], hi[g], pw[g], n[g] }' \
  "$out/gpu-clocks.csv" | tee -a "$summary" > /dev/null
echo "=== steps ==="; cat "$summary"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT" && tar -czf "$OUT/results.tgz" -C "$out" . && cp "$summary" "$OUT/"
  [ "${LOOM_OUT_FILES:-0}" = 1 ] && cp -r "$out"/. "$OUT/"
fi
echo "logs: $out"
exit $(( fails != 0 ))
