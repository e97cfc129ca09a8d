import json,glob,math,sys
import numpy as np
SMS=132
def parse(cfg):
    c=dict(bn=0,bm=0,sk_tiles=0,splits=0,cluster=0,reduce=0)
    for t in cfg.split():
        k,v=t.split("="); c[k]=int(v)
    return c
def split_waves(m,n,k,c):
    bm=c['bm'] or 128
    if bm==16: return None
    bn=c['bn']; tiles=math.ceil(m/bm)*math.ceil(n/bn); kb=math.ceil(k/64)
    sk=c['sk_tiles']; sp=min(c['splits'],kb)
    if sk<0 or sk>tiles: sk=tiles
    if sk==0 or sp<=1: return None
    dp=tiles-sk; units=dp+sk*sp; waves=0
    for u0 in range(0,units,SMS):
        a=min(SMS,units-u0)
        if u0+a>dp: waves+=1
    return waves,sp,bm,bn,sk
def load(files):
    out={}
    for f in files:
        for r in json.load(open(f))['results']:
            out.setdefault((r['m'],r['n'],r['k'],r['b_layout']),[]).append(dict(cfg=r['config'],c=parse(r['config']),us=r['us'],pred=r['predicted_us'],lt=r['cublaslt_us'],pick=r['pick']))
    return out
def pred(key,e,G,RBW,SBW=200e9):
    m,n,k,_=key; c=e['c']
    if not c['reduce']: return e['pred']
    w,sp,bm,bn,sk=split_waves(m,n,k,c)
    fin=w*(sp+1)*bm*bn*4/60e9
    store=w*bm*bn*4/SBW - w*bm*bn*2/SBW   # partial fp32 out instead of C bf16
    rb=sp*sk*bm*bn*4+sk*bm*bn*2
    return e['pred']-fin*1e6+store*1e6+G+rb/RBW*1e6
def evaluate(data,G,RBW,use_r=True):
    lerr=[];picks=[];best=[]
    for key,es in data.items():
        cand=[e for e in es if (use_r or not e['c']['reduce']) and (e['c']['bm']!=16)]
        for e in cand:
            if e['c']['reduce']: lerr.append(math.log(e['us']/pred(key,e,G,RBW)))
        sc=lambda e: pred(key,e,G,RBW)*(1.04 if e['c']['sk_tiles']!=0 else 1)
        p=min(cand,key=sc)
        lt=es[0]['lt']
        picks.append(lt/p['us']); best.append(lt/min(e['us'] for e in cand))
    gm=lambda v: math.exp(sum(map(math.log,v))/len(v))
    return (math.sqrt(np.mean(np.square(lerr))) if lerr else 0, np.mean(lerr) if lerr else 0, gm(picks), gm(best), len(picks))
fitd=load(['mid.json']); held=load(glob.glob('r/shape-*.json'))
best=None
for G in [0,1,2,3,4,5,6,8]:
    for RBW in [1e12,2e12,3e12,4e12,6e12]:
        r=evaluate(fitd,G,RBW)
        if best is None or r[0]<best[0][0]: best=(r,G,RBW)
print("best fit on fitting half: G=%.1f us RBW=%.0f GB/s: log err rms %.3f mean %.3f"%(best[1],best[2]/1e9,best[0][0],best[0][1]))
G,RBW=best[1],best[2]
for name,d in (('fitting mid',fitd),('narrow',held)):
    a=evaluate(d,G,RBW,False); b=evaluate(d,G,RBW,True)
    print("%-12s n=%d  without apart: pick %.3f best %.3f | with apart: pick %.3f best %.3f (err rms %.3f mean %.3f)"%(name,a[4],a[2],a[3],b[2],b[3],b[0],b[1]))
if len(sys.argv)>1:
    G,RBW=float(sys.argv[1]),float(sys.argv[2])*1e9
    for key in [(64,1280,8192,'nk'),(512,768,4096,'nk'),(1024,768,4096,'nk'),(64,768,4096,'nk')]:
        es=held[key]
        print(key,"Lt",es[0]['lt'])
        for e in sorted(es,key=lambda e:e['us'])[:8]:
            print("   %-45s meas %6.1f pred %6.1f"%(e['cfg'],e['us'],pred(key,e,G,RBW)))
