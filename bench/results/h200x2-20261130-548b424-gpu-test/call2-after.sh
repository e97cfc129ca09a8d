# then make gpu-test's one-GPU worlds (W = 1..8 ranks on one GPU), in one-GPU lanes, with the time left
for l in $O/moe-w8-*.log; do echo "$(basename $l .log): $(grep -E 'passed, ' $l) $(grep -E '^    took' $l | tr -s ' ')"; done
left=$(( ${TOTAL:-570} - 25 - ($(date +%s) - CALL_START) ))
JOB_TESTS=3 PARTS=worlds bash bench/diag/gpu_test_split.sh $O/gpu-test 0 $left
grep -hE '^    took|^\[ ( OK |FAIL|SKIP)' $O/gpu-test/worlds-*.log | paste - - | awk '{print $2, $NF}' | sort -rn | head -8
