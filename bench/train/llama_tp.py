#!/usr/bin/env python3
"""llama_tp.py - a Llama-style decoder trained with tensor + sequence
parallelism on W GPUs: loom against PyTorch's own tensor parallelism and
the communication-free limit, side by side in one job.

    python3 bench/train/llama_tp.py [--layers 4 --hidden 4096 --ffn 11008 --heads 32 --seq 4096
                                     --steps 50 --world 2 --json bench/results/x.json]

The model: --layers decoder blocks (RMSNorm, causal attention with q, k, v
and output projections, RMSNorm, SwiGLU MLP w2(silu(w1 x) * w3 x)),
random initialisation (one seed: every variant starts from the same full
weights), bf16 parameters and activations, batch 1, --seq tokens; the
loss is the mean squared distance of the last block's output to a fixed
random target, on fresh random inputs each step (the same on every
variant); AdamW (torch's, foreach) on each rank's shards.

Variants (each its own copy of the model, run one after the other):
  loom              loom.nn layers: q/k/v as one column-parallel layer (one
                    AllGather+GEMM), w1/w3 as one, wo and w2 row-parallel
                    (GEMM+ReduceScatter); norms and attention in torch
  loom-compiled     the same under torch.compile (the registered ops)
  loom-sequential   loom's layers on their sequential path (NCCL collective,
                    then cuBLASLt), eager: what the fusion itself gains
  loom-ag-copy-engine, loom-ag-sm-copy   loom with every AllGather+GEMM
                    (forward and backward) on that fused transfer, whatever
                    AUTO would choose: what AUTO's choice costs or saves
  loom-parallelize  PyTorch's plain model (separate q, k, v, w1, w3) split
                    by loom.parallelize: the attention's and the MLP's input
                    gathered once (loom's all_gather), projections local,
                    wo and w2 GEMM+ReduceScatter fused; eager
  loom-parallelize-fused   the same with fused_gather=True: every
                    column-parallel projection gathers in its GEMM
  torch-tp          DTensor tensor parallelism with sequence parallelism
                    (torchtitan's plan: ColwiseParallel / RowwiseParallel
                    with Shard(1) outputs, SequenceParallel norms), eager
  torch-async-tp    the same under torch.compile with
                    torch._inductor.config._micro_pipeline_tp = True
  limit             the loom model with its collectives replaced by local
                    writes of the rows they would write (this rank's rows
                    copied into a zeroed [S, ...] tensor; a slice for the
                    reduce-scatter), the GEMMs torch's (cuBLAS): no
                    communication, the floor no tensor-parallel
                    implementation can beat, eager
  limit-compiled    the same compiled
Time per step: forward, backward and optimizer step between CUDA events,
the maximum over ranks, median over the steps after --warmup. Losses of
loom and torch-tp are compared step by step (rank 0 prints both).
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import socket
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def _args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=11008)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10, help="steps not timed (compilation included)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--variants", default="loom,loom-compiled,loom-sequential,loom-parallelize,"
                                          "loom-parallelize-fused,torch-tp,torch-async-tp,limit,limit-compiled")
    ap.add_argument("--json", default="")
    ap.add_argument("--profile", type=int, default=0,
                    help="N > 0: after each variant, N more steps under torch.profiler; rank 0 prints the "
                         "kernels taking the most GPU time per step")
    return ap.parse_args(argv)


# ---- the model ------------------------------------------------------------------

def _full_weights(torch, a, seed=1234):
    """Every block's full weights (fp32 on the CPU), nn.Linear's init."""
    g = torch.Generator().manual_seed(seed)
    H, F = a.hidden, a.ffn

    def lin(o, i):
        return (torch.rand(o, i, generator=g) * 2 - 1) / math.sqrt(i)

    return [dict(wq=lin(H, H), wk=lin(H, H), wv=lin(H, H), wo=lin(H, H), w1=lin(F, H), w3=lin(F, H), w2=lin(H, F))
            for _ in range(a.layers)]


def _attention(torch, q, k, v, heads, batch_first):
    """Causal attention of q, k, v [S, B, h] (seq first) or [B, S, h] -> same layout."""
    if batch_first:
        b, s = q.shape[:2]
        q, k, v = (t.view(b, s, heads, -1).transpose(1, 2) for t in (q, k, v))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return o.transpose(1, 2).reshape(b, s, -1)
    s, b = q.shape[:2]
    q, k, v = (t.reshape(s, b, heads, -1).permute(1, 2, 0, 3) for t in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return o.permute(2, 0, 1, 3).reshape(s, b, -1)


AG_FORCED = {"loom-ag-copy-engine": "copy_engine", "loom-ag-sm-copy": "sm_copy"}


def _loom_model(torch, loom, comm, a, weights, dev, local=False, transfer="auto", ag_transfer=None):
    """The loom model (seq-first [S / W, 1, H]); local=True: the limit;
    transfer: the layers' (forward and backward); ag_transfer: the
    AllGather+GEMMs' instead (column layers' forward, row layers' backward)."""
    ag = ag_transfer or transfer
    nn = torch.nn
    W, p = comm.size, comm.rank
    H, F = a.hidden, a.ffn
    hs, fs = slice(p * H // W, (p + 1) * H // W), slice(p * F // W, (p + 1) * F // W)

    class LocalGather(torch.autograd.Function):
        """[S / W, ...] -> [S, ...] holding this rank's rows, zeros elsewhere
        (the rows a gather writes, written locally: no communication)."""

        @staticmethod
        def forward(ctx, x):
            n = x.shape[0]
            out = x.new_zeros((n * W,) + tuple(x.shape[1:]))
            out[p * n:(p + 1) * n] = x
            ctx.rows = n
            return out

        @staticmethod
        def backward(ctx, g):
            return g[p * ctx.rows:(p + 1) * ctx.rows]

    class LocalScatter(torch.autograd.Function):
        """[S, ...] -> this rank's rows (no reduction, no communication)."""

        @staticmethod
        def forward(ctx, y):
            ctx.shape = y.shape
            n = y.shape[0] // W
            return y[p * n:(p + 1) * n].contiguous()

        @staticmethod
        def backward(ctx, g):
            out = g.new_zeros(ctx.shape)
            n = g.shape[0]
            out[p * n:(p + 1) * n] = g
            return out

    class Col(nn.Module):
        def __init__(self, w):  # w: this rank's [n, H]
            super().__init__()
            if local:
                self.weight = nn.Parameter(w.to(dev, torch.bfloat16))
            else:
                self.lin = loom.nn.ColumnParallelLinear(comm, H, w.shape[0] * W, bias=False, dtype=torch.bfloat16,
                                                        transfer=ag, backward_transfer=transfer)
                with torch.no_grad():
                    self.lin.weight.copy_(w)

        def forward(self, x):
            if local:
                return nn.functional.linear(LocalGather.apply(x), self.weight)
            return self.lin(x)

    class Row(nn.Module):
        def __init__(self, w):  # w: this rank's [H, k]
            super().__init__()
            if local:
                self.weight = nn.Parameter(w.to(dev, torch.bfloat16))
            else:
                self.lin = loom.nn.RowParallelLinear(comm, w.shape[1] * W, H, bias=False, dtype=torch.bfloat16,
                                                     transfer=transfer, backward_transfer=ag)
                with torch.no_grad():
                    self.lin.weight.copy_(w)

        def forward(self, x):
            if local:
                return LocalScatter.apply(nn.functional.linear(x, self.weight))
            return self.lin(x)

    class Block(nn.Module):
        def __init__(self, w):
            super().__init__()
            self.norm1 = nn.RMSNorm(H, device=dev, dtype=torch.bfloat16)
            self.norm2 = nn.RMSNorm(H, device=dev, dtype=torch.bfloat16)
            self.qkv = Col(torch.cat([w["wq"][hs], w["wk"][hs], w["wv"][hs]]))
            self.wo = Row(w["wo"][:, hs])
            self.w13 = Col(torch.cat([w["w1"][fs], w["w3"][fs]]))
            self.w2 = Row(w["w2"][:, fs])
            self.heads = a.heads // W

        def forward(self, x):
            q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
            x = x + self.wo(_attention(torch, q, k, v, self.heads, False))
            g, u = self.w13(self.norm2(x)).chunk(2, dim=-1)
            return x + self.w2(nn.functional.silu(g) * u)

    return nn.Sequential(*[Block(w) for w in weights])


def _plain_model(torch, a, weights, dev):
    """The same model in plain torch modules, full weights (batch-first
    [1, S, H]; torchtitan's module names)."""
    nn = torch.nn
    H, F = a.hidden, a.ffn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq, self.wk, self.wv, self.wo = (nn.Linear(H, H, bias=False) for _ in range(4))
            self.heads = a.heads  # local heads from the local width below

        def forward(self, x):
            q, k, v = self.wq(x), self.wk(x), self.wv(x)
            heads = self.heads * q.shape[-1] // H
            return self.wo(_attention(torch, q, k, v, heads, True))

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.w3 = nn.Linear(H, F, bias=False), nn.Linear(H, F, bias=False)
            self.w2 = nn.Linear(F, H, bias=False)

        def forward(self, x):
            return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_norm, self.ffn_norm = nn.RMSNorm(H), nn.RMSNorm(H)
            self.attention, self.feed_forward = Attention(), FeedForward()

        def forward(self, x):
            x = x + self.attention(self.attention_norm(x))
            return x + self.feed_forward(self.ffn_norm(x))

    blocks = []
    for w in weights:
        b = Block()
        with torch.no_grad():
            for name in ("wq", "wk", "wv", "wo"):
                getattr(b.attention, name).weight.copy_(w[name])
            for name in ("w1", "w2", "w3"):
                getattr(b.feed_forward, name).weight.copy_(w[name])
        blocks.append(b.to(dev, torch.bfloat16))
    return nn.Sequential(*blocks)


def _torch_tp_model(torch, a, weights, dev, mesh):
    """The plain model parallelized with DTensor the way torchtitan does."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    model = _plain_model(torch, a, weights, dev)
    for b in model:
        parallelize_module(b, mesh, {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
        })
    return model


# ---- one variant -------------------------------------------------------------

def _data(torch, a, step, rank, world, dev):
    """This rank's rows of step `step`'s input and the target, [S / W, H]."""
    g = torch.Generator(device=dev).manual_seed(10_000 + step)
    x = torch.randn(a.seq, a.hidden, generator=g, device=dev, dtype=torch.bfloat16)
    t = torch.randn(a.seq, a.hidden, generator=g, device=dev, dtype=torch.bfloat16) * 0.5
    n = a.seq // world
    return x[rank * n:(rank + 1) * n], t[rank * n:(rank + 1) * n]


def _run_variant(torch, dist, a, model, batch_first, rank, world, dev):
    """(losses, median ms per step) of `steps` training steps."""
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, foreach=True)
    losses, times = [], []
    for step in range(a.steps):
        x, t = _data(torch, a, step, rank, world, dev)
        x = x.unsqueeze(0) if batch_first else x.unsqueeze(1)
        t = t.unsqueeze(0) if batch_first else t.unsqueeze(1)
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        y = model(x)
        if hasattr(y, "to_local"):
            y = y.to_local()
        loss = (y.float() - t.float()).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        end.synchronize()
        ms = torch.tensor([start.elapsed_time(end)], device=dev)
        dist.all_reduce(ms, op=dist.ReduceOp.MAX)
        whole = loss.detach().clone()
        dist.all_reduce(whole)  # the loss over all tokens: mean of the ranks' means
        losses.append(whole.item() / world)
        times.append(ms.item())
    timed = sorted(times[a.warmup:]) or sorted(times)
    return losses, timed[len(timed) // 2]


def _profile(torch, dist, a, model, batch_first, rank, world, dev, name):
    """a.profile more steps under torch.profiler: the top GPU kernels per step (rank 0 prints)."""
    from torch.profiler import ProfilerActivity, profile
    b = argparse.Namespace(**vars(a))
    b.steps, b.warmup = a.profile, 0
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        _run_variant(torch, dist, b, model, batch_first, rank, world, dev)
    if rank != 0:
        return
    rows = sorted(((e.key, e.device_time_total / a.profile / 1000.0, e.count // a.profile)
                   for e in prof.key_averages()), key=lambda r: -r[1])
    total = sum(r[1] for r in rows)
    print(f"profile {name}: GPU kernel time {total:.2f} ms per step; the largest:")
    for key, ms, n in rows[:12]:
        print(f"  {ms:7.2f} ms  x{n:<4d} {key[:110]}")


def _rank(rank, world, port, argv, q):
    try:
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
        import torch
        import torch.distributed as dist
        torch.cuda.set_device(rank)
        dev = f"cuda:{rank}"
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                device_id=torch.device("cuda", rank))
        import loom
        a = _args(argv)
        weights = _full_weights(torch, a)
        comm = loom.Comm.from_process_group()
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cuda", (world,))
        results = {}
        for v in a.variants.split(","):
            torch.cuda.synchronize()
            t0 = time.time()
            if v.startswith("loom-parallelize"):  # the plain model split by loom.parallelize
                model = loom.parallelize(_plain_model(torch, a, weights, dev), comm,
                                         fused_gather=v.endswith("fused"))
                batch_first = True
            elif v.startswith("torch"):
                if v == "torch-async-tp":
                    import torch._inductor.config as ic
                    ic._micro_pipeline_tp = True
                    from torch.distributed import _symmetric_memory as sm
                    if hasattr(sm, "enable_symm_mem_for_group"):
                        sm.enable_symm_mem_for_group(dist.group.WORLD.group_name)
                model = _torch_tp_model(torch, a, weights, dev, mesh)
                batch_first = True
            else:
                model = _loom_model(torch, loom, comm, a, weights, dev, local=v.startswith("limit"),
                                    transfer="sequential" if v == "loom-sequential" else "auto",
                                    ag_transfer=AG_FORCED.get(v))
                batch_first = False
            run = torch.compile(model) if v.endswith("compiled") or v == "torch-async-tp" else model
            try:
                losses, ms = _run_variant(torch, dist, a, run, batch_first, rank, world, dev)
                results[v] = dict(ms=ms, losses=losses, wall_s=time.time() - t0)
                if a.profile:
                    _profile(torch, dist, a, run, batch_first, rank, world, dev, v)
            except Exception as e:  # noqa: BLE001  (a variant that fails is reported, the others still run)
                results[v] = dict(error=f"{type(e).__name__}: {e}".splitlines()[0][:400])
                traceback.print_exc()
            del model, run
            comm.free_unused()  # the loom layers' gathered-input buffers
            torch.cuda.empty_cache()
            if rank == 0:
                r = results[v]
                print(f"{v}: " + (f"{r['ms']:.2f} ms/step (wall {r['wall_s']:.0f} s)" if "ms" in r
                                  else r["error"]), flush=True)
        comm.close()
        dist.destroy_process_group()
        q.put((rank, "ok", results))
    except BaseException:
        q.put((rank, "error", traceback.format_exc()))


def _table(a, res, device):
    lines = [f"Llama-style decoder, {a.layers} layers, hidden {a.hidden}, ffn {a.ffn}, heads {a.heads}, "
             f"seq {a.seq}, bf16, AdamW, W = {a.world}, {device}: median ms per step over steps "
             f"{a.warmup}..{a.steps - 1}", "",
             "| variant | ms / step | vs limit (same mode) | loom vs it |", "|---|---|---|---|"]
    lim = {False: res.get("limit", {}).get("ms"), True: res.get("limit-compiled", {}).get("ms")}
    for v, r in res.items():
        if "ms" not in r:
            lines.append(f"| {v} | failed: {r['error'][:120]} | | |")
            continue
        compiled = v.endswith("compiled") or v == "torch-async-tp"
        ref = lim[compiled]
        loom_v = res.get("loom-compiled" if compiled else "loom", {}).get("ms")
        lines.append(f"| {v} | {r['ms']:.2f} | {r['ms'] / ref:.3f}x |" if ref else f"| {v} | {r['ms']:.2f} | |")
        lines[-1] += (f" {r['ms'] / loom_v:.3f}x |" if loom_v and v.startswith("torch") else " |")
    a_l, b_l = res.get("loom", {}).get("losses"), res.get("torch-tp", {}).get("losses")
    if a_l and b_l:
        worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a_l, b_l))
        lines += ["", f"losses loom vs torch-tp: first {a_l[0]:.5f} / {b_l[0]:.5f}, last {a_l[-1]:.5f} / "
                      f"{b_l[-1]:.5f}, largest relative difference over {len(a_l)} steps {worst:.2e}"]
    return "\n".join(lines)


def main():
    a = _args()
    import torch
    if torch.cuda.device_count() < a.world:
        print(f"llama_tp: needs {a.world} GPUs, {torch.cuda.device_count()} visible", file=sys.stderr)
        return 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, a.world, port, sys.argv[1:], q)) for r in range(a.world)]
    for p in procs:
        p.start()
    got = {}
    while len(got) < a.world:
        rank, status, value = q.get(timeout=3600)
        got[rank] = (status, value)
    for p in procs:
        p.join(timeout=60)
    bad = [f"rank {r}: {v}" for r, (s, v) in got.items() if s != "ok"]
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 1
    res = got[0][1]
    device = torch.cuda.get_device_name(0)
    table = _table(a, res, device)
    print(table)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(args=vars(a), device=device, results=res, table=table), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
