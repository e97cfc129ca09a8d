"""loom.MoE on 2 ranks: the whole expert MLP layer (mlp) against the same
layer per token in float64 (its fused and unfused forms the same bits), dispatch + combine of the received rows
themselves against sum_j w_j x_t, the received row counts against the
routing, bad arguments refused by name; the registered op; loom.nn.MoE's
forward and every gradient (x, router weights, experts) against float64
autograd, and the same under torch.compile(fullgraph=True) equal to eager. Every rank draws every rank's
inputs and every expert's weights from one seed (tokens per rank differ)."""
import pytest
import torch
import torch.nn.functional as F
from dist_harness import print_ranks, run_ranks, within

import loom

pytestmark = pytest.mark.two_gpus

H, E, K, FFN, TMAX = 256, 8, 2, 512, 96


def _problem(world):
    g = torch.Generator().manual_seed(77)
    toks = [TMAX - 17 * r for r in range(world)]
    xs = [(torch.rand(t, H, generator=g) * 2 - 1).to(torch.bfloat16) for t in toks]
    ids = [torch.rand(t, E, generator=g).topk(K, dim=1).indices.to(torch.int32) for t in toks]
    ws = [torch.rand(t, K, generator=g) for t in toks]
    wg = ((torch.rand(E, FFN, H, generator=g) * 2 - 1) / H ** 0.5).to(torch.bfloat16)
    wu = ((torch.rand(E, FFN, H, generator=g) * 2 - 1) / H ** 0.5).to(torch.bfloat16)
    wd = ((torch.rand(E, H, FFN, generator=g) * 2 - 1) / FFN ** 0.5).to(torch.bfloat16)
    return xs, ids, ws, wg, wu, wd


