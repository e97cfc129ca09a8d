# The W = 2 AllGather tests with the shard GEMMs; then the copy-engine row with (1) and without (0) them in one
# binary: held-out and fitting TP 8 and TP 2-8 at m = 2048, held-out TP 8 at m = 8192; PyTorch's async-TP beside
# the held-out runs with them.
for l in $O/world-*.log; do echo "$(basename $l .log): $(grep -E 'passed, ' $l)"; grep "^\[ FAIL" $l; done
LOOM_TP_CE_SHARD_GEMMS=1 timeout 150 build/tests/loom-test-gpu 'gpu_tp_ag,gpu_tp_thousand_calls_alternating,gpu_tp_checks,gpu_tp_ops_on_one_rank' > $O/w2-shards.log 2>&1
echo "w2-shards: $(grep -E 'passed, ' $O/w2-shards.log)"; grep -E "^\[ FAIL|FAIL " $O/w2-shards.log | head -5
run() { # NAME SHARDS ARGS...
  local n=$1 s=$2; shift 2
  local left=$(( ${TOTAL:-570} - 20 - ($(date +%s) - CALL_START) ))
  [ $left -gt 30 ] || { echo "$n: no time left"; return; }
  LOOM_TP_CE_SHARD_GEMMS=$s timeout $left build/bin/loom-bench ag_gemm --quick --paths ce,auto --results $O/$n "$@" > $O/$n.log 2>&1
  echo "$n rc=$?"
}
run h8-s1 1 --set held-out --tp 8 --m 2048 --sample 10
run h8-s0 0 --set held-out --tp 8 --m 2048 --sample 10 --peer none
run f8-s1 1 --set fitting --tp 8 --m 2048 --sample 10 --peer none
run f8-s0 0 --set fitting --tp 8 --m 2048 --sample 10 --peer none
run h2-s1 1 --set held-out --m 2048 --sample 12
run h2-s0 0 --set held-out --m 2048 --sample 12 --peer none
run f2-s1 1 --set fitting --m 2048 --sample 12 --peer none
run f2-s0 0 --set fitting --m 2048 --sample 12 --peer none
run h8x-s1 1 --set held-out --tp 8 --m 8192 --sample 6
run h8x-s0 0 --set held-out --tp 8 --m 8192 --sample 6 --peer none
