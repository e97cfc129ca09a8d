"""loom.parallelize on 1 and 2 ranks: a two-layer Llama-style model (HF
and torchtitan module names, batch first, b = 2) split over the ranks, both
ways of gathering the sequence, against the unsplit model (every rank
builds it from one seed): outputs of this rank's tokens, the input
gradient, the projections' weight-gradient shards, and the norm weights'
gradients summed over the ranks (sequence parallelism leaves each rank the
part from its own tokens)."""
import copy

import pytest
import torch
import torch.distributed as dist
from dist_harness import run_ranks

import loom

WORLDS = [1, pytest.param(2, marks=pytest.mark.two_gpus)]


class Attention(torch.nn.Module):
    def __init__(self, h, heads, names, length_from_input):
        super().__init__()
        self.names, self.head_dim, self.from_input = names, h // heads, length_from_input
        for n in names:
            setattr(self, n, torch.nn.Linear(h, h, bias=False))

    def forward(self, x):
        q, k, v = (getattr(self, n)(x) for n in self.names[:3])
        b, s = x.shape[:2] if self.from_input else q.shape[:2]
        q, k, v = (t.view(b, s, -1, self.head_dim).transpose(1, 2) for t in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return getattr(self, self.names[3])(a.transpose(1, 2).reshape(b, s, -1))


class Mlp(torch.nn.Module):
    def __init__(self, h, f, names):
        super().__init__()
        self.names = names
        for n, (i, o) in zip(names, ((h, f), (h, f), (f, h))):
            setattr(self, n, torch.nn.Linear(i, o, bias=n == names[2]))

    def forward(self, x):
        gate, up, down = (getattr(self, n) for n in self.names)
        return down(torch.nn.functional.silu(gate(x)) * up(x))


class Layer(torch.nn.Module):
    def __init__(self, h, heads, f, hf, length_from_input):
        super().__init__()
        self.self_attn = Attention(h, heads, ("q_proj", "k_proj", "v_proj", "o_proj") if hf else
                                   ("wq", "wk", "wv", "wo"), length_from_input)
        self.mlp = Mlp(h, f, ("gate_proj", "up_proj", "down_proj") if hf else ("w1", "w3", "w2"))
        self.norm1, self.norm2 = torch.nn.RMSNorm(h), torch.nn.RMSNorm(h)

    def forward(self, x):
        x = x + self.self_attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


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
    bad = {k: v for k, v in worst.items() if v > 3e-2}
    assert not bad, f"relative differences over 3e-2: {bad}"
    return worst


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("hf,fused", [(True, False), (False, True)])
def test_parallelized_model_matches_the_whole_one(world, hf, fused):
    for r, w in enumerate(run_ranks(_case, world, hf, fused, timeout=240)):
        print(f"rank {r}:", {k: f"{v:.1e}" for k, v in w.items()})
