# then make gpu-test's rest (every test neither two-GPU nor a world), three jobs a GPU; then AUTO's refitted
# AllGather+GEMM rule on the held-out TP 8 shapes (W = 2, every path), with what time is left
for l in $O/moe-w8-*.log $O/ag-w8-*.log $O/worlds-left-*.log; do echo "$(basename $l .log): $(grep -E 'passed, ' $l) $(grep -E '^    took' $l | tr -s ' ' | tr '\n' ' ')"; done
grep -h "^\[ FAIL" $O/worlds-left-*.log
left=$(( ${TOTAL:-570} - 150 - ($(date +%s) - CALL_START) ))
JOB_TESTS=2 REST_SLOTS=3 PARTS=rest bash bench/diag/gpu_test_split.sh $O/gpu-test 0 $left
grep -hE '^    took|^\[ ( OK |FAIL|SKIP)' $O/gpu-test/rest-*.log | paste - - | awk '{print $2, $NF}' | sort -rn | head -5
left=$(( ${TOTAL:-570} - 20 - ($(date +%s) - CALL_START) ))
[ $left -gt 40 ] && timeout $left build/bin/loom-bench ag_gemm --set held-out --tp 8 --sample 40 --quick --peer none --results $O/tp8 > $O/tp8.log 2>&1; echo "tp8 rc=$?"
for j in $O/tp8/ag_gemm-*.json; do [ -f $j ] && python3 bench/tp_auto_check.py $j > $O/tp8-auto-check.txt 2>&1; grep -v "^below" $O/tp8-auto-check.txt | tail -6; done
