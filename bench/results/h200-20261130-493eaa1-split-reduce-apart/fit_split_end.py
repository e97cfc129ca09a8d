exec(open('fit_reduce_apart.py').read().split("fitd=load")[0])
def pred2(key,e,G,RBW,A,B):
    m,n,k,_=key; c=e['c']
    sw=split_waves(m,n,k,c) if c['bm']!=16 else None
    if not sw: return e['pred']
    if c['reduce']: return pred(key,e,G,RBW)
    w,sp,bm,bn,sk=sw
    fin=w*(sp+1)*bm*bn*4/60e9
    return e['pred']-fin*1e6+w*(A+(sp+1)*bm*bn*4/B*1e6)
def ev(data,G,RBW,A,B):
    le=[];pk=[];bs=[]
    for key,es in data.items():
        cand=[e for e in es if e['c']['bm']!=16]
        for e in cand:
            if e['c']['sk_tiles']!=0 and not e['c']['reduce']: le.append(math.log(e['us']/pred2(key,e,G,RBW,A,B)))
        sc=lambda e: pred2(key,e,G,RBW,A,B)*(1.04 if e['c']['sk_tiles']!=0 else 1)
        p=min(cand,key=sc); lt=es[0]['lt']; pk.append(lt/p['us']); bs.append(lt/min(e['us'] for e in cand))
    gm=lambda v: math.exp(sum(map(math.log,v))/len(v))
    return math.sqrt(np.mean(np.square(le))),np.mean(le),gm(pk),gm(bs)
fitd=load(['mid.json']); held=load(glob.glob('r/shape-*.json'))
res=[]
for A in [0,1,2,3,4,5,6]:
    for B in [30e9,60e9,90e9,150e9]:
        res.append((ev(fitd,5,2e12,A,B)[0],A,B))
res.sort()
for e,A,B in res[:5]:
    f=ev(fitd,5,2e12,A,B); h=ev(held,5,2e12,A,B)
    print("A %d us B %d GB/s: fit err %.3f mean %.3f pick %.3f | narrow err %.3f mean %.3f pick %.3f"%(A,B/1e9,f[0],f[1],f[2],h[0],h[1],h[2]))
f=ev(fitd,5,2e12,0,60e9); h=ev(held,5,2e12,0,60e9)
print("current A 0 B 60: fit err %.3f mean %.3f pick %.3f | narrow err %.3f mean %.3f pick %.3f"%(f[0],f[1],f[2],h[0],h[1],h[2]))
