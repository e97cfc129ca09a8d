# both GPUs: the W = 2 absent-peer tests (a comm's timeout read through loom__comm_check)
for t in gpu_tp_ag_gemm_absent_peer_times_out_w2 gpu_lang_absent_rank_times_out_naming_the_stage_w2; do
  timeout ${W2_LIMIT:-60} build/tests/loom-test-gpu $t > $O/w2-$t.log 2>&1; echo "w2 $t rc=$?"
done
cat $O/host-cost.log
