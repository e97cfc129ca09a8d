import sys,re,math
rows={}
for l in open(sys.argv[1]):
    if not l.startswith('shape'): continue
    p=l.split()
    key=(int(p[3]),int(p[4]),int(p[5]))
    d=rows.setdefault(key,{'cfg':{}})
    if 'cuBLASLt' in p:
        d['lt']=float(p[p.index('cuBLASLt')+1]); continue
    cfg=p[8]; us=float(re.search(r'([\d.]+) us',l).group(1))
    d['cfg'][cfg]=us
    if p[9]=='*': d['pick']=(cfg,us)
g=[[],[],[]]
print("%-18s %6s %16s %16s %16s"%("shape","Lt","pick","best in-kernel","best apart"))
for k,d in rows.items():
    c=d['cfg']
    ik=min(((u,n) for n,u in c.items() if not n.endswith('r')),default=(float('nan'),'-'))
    ap=min(((u,n) for n,u in c.items() if n.endswith('r')),default=(float('nan'),'-'))
    pk=d.get('pick',('-',float('nan')))
    print("%-18s %6.1f %9s %6.1f %9s %6.1f %9s %6.1f"%("x".join(map(str,k)),d.get('lt',0),pk[0],pk[1],ik[1],ik[0],ap[1],ap[0]))
    if 'lt' in d:
        g[0].append(d['lt']/pk[1]); g[1].append(d['lt']/ik[0]); g[2].append(d['lt']/min(ik[0],ap[0] if ap[0]==ap[0] else 1e9))
gm=lambda v: math.exp(sum(map(math.log,v))/len(v)) if v else float('nan')
print("cuBLASLt/loom geomean over %d: pick %.3f  best in-kernel %.3f  best incl. apart %.3f"%((len(g[0]),)+tuple(gm(x) for x in g)))
