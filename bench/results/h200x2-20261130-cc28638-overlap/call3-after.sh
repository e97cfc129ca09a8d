# Call 3 (2x H200): the copy engine's chunks per shard (LOOM_TP_CE_CHUNKS 1, 2, 4) on AllGather+GEMM, fitting and
# held-out halves, TP = 8 and TP 2-8 (--paths ce); the tests of the split-K and hooked GEMMs at W = 1 and of
# AllGather+GEMM at W = 2 with one chunk per shard.
B=build/bin/loom-bench
for c in 4 1 2; do
  for reg in "F8 fitting --tp 8" "H8 held-out --tp 8" "F fitting" "H held-out"; do set -- $reg; n=$1 half=$2; shift 2
    LOOM_TP_CE_CHUNKS=$c timeout 100 $B ag_gemm --set $half "$@" --sample 36 --paths ce --quick --peer none --results $O/c$c-$n > $O/c$c-$n.log 2>&1
    echo "chunks=$c $n rc=$?"
  done
done
LOOM_TP_CE_CHUNKS=1 timeout 120 build/tests/loom-test-gpu gpu_tp_ag > $O/w2-gpu_tp_ag-c1.log 2>&1; echo "gpu_tp_ag chunks=1 rc=$?"
timeout 150 build/tests/loom-test-gpu gemm_split,gemm_hooks,gemm_stream > $O/t-gemm-split-hooks.log 2>&1; echo "gemm split/hooks rc=$?"
python3 - <<'PY'
import json, glob, os, math
O = os.environ["O"]
for n in ("F8", "H8", "F", "H"):
    rows = {}
    for c in ("4", "1", "2"):
        for f in glob.glob(f"{O}/c{c}-{n}/ag_gemm-*.json"):
            for r in json.load(open(f))["rows"]:
                if r["impl"] == "loom-ce": rows.setdefault(r["shape"], {})[c] = r
    for a, b in (("4", "1"), ("4", "2"), ("2", "1")):
        for lo, hi, lab in ((0, 600, "m<=512"), (1024, 10**9, "m>=1024")):
            lr = [math.log(v[a]["fused_us"] / v[b]["fused_us"]) for s, v in rows.items() if a in v and b in v and lo <= v[a]["m"] < hi]
            if lr: print(f"{n} chunks {a}/{b} {lab}: geomean {math.exp(sum(lr)/len(lr)):.3f} over {len(lr)} min {math.exp(min(lr)):.3f} max {math.exp(max(lr)):.3f}")
    wrong = sum(v[x]["wrong"] or 0 for s, v in rows.items() for x in v)
    ov = {c: [v[c]["overlap"] for s, v in rows.items() if c in v and v[c]["m"] >= 1024] for c in ("4", "1", "2")}
    print(f"{n}: wrong {wrong}; CE overlap at m>=1024 (mean): " + " ".join(f"c{c} {sum(x)/len(x):.2f}" for c, x in ov.items() if x))
PY
