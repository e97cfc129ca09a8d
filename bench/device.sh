#!/usr/bin/env bash
# device.sh - everything one GPU-machine call does, in one command:
# record the machine, build (or unpack a carried build), run the GPU tests,
# the benchmark suites, the examples and the Python GPU steps asked for, each
# under its own time limit, put logs and JSON into one archive in $OUT (when
# set) and print a short summary last.
#
#   bash bench/device.sh [filters]
# filters: test-name substrings separated by commas, each run in turn
#   ("gpu_tp,gpu_coll"; "!gemm" excludes; default: the whole GPU suite).
# Environment:
#   LOOM_COMMIT        commit being tested (the device has no .git)
#   LOOM_BENCH_SUITES  loom-bench suites, space-separated ("none" to skip; default all)
#   LOOM_BENCH_ARGS    passed to every loom-bench suite, e.g. "--quick"
#   LOOM_BENCH_ARGS_<suite>  passed to that suite only, after LOOM_BENCH_ARGS,
#                      e.g. LOOM_BENCH_ARGS_allreduce="--max-bytes 4M"
#   LOOM_BEFORE        a directory from bench/build_before.sh holding the previous
#                      build's libloom.so.0: the embedding_a2a suite times it side by side
#   LOOM_PREBUILT=1    use the carried build/ binaries as they are: no make on the device
#   LOOM_CARRY_TAR     a tar.xz of build/ binaries (bench/pack_build.sh) unpacked
#                      first; implies LOOM_PREBUILT=1
#   LOOM_EXAMPLES=0    skip examples/tp_mlp (run on every GPU when built or carried)
#   LOOM_PYTEST        pytest arguments for the Python GPU tests ("" skips them),
#                      e.g. "tests/python/gpu/test_tp_gpu.py"
#   LOOM_PYTEST_TIMEOUT seconds the pytest step may take (default LOOM_STEP_TIMEOUT:
#                      each 2-process test spends ~15 s starting torch and NCCL)
#   LOOM_TORCHRUN      Python scripts run with torchrun on every GPU ("" skips),
#                      e.g. "examples/python/tp_mlp.py"
#   LOOM_STEP_TIMEOUT  seconds each step may take (default 600): a stuck step
#                      fails alone and the later ones still run
#   LOOM_DEADLINE      seconds from the start after which no step runs (default
#                      570: a device call's limit is 600); each step's limit is cut
#                      to what is left, so the archive always comes back
#   OUT                where the archive results.tgz and the summary go
# loom-bench embedding_a2a/ag_gemm/gemm_rs/allreduce run their PyTorch peers
# (bench/peers/*.py) themselves, in the same job.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
out=/tmp/loom-out
rm -rf "$out"; mkdir -p "$out"
filters=${1:-}
commit=${LOOM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export LOOM_COMMIT=$commit
limit=${LOOM_STEP_TIMEOUT:-600}
start=$(date +%s)
deadline=${LOOM_DEADLINE:-570}
summary=$out/summary.txt
note() { echo "$*" | tee -a "$summary"; }
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')  commit: $commit"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  nvidia-smi topo -m 2>/dev/null | head -5
  nvcc --version | tail -1
  grep -m1 NCCL_VERSION_CODE /usr/include/nccl.h 2>/dev/null
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

suites=${LOOM_BENCH_SUITES:-all}
targets="build/tests/loom-test-gpu"
[ "$suites" != none ] && targets="$targets build/bin/loom-bench"
t0=$(date +%s)
if [ -n "${LOOM_CARRY_TAR:-}" ]; then
  tar -xJf "$LOOM_CARRY_TAR" || { echo "could not unpack LOOM_CARRY_TAR=$LOOM_CARRY_TAR"; exit 1; }
  LOOM_PREBUILT=1
fi
if [ "${LOOM_PREBUILT:-0}" = 1 ]; then
  for t in $targets; do
    [ -x "$t" ] || { echo "LOOM_PREBUILT=1 but $t is missing: carry it or unset LOOM_PREBUILT"; exit 1; }
  done
  echo "prebuilt binaries: $targets" > "$out/build.log"
elif ! make -j"$(nproc)" $targets > "$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  echo "BUILD FAILED"
  exit 1
fi
note "build: $(( $(date +%s) - t0 )) s"

# the GPUs' clocks, power and clock-limiting reasons once a second while the
# steps run (gpu-clocks.csv): evidence for timings that a slowed GPU explains
fields=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$fields --format=csv,noheader > /dev/null 2>&1 || fields=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu
nvidia-smi --query-gpu=$fields --format=csv,nounits -l 1 > "$out/gpu-clocks.csv" 2>&1 &
smi_pid=$!

fails=0
# step NAME LOG CMD...: runs CMD under the step limit, output to LOG, one summary line
step() {
  local name=$1 log=$2; shift 2
  local t=$(date +%s) rc=0
  local left=$(( deadline - (t - start) - 15 )) lim=$limit
  [ $left -lt $lim ] && lim=$left
  if [ $lim -lt 10 ]; then
    fails=$((fails + 1)); note "$name: NOT RUN (LOOM_DEADLINE=$deadline s reached)"; return
  fi
  local from=$(( $(wc -l < "$log" 2>/dev/null || echo 0) + 1 )) # this step's lines only (logs are shared)
  timeout -k 5 "$lim" "$@" >> "$log" 2>&1 || rc=$?
  [ $rc = 124 ] && echo "STEP TIMED OUT after $lim s" >> "$log"
  [ $rc != 0 ] && fails=$((fails + 1))
  note "$name: rc=$rc, $(( $(date +%s) - t )) s  ($(tail -n +"$from" "$log" | grep -E 'passed|PASS|FAIL|STEP TIMED OUT' | tail -1))"
}

cat "$out/machine.txt" > "$out/gpu-test.log"
IFS=, read -r -a flist <<< "${filters}"
[ ${#flist[@]} = 0 ] && flist=("")
for f in "${flist[@]}"; do
  echo "### filter: ${f:-(all)}" >> "$out/gpu-test.log"
  step "gpu tests ${f:-(all)}" "$out/gpu-test.log" build/tests/loom-test-gpu $f
done

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
    step "loom-bench $s" "$out/bench-$s.log" build/bin/loom-bench "$s" ${LOOM_BENCH_ARGS:-} ${!own_var:-} $extra
  done
fi

# charts of every suite's JSON (matplotlib is on the GPU machines)
if [ "$suites" != none ] && ls "$out"/*.json > /dev/null 2>&1; then
  for j in "$out"/*.json; do
    case "$j" in *_torch-*) continue ;; esac
    python3 bench/plot.py "$j" --out "$out" >> "$out/plots.log" 2>&1 || true
  done
fi

# the tensor-parallel example (every GPU present), when it was built or carried
if [ "${LOOM_EXAMPLES:-1}" = 1 ] && [ -x build/examples/tp_mlp/tp_mlp ]; then
  LD_LIBRARY_PATH=$PWD/build/lib:${LD_LIBRARY_PATH:-} step "examples/tp_mlp" "$out/tp_mlp.log" build/examples/tp_mlp/tp_mlp
fi

# the Python binding on the GPUs (libloom from build/lib)
export LOOM_LIBRARY=$PWD/build/lib/libloom.so
if [ -n "${LOOM_PYTEST:-}" ]; then
  limit=${LOOM_PYTEST_TIMEOUT:-$limit} step "pytest ${LOOM_PYTEST}" "$out/python-pytest.log" \
    python3 -m pytest -v -p no:cacheprovider ${LOOM_PYTEST}
fi
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
for s in ${LOOM_TORCHRUN:-}; do
  b=$(basename "$s" .py)
  PYTHONPATH=$PWD/python:${PYTHONPATH:-} step "torchrun $s" "$out/python-$b.log" \
    python3 -m torch.distributed.run --standalone --nproc_per_node="$ngpu" "$s"
done

{
  echo "=== GPU tests ==="
  grep -E "^### |^\[ (FAIL|SKIP) \]|^    FAIL|passed, .* failed" "$out/gpu-test.log" | tail -60
  if [ "$suites" != none ]; then
    for s in $suites; do echo "=== loom-bench $s (tail) ==="; tail -${LOOM_BENCH_TAIL:-12} "$out/bench-$s.log"; done
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
fi
exit $(( fails != 0 ))
