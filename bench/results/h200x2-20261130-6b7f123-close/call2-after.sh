# 1. The training step (bench/train/llama_tp.py, every variant, W = 2, 50 steps). 2. The MoE layer at the held-out
#    token counts (512 and 2048 per rank). 3. With the time left: GEMM+ReduceScatter on held-out TP 8 shapes at
#    m = 2048, and AllGather+GEMM on held-out TP 2 shapes at m = 2048 with PyTorch's async-TP as the peer.
for l in $O/fresh-*.log; do echo "$(basename $l .log): $(grep -E 'passed, ' $l) $(grep -E '^    took' $l | tr -s ' ')"; done
PYTHONPATH=$PWD/python LOOM_LIBRARY=$PWD/build/lib timeout 200 python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
  bench/train/llama_tp.py --steps 50 --json $O/llama_tp.json > $O/llama_tp.log 2>&1; echo "llama_tp rc=$?"
grep -vE "Warning|warn|enable_symm" $O/llama_tp.log | tail -16
for t in 512 2048; do
  timeout 120 build/bin/loom-bench moe --layer --tokens $t --reps 5 --peer none --timeout 110 --results $O/layer-$t > $O/layer-$t.log 2>&1
  echo "layer T=$t rc=$?"; grep -E "^# moe" $O/layer-$t.log | grep -E " T=$t " | cut -c1-120
done
left=$(( (${TOTAL:-570} - 20 - ($(date +%s) - CALL_START)) / 2 ))
[ $left -gt 30 ] && timeout $left build/bin/loom-bench gemm_rs --set held-out --tp 8 --m 2048 --sample 16 --quick --peer none --results $O/rs8 > $O/rs8.log 2>&1; echo "rs8 rc=$? (limit $left s)"
left=$(( ${TOTAL:-570} - 15 - ($(date +%s) - CALL_START) ))
[ $left -gt 30 ] && timeout $left build/bin/loom-bench ag_gemm --set held-out --tp 2 --m 2048 --sample 16 --quick --results $O/ag2 > $O/ag2.log 2>&1; echo "ag2 rc=$? (limit $left s)"
