# then make gpu-test's two-GPU part (every "_w2" test outside the worlds) with the time left
for l in $O/*-w8-*.log; do echo "$(basename $l .log): $(grep -E 'passed, ' $l) $(grep -E '^    took' $l | tr -s ' ')"; done
left=$(( ${TOTAL:-570} - 30 - ($(date +%s) - CALL_START) ))
PARTS=two bash bench/diag/gpu_test_split.sh $O/gpu-test $left 0
grep -E '^    took|^\[ ( OK |FAIL|SKIP)' $O/gpu-test/two-gpu.log | paste - - | awk '{print $2, $NF}' | sort -rn | head -12
