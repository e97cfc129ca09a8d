# 1. The MoE W = 8 one-GPU world under the conditions that failed (bench/diag/moe_world_check.sh), first on the
#    fresh machine. 2. The `_2gpu` tests (both GPUs visible). 3. The two-GPU MoE tests and MoE W = 1 with the
#    combine's world cap. 4. With the time left: the MoE layer at the named shapes (prefill T = 4096), no peer.
bash bench/diag/moe_world_check.sh $O/mwc 250 > $O/mwc.txt 2>&1; cat $O/mwc.txt
build/tests/loom-test-gpu _2gpu > $O/two-gpu.log 2>&1
echo "_2gpu: $(grep -E 'passed, ' $O/two-gpu.log)"; grep -E "^\[ (FAIL|SKIP)" $O/two-gpu.log
build/tests/loom-test-gpu '=gpu_moe_absent_peer_times_out_w2,=gpu_moe_dispatch_combine_match_reference_w2,=gpu_moe_graph_replays_1000_calls_w2,=gpu_moe_mlp_absent_peer_times_out_w2,=gpu_moe_mlp_graph_replays_w2,=gpu_moe_mlp_matches_reference_w2,=gpu_moe_mlp_tune_w2' > $O/moe-w2.log 2>&1
echo "moe-w2: $(grep -E 'passed, ' $O/moe-w2.log)"; grep "^\[ FAIL" $O/moe-w2.log
build/tests/loom-test-gpu '=gpu_moe_bad_routing_is_reported_w1,=gpu_moe_dispatch_combine_match_reference_w1,=gpu_moe_graph_replays_1000_calls_w1,=gpu_moe_mlp_matches_reference_w1' > $O/moe-w1.log 2>&1
echo "moe-w1: $(grep -E 'passed, ' $O/moe-w1.log)"; grep "^\[ FAIL" $O/moe-w1.log
left=$(( ${TOTAL:-570} - 15 - ($(date +%s) - CALL_START) ))
[ $left -gt 45 ] && timeout $left build/bin/loom-bench moe --layer --reps 5 --peer none --timeout $left --results $O/layer > $O/layer.log 2>&1; echo "layer rc=$? (limit $left s)"
grep -E "^# moe|rror" $O/layer.log | head -20
