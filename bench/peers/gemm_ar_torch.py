#!/usr/bin/env python3
"""gemm_ar_torch.py - the PyTorch baseline of loom-bench gemm_ar.

Megatron's row-parallel linear layer without sequence parallelism, followed
by the pointwise work CoCoNet fuses (section 5.4): y = dropout(AR(x W) + b) + r,
as PyTorch runs it: torch.matmul (cuBLAS), dist.all_reduce (NCCL, in place),
then torch.nn.functional.dropout(p + bias, p=0.1) + residual (PyTorch's own
kernels), fp16, on W GPUs of one machine (torch.multiprocessing spawn, NCCL;
no torchrun). Shapes: CoCoNet's model-parallel GPT-2 setting, H = 3072,
S = 1024, B = 8 and 16 (m = B S rows), the weight split W ways: the MLP's
second GEMM [m, 4H/W] x [4H/W, H] and the attention output GEMM
[m, H/W] x [H/W, H].
Also timed: the matmul alone and the all-reduce alone. Each repetition runs
the variants one after the other (interleaved) after a barrier; the time of
a repetition is the maximum over ranks; the median over --reps is reported
(peer_timing.py).
Writes one JSON object (device, torch version, options, rows: op, layer, B,
m, n, k, torch_us, matmul_us, allreduce_us) to --json and prints one line
per shape. loom-bench gemm_ar runs it and reads the JSON (the peer column).
Exit status 2 when PyTorch or two GPUs are missing (nothing measured).
Usage: python3 bench/peers/gemm_ar_torch.py [--world 2] [--reps 20] [--warmup 5] [--quick]
       [--batch B] [--layer mlp|attn] [--json FILE]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import interleaved_medians, peer_arguments, spawn_ranks, write_results  # noqa: E402

H, SEQ = 3072, 1024
BATCHES = [8, 16]
LAYERS = {"mlp": 4 * H, "attn": H}  # the full K of the layer's GEMM (split W ways)


def worker(rank, world, args, port, result_path):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    batches = [args.batch] if args.batch else ([8] if args.quick else BATCHES)
    layers = [args.layer] if args.layer else list(LAYERS)
    g = torch.Generator(device="cuda").manual_seed(4321 + rank)
    results = []
    for layer in layers:
        for B in batches:
            m, n, k = B * SEQ, H, LAYERS[layer] // world
            x = torch.empty(m, k, device="cuda", dtype=torch.float16).uniform_(-1, 1, generator=g)
            w = torch.empty(k, n, device="cuda", dtype=torch.float16).uniform_(-1, 1, generator=g)
            bias = torch.empty(n, device="cuda", dtype=torch.float16).uniform_(-1, 1, generator=g)
            res = torch.empty(m, n, device="cuda", dtype=torch.float16).uniform_(-1, 1, generator=g)
            part = torch.empty(m, n, device="cuda", dtype=torch.float16)

            def layer_fn():
                torch.matmul(x, w, out=part)
                dist.all_reduce(part)
                return F.dropout(part + bias, p=0.1, training=True) + res

            def matmul_fn():
                return torch.matmul(x, w, out=part)

            def allreduce_fn():
                dist.all_reduce(part)
                return part

            med = interleaved_medians(torch, dist, [layer_fn, matmul_fn, allreduce_fn], args.warmup, args.reps)
            if rank == 0:
                row = {"op": "gemm_ar", "layer": layer, "B": B, "m": m, "n": n, "k": k, "world": world,
                       "torch_us": round(med[0], 1), "matmul_us": round(med[1], 1), "allreduce_us": round(med[2], 1)}
                results.append(row)
                print("gemm_ar_torch: " + json.dumps(row), flush=True)
            del x, w, bias, res, part
            torch.cuda.empty_cache()
    if rank == 0 and result_path:
        write_results(result_path, torch, args, world, "torch matmul + all_reduce + dropout", results)
    dist.destroy_process_group()


def main():
    ap = peer_arguments()
    ap.add_argument("--batch", type=int, default=0, help="one batch size B only")
    ap.add_argument("--layer", choices=list(LAYERS), default="")
    args = ap.parse_args()

    def check(world):
        for layer in ([args.layer] if args.layer else LAYERS):
            if LAYERS[layer] % world:
                return f"K={LAYERS[layer]} of the {layer} layer does not split {world} ways"
        return None

    return spawn_ranks("gemm_ar_torch.py", worker, args, "the all-reduce", check=check)


if __name__ == "__main__":
    sys.exit(main())
