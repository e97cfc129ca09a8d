# then the two-GPU MoE tests; then, with time left, AUTO's AllGather+GEMM rule on held-out TP 2-8 shapes
for l in $O/z*.log $O/world-moe.log $O/moe-w1.log; do echo "$(basename $l .log): $(grep -E 'passed, ' $l) $(grep -cE 'WARN: rank' $l) rank timeouts"; done
grep -h "WARN: rank" $O/z0.log | head -2 | cut -c1-200
build/tests/loom-test-gpu '=gpu_moe_absent_peer_times_out_w2,=gpu_moe_dispatch_combine_match_reference_w2,=gpu_moe_graph_replays_1000_calls_w2,=gpu_moe_mlp_absent_peer_times_out_w2,=gpu_moe_mlp_graph_replays_w2,=gpu_moe_mlp_matches_reference_w2,=gpu_moe_mlp_tune_w2' > $O/moe-w2.log 2>&1
echo "moe-w2: $(grep -E 'passed, ' $O/moe-w2.log)"; grep "^\[ FAIL" $O/moe-w2.log
left=$(( ${TOTAL:-570} - 15 - ($(date +%s) - CALL_START) ))
[ $left -gt 45 ] && timeout $left build/bin/loom-bench ag_gemm --set held-out --sample 30 --quick --peer none --paths ce,sm,dec,auto --results $O/tp2 > $O/tp2.log 2>&1; echo "tp2 rc=$? (limit $left s)"
for j in $O/tp2/ag_gemm-*.json; do [ -f $j ] && python3 bench/tp_auto_check.py $j > $O/tp2-auto-check.txt 2>&1; grep -v "^below" $O/tp2-auto-check.txt | tail -4; done
