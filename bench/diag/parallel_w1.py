#!/usr/bin/env python3
"""parallel_w1.py - loom.parallelize at W = 1 against the unsplit model,
every parameter's gradient printed (tests/python/gpu/test_parallel_gpu.py's
model), for 1 and 2 layers, b = 1 and 2."""
import copy
import os
import sys

import torch
import torch.distributed as dist

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "python", "gpu"))
import loom  # noqa: E402
from test_parallel_gpu import Layer  # noqa: E402

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29534", NCCL_NVLS_ENABLE="0")
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))


def rel(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-12)).item()


with loom.Comm.from_process_group() as comm:
    for layers, B, fused in ((1, 2, False), (2, 1, False), (2, 2, False), (2, 2, True)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[Layer(128, 4, 256, True, not fused) for _ in range(layers)])
        model = model.to("cuda", torch.bfloat16)
        x = torch.randn(B, 16, 128, device="cuda", dtype=torch.bfloat16)
        gy = torch.randn(B, 16, 128, device="cuda")
        ref = copy.deepcopy(model)
        xr = x.clone().requires_grad_()
        (ref(xr).float() * gy).sum().backward()
        loom.parallelize(model, comm, fused_gather=fused)
        xs = x.clone().requires_grad_()
        (model(xs).float() * gy).sum().backward()
        bad = {n: round(rel(p.grad, dict(ref.named_parameters())[n].grad), 3)
               for n, p in model.named_parameters() if rel(p.grad, dict(ref.named_parameters())[n].grad) > 2e-2}
        print(f"layers={layers} b={B} fused={fused}: dx {rel(xs.grad, xr.grad):.1e}; params over 2e-2: {bad}",
              flush=True)

# cuDNN's SDPA backward with the output gradient in the strides a transposed layer input gives it
for backend in ("cudnn", "flash", "efficient"):
    torch.manual_seed(3)
    b, s, h, heads = 2, 16, 128, 4
    q, k, v = (torch.randn(b, heads, s, h // heads, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    g = torch.randn(s, b, h, device="cuda", dtype=torch.bfloat16).transpose(0, 1)  # [b, s, h], strides (h, b h, 1)
    g4 = g.reshape(b, s, heads, h // heads).transpose(1, 2)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
          "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]
    try:
        with sdpa_kernel(be):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            d1 = torch.autograd.grad(o, (q, k, v), g4)
            d2 = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
                                     (q, k, v), g4.contiguous())
        print(f"sdpa {backend}: grads with strided vs contiguous output gradient differ by "
              f"{max(rel(a, c) for a, c in zip(d1, d2)):.1e}", flush=True)
    except RuntimeError as e:
        print(f"sdpa {backend}: {str(e).splitlines()[0][:100]}")
dist.destroy_process_group()
