"""loom.lang.compile on 1 and 2 ranks: a program (AllReduce of every rank's
x, scaled, then RMSNorm) compiled for the GPUs and called on torch tensors,
against the same arithmetic in float64 torch (every rank draws every
rank's x from a seed); the call as the custom op loom::prog_run traced by
torch.compile(fullgraph=True) and captured in a CUDA graph gives the eager
result bit for bit; a wrong input is refused by name."""
import pytest
import torch
from dist_harness import run_ranks

import loom
from loom import lang
from loom.errors import InvalidArgumentError

WORLDS = [1, pytest.param(2, marks=pytest.mark.two_gpus)]
TEXT = """
Tensor x(FP32, [R, C], Local, WORLD);
Tensor g(FP32, [C], Replicated, WORLD);
Var s = AllReduce("+", x);
Var y = RMSNorm(s * 2, g);
Execute ar_norm({x, g}, {y});
"""
R, C = 37, 96


def _x(rank, step):
    return torch.randn(R, C, generator=torch.Generator().manual_seed(1000 * step + rank), dtype=torch.float64)


def _reference(world, step, g):
    s = sum(_x(r, step) for r in range(world)) * 2
    return s / torch.sqrt((s * s).mean(dim=-1, keepdim=True) + 1e-6) * g


def _run(rank, world):
    dev = torch.device("cuda", rank)
    prog = lang.Program.parse(TEXT, "ar_norm.loom")
    g64 = torch.rand(C, generator=torch.Generator().manual_seed(7), dtype=torch.float64) + 0.5
    g = g64.to(dev, torch.float32)
    worst = {}
    with loom.Comm.from_process_group() as comm:
        run = lang.compile(prog, comm, R=R, C=C)
        assert [s.name for s in run.inputs] == ["x", "g"] and run.outputs[0].shape == (R, C)
        for step in range(3):
            (y,) = run(_x(rank, step).to(dev, torch.float32), g)
            ref = _reference(world, step, g64)
            worst[f"eager {step}"] = ((y.double().cpu() - ref).abs() / ref.abs().clamp(min=1)).max().item()
        x = _x(rank, 9).to(dev, torch.float32)
        (eager,) = run(x, g)
        compiled = torch.compile(lambda a, b: run(a, b), fullgraph=True)
        assert torch.equal(compiled(x, g)[0], eager)
        graph, out = torch.cuda.CUDAGraph(), None
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            out = run(x, g)[0]
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, eager)
        with pytest.raises(InvalidArgumentError, match=r"input 0 \(`x`\) has shape \(3, 96\)"):
            run(x[:3], g)
        run.close()
    return worst


@pytest.mark.parametrize("world", WORLDS)
def test_compiled_program_matches_torch_and_traces(world):
    for w in run_ranks(_run, world):
        assert all(v < 1e-4 for v in w.values()), w
