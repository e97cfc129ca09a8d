# The whole W = 2 tensor-parallel suite (gpu_tp) with the copy engine's shard GEMMs as the default.
for l in $O/world-tp.log $O/moe-w8.log; do echo "$(basename $l .log): $(grep -E 'passed, ' $l)"; grep "^\[ FAIL" $l; done
left=$(( ${TOTAL:-570} - 15 - ($(date +%s) - CALL_START) ))
timeout $left build/tests/loom-test-gpu gpu_tp > $O/w2-tp.log 2>&1; echo "w2 gpu_tp rc=$? (limit $left s): $(grep -E 'passed, ' $O/w2-tp.log)"
grep -E "^\[ FAIL|^\[ RUN" $O/w2-tp.log | tail -3
