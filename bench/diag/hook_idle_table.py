#!/usr/bin/env python3
"""hook_idle_table.py JSON - the hooked GEMM with idle hooks (the fused plan's kernel and configuration) and
loom_gemm against cuBLASLt on the same local GEMM, per m band, from a loom-bench ag_gemm|gemm_rs JSON
(each row's note: lt, loom, hook-idle, same-cfg)."""
import json,re,math,collections,sys
d=json.load(open(sys.argv[1]))
rows=d['rows'] if isinstance(d,dict) and 'rows' in d else [v for v in d.values() if isinstance(v,list)][0]
seen={}
for r in rows:
    if not isinstance(r,dict) or r.get('impl') not in ('loom-ce','loom-sm','loom-bulk'): continue
    n=r['note']
    try:
        lt=float(re.search(r' lt ([\d.]+)',n).group(1)); hi=float(re.search(r'hook-idle ([\d.]+)',n).group(1)); lg=float(re.search(r' loom ([\d.]+)',n).group(1)); sc=float(re.search(r'same-cfg ([\d.]+)',n).group(1))
    except Exception: continue
    cfg=re.search(r'(\d+x\d+ g\d+ cl\d)',n).group(1)
    seen[(r['shape'],r['m'])]=(r['m'],r['n'],r['k'],lt,lg,hi,sc,cfg)
bands=collections.defaultdict(list); lgb=collections.defaultdict(list)
for (s,_),(m,n,k,lt,lg,hi,sc,cfg) in sorted(seen.items()):
    b='m<=64' if m<=64 else 'm<=512' if m<=512 else 'm>=1024'
    bands[b].append(lt/hi); lgb[b].append(lt/lg)
    print(f"{s:42s} m={m:5d} n={n:6d} k={k:6d} lt {lt:8.1f} loom_gemm {lg:8.1f} hook-idle {hi:8.1f} ({lt/hi:.2f}) same-cfg {sc:8.1f} {cfg}")
gm=lambda v: math.exp(sum(map(math.log,v))/len(v))
for b in sorted(bands):
    v=bands[b]; print(f"{b}: {len(v)} shapes, hook-idle/cuBLASLt geomean {gm(v):.3f} min {min(v):.3f}; loom_gemm/cuBLASLt geomean {gm(lgb[b]):.3f} min {min(lgb[b]):.3f}")
allv=[x for v in bands.values() for x in v]; print('all', len(allv), round(gm(allv),3))
