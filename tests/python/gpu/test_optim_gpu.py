"""loom.optim (Adam, AdamW, LAMB over loom_plan_adam / _lamb) on 1 and 2
ranks against the same steps in float64 torch: every rank draws every
rank's gradients from a seed, the reference applies them averaged; fp32
and bf16 parameters, tensors sliced over the ranks and small replicated
ones, per-group weight decay, an lr changed between steps, gradients that
autograd replaced, the state dict saved and loaded (the resumed run equal
bit for bit), and refusals by name. The step as a registered op: eager,
torch.compile(fullgraph=True) and a captured CUDA graph take the same
steps bit for bit, with lr a device tensor changed between them.
loom.optim.GradScaler: the gradients divided by its scale in the step, and
an inf on one rank's gradient skips the step on every rank."""
import math

import pytest
import torch
from dist_harness import run_ranks

import loom
import loom.optim

WORLDS = [1, pytest.param(2, marks=pytest.mark.two_gpus)]
SHAPES = [(300, 64), (37,), (4099,), (8, 8, 3)]


def _grads(step, rank):
    g = torch.Generator().manual_seed(100 * step + rank)
    return [torch.randn(*s, generator=g, dtype=torch.float64) for s in SHAPES]


def _reference(kind, params, grads_all, lr, wds, betas=(0.9, 0.999), eps=1e-8, state=None, step=1):
    """One step of loom.h's arithmetic in float64 (grads averaged over ranks)."""
    b1, b2 = betas
    out = []
    for i, p in enumerate(params):
        g = sum(gr[i] for gr in grads_all) / len(grads_all)
        m, v = state.setdefault(i, (torch.zeros_like(p), torch.zeros_like(p)))
        wd = wds[i]
        if kind == "adam" and wd:
            g = g + wd * p
        if kind == "adamw" and wd:
            p = p - lr * wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        state[i] = (m, v)
        bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
        if kind == "lamb":
            u = (m / bc1) / ((v / bc2).sqrt() + eps) + wd * p
            pn, un = p.norm().item(), u.norm().item()
            r = lr * pn / un if (wd != 0 and pn != 0 and un != 0) else lr
            p = p - r * u
        else:
            p = p - (lr / bc1) * m / (v.sqrt() / math.sqrt(bc2) + eps)
        out.append(p)
    return out


def _run(rank, world, kind, dtype):
    dev = f"cuda:{rank}"
    cls = {"adam": loom.optim.Adam, "adamw": loom.optim.AdamW, "lamb": loom.optim.LAMB}[kind]
    eps = 1e-6 if kind == "lamb" else 1e-8
    worst = 0.0
    with loom.Comm.from_process_group() as comm:
        g0 = torch.Generator().manual_seed(5)
        init = [torch.randn(*s, generator=g0, dtype=torch.float64) for s in SHAPES]
        params = [torch.nn.Parameter(t.to(dev, dtype)) for t in init]
        wds = [0.1, 0.1, 0.05, 0.05]
        groups = [{"params": params[:2], "weight_decay": 0.1}, {"params": params[2:], "weight_decay": 0.05}]
        opt = cls(groups, comm, lr=1e-2, eps=eps)
        ref, state = [t.clone() for t in init], {}
        for step in range(1, 6):
            lr = 1e-2 if step < 4 else 3e-3  # a scheduler's change, read on the device
            for g in opt.param_groups:
                g["lr"] = lr
            mine = _grads(step, rank)
            for i, (p, g) in enumerate(zip(params, mine)):
                if step == 2 and i == 3:
                    p.grad = g.to(dev, dtype)  # replaced, as set_to_none + autograd would: copied in
                else:
                    p.grad.copy_(g)
            opt.step()
            ref = _reference(kind, ref, [_grads(step, r) for r in range(world)], lr, wds, eps=eps, state=state,
                             step=step)
            torch.cuda.synchronize()
            for p, r in zip(params, ref):
                err = ((p.detach().double().cpu() - r).abs().max() / r.abs().max()).item()
                worst = max(worst, err)
            opt.zero_grad()
            assert all(float(p.grad.abs().max()) == 0.0 for p in params)
        tol = 1e-5 if dtype == torch.float32 else 8e-3
        assert worst < tol, f"{kind} {dtype}: largest relative difference {worst:.2e} > {tol}"

        # checkpoint: save, keep stepping; a new optimizer loads it and must follow bit for bit
        sd = opt.state_dict()
        saved = [p.detach().clone() for p in params]
        twin = [torch.nn.Parameter(s.clone()) for s in saved]
        groups2 = [{"params": twin[:2], "weight_decay": 0.1}, {"params": twin[2:], "weight_decay": 0.05}]
        opt2 = cls(groups2, comm, lr=1e-2, eps=eps)
        opt2.load_state_dict(sd)
        assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
        for step in (6, 7):
            for o, ps in ((opt, params), (opt2, twin)):
                for p, g in zip(ps, _grads(step, rank)):
                    p.grad.copy_(g)
                o.step()
        torch.cuda.synchronize()
        for a, b in zip(params, twin):
            assert torch.equal(a.detach(), b.detach()), "the resumed optimizer left the original's path"
        sd2 = opt2.state_dict()
        assert float(sd2["state"][0]["step"]) == 7.0
        opt.close()
        opt2.close()
        comm.check()
    return worst


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("kind,dtype", [("adamw", torch.float32), ("adam", torch.float32),
                                        ("lamb", torch.float32), ("adamw", torch.bfloat16)])
