"""loom.parallelize on 1 and 2 ranks: a two-layer Llama-style model (HF
and torchtitan module names, batch first, b = 2) split over the ranks, both
ways of gathering the sequence, against the unsplit model (every rank
builds it from one seed): outputs of this rank's tokens, the input
gradient, the projections' weight-gradient shards, and the norm weights'
gradients summed over the ranks (sequence parallelism leaves each rank the
part from its own tokens)."""
import copy
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from dist_harness import print_ranks, run_ranks, within

import loom

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/python: the layer the host tests split too
from llama_layer import Layer  # noqa: E402

WORLDS = [1, pytest.param(2, marks=pytest.mark.two_gpus)]


def _rel(got, want):
    assert tuple(got.shape) == tuple(want.shape), (tuple(got.shape), tuple(want.shape))
    return ((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-12)).item()


def _case(rank, world, hf, fused):
    dev = f"cuda:{rank}"
    torch.manual_seed(0)  # the same full model and data on every rank
    H, heads, F, B, S = 128, 4, 256, 2, 16 * world
    model = torch.nn.Sequential(*[Layer(H, heads, F, hf, length_from_input=not fused) for _ in range(2)])
    model = model.to(dev, torch.bfloat16)
    x = torch.randn(B, S, H, device=dev, dtype=torch.bfloat16)
    gy = torch.randn(B, S, H, device=dev, dtype=torch.float32)
    ref = copy.deepcopy(model)
    xr = x.clone().requires_grad_()
    (ref(xr).float() * gy).sum().backward()
    rows = slice(rank * S // world, (rank + 1) * S // world)
    worst = {}
    with loom.Comm.from_process_group() as comm:
        loom.parallelize(model, comm, fused_gather=fused)
        xs = x[:, rows].contiguous().requires_grad_()
        y = model(xs)
        (y.float() * gy[:, rows]).sum().backward()
        with torch.no_grad():
            worst["y"] = _rel(y, ref(x)[:, rows])
        worst["dx"] = _rel(xs.grad, xr.grad[:, rows])
        q, qr = (model[0].self_attn.q_proj, ref[0].self_attn.q_proj) if hf else (model[0].self_attn.wq,
                                                                               ref[0].self_attn.wq)
        n = H // world
        worst["dq"] = _rel(q.weight.grad, qr.weight.grad[rank * n:(rank + 1) * n])
        down, dr = (model[1].mlp.down_proj, ref[1].mlp.down_proj) if hf else (model[1].mlp.w2, ref[1].mlp.w2)
        f = F // world
        worst["ddown"] = _rel(down.weight.grad, dr.weight.grad[:, rank * f:(rank + 1) * f])
        worst["ddown bias"] = _rel(down.bias.grad, dr.bias.grad)
        g = model[1].norm2.weight.grad.float()
        dist.all_reduce(g)
        worst["dnorm summed"] = _rel(g, ref[1].norm2.weight.grad)
        torch.cuda.synchronize()
        comm.check()
    return within(worst, 3e-2)


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("hf,fused", [(True, False), (False, True)])
def test_parallelized_model_matches_the_whole_one(world, hf, fused):
    print_ranks(run_ranks(_case, world, hf, fused, timeout=240))