def _layer_ref(x, ids, w, wg, wu, wd):
    """out[t] = sum_j w[t, j] (silu(x Wg^T) * (x Wu^T)) Wd^T of expert ids[t, j], float64."""
    x, wg, wu, wd = x.double(), wg.double(), wu.double(), wd.double()
    out = torch.zeros(x.shape[0], H, dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(K):
            e = int(ids[t, j])
            h = F.silu(x[t] @ wg[e].t()) * (x[t] @ wu[e].t())
            out[t] += float(w[t, j]) * (h @ wd[e].t())
    return out


def _rel(got, want):
    return ((got.double().cpu() - want).abs().max() / want.abs().max()).item()


def _local_experts(moe, wg, wu, wd, dev):
    """gate_up [n, 2F, H] and down [n, H, F] of the plan's rank's experts."""
    n, f0 = moe.local_experts, moe.first_expert
    gate_up = torch.cat([wg[f0:f0 + n], wu[f0:f0 + n]], dim=1).to(dev).contiguous()
    return gate_up, wd[f0:f0 + n].to(dev).contiguous()


def _mlp_and_steps(rank, world):
    dev = f"cuda:{rank}"
    xs, ids, ws, wg, wu, wd = _problem(world)
    x, i, w = xs[rank].to(dev), ids[rank].to(dev), ws[rank].to(dev)
    with loom.Comm.from_process_group() as comm:
        with loom.MoE(comm, H, E, K, TMAX, ffn=FFN) as moe:
            n, f0 = moe.local_experts, moe.first_expert
            gate_up, down = _local_experts(moe, wg, wu, wd, dev)
            out = moe.mlp(x, i, w, gate_up, down)
            torch.cuda.synchronize()
            err_mlp = _rel(out, _layer_ref(xs[rank], ids[rank], ws[rank], wg, wu, wd))
            assert err_mlp < 3e-2, f"mlp: relative error {err_mlp}"

            rows, offsets = moe.dispatch(x, i)
            torch.cuda.synchronize()
            mine = sum(int(((ids[r] >= f0) & (ids[r] < f0 + n)).sum()) for r in range(world))
            assert int(offsets[-1]) == mine, f"received {int(offsets[-1])} rows, the routing says {mine}"
            back = moe.combine(rows, w)  # the rows themselves as the experts' outputs
            torch.cuda.synchronize()
            want = (ws[rank].double().unsqueeze(2) * xs[rank].double().unsqueeze(1)).sum(1)
            err_ident = _rel(back, want)
            assert err_ident < 1e-2, f"dispatch + combine: relative error {err_ident}"

            assert moe.mlp_form(x.shape[0]) == "fused"  # auto, nothing tuned
            for form in ("fused", "unfused", "fused_all"):  # each form forced: the same bits
                with loom.MoE(comm, H, E, K, TMAX, ffn=FFN, mlp_path=form) as forced:
                    assert forced.mlp_form(x.shape[0]) == form
                    got = forced.mlp(x, i, w, gate_up, down)
                    torch.cuda.synchronize()
                    assert torch.equal(got, out), f"mlp_path={form} differs from auto's"
            with pytest.raises(loom.InvalidArgumentError, match="mlp_path"):
                loom.MoE(comm, H, E, K, TMAX, ffn=FFN, mlp_path="sideways")
            tuned = moe.mlp_tune(x, i, w, gate_up, down).clone()  # the fastest form and tiles; the layer's output
            torch.cuda.synchronize()
            err_tuned = _rel(tuned, _layer_ref(xs[rank], ids[rank], ws[rank], wg, wu, wd))
            assert err_tuned < 3e-2, f"mlp_tune: relative error {err_tuned}"
            assert moe.mlp_form(x.shape[0]) in ("fused", "unfused", "fused_all")
            assert torch.equal(moe.mlp(x, i, w, gate_up, down), tuned), "mlp after mlp_tune differs from its output"

            with pytest.raises(loom.InvalidArgumentError, match="ids"):
                moe.mlp(x, i.long(), w, gate_up, down)
            with pytest.raises(loom.InvalidArgumentError, match="gate_up"):
                moe.mlp(x, i, w, gate_up[:, :FFN].contiguous(), down)
    return err_mlp, err_ident


def test_moe_mlp_dispatch_combine_match_torch():
    errs = run_ranks(_mlp_and_steps, 2, timeout=240)
    print("relative errors (mlp, dispatch+combine) per rank:", errs)


def _registered_op(rank, world):
    import loom.functional as LF
    dev = f"cuda:{rank}"
    xs, ids, ws, wg, wu, wd = _problem(world)
    x, i, w = xs[rank].to(dev), ids[rank].to(dev), ws[rank].to(dev)
    with loom.Comm.from_process_group() as comm:
        with loom.MoE(comm, H, E, K, TMAX, ffn=FFN) as moe:
            gate_up, down = _local_experts(moe, wg, wu, wd, dev)
            want = moe.mlp(x, i, w, gate_up, down)
            got = LF.moe_mlp(x, i, w, gate_up, down, comm, experts=E, max_tokens=TMAX)
            compiled = torch.compile(lambda x: LF.moe_mlp(x, i, w, gate_up, down, comm, experts=E, max_tokens=TMAX),
                                     fullgraph=True)
            with torch.no_grad():
                got_c = compiled(x)
            torch.cuda.synchronize()
            assert torch.equal(got, want) and torch.equal(got_c, want)
            torch.library.opcheck(torch.ops.loom.moe_mlp.default, (x, i, w, gate_up, down, comm.name),
                                  {"experts": E, "max_tokens": TMAX}, test_utils=("test_schema", "test_faketensor"))


def test_moe_mlp_registered_op_matches_the_plan():
    run_ranks(_registered_op, 2, timeout=300)


def _layer_ref_autograd(x, ids, w, wg, wu, wd):
    """The layer in float64 with autograd, expert by expert."""
    out = torch.zeros(x.shape[0], H, dtype=torch.float64)
    for e in range(E):
        t, j = (ids == e).nonzero(as_tuple=True)
        if t.numel():
            h = F.silu(x[t] @ wg[e].t()) * (x[t] @ wu[e].t())
            out = out.index_add(0, t, w[t, j].unsqueeze(1) * (h @ wd[e].t()))
    return out


def _nn_moe_trains(rank, world):
    dev = f"cuda:{rank}"
    xs, ids, ws, wg, wu, wd = _problem(world)
    gys = [torch.randn(t.shape[0], H, generator=torch.Generator().manual_seed(9 + r)) for r, t in enumerate(xs)]
    # the reference: every rank's tokens through every expert, float64, one loss summed over ranks
    ref = [t.double().requires_grad_() for t in (wg, wu, wd)]
    refx = [t.double().requires_grad_() for t in xs]
    refw = [t.double().requires_grad_() for t in ws]
    loss = sum((_layer_ref_autograd(refx[r], ids[r], refw[r], *ref) * gys[r].double()).sum() for r in range(world))
    loss.backward()
    with loom.Comm.from_process_group() as comm:
        layer = loom.nn.MoE(comm, H, FFN, E, K, TMAX).load_full(wg.to(dev), wu.to(dev), wd.to(dev))
        x = xs[rank].to(dev).requires_grad_()
        w = ws[rank].to(dev).requires_grad_()
        for step in range(2):  # twice: the plans' buffers reused, the same answer
            x.grad = w.grad = layer.gate_up.grad = layer.down.grad = None
            out = layer(x, ids[rank].to(dev), w)
            (out.float() * gys[rank].to(dev)).sum().backward()
        torch.cuda.synchronize()
        f, n = layer.first_expert, layer.local_experts
        worst = {
            "out": _rel(out, _layer_ref_autograd(xs[rank].double(), ids[rank], ws[rank].double(),
                                                 wg.double(), wu.double(), wd.double())),
            "dx": _rel(x.grad, refx[rank].grad), "dweights": _rel(w.grad, refw[rank].grad),
            "dgate": _rel(layer.gate_up.grad[:, :FFN], ref[0].grad[f:f + n]),
            "dup": _rel(layer.gate_up.grad[:, FFN:], ref[1].grad[f:f + n]),
            "ddown": _rel(layer.down.grad, ref[2].grad[f:f + n]),
        }
        # the same layer under torch.compile (loom::moe_layer and its registered backward): eager's bits
        eager = [t.detach().clone() for t in (out, x.grad, w.grad, layer.gate_up.grad, layer.down.grad)]
        x.grad = w.grad = layer.gate_up.grad = layer.down.grad = None
        outc = torch.compile(layer, fullgraph=True)(x, ids[rank].to(dev), w)
        (outc.float() * gys[rank].to(dev)).sum().backward()
        torch.cuda.synchronize()
        got = (outc, x.grad, w.grad, layer.gate_up.grad, layer.down.grad)
        for name, a, b in zip(("out", "dx", "dweights", "dgate_up", "ddown"), eager, got):
            assert torch.equal(a, b), f"compiled {name} differs from eager"
        args = (x.detach(), ids[rank].to(dev), w.detach(), layer.gate_up.detach(), layer.down.detach(), comm.name)
        torch.library.opcheck(torch.ops.loom.moe_layer.default, args, {"layer": layer.name},
                              test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
        saved = torch.ops.loom.moe_layer(*args, layer=layer.name)
        torch.library.opcheck(torch.ops.loom.moe_layer_backward.default,
                              (gys[rank].to(dev, torch.bfloat16), args[2], args[3], args[4], args[1], *saved[1:],
                               comm.name), {"layer": layer.name}, test_utils=("test_schema", "test_faketensor"))
        # a second forward before the backward: the kept rows are stale, autograd refuses
        o1 = layer(x, ids[rank].to(dev), w)
        layer(x, ids[rank].to(dev), w)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            o1.float().sum().backward()
        layer.close()
        comm.check()
    return within(worst, 3e-2)


def test_nn_moe_forward_and_gradients_match_float64():
    print_ranks(run_ranks(_nn_moe_trains, 2, timeout=300))


def test_expert_weight_grads_group_k_on_the_device():
    """loom.nn.expert_weight_grads (the experts' weight gradients, k = each
    expert's rows) against one float64 GEMM per expert: experts without rows
    give zeros, rows past the last offset (NaN here) are never read; bf16
    runs torch._grouped_mm with the offsets on the device (it captures into a
    CUDA graph: a host synchronisation would fail the capture), fp16 the
    per-expert loop."""
    dev = "cuda:0"
    g = torch.Generator().manual_seed(5)
    R, A, B = 300, 64, 48
    counts = [40, 0, 77, 0, 101]
    n, used = len(counts), sum(counts)
    bounds = [0]
    for c in counts:
        bounds.append(bounds[-1] + c)
    off = torch.tensor(bounds, dtype=torch.int64, device=dev)
    for dtype in (torch.bfloat16, torch.float16):
        gm = torch.randn(R, A, generator=g).to(dtype).to(dev)
        x = torch.randn(R, B, generator=g).to(dtype).to(dev)
        gm[used:] = float("nan")
        x[used:] = float("nan")
        got = loom.nn.expert_weight_grads(gm, x, off, n).float().cpu()
        assert got.shape == (n, A, B)
        for e in range(n):
            a, b = bounds[e], bounds[e + 1]
            want = gm[a:b].double().cpu().t() @ x[a:b].double().cpu()
            if b == a:
                assert torch.count_nonzero(got[e]) == 0, f"{dtype} expert {e} without rows"
            else:
                err = ((got[e].double() - want).abs().max() / want.abs().max()).item()
                assert err < 1e-2, f"{dtype} expert {e}: relative error {err}"
        if dtype == torch.bfloat16:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                captured = loom.nn.expert_weight_grads(gm, x, off, n)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(captured.float().cpu(), got)
