#!/usr/bin/env bash
# mutants.sh - kernels built with one wait removed, and the proof that the
# one-GPU world's tests catch each (tests/gpu/mutants.txt lists them).
#
#   mutants.sh build   (make mutants calls it, with NVCC, NVFLAGS, CC, LIBA,
#                       LINK_IN and LDLIBS from the Makefile): for each
#                       mutant, its unit compiled with -DLOOM_MUTANT_SITE=<the
#                       site's value> (every wait at that site met at once,
#                       src/core/signal.cuh), the library with that object
#                       replaced, and the GPU test program linked against it:
#                       build/mutants/<name>/loom-test-gpu
#   mutants.sh run     on a GPU: each mutant's world test runs first in the
#                       library's own program (build/tests/loom-test-gpu, the
#                       control: it must pass), then in the mutant's; the
#                       mutant is killed when its run fails (a wrong result or
#                       an expired wait) where the control passed. Exit 0
#                       only when every mutant is killed and none is missing.
#                       The environment reaches both runs (LOOM_WORLD_SKEW_US
#                       staggers the ranks' calls: core/world.h).
# LOOM_MUTANTS=name1,name2 limits either mode to those mutants; LOOM_MUTANT_LOGS: a folder for each
# run's log (default: build/mutants/<name>/).
set -uo pipefail
cd "$(dirname "$0")/../.."
list=tests/gpu/mutants.txt
out=${BUILD:-build}/mutants
mode=${1:-}

# name site unit test, one per line, comments dropped, LOOM_MUTANTS applied
mutants() {
  sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$list" | while read -r name site unit test; do
    case ",${LOOM_MUTANTS:-$name}," in *",$name,"*) echo "$name $site $unit $test";; esac
  done
}

site_value() { # LOOM_SITE_<site>'s value, from the family's header
  grep -rhoE "^#define LOOM_SITE_$1 [0-9]+" src | awk '{print $3}' | head -1
}

build_one() {
  local name=$1 site=$2 unit=$3 v obj
  v=$(site_value "$site")
  [ -n "$v" ] || { echo "mutants: no #define LOOM_SITE_$site under src/ ($list, mutant $name)" >&2; return 1; }
  mkdir -p "$out/$name"
  obj="$out/$name/$(basename "$unit" .cu).o"
  echo "mutant $name: $unit with LOOM_SITE_$site ($v) removed"
  # compiled again only when the library's own object of the unit is newer (make rebuilt it: a source changed)
  main_obj="${BUILD:-build}/obj/${unit%.cu}.o"
  if [ ! -f "$obj" ] || [ ! "$obj" -nt "$main_obj" ]; then
    $NVCC $NVFLAGS -DLOOM_MUTANT_SITE="$v" -c "$unit" -o "$obj" || return 1
  fi
  cp "$LIBA" "$out/$name/libloom.a"
  # the member of the same name is replaced (one object per basename in the library)
  ar r "$out/$name/libloom.a" "$obj" || return 1
  $CC -o "$out/$name/loom-test-gpu" $LINK_IN "$out/$name/libloom.a" $LDLIBS
}

case "$mode" in
  build)
    : "${NVCC:?mutants.sh build: run it through make mutants}"
    fails=0
    while read -r name site unit test; do build_one "$name" "$site" "$unit" || fails=$((fails + 1)); done < <(mutants)
    [ "$fails" = 0 ] || { echo "mutants: $fails mutant(s) failed to build" >&2; exit 1; }
    ;;
  run)
    killed=0 survived=0 missing=0 control_failed=0
    run_test() { # program test log: rc
      LOOM_TEST_TIMEOUT_MS=${LOOM_TEST_TIMEOUT_MS:-3000} timeout "${LOOM_MUTANT_LIMIT_S:-300}" "$1" "$2" > "$3" 2>&1
    }
    while read -r name site unit test; do
      prog="$out/$name/loom-test-gpu"
      if [ ! -x "$prog" ]; then
        echo "mutant $name: $prog missing (make mutants)"; missing=$((missing + 1)); continue
      fi
      logs=${LOOM_MUTANT_LOGS:-$out/$name}; mkdir -p "$logs"
      run_test "${BUILD:-build}/tests/loom-test-gpu" "$test" "$logs/$name.control.log"
      rc=$?
      if [ "$rc" != 0 ] || grep -q 'nothing ran' "$logs/$name.control.log"; then
        echo "mutant $name: the control (the library's own kernels) failed $test, rc $rc: $(grep -m1 -E 'FAIL|expired|nothing ran' "$logs/$name.control.log" | cut -c1-160)"
        control_failed=$((control_failed + 1)); continue
      fi
      log="$logs/$name.run.log"
      t0=$(date +%s)
      run_test "$prog" "$test" "$log"
      rc=$?
      summary=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
      why=$(grep -m1 -E 'FAIL|expired' "$log" | cut -c1-160)
      if [ "$rc" != 0 ] && ! grep -q 'nothing ran' "$log"; then
        echo "mutant $name (LOOM_SITE_$site removed): killed by $test in $(( $(date +%s) - t0 )) s, rc $rc: ${summary:-no summary}; first: ${why:-?}"
        killed=$((killed + 1))
      else
        echo "mutant $name (LOOM_SITE_$site removed): SURVIVED $test (rc $rc: ${summary:-no summary})"
        survived=$((survived + 1))
      fi
    done < <(mutants)
    echo "mutants: $killed killed, $survived survived, $missing missing, $control_failed with a failed control"
    [ "$survived" = 0 ] && [ "$missing" = 0 ] && [ "$control_failed" = 0 ] && [ "$killed" -gt 0 ]
    ;;
  *) echo "usage: $0 build|run (tests/gpu/mutants.txt)" >&2; exit 2 ;;
esac
