#!/usr/bin/env python3
"""gemm_ar_torch.py - the PyTorch baseline of loom-bench gemm_ar.

Megatron's row-parallel linear layer without sequence parallelism, followed
by the pointwise work CoCoNet fuses (section 5.4): y = dropout(AR(x W) + b) + r,
as PyTorch runs it: torch.matmul (cuBLAS), dist.all_reduce (NCCL, in place),
then torch.nn.functional.dropout(p + bias, p=0.1) + residual (PyTorch's own
kernels), fp16, on W GPUs of one machine (torch.multiprocessing spawn, NCCL;
no torchrun). Also timed: the matmul alone and the all-reduce alone.
Shapes: --shapes LAYER:B:M:N:K,... is the list loom-bench passes, its rows'
exact GEMMs [m, k] x [k, n] (k after its --tp split). Without it:
CoCoNet's model-parallel GPT-2 setting, H = 3072, S = 1024, B = 8 and 16
(--batch: one; --quick: 8; m = B S rows), the weight split --tp ways
(default: the world size): the MLP's second GEMM [m, 4H/T] x [4H/T, H]
(--layer mlp) and the attention output GEMM [m, H/T] x [H/T, H] (attn).
Timing (peer_timing.py): per call, N calls in a CUDA graph where PyTorch
lets the layer be captured, else call by call ("eager"); the variants
interleaved in each repetition after a barrier; the slowest rank; median
over --reps.
Writes one JSON object (device, torch version, options, rows) to --json:
one row per (shape, variant), variant torch (the layer), matmul or
allreduce, with the shape's fields (op, layer, B, m, n, k, world, dtype,
epilogue), us, timing and shape_keys, and prints one line per shape.
loom-bench gemm_ar runs it and pairs its rows with theirs by the complete
shape. Exit status 2 when PyTorch or two GPUs are missing (nothing
measured).
Usage: python3 bench/peers/gemm_ar_torch.py [--world 2] [--reps 20] [--warmup 5] [--quick]
       [--shapes LAYER:B:M:N:K,...] [--batch B] [--layer mlp|attn] [--tp T] [--eager] [--json FILE]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import (join_ranks, peer_arguments, spawn_ranks, time_variants, tuples,  # noqa: E402
                         variant_rows, write_results)

H, SEQ = 3072, 1024
BATCHES = [8, 16]
LAYERS = {"mlp": 4 * H, "attn": H}  # the full K of the layer's GEMM (split T ways)
P = 0.1
EPILOGUE = "dropout(x+bias,p=0.1)+residual"  # as loom-bench's rows name theirs
VARIANTS = ["torch", "matmul", "allreduce"]


def default_shapes(args, world):
    """(layer, B, m, n, k) of the defaults: the weights split --tp ways (0: world)."""
    T = args.tp or world
    batches = [args.batch] if args.batch else ([8] if args.quick else BATCHES)
    return [(layer, B, B * SEQ, H, LAYERS[layer] // T)
            for layer in ([args.layer] if args.layer else list(LAYERS)) for B in batches]


def shape_fields(layer, B, m, n, k, world):
    """The complete shape of a row, as loom-bench's gemm_ar rows name it."""
    return {"op": "gemm_ar", "layer": layer, "B": B, "m": m, "n": n, "k": k, "world": world, "dtype": "fp16",
            "epilogue": EPILOGUE}


def worker(rank, world, args, port, result_path):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    join_ranks(torch, dist, rank, world, port)
    log = (lambda s: print("gemm_ar_torch: " + s, file=sys.stderr, flush=True)) if rank == 0 else None
    g = torch.Generator(device="cuda").manual_seed(4321 + rank)
    results = []
    for layer, B, m, n, k in (args.shapes or default_shapes(args, world)):
        x = torch.empty(m, k, device="cuda", dtype=torch.float16).uniform_(-1, 1, generator=g)
        w = torch.empty(k, n, device="cuda", dtype=torch.float16).uniform_(-1, 1, generator=g)
        bias = torch.empty(n, device="cuda", dtype=torch.float16).uniform_(-1, 1, generator=g)
        res = torch.empty(m, n, device="cuda", dtype=torch.float16).uniform_(-1, 1, generator=g)
        part = torch.empty(m, n, device="cuda", dtype=torch.float16)

        def layer_fn():
            torch.matmul(x, w, out=part)
            dist.all_reduce(part)
            return F.dropout(part + bias, p=P, training=True) + res

        def matmul_fn():
            return torch.matmul(x, w, out=part)

        def allreduce_fn():
            dist.all_reduce(part)
            return part

        timed = time_variants(torch, dist, [layer_fn, matmul_fn, allreduce_fn], args, VARIANTS, log)
        if rank == 0:
            shape = shape_fields(layer, B, m, n, k, world)
            results += variant_rows(shape, VARIANTS, timed)
            print("gemm_ar_torch: " + json.dumps(dict(shape, **{v: t for v, t in zip(VARIANTS, timed)})), flush=True)
        del x, w, bias, res, part
        torch.cuda.empty_cache()
    if rank == 0 and result_path:
        write_results(result_path, torch, args, world, "torch matmul + all_reduce + dropout", results)
    dist.destroy_process_group()


def main():
    ap = peer_arguments()
    ap.add_argument("--shapes", type=tuples(str, int, int, int, int), default=None,
                    help="LAYER:B:M:N:K,... the exact GEMMs to run (loom-bench passes its rows')")
    ap.add_argument("--batch", type=int, default=0, help="default shapes: one batch size B only")
    ap.add_argument("--layer", choices=list(LAYERS), default="", help="default shapes: one layer")
    ap.add_argument("--tp", type=int, default=0, help="default shapes: split the weights T ways (0: the world size)")
    args = ap.parse_args()

    def check(world):
        if args.shapes:
            return None
        for layer in ([args.layer] if args.layer else LAYERS):
            if LAYERS[layer] % (args.tp or world):
                return f"K={LAYERS[layer]} of the {layer} layer does not split {args.tp or world} ways"
        return None

    return spawn_ranks("gemm_ar_torch.py", worker, args, "the all-reduce", check=check)


if __name__ == "__main__":
    sys.exit(main())
