# Call 2 (2x H200): split-K units band by band (LOOM_TP_AG_SPLIT_BANDS) and copy-engine bands no taller than a chunk
# (LOOM_TP_AG_CHUNK_BANDS), each on and off, on held-out AllGather+GEMM shapes at TP = 8 and TP 2-8; the GPU tests
# of the split-K GEMMs and AllGather+GEMM first; traces and chunk sizes on two layers.
B=build/bin/loom-bench
timeout 120 build/tests/loom-test-gpu gpu_tp_ag > $O/w2-gpu_tp_ag.log 2>&1; echo "gpu_tp_ag rc=$?"
for v in "0 0" "1 0" "1 1"; do
  for reg in "tp8 --tp 8 --sample 30" "tp2 --sample 30"; do set -- $v $reg; sb=$1 cb=$2 n=$3; shift 3
    LOOM_TP_AG_SPLIT_BANDS=$sb LOOM_TP_AG_CHUNK_BANDS=$cb timeout 150 $B ag_gemm --set held-out "$@" --paths ce,sm --quick --peer none --results $O/v$sb$cb-$n > $O/v$sb$cb-$n.log 2>&1
    echo "variant split=$sb chunk=$cb $n rc=$?"
  done
done
for L in "Qwen2.5-72B/qkv 2048 1024 512 256 128" "Llama-3-8B/qkv 8192 4096 2048 1024 512"; do set -- $L
  for c in $3 $4 $5 $6; do
    LOOM_DEBUG=TRACE timeout 60 $B ag_gemm --set all --tp 8 --layer $1 --m $2 --paths ce --chunk $c --quick --peer none --no-json > $O/trace-${1//\//_}-$2-c$c.log 2>&1
    echo "== $1 m=$2 chunk=$c: $(grep -E '^# ag_gemm loom-ce' $O/trace-${1//\//_}-$2-c$c.log | cut -c40-120)"
    grep -E "TRACE: ag_gemm rank 0 call" $O/trace-${1//\//_}-$2-c$c.log | grep COPY_ENGINE | tail -2 | sed 's/.*device\/host us: //'
  done
done
timeout 100 build/tests/loom-test-gpu gpu_gemm_split > $O/t-gemm-split.log 2>&1; echo "gpu_gemm_split rc=$?"
timeout 60 build/tests/loom-test-gpu gpu_world_tp_ag > $O/t-world-tp-ag.log 2>&1; echo "gpu_world_tp_ag rc=$?"
python3 - <<'PY'
import json, glob, os, math
O = os.environ["O"]
for reg in ("tp8", "tp2"):
    rows = {}
    for v in ("00", "10", "11"):
        for f in glob.glob(f"{O}/v{v}-{reg}/ag_gemm-*.json"):
            for r in json.load(open(f))["rows"]:
                if r["impl"] in ("loom-ce", "loom-sm"): rows.setdefault((r["shape"], r["impl"]), {})[v] = r
    for impl in ("loom-ce", "loom-sm"):
        for a, b in (("00", "10"), ("10", "11"), ("00", "11")):
            lr = [math.log(v[a]["fused_us"] / v[b]["fused_us"]) for (s, i), v in rows.items() if i == impl and a in v and b in v]
            big = [math.log(v[a]["fused_us"] / v[b]["fused_us"]) for (s, i), v in rows.items() if i == impl and a in v and b in v and v[a]["m"] >= 1024]
            if lr: print(f"{reg} {impl} v{a}/v{b}: geomean {math.exp(sum(lr)/len(lr)):.3f} over {len(lr)} (m>=1024: {math.exp(sum(big)/len(big)) if big else float('nan'):.3f} over {len(big)}) min {math.exp(min(lr)):.3f} max {math.exp(max(lr)):.3f}")
        wrong = sum(v[x]["wrong"] or 0 for (s, i), v in rows.items() for x in v)
    print(f"{reg}: wrong outputs over every row: {wrong}")
PY
