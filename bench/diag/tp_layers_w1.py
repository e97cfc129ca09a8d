#!/usr/bin/env python3
"""tp_layers_w1.py - loom.nn's tensor-parallel layers at W = 1 against
nn.Linear, forward and backward, batch first (sequence_dim=1) and
sequence first, for small row counts: prints the relative differences."""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import loom  # noqa: E402

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", NCCL_NVLS_ENABLE="0")
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
comm = loom.Comm.from_process_group()


def rel(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


for kind in ("row", "col"):
    for (b, s, i, o) in ((2, 16, 128, 128), (2, 16, 256, 128), (1, 32, 128, 128), (2, 32, 128, 128), (4, 16, 128, 128)):
        for sd in (0, 1):
            torch.manual_seed(1)
            lin = torch.nn.Linear(i, o, bias=False, device="cuda", dtype=torch.bfloat16)
            cls = loom.nn.RowParallelLinear if kind == "row" else loom.nn.ColumnParallelLinear
            layer = cls.from_linear(comm, lin, sequence_dim=sd)
            x = torch.randn(b, s, i, device="cuda", dtype=torch.bfloat16)
            gy = torch.randn(b, s, o, device="cuda", dtype=torch.bfloat16)
            xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
            ya, yb = lin(xa), layer(xb)
            (ya.float() * gy).sum().backward()
            (yb.float() * gy).sum().backward()
            print(f"{kind} b={b} s={s} in={i} out={o} sequence_dim={sd}: y {rel(yb, ya):.1e} dx {rel(xb.grad, xa.grad):.1e} "
                  f"dw {rel(layer.weight.grad, lin.weight.grad):.1e}", flush=True)
comm.close()

# two layers of one shape in a chain: their cached plan (and its gathered buffer) serves both backwards
comm = loom.Comm.from_process_group()
for kind in ("row", "col"):
    for sd in (0, 1):
        torch.manual_seed(2)
        lins = [torch.nn.Linear(128, 128, bias=False, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
        cls = loom.nn.RowParallelLinear if kind == "row" else loom.nn.ColumnParallelLinear
        layers = [cls.from_linear(comm, lin, sequence_dim=sd) for lin in lins]
        x = torch.randn(2, 16, 128, device="cuda", dtype=torch.bfloat16)
        gy = torch.randn(2, 16, 128, device="cuda", dtype=torch.bfloat16)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        ya = lins[1](torch.nn.functional.gelu(lins[0](xa)))
        yb = layers[1](torch.nn.functional.gelu(layers[0](xb)))
        (ya.float() * gy).sum().backward()
        (yb.float() * gy).sum().backward()
        print(f"chain {kind} sequence_dim={sd}: y {rel(yb, ya):.1e} dx {rel(xb.grad, xa.grad):.1e} "
              f"dw0 {rel(layers[0].weight.grad, lins[0].weight.grad):.1e} "
              f"dw1 {rel(layers[1].weight.grad, lins[1].weight.grad):.1e}", flush=True)
comm.close()
dist.destroy_process_group()
