"""The registered ops (torch.ops.loom.*, loom.functional) on 1 and 2 ranks:
forward and backward against the same layers in float64 torch (every rank
builds every rank's operands from a seed), torch.library.opcheck on each
op, and a Llama-style sequence-parallel block of loom.nn layers run eager,
under torch.compile(fullgraph=True) (forward and backward) and under
mode="reduce-overhead" (CUDA graph replays with fresh inputs), all equal
within bf16 tolerance."""
import pytest
import torch
from dist_harness import print_ranks, run_ranks, within

import loom
import loom.functional as LF
from loom import coll, tp

WORLDS = [1, pytest.param(2, marks=pytest.mark.two_gpus)]
BF16 = torch.bfloat16


def _rand(gen, *shape):
    return torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1


def _rel(got, want):
    assert tuple(got.shape) == tuple(want.shape), (tuple(got.shape), tuple(want.shape))
    got = got.double().cpu()
    assert torch.isfinite(got).all()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()


def _leaf(t, dev, dtype=BF16):
    return t.to(dev, dtype).requires_grad_()


def _mlp(comm, dev, gen, worst):
    """Sequence-parallel MLP: z = gemm_rs(gelu(ag_gemm(x))) vs the full MLP."""
    W, p = comm.size, comm.rank
    S, B, H, F = 6 * W, 3, 64, 64 * W
    x, w1, b1, w2, b2, gz = (_rand(gen, S, B, H), _rand(gen, F, H), _rand(gen, F), _rand(gen, H, F) / 4,
                             _rand(gen, H), _rand(gen, S, B, H))
    ref = [t.clone().requires_grad_() for t in (x, w1, b1, w2, b2)]
    z_ref = torch.nn.functional.linear(torch.nn.functional.gelu(torch.nn.functional.linear(ref[0], ref[1], ref[2])),
                                       ref[3], ref[4])
    (z_ref * gz).sum().backward()
    rows, cols = slice(p * S // W, (p + 1) * S // W), slice(p * F // W, (p + 1) * F // W)
    mine = [_leaf(x[rows], dev), _leaf(w1[cols], dev), _leaf(b1[cols], dev), _leaf(w2[:, cols], dev),
            _leaf(b2, dev)]
    z = LF.gemm_rs(torch.nn.functional.gelu(LF.ag_gemm(mine[0], mine[1], comm, mine[2])), mine[3], comm, mine[4])
    (z.float() * gz[rows].to(dev, torch.float32)).sum().backward()
    worst["mlp z"] = _rel(z, z_ref.detach()[rows])
    for name, t, r, sl in (("dx", mine[0], ref[0], (rows,)), ("dw1", mine[1], ref[1], (cols,)),
                           ("db1", mine[2], ref[2], (cols,)), ("dw2", mine[3], ref[3], (slice(None), cols)),
                           ("db2", mine[4], ref[4], ())):
        worst["mlp " + name] = _rel(t.grad, r.grad[sl] if sl else r.grad)


def _gemm_ar(comm, dev, gen, worst):
    """Plain TP row-parallel layer: y = AllReduce(x_p w_p^T) + b + r (one loss)."""
    W, p = comm.size, comm.rank
    M, N, K = 40, 48, 32 * W
    x, w, b, r, gy = _rand(gen, 2, M // 2, K), _rand(gen, N, K), _rand(gen, N), _rand(gen, 2, M // 2, N), \
        _rand(gen, 2, M // 2, N)
    ref = [t.clone().requires_grad_() for t in (x, w, b, r)]
    y_ref = 0.5 * torch.nn.functional.linear(ref[0], ref[1]) + ref[2] + ref[3]
    (y_ref * gy).sum().backward()
    cols = slice(p * K // W, (p + 1) * K // W)
    mine = [_leaf(x[..., cols], dev), _leaf(w[:, cols], dev), _leaf(b, dev), _leaf(r, dev)]
    y = LF.gemm_ar(mine[0], mine[1], comm, mine[2], residual=mine[3], scale=0.5)
    (y.float() * gy.to(dev, torch.float32)).sum().backward()
    worst["gemm_ar y"] = _rel(y, y_ref.detach())
    for name, t, g in (("dx", mine[0], ref[0].grad[..., cols]), ("dw", mine[1], ref[1].grad[:, cols]),
                       ("db", mine[2], ref[2].grad), ("dr", mine[3], ref[3].grad)):
        worst["gemm_ar " + name] = _rel(t.grad, g)


def _collectives(comm, dev, gen, worst):
    """all_reduce / reduce_scatter / all_gather, every rank's own loss."""
    W, p = comm.size, comm.rank
    R, C = 5, 16
    xs, gys = [_rand(gen, R, C) for _ in range(W)], [_rand(gen, R, C) for _ in range(W)]
    bias, nw = _rand(gen, C), _rand(gen, C)
    total = sum(xs)
    # forward with the whole epilogue: RMSNorm(2 * sum + bias + residual)
    res = _rand(gen, R, C)
    y = LF.all_reduce(xs[p].to(dev, torch.float32), comm, bias=bias.to(dev, torch.float32),
                      residual=res.to(dev, torch.float32), norm="rms", norm_weight=nw.to(dev, torch.float32),
                      scale=2.0)
    v = 2 * total + bias + res
    worst["all_reduce+rms y"] = _rel(y, v * torch.rsqrt(v.square().mean(-1, keepdim=True) + 1e-5) * nw)
    # gradients: all_reduce <- all_reduce, reduce_scatter <- all_gather, all_gather <- reduce_scatter
    x = _leaf(xs[p], dev, torch.float32)
    (LF.all_reduce(x, comm, scale=3.0) * gys[p].to(dev, torch.float32)).sum().backward()
    worst["all_reduce dx"] = _rel(x.grad, 3.0 * sum(gys))
    b0, b1 = tp.shard_range(R, W, p)
    x, b = _leaf(xs[p], dev, torch.float32), _leaf(bias, dev, torch.float32)
    s = LF.reduce_scatter(x, comm, bias=b)
    worst["reduce_scatter y"] = _rel(s, (total + bias)[b0:b1])
    (s * gys[p][b0:b1].to(dev, torch.float32)).sum().backward()
    worst["reduce_scatter dx"] = _rel(x.grad, torch.cat([g[slice(*tp.shard_range(R, W, q))]
                                                         for q, g in enumerate(gys)]))
    worst["reduce_scatter db"] = _rel(b.grad, gys[p][b0:b1].sum(0))
    part = _leaf(xs[0][b0:b1], dev, torch.float32)
    g = LF.all_gather(part, comm, size=R)
    (g * gys[p].to(dev, torch.float32)).sum().backward()
    worst["all_gather dx"] = _rel(part.grad, sum(gys)[b0:b1])
    flat = _rand(gen, 21)
    lo, hi = coll.slice_range(21, 8, W, p)
    worst["reduce_scatter flat"] = _rel(LF.reduce_scatter(flat.to(dev, torch.float32), comm), W * flat[lo:hi])


def _against_torch(rank, world):
    dev = f"cuda:{rank}"
    worst = {}
    with loom.Comm.from_process_group() as comm:
        gen = torch.Generator().manual_seed(7)
        _mlp(comm, dev, gen, worst)
        _gemm_ar(comm, dev, gen, worst)
        _collectives(comm, dev, gen, worst)
        torch.cuda.synchronize()
        comm.check()
    return max(within(worst, 2e-2).values())


@pytest.mark.parametrize("world", WORLDS)
def test_functional_ops_and_gradients_match_torch(world):
    print("largest relative difference per rank:", run_ranks(_against_torch, world, timeout=300))


def _opcheck(rank, world):
    dev = f"cuda:{rank}"
    torch.manual_seed(3)
    with loom.Comm.from_process_group() as comm:
        n = comm.name
        x = torch.randn(16, 2, 64, device=dev, dtype=BF16, requires_grad=True)
        w = torch.randn(32, 64, device=dev, dtype=BF16, requires_grad=True)
        b = torch.randn(32, device=dev, dtype=BF16, requires_grad=True)
        t = torch.randn(6, 16, device=dev, requires_grad=True)
        cases = [(torch.ops.loom.ag_gemm.default, (x, w, b, n), {"keep_gathered": True}),
                 (torch.ops.loom.gemm_rs.default, (x, w, b, n), {}),
                 (torch.ops.loom.gemm_ar.default, (x, w, b, None, n), {"scale": 0.5}),
                 (torch.ops.loom.all_reduce.default, (t, None, None, None, None, n), {"scale": 2.0}),
                 (torch.ops.loom.reduce_scatter.default, (t, None, None, None, None, n), {}),
                 (torch.ops.loom.all_gather.default,
                  (torch.randn(*coll.slice_shape((6, 16), world, rank), device=dev, requires_grad=True), n),
                  {"size": 6})]
        for op, args, kwargs in cases:
            torch.library.opcheck(op, args, kwargs)
        torch.cuda.synchronize()
        comm.check()
    return len(cases)


@pytest.mark.parametrize("world", WORLDS)
def test_opcheck_every_op(world):
    run_ranks(_opcheck, world, timeout=300)


class Block(torch.nn.Module):
    """A Llama-style decoder block, sequence parallel: x [s / W, b, h]."""

    def __init__(self, comm, h, heads, f, dev):
        super().__init__()
        self.heads = heads // comm.size
        self.norm1 = torch.nn.RMSNorm(h, device=dev, dtype=BF16)
        self.norm2 = torch.nn.RMSNorm(h, device=dev, dtype=BF16)
        self.qkv = loom.nn.ColumnParallelLinear(comm, h, 3 * h, bias=False, copy_gathered=True)
        self.o = loom.nn.RowParallelLinear(comm, h, h, bias=False)
        self.up = loom.nn.ColumnParallelLinear(comm, h, f, copy_gathered=True)
        self.down = loom.nn.RowParallelLinear(comm, f, h)

    def forward(self, x):
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        s, b = q.shape[:2]
        q, k, v = (t.reshape(s, b, self.heads, -1).permute(1, 2, 0, 3) for t in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.permute(2, 0, 1, 3).reshape(s, b, -1))
        return x + self.down(torch.nn.functional.silu(self.up(self.norm2(x))))


def _compiled_block(rank, world):
    dev = f"cuda:{rank}"
    torch.manual_seed(11 + rank)
    worst = {}
    with loom.Comm.from_process_group() as comm:
        block = Block(comm, 256, 8, 512, dev)
        seq, batch = 128, 2

        def step(fn, x):
            for p in block.parameters():
                p.grad = None
            x = x.clone().requires_grad_()
            y = fn(x)
            y.float().square().mean().backward()
            return y.detach(), x.grad, [p.grad.clone() for p in block.parameters()]

        x = torch.randn(seq // world, batch, 256, device=dev, dtype=BF16)
        y0, gx0, gp0 = step(block, x)
        compiled = torch.compile(block, fullgraph=True)
        for _ in range(2):  # the second call runs the compiled graphs as they are
            y1, gx1, gp1 = step(compiled, x)
        worst["compiled y"] = _rel(y1, y0.double().cpu())
        worst["compiled dx"] = _rel(gx1, gx0.double().cpu())
        worst["compiled dparams"] = max(_rel(a, b.double().cpu()) for a, b in zip(gp1, gp0))
        from torch._dynamo.utils import counters
        skips = counters["inductor"]["cudagraph_skips"]
        graphed = torch.compile(block, fullgraph=True, mode="reduce-overhead")
        with torch.no_grad():
            for i in range(4):  # warm-up, capture, then replays, each with fresh inputs
                xi = torch.randn(seq // world, batch, 256, device=dev, dtype=BF16)
                want = block(xi).double().cpu()
                got = graphed(xi).clone()
                worst[f"reduce-overhead y call {i}"] = _rel(got, want)
        assert counters["inductor"]["cudagraph_skips"] == skips, "inductor skipped the CUDA graph"
        torch.cuda.synchronize()
        comm.check()
    return within(worst, 3e-2)


@pytest.mark.parametrize("world", WORLDS)
def test_block_eager_compiled_and_cuda_graphs_agree(world):
    print_ranks(run_ranks(_compiled_block, world, timeout=600))


def _embedding(rank, world):
    from emb_ref import local_inputs, make_problem
    dev = f"cuda:{rank}"
    tpr, rows, D, B = [2, 1][:world] if world == 2 else [3], [50, 70, 90], 32, 8 * world
    p = make_problem(21, tpr, rows, D, B)
    x = local_inputs(p, rank, dev)
    with loom.Comm.from_process_group() as comm:
        w = x["tables"].clone().requires_grad_()
        gy = torch.randn(B // world, len(rows) * D, device=dev, generator=torch.Generator(dev).manual_seed(rank))
        kw = dict(tables_per_rank=tpr, rows=rows, global_batch=B)
        y = LF.embedding_a2a(w, x["indices"], x["offsets"], comm, **kw)
        (y * gy).sum().backward()
        # the unregistered functions, eager: the same kernels, the same bits
        want = loom.embedding_a2a(comm, x["tables"], x["indices"], x["offsets"], **kw).clone()
        gw = loom.embedding_a2a_backward(comm, gy, x["indices"], x["offsets"], dim=D, table_dtype=torch.float32,
                                         **kw)
        torch.cuda.synchronize()
        assert torch.equal(y, want)
        # fp32 tables: the backward adds with fp32 atomics in no fixed order (loom.h), so the gradient matches to
        # rounding, not bit for bit
        torch.testing.assert_close(w.grad, gw, rtol=1e-5, atol=1e-5)
        torch.library.opcheck(torch.ops.loom.embedding_a2a.default,
                              (x["tables"].clone().requires_grad_(), x["indices"], x["offsets"], None, comm.name), kw)
        compiled = torch.compile(lambda t: LF.embedding_a2a(t, x["indices"], x["offsets"], comm, **kw),
                                 fullgraph=True)
        w.grad = None
        (compiled(w) * gy).sum().backward()
        torch.cuda.synchronize()
        torch.testing.assert_close(w.grad, gw, rtol=1e-5, atol=1e-5)
        comm.check()


@pytest.mark.parametrize("world", WORLDS)
def test_embedding_a2a_op_matches_the_eager_calls(world):
    run_ranks(_embedding, world, timeout=300)
