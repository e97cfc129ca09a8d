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
#                       A line with a fifth column (microseconds) also
#                       makes the last rank a slow pusher in that unit
#                       (-DLOOM_MUTANT_SLOW_US, src/core/signal.cuh) and
#                       builds the unit with only that as the mutant's
#                       control: build/mutants/<name>/control/loom-test-gpu
#   mutants.sh check   no GPU, no compiler (make host-test runs it): every
#                       line names a LOOM_SITE_ defined under src/, a unit
#                       that exists, a GPU test the suite has (its name, or
#                       for a world test its name without the _wN suffix,
#                       in tests/gpu) and a whole number of microseconds
#                       > 0 where a fifth column is given
#   mutants.sh run     on a GPU: each mutant's world test runs first in the
#                       control (the library's own program, build/tests/
#                       loom-test-gpu, or the slow-peer one: it must pass),
#                       then in the mutant's; the
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

# name site unit test [slow_us], one per line, comments dropped, LOOM_MUTANTS applied
mutants() {
  sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$list" | while read -r name site unit test slow; do
    case ",${LOOM_MUTANTS:-$name}," in *",$name,"*) echo "$name $site $unit $test $slow";; esac
  done
}

site_value() { # LOOM_SITE_<site>'s value, from the family's header
  grep -rhoE "^#define LOOM_SITE_$1 [0-9]+" src | awk '{print $3}' | head -1
}

# The unit compiled with `flags` into dir/<unit>.o (again only when the library's own object of the
# unit is newer, make having rebuilt it, or the flags changed), the library with that object
# replaced, and the GPU test program linked against it: dir/loom-test-gpu.
build_unit() {
  local dir=$1 unit=$2 flags=$3 obj main_obj
  mkdir -p "$dir"
  obj="$dir/$(basename "$unit" .cu).o"
  main_obj="${BUILD:-build}/obj/${unit%.cu}.o"
  if [ ! -f "$obj" ] || [ ! "$obj" -nt "$main_obj" ] || [ "$(cat "$dir/flags" 2>/dev/null)" != "$flags" ]; then
    $NVCC $NVFLAGS $flags -c "$unit" -o "$obj" || return 1
    echo "$flags" > "$dir/flags"
  fi
  cp "$LIBA" "$dir/libloom.a"
  # the member of the same name is replaced (one object per basename in the library)
  ar r "$dir/libloom.a" "$obj" || return 1
  $CC -o "$dir/loom-test-gpu" $LINK_IN "$dir/libloom.a" $LDLIBS
}

build_one() {
  local name=$1 site=$2 unit=$3 slow=${4:-} v slow_flag=""
  v=$(site_value "$site")
  [ -n "$v" ] || { echo "mutants: no #define LOOM_SITE_$site under src/ ($list, mutant $name)" >&2; return 1; }
  [ -n "$slow" ] && slow_flag="-DLOOM_MUTANT_SLOW_US=$slow"
  echo "mutant $name: $unit with LOOM_SITE_$site ($v) removed${slow:+, the last rank pushing $slow us late}"
  build_unit "$out/$name" "$unit" "-DLOOM_MUTANT_SITE=$v $slow_flag" || return 1
  if [ -n "$slow" ]; then build_unit "$out/$name/control" "$unit" "$slow_flag" || return 1; fi
}

case "$mode" in
  build)
    : "${NVCC:?mutants.sh build: run it through make mutants}"
    fails=0
    while read -r name site unit test slow; do build_one "$name" "$site" "$unit" "$slow" || fails=$((fails + 1)); done < <(mutants)
    [ "$fails" = 0 ] || { echo "mutants: $fails mutant(s) failed to build" >&2; exit 1; }
    ;;
  check)
    bad=0 n=0
    while read -r name site unit test slow; do
      n=$((n + 1))
      why=""
      [ -n "$(site_value "$site")" ] || why="no #define LOOM_SITE_$site under src/"
      [ -f "$unit" ] || why="${why:+$why; }no unit $unit"
      stem=${test%_w[0-9]*}
      grep -rqE "\b($test|$stem)\b" tests/gpu --include='*.c' || why="${why:+$why; }no GPU test $test in tests/gpu"
      if [ -n "$slow" ] && ! [[ "$slow" =~ ^[1-9][0-9]*$ ]]; then why="${why:+$why; }slow \"$slow\" is not microseconds > 0"; fi
      if [ -n "$why" ]; then echo "mutants: $list, mutant $name: $why"; bad=$((bad + 1)); fi
    done < <(mutants)
    [ "$bad" = 0 ] && echo "mutants: $list: $n mutants, each site, unit and test found"
    [ "$bad" = 0 ] && [ "$n" -gt 0 ]
    ;;
  run)
    killed=0 survived=0 missing=0 control_failed=0
    run_test() { # program test log: rc
      LOOM_TEST_TIMEOUT_MS=${LOOM_TEST_TIMEOUT_MS:-3000} timeout "${LOOM_MUTANT_LIMIT_S:-300}" "$1" "$2" > "$3" 2>&1
    }
    while read -r name site unit test slow; do
      prog="$out/$name/loom-test-gpu"
      control="${BUILD:-build}/tests/loom-test-gpu" what="the library's own kernels"
      [ -n "$slow" ] && control="$out/$name/control/loom-test-gpu" what="the last rank $slow us late, every wait in place"
      if [ ! -x "$prog" ] || [ ! -x "$control" ]; then
        echo "mutant $name: $prog or $control missing (make mutants)"; missing=$((missing + 1)); continue
      fi
      logs=${LOOM_MUTANT_LOGS:-$out/$name}; mkdir -p "$logs"
      run_test "$control" "$test" "$logs/$name.control.log"
      rc=$?
      if [ "$rc" != 0 ] || grep -q 'nothing ran' "$logs/$name.control.log"; then
        echo "mutant $name: the control ($what) failed $test, rc $rc: $(grep -m1 -E 'FAIL|expired|nothing ran' "$logs/$name.control.log" | cut -c1-160)"
        control_failed=$((control_failed + 1)); continue
      fi
      log="$logs/$name.run.log"
      t0=$(date +%s)
      run_test "$prog" "$test" "$log"
      rc=$?
      summary=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
      why=$(grep -m1 -E 'FAIL|expired' "$log" | cut -c1-160)
      if [ "$rc" != 0 ] && ! grep -q 'nothing ran' "$log"; then
        echo "mutant $name (LOOM_SITE_$site removed${slow:+, a peer $slow us late}): killed by $test in $(( $(date +%s) - t0 )) s, rc $rc: ${summary:-no summary}; first: ${why:-?}"
        killed=$((killed + 1))
      else
        echo "mutant $name (LOOM_SITE_$site removed${slow:+, a peer $slow us late}): SURVIVED $test (rc $rc: ${summary:-no summary})"
        survived=$((survived + 1))
      fi
    done < <(mutants)
    echo "mutants: $killed killed, $survived survived, $missing missing, $control_failed with a failed control"
    [ "$survived" = 0 ] && [ "$missing" = 0 ] && [ "$control_failed" = 0 ] && [ "$killed" -gt 0 ]
    ;;
  *) echo "usage: $0 build|check|run (tests/gpu/mutants.txt)" >&2; exit 2 ;;
esac
