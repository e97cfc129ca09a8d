"""fit_split_and_clusters.py FITTING_JSONS [HELD_OUT_JSONS] - what two changes of the GEMM model would
do to its picks, from bench_gemm_dev's JSON (every configuration measured and predicted per shape):
  1. the split units' end: per wave holding split units, a + (splits + 1) x partial bytes / B in place of
     the model's (splits + 1) x partial bytes / 60 GB/s (gemm_heuristic.c); least squares of the split
     configurations' log error on the fitting half, then the picks' quality on both halves;
  2. clusters: each 2x1-cluster configuration's time against the same tiles without, per width and k
     band, and the picks when the model no longer credits clusters.
The chooser is replicated (best whole configuration against the best split one, which must be 4% ahead);
at the model's constants it reproduces every recorded pick. Comma-separated file lists.
"""
import json, math, sys, re, itertools
SMS=132
def parse(cfg):
    c=dict(bn=0,bm=0,sk_tiles=0,splits=0,cluster=0,stages=0)
    for t in cfg.split():
        k,v=t.split("="); c["splits" if k in ("splits","sk_splits") else k]=int(v)
    return c
def split_info(m,n,k,c):
    bm = c.get("bm",0) or 128
    if bm==16: return None
    bn=c["bn"]; tiles=math.ceil(m/bm)*math.ceil(n/bn); kb=math.ceil(k/64)
    sk=c.get("sk_tiles",0); sp=c.get("splits",0)
    if sk<0 or sk>tiles: sk=tiles
    if sp>kb: sp=kb
    if sk==0 or sp<=1: return None
    dp=tiles-sk; units=dp+sk*sp; waves=0
    for u0 in range(0,units,SMS):
        a=min(SMS,units-u0)
        if u0+a>dp: waves+=1
    bytes_=(sp+1)*bm*bn*4
    return waves,bytes_,sp,bm,bn
def load(files):
    recs=[]
    for f in files:
        for r in json.load(open(f))["results"]:
            c=parse(r["config"])
            recs.append(dict(m=r["m"],n=r["n"],k=r["k"],lay=r["b_layout"],cfg=r["config"],c=c,us=r["us"],pred=r["predicted_us"],pick=r["pick"],lt=r["cublaslt_us"]))
    return recs
def newpred(r,a,B):
    si=split_info(r["m"],r["n"],r["k"],r["c"])
    if not si: return r["pred"]
    waves,bytes_,sp,bm,bn=si
    return r["pred"]+waves*(a*1e6 + bytes_/B*1e6 - bytes_/60e9*1e6)
def choose(group,a,B):
    # the chooser: best whole (non-split sm90/other) vs best split; split must beat whole by 4%
    whole=[r for r in group if not split_info(r["m"],r["n"],r["k"],r["c"])]
    split=[r for r in group if split_info(r["m"],r["n"],r["k"],r["c"])]
    bw=min(whole,key=lambda r:newpred(r,a,B)) if whole else None
    bs=min(split,key=lambda r:newpred(r,a,B)) if split else None
    if bs and (not bw or newpred(bs,a,B)*1.04<=newpred(bw,a,B)): return bs
    return bw
def evaluate(recs,a,B,label):
    groups={}
    for r in recs: groups.setdefault((r["m"],r["n"],r["k"],r["lay"]),[]).append(r)
    g=[];gl=[];err=[]
    for key,grp in groups.items():
        p=choose(grp,a,B); best=min(x["us"] for x in grp)
        g.append(best/p["us"]); gl.append(p["lt"]/p["us"])
        for x in grp:
            if split_info(x["m"],x["n"],x["k"],x["c"]): err.append(math.log(x["us"]/newpred(x,a,B)))
    gm=lambda v: math.exp(sum(map(math.log,v))/len(v))
    e=math.sqrt(sum(x*x for x in err)/len(err)) if err else 0
    bias=math.exp(sum(err)/len(err)) if err else 1
    print("%-28s a=%5.1fus B=%5.0fGB/s shapes %3d  best/pick %.4f  lt/pick %.4f  split meas/pred %.3f rms-log %.3f  picks<0.97: %d"%(label,a*1e6,B/1e9,len(groups),gm(g),gm(gl),bias,e,sum(1 for x in g if x<0.97)))
