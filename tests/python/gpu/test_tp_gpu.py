"""loom.ag_gemm / loom.gemm_rs and loom.nn's tensor-parallel layers on 1 and
2 ranks, against torch in float64 (every rank builds every rank's inputs
from a seed; outputs poisoned with NaN before each call): uneven and empty
shards, both weight layouts, every dtype pair, bias, every transfer, the
gathered A in a symmetric buffer (bit for bit), a_shard in place inside it,
torch's current stream, the plan cache; the layers' training steps against
the same MLP in plain PyTorch; refusals by name."""
import pytest
import torch
import torch.distributed as dist
from dist_harness import run_ranks

import loom
from loom import tp

WORLDS = [1, pytest.param(2, marks=pytest.mark.two_gpus)]


def _rand(gen, *shape):
    return torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1


def _eps(dtype):
    return {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]


def _rel(got, want):
    assert tuple(got.shape) == tuple(want.shape), (tuple(got.shape), tuple(want.shape))
    if want.numel() == 0:
        return 0.0
    return ((got.double().cpu() - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()


# (op, m, n, k, ab, c, layout, bias, transfer, gathered): n and k this rank's
CASES = [
    ("ag", 256, 128, 64, torch.bfloat16, torch.bfloat16, "nk", True, "auto", False),
    ("ag", 301, 64, 128, torch.float16, torch.float32, "kn", False, "sequential", True),
    ("ag", 300, 256, 128, torch.bfloat16, torch.float32, "nk", True, "copy_engine", True),
    ("ag", 513, 128, 256, torch.bfloat16, torch.bfloat16, "kn", True, "sm_copy", "in_place"),
    # W = 2: rank 1 owns no row (the fused path asked for: "auto" is sequential at m = 1)
    ("ag", 1, 64, 64, torch.bfloat16, torch.bfloat16, "nk", False, "copy_engine", True),
    ("rs", 256, 128, 64, torch.bfloat16, torch.bfloat16, "nk", True, "auto", False),
    ("rs", 301, 64, 128, torch.float16, torch.float32, "kn", True, "sequential", False),
    ("rs", 777, 256, 128, torch.bfloat16, torch.float32, "nk", False, "sm_copy", False),
    ("rs", 1, 64, 64, torch.bfloat16, torch.bfloat16, "kn", True, "auto", False),
]


def _case(comm, case, call):
    op, m, n, k, ab, c, layout, with_bias, transfer, gathered = case
    rank, W, dev = comm.rank, comm.size, f"cuda:{comm.device}"
    gen = torch.Generator().manual_seed(1000 * call + 17)
    b0, b1 = tp.shard_range(m, W, rank)
    # every rank's operands, built on every rank
    if op == "ag":
        a_full = _rand(gen, m, k)
        ws = [_rand(gen, k, n) if layout == "kn" else _rand(gen, n, k) for _ in range(W)]
        biases = [_rand(gen, n) for _ in range(W)]
        w, bias = ws[rank], biases[rank] if with_bias else None
        a_q, w_q = a_full.to(ab), w.to(ab)
        ref = a_q.double() @ (w_q.double() if layout == "kn" else w_q.double().t())
        if bias is not None:
            ref = ref + bias.to(c).double()
        buf = None
        if gathered:
            buf = comm.empty((m, k), ab)
            buf.fill_(float("nan"))
        a_shard = a_q[b0:b1].to(dev)
        if gathered == "in_place":
            buf[b0:b1].copy_(a_shard)
            a_shard = buf[b0:b1]
        out = torch.full((m, n), float("nan"), dtype=c, device=dev)
        y = loom.ag_gemm(comm, a_shard, w_q.to(dev), bias.to(c).to(dev) if bias is not None else None, m=m,
                         layout=layout, out=out, gathered=buf, transfer=transfer)
        assert y is out
        torch.cuda.synchronize()
        if buf is not None:
            assert torch.equal(buf.cpu(), a_q), "the gathered A is the shards, bit for bit"
            comm.free(buf)
        want, bound = ref, _eps(c) + 1e-6 * k
    else:
        a_s = [_rand(gen, m, k).to(ab) for _ in range(W)]
        w_s = [(_rand(gen, k, n) if layout == "kn" else _rand(gen, n, k)).to(ab) for _ in range(W)]
        bias = _rand(gen, n).to(c) if with_bias else None
        ref = sum(a.double() @ (w.double() if layout == "kn" else w.double().t()) for a, w in zip(a_s, w_s))
        if bias is not None:
            ref = ref + bias.double()
        out = torch.full((b1 - b0, n), float("nan"), dtype=c, device=dev)
        y = loom.gemm_rs(comm, a_s[rank].to(dev), w_s[rank].to(dev), bias.to(dev) if bias is not None else None,
                         layout=layout, out=out, transfer=transfer)
        assert y is out
        torch.cuda.synchronize()
        want, bound = ref[b0:b1], (W + 1) * _eps(c) + 1e-6 * k
    err = _rel(y, want)
    assert not torch.isnan(y).any(), "an output element was left unwritten"
    assert err < bound, f"relative error {err} (bound {bound})"
    return err


def _ops(rank, world):
    failures, seen = [], set()
    with loom.Comm.from_process_group() as comm:
        for call, case in enumerate(CASES):
            try:
                _case(comm, case, call)
            except AssertionError as e:
                failures.append(f"{case}: {e}")
        plans = {k: p for k, p in comm._plan_cache.items() if k[0] == "tp"}
        for key, plan in plans.items():
            seen.add((key[1], key[9], plan.info["transfer"]))
        assert len(plans) == len(CASES), f"one cached plan per case: {sorted(plans)}"
        # the same call again: the cached plan, on torch's current stream (a side stream here)
        a = torch.randn(64, 128, device="cuda").bfloat16()
        w = torch.randn(256, 128, device="cuda").bfloat16()
        ref = tp.gemm_rs(comm, a, w)  # a new layout: a new plan
        n_plans = len(comm._plan_cache)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            y = tp.gemm_rs(comm, a, w)
        s.synchronize()
        assert len(comm._plan_cache) == n_plans
        assert torch.equal(y, ref), "the same call on another stream gives the same bits"
        torch.cuda.synchronize()
        dist.barrier()
    assert not failures, "\n".join(failures)
    return sorted(seen)


@pytest.mark.parametrize("world", WORLDS)
def test_ops_match_torch(world):
    seen = run_ranks(_ops, world)[0]
    print("op, transfer asked, transfer taken:", seen)
    taken = dict(((op, asked), t) for op, asked, t in seen)
    assert taken[("ag_gemm", "sequential")] == "sequential" and taken[("gemm_rs", "sm_copy")] == "sm_copy"
    if world == 1:
        assert taken[("ag_gemm", "auto")] == "sequential"  # nothing to overlap on one rank


# ---- the layers -------------------------------------------------------------------------

H, F = 256, 512


def _layers(rank, world, steps=3):
    """A sequence-parallel MLP (fc1 column-parallel, GeLU, fc2 row-parallel)
    trained for `steps` SGD steps against the same MLP in plain PyTorch on
    every rank (fp32); loom's layers keep fp32 parameters and compute in
    bf16. m = 301 rows: uneven shards when W = 2."""
    torch.manual_seed(0)
    dev = f"cuda:{rank}"
    m, lr = 301, 0.2
    ref1, ref2 = torch.nn.Linear(H, F, device=dev), torch.nn.Linear(F, H, device=dev)
    opt_ref = torch.optim.SGD(list(ref1.parameters()) + list(ref2.parameters()), lr=lr)
    worst = {}
    with loom.Comm.from_process_group() as comm:
        fc1 = loom.nn.ColumnParallelLinear.from_linear(comm, ref1, out_dtype=torch.float32)
        fc2 = loom.nn.RowParallelLinear.from_linear(comm, ref2, out_dtype=torch.float32)
        assert fc1.weight.dtype == torch.float32 and fc1.compute_dtype == torch.bfloat16
        opt = torch.optim.SGD(list(fc1.parameters()) + list(fc2.parameters()), lr=lr)
        b0, b1 = tp.shard_range(m, world, rank)
        n1, k2 = F // world, F // world
        w1_init = fc1.weight.detach().double().cpu().clone()
        for step in range(steps):
            gen = torch.Generator().manual_seed(step)
            x_full = torch.randn(m, H, generator=gen).to(dev)
            target = torch.randn(m, H, generator=gen).to(dev)
            xr = x_full.clone().requires_grad_(True)
            opt_ref.zero_grad()
            y_ref = ref2(torch.nn.functional.gelu(ref1(xr)))
            loss_ref = ((y_ref - target) ** 2).sum() / m
            loss_ref.backward()

            opt.zero_grad()
            x = x_full[b0:b1].clone().requires_grad_(True)
            y = fc2(torch.nn.functional.gelu(fc1(x, m=m)))
            loss = ((y - target[b0:b1]) ** 2).sum() / m  # this rank's share
            loss.backward()
            total = loss.detach().clone()
            dist.all_reduce(total)
            for name, got, want in [
                ("loss", total, loss_ref.detach()), ("y", y.detach(), y_ref.detach()[b0:b1]),
                ("dx", x.grad, xr.grad[b0:b1]),
                ("dw1", fc1.weight.grad, ref1.weight.grad[rank * n1:(rank + 1) * n1]),
                ("db1", fc1.bias.grad, ref1.bias.grad[rank * n1:(rank + 1) * n1]),
                ("dw2", fc2.weight.grad, ref2.weight.grad[:, rank * k2:(rank + 1) * k2]),
                ("db2", fc2.bias.grad, ref2.bias.grad)]:
                worst[name] = max(worst.get(name, 0.0), _rel(got.reshape(want.shape), want.double().cpu()))
            opt_ref.step()
            opt.step()
        moved = _rel(fc1.weight.detach(), w1_init)  # training changed the weights (so "after" means something)
        worst["w1 after"] = _rel(fc1.weight.detach(), ref1.weight.detach()[rank * n1:(rank + 1) * n1].double().cpu())
        worst["w2 after"] = _rel(fc2.weight.detach(),
                                 ref2.weight.detach()[:, rank * k2:(rank + 1) * k2].double().cpu())
        torch.cuda.synchronize()
        comm.check()
        fc1.free_buffers()
        assert fc1._gathered is None and not any(not a.internal for a in comm._allocs.values())
    bad = {k: v for k, v in worst.items() if not v < 2e-2}
    assert not bad, f"relative differences over the tolerance 2e-2: {worst}"
    assert moved > 0.1, f"the weights hardly moved ({moved}): the test would not see a wrong update"
    return worst, moved


@pytest.mark.parametrize("world", WORLDS)
def test_layers_train_like_plain_pytorch(world):
    worst = run_ranks(_layers, world)
    print("largest relative differences per rank:", worst)


def _guard_and_refusals(rank, world):
    dev = f"cuda:{rank}"
    with loom.Comm.from_process_group() as comm:
        fc = loom.nn.ColumnParallelLinear(comm, 128, 128 * world)
        x = torch.randn(64, 128, device=dev, dtype=torch.bfloat16, requires_grad=True)
        y1 = fc(x)
        l1 = y1.float().square().sum()
        y2 = fc(x)  # overwrites the gathered input y1's backward needs
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            l1.backward()
        y2.float().square().sum().backward()
        assert torch.isfinite(fc.weight.grad).all() and torch.isfinite(x.grad).all()
        fc.free_buffers()

        a = torch.randn(64, 128, device=dev).bfloat16()
        w = torch.randn(64, 128, device=dev).bfloat16()
        with pytest.raises(loom.InvalidArgumentError, match="gathered .* is not symmetric memory of this comm"):
            loom.ag_gemm(comm, a, w, gathered=torch.empty(64 * world, 128, device=dev, dtype=torch.bfloat16))
        big = torch.randn(64 * 128 + 8, device=dev).bfloat16()
        with pytest.raises(loom.InvalidArgumentError, match=r"loom_ag_gemm: a_shard=0x[0-9a-f]+ is not 16-byte aligned"):
            loom.ag_gemm(comm, big[1:1 + 64 * 128].view(64, 128), w)
        with pytest.raises(loom.InvalidArgumentError, match=r"loom_plan_gemm_rs: .*n=12"):
            loom.gemm_rs(comm, a, torch.randn(12, 128, device=dev).bfloat16())
        with pytest.raises(loom.InvalidArgumentError, match="LOOM_TP_COPY_ENGINE is not offered for GEMM"):
            loom.gemm_rs(comm, a, w, transfer="copy_engine")
        with pytest.raises(loom.InvalidArgumentError, match="loom.gemm_rs: weight has dtype torch.float16"):
            loom.gemm_rs(comm, a, w.half())
        torch.cuda.synchronize()
        dist.barrier()
        y = loom.gemm_rs(comm, a, w)  # the comm works on afterwards
        torch.cuda.synchronize()
        comm.check()
        assert torch.isfinite(y).all()


@pytest.mark.parametrize("world", WORLDS)
def test_stale_gathered_input_and_refusals(world):
    run_ranks(_guard_and_refusals, world)


def _first_fused_rs(rank, world):
    """The fused GEMM+ReduceScatter as the first GEMM of a fresh process."""
    with loom.Comm.from_process_group(timeout_ms=5000) as comm:
        a = torch.randn(1000, 512, device="cuda").bfloat16()
        w = torch.randn(256, 512, device="cuda").bfloat16()
        y = loom.gemm_rs(comm, a, w, transfer="sm_copy")
        torch.cuda.synchronize()
        comm.check()
        assert torch.isfinite(y).all()


@pytest.mark.parametrize("world", WORLDS)
def test_fused_gemm_rs_first_call_under_lazy_loading(world, monkeypatch):
    monkeypatch.setenv("CUDA_MODULE_LOADING", "LAZY")
    run_ranks(_first_fused_rs, world)


# gemm_ar: (m, n, k, ab, c, layout, bias, residual, scale, activation, transfer)
AR_CASES = [
    (300, 256, 128, torch.bfloat16, torch.bfloat16, "nk", True, True, 1.0, "none", "auto"),
    (77, 128, 64, torch.float16, torch.float32, "kn", True, False, 0.5, "gelu_tanh", "sequential"),
    (129, 136, 72, torch.bfloat16, torch.float16, "nk", False, True, 1.0, "relu", "sm_copy"),
    (1, 64, 64, torch.bfloat16, torch.bfloat16, "kn", True, True, 1.0, "none", "auto"),
]


def _act(name, v):
    if name == "relu":
        return v.clamp_min(0)
    if name == "gelu_tanh":
        return torch.nn.functional.gelu(v, approximate="tanh")
    return v


def _gemm_ar(rank, world):
    """loom.gemm_ar against torch (fp64) on every rank: every epilogue piece
    but dropout, then dropout: dropped elements are the residual exactly,
    kept ones the reference / (1 - p) + residual, about 1 - p of them kept,
    and the fused and sequential plans drop the same elements."""
    dev = f"cuda:{rank}"
    worst = 0.0
    with loom.Comm.from_process_group() as comm:
        for call, (m, n, k, ab, c, layout, with_bias, with_res, scale, act, transfer) in enumerate(AR_CASES):
            gen = torch.Generator().manual_seed(500 + call)
            a_s = [_rand(gen, m, k).to(ab) for _ in range(world)]
            w_s = [(_rand(gen, k, n) if layout == "kn" else _rand(gen, n, k)).to(ab) for _ in range(world)]
            bias = _rand(gen, n).to(c) if with_bias else None
            res = _rand(gen, m, n).to(c) if with_res else None
            ref = sum(a.double() @ (w.double() if layout == "kn" else w.double().t()) for a, w in zip(a_s, w_s))
            ref = ref * scale + (bias.double() if bias is not None else 0)
            ref = _act(act, ref) + (res.double() if res is not None else 0)
            y = loom.gemm_ar(comm, a_s[rank].to(dev), w_s[rank].to(dev), bias.to(dev) if bias is not None else None,
                             residual=res.to(dev) if res is not None else None, scale=scale, activation=act,
                             layout=layout, out_dtype=c, transfer=transfer)
            torch.cuda.synchronize()
            assert not torch.isnan(y).any(), f"case {call}: an output element was left unwritten"
            err, bound = _rel(y, ref), (world + 1) * _eps(c) + 1e-6 * k
            assert err < bound, f"case {call}: relative error {err} (bound {bound})"
            worst = max(worst, err)
        # the sequential path's GEMM engine, as asked, and the same result from both
        a1, w1 = _rand(torch.Generator().manual_seed(9), 130, 64).bfloat16().to(dev), \
            _rand(torch.Generator().manual_seed(10), 128, 64).bfloat16().to(dev)
        ys = {}
        for engine in ("loom", "cublaslt"):
            plan = loom.tp.gemm_ar_plan(comm, a1, w1, transfer="sequential", sequential_gemm=engine)
            assert plan.info["transfer"] == "sequential" and plan.info["gemm"] == engine, plan.info
            ys[engine] = loom.gemm_ar(comm, a1, w1, transfer="sequential", sequential_gemm=engine).float()
        torch.cuda.synchronize()
        assert ((ys["loom"] - ys["cublaslt"]).abs().max() / ys["cublaslt"].abs().max()).item() < 4 * _eps(torch.bfloat16)
        # dropout: the mask is loom's (Philox of the element index), the same on both paths
        m, n, k, p = 256, 512, 128, 0.25
        gen = torch.Generator().manual_seed(777)
        a_s = [_rand(gen, m, k).bfloat16() for _ in range(world)]
        w_s = [_rand(gen, n, k).bfloat16() for _ in range(world)]
        bias, res = _rand(gen, n).float(), _rand(gen, m, n).float()
        pre = sum(a.double() @ w.double().t() for a, w in zip(a_s, w_s)) + bias.double()
        outs = []
        for transfer in ("sm_copy", "sequential"):  # fused explicitly (auto is sequential untuned)
            y = loom.gemm_ar(comm, a_s[rank].to(dev), w_s[rank].to(dev), bias.to(dev), residual=res.to(dev),
                             dropout_p=p, seed=1234, offset=8, out_dtype=torch.float32, transfer=transfer)
            outs.append(y.clone())
        torch.cuda.synchronize()
        # the same mask on both paths; the values within rounding (the two
        # paths' GEMMs may sum k in different orders, and the sequential one
        # may be cuBLASLt's)
        res_d = res.to(dev)
        masks = [o == res_d for o in outs]
        assert torch.equal(masks[0], masks[1]), "fused and sequential: the same dropout mask"
        diff = ((outs[0] - outs[1]).abs().max() / outs[1].abs().max()).item()
        assert diff < (world + 1) * _eps(torch.float32) + 1e-3, f"fused and sequential differ by {diff} (relative)"
        y = outs[0].double().cpu()
        dropped = y == res.double()
        kept_frac = 1.0 - dropped.double().mean().item()
        assert abs(kept_frac - (1 - p)) < 0.02, f"kept {kept_frac:.3f} of the elements, expected {1 - p}"
        kept = ~dropped
        err = ((y - res.double() - pre / (1 - p))[kept].abs().max() / (pre / (1 - p)).abs().max()).item()
        assert err < (world + 1) * _eps(torch.float32) + 1e-3, f"kept elements: relative error {err}"
        torch.cuda.synchronize()
        dist.barrier()
    return worst


@pytest.mark.parametrize("world", WORLDS)
def test_gemm_ar_matches_torch(world):
    worst = run_ranks(_gemm_ar, world)
    print("largest relative errors per rank:", worst)
