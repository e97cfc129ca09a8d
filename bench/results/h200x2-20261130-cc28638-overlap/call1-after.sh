# Call 1 (2x H200): the copy engine's chunk signals by copy (LOOM_TP_CE_SIGNAL=1, the new default) against the
# signal kernel (0): GPU tests of AllGather+GEMM at W = 2 first, then stage traces on five TP = 8 layers, then
# the held-out TP = 8 sample with the copy-engine row alone, both settings, one after the other.
B=build/bin/loom-bench
timeout 150 build/tests/loom-test-gpu gpu_tp_ag > $O/w2-gpu_tp_ag.log 2>&1; echo "gpu_tp_ag rc=$?"
for L in "Qwen2.5-72B/qkv 2048" "Llama-3-8B/qkv 8192" "Llama-3.1-405B/qkv 2048" "Llama-3-8B/qkv 512" "DBRX/qkv 2048"; do
  set -- $L
  for s in 0 1; do
    LOOM_TP_CE_SIGNAL=$s LOOM_DEBUG=TRACE timeout 60 $B ag_gemm --set all --tp 8 --layer $1 --m $2 --paths ce,sm --quick --peer none --no-json > $O/trace-$s-${1//\//_}-$2.log 2>&1
    echo "== signal=$s $1 m=$2"; grep -E "^# ag_gemm" $O/trace-$s-${1//\//_}-$2.log | cut -c1-150
    grep -E "TRACE: ag_gemm rank 0 call" $O/trace-$s-${1//\//_}-$2.log | grep COPY_ENGINE | tail -3 | sed 's/.*device\/host us: //'
  done
done
for s in 0 1; do
  LOOM_TP_CE_SIGNAL=$s timeout 140 $B ag_gemm --set held-out --tp 8 --sample 24 --paths ce --quick --peer none --results $O/heldout-$s > $O/heldout-$s.log 2>&1
  echo "held-out signal=$s rc=$?"
done
python3 - <<'PY'
import json, glob, os, math
O = os.environ["O"]
rows = {}
for s in ("0", "1"):
    for f in glob.glob(f"{O}/heldout-{s}/ag_gemm-*.json"):
        for r in json.load(open(f))["rows"]:
            if r["impl"] == "loom-ce": rows.setdefault((r["shape"]), {})[s] = r
print("shape | gemm | seq | ce kernel-signal | ce copy-signal | ratio")
lr = []
for k, v in sorted(rows.items()):
    if "0" in v and "1" in v:
        a, b = v["0"]["fused_us"], v["1"]["fused_us"]; lr.append(math.log(a / b))
        print(f"{k} | {v['1']['gemm_us']:.1f} | {v['1']['seq_us']:.1f} | {a:.1f} | {b:.1f} | {a/b:.3f} | wrong {v['0']['wrong']}/{v['1']['wrong']}")
if lr: print(f"geomean kernel/copy {math.exp(sum(lr)/len(lr)):.3f} over {len(lr)} rows")
PY