def test_optimizer_steps_match_torch_float64(world, kind, dtype):
    print(run_ranks(_run, world, kind, dtype, timeout=240))


def _refusals(rank, world):
    dev = f"cuda:{rank}"
    with loom.Comm.from_process_group() as comm:
        a = torch.nn.Parameter(torch.randn(64, device=dev))
        b = torch.nn.Parameter(torch.randn(64, device=dev, dtype=torch.bfloat16))
        with pytest.raises(loom.InvalidArgumentError, match="parameter 1 has dtype torch.bfloat16, parameter 0 "
                                                            "torch.float32: one dtype for all"):
            loom.optim.AdamW([a, b], comm)
        with pytest.raises(loom.InvalidArgumentError, match="parameter 0 is on cpu"):
            loom.optim.Adam([torch.nn.Parameter(torch.randn(8))], comm)
        with pytest.raises(loom.InvalidArgumentError, match="param group 1 has lr=0.1, group 0 0.001"):
            loom.optim.AdamW([{"params": [a]}, {"params": [torch.nn.Parameter(torch.randn(8, device=dev))],
                                                "lr": 0.1}], comm)
        with pytest.raises(loom.InvalidArgumentError, match="form='zero3'"):
            loom.optim.LAMB([a], comm, form="zero3")
        opt = loom.optim.AdamW([a], comm)
        sd = opt.state_dict()
        sd["loom"]["world_size"] = world + 1
        with pytest.raises(loom.InvalidArgumentError, match="the state was saved by"):
            opt.load_state_dict(sd)
        opt.close()


@pytest.mark.parametrize("world", WORLDS)
def test_refusals_name_the_argument(world):
    run_ranks(_refusals, world)


def _compiled_and_captured(rank, world):
    dev = f"cuda:{rank}"
    with loom.Comm.from_process_group() as comm:
        g0 = torch.Generator().manual_seed(11)
        init = [torch.randn(*s, generator=g0) for s in SHAPES]
        runs = {}
        for mode in ("eager", "compiled", "graph"):
            params = [torch.nn.Parameter(t.to(dev)) for t in init]
            lr = torch.tensor(1e-2, device=dev)  # a device scalar: a scheduler changes it without recompiling
            opt = loom.optim.AdamW(params, comm, lr=lr, weight_decay=0.1)
            if mode == "graph":  # the step captured once (a captured step replays as a new step), then replayed
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    opt.step()
                step = graph.replay
            else:
                step = opt.step if mode == "eager" else torch.compile(opt.step, fullgraph=True)
            for s in range(1, 5):
                lr.fill_(1e-2 if s < 3 else 3e-3)
                for p, g in zip(params, _grads(s, rank)):
                    p.grad.copy_(g.to(dev, torch.float32))
                step()
            torch.cuda.synchronize()
            runs[mode] = [p.detach().clone() for p in params]
            assert int(float(opt.state_dict()["state"][0]["step"])) == 4, mode
            opt.close()
        moved = max(float((a - t.to(dev)).abs().max()) for a, t in zip(runs["eager"], init))
        assert moved > 1e-4, "the steps changed nothing"
        for mode in ("compiled", "graph"):
            for i, (a, b) in enumerate(zip(runs["eager"], runs[mode])):
                assert torch.equal(a, b), f"{mode}: parameter {i} differs from the eager steps"
        comm.check()


@pytest.mark.parametrize("world", WORLDS)
def test_compiled_and_captured_steps_match_eager(world):
    run_ranks(_compiled_and_captured, world, timeout=300)


def _grad_scaler(rank, world):
    dev = f"cuda:{rank}"
    with loom.Comm.from_process_group() as comm:
        g0 = torch.Generator().manual_seed(3)
        init = [torch.randn(*s, generator=g0, dtype=torch.float64) for s in SHAPES]
        params = [torch.nn.Parameter(t.to(dev, torch.float32)) for t in init]
        opt = loom.optim.AdamW(params, comm, lr=1e-2, weight_decay=0.1)
        scaler = loom.optim.GradScaler(init_scale=2.0 ** 10, growth_interval=1000)
        ref, state, taken, worst = [t.clone() for t in init], {}, 0, 0.0
        for s in range(1, 5):
            grads = _grads(s, rank)
            if s == 2 and rank == world - 1:
                grads[1][0] = float("inf")  # one rank's gradient: every rank must skip
            loss = sum((p * g.to(dev, torch.float32)).sum() for p, g in zip(params, grads))  # d loss / d p = g
            before = [p.detach().clone() for p in params]
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            torch.cuda.synchronize()
            if s == 2:
                assert all(torch.equal(a, p.detach()) for a, p in zip(before, params)), "the step was not skipped"
                assert scaler.get_scale() == 2.0 ** 9
                continue
            taken += 1
            ref = _reference("adamw", ref, [_grads(s, r) for r in range(world)], 1e-2, [0.1] * len(SHAPES),
                             state=state, step=taken)
            for p, r in zip(params, ref):
                worst = max(worst, ((p.detach().double().cpu() - r).abs().max() / r.abs().max()).item())
        assert worst < 1e-5, f"largest relative difference {worst:.2e}"
        opt.close()
        comm.check()


@pytest.mark.parametrize("world", WORLDS)
def test_grad_scaler_divides_by_the_scale_and_skips_on_every_rank(world):
    run_ranks(_grad_scaler, world, timeout=240)