def pick_quality(recs, adj):
    groups={}
    for r in recs: groups.setdefault((r["m"],r["n"],r["k"],r["lay"]),[]).append(r)
    g=[];gl=[]
    for grp in groups.values():
        cand=[dict(x) for x in grp]
        for x in cand: x["pred"]=x["pred"]*adj(x)
        p=choose(cand,0,60e9); g.append(min(x["us"] for x in grp)/p["us"]); gl.append(p["lt"]/p["us"])
    gm=lambda v: math.exp(sum(map(math.log,v))/len(v))
    return gm(g), gm(gl)
def clusters(fit, held):
    by={}
    groups={}
    for r in fit: groups.setdefault((r["m"],r["n"],r["k"],r["lay"]),[]).append(r)
    for (m,n,k,lay),grp in groups.items():
        for r in grp:
            c=r["c"]
            if c.get("cluster")!=2: continue
            twin=[x for x in grp if x["c"].get("cluster",0)!=2 and x["c"]["bn"]==c["bn"] and x["c"].get("sk_tiles",0)==0 and x["c"].get("bm",0)==c.get("bm",0)]
            if twin:
                band="k <= 1024" if k<=1024 else "k <= 4096" if k<=4096 else "k > 4096"
                by.setdefault((c["bn"],band),[]).append(r["us"]/twin[0]["us"])
    for key,v in sorted(by.items()):
        print("clusters bn %d %-9s: time / same tiles without, geomean %.3f min %.3f max %.3f (%d)"%(key[0],key[1],math.exp(sum(map(math.log,v))/len(v)),min(v),max(v),len(v)))
    no_credit=lambda x: 1.06 if x["c"].get("cluster")==2 else 1.0
    for name,recs in (("fitting",fit),("held-out",held)):
        if recs:
            print("%-8s picks best/pick, cuBLASLt/pick: model %.4f %.4f; without the cluster credit %.4f %.4f"%((name,)+pick_quality(recs,lambda x:1.0)+pick_quality(recs,no_credit)))
if __name__=="__main__":
    fit=load(sys.argv[1].split(","))
    held=load(sys.argv[2].split(",")) if len(sys.argv)>2 else []
    # verify the replica: the chooser at a=0,B=60 reproduces the picks?
    groups={}
    for r in fit: groups.setdefault((r["m"],r["n"],r["k"],r["lay"]),[]).append(r)
    ok=sum(1 for grp in groups.values() if choose(grp,0,60e9)["pick"]==1); print("replica reproduces %d of %d picks"%(ok,len(groups)))
    evaluate(fit,0,60e9,"fitting, current")
    best=None
    for a in [0,1e-6,2e-6,3e-6,4e-6,5e-6,6e-6,8e-6]:
        for B in [15e9,20e9,30e9,40e9,60e9,90e9]:
            groups={}
            for r in fit: groups.setdefault((r["m"],r["n"],r["k"],r["lay"]),[]).append(r)
            err=[math.log(x["us"]/newpred(x,a,B)) for x in fit if split_info(x["m"],x["n"],x["k"],x["c"])]
            e=sum(x*x for x in err)
            if best is None or e<best[0]: best=(e,a,B)
    print("least squares on the fitting half's split configurations: a=%.1f us B=%.0f GB/s"%(best[1]*1e6,best[2]/1e9))
    evaluate(fit,best[1],best[2],"fitting, fitted")
    if held:
        evaluate(held,0,60e9,"held-out, current")
        evaluate(held,best[1],best[2],"held-out, fitted")
    clusters(fit, held)
