#!/usr/bin/env python3
"""tp_torch.py - the PyTorch baselines of loom-bench ag_gemm / gemm_rs.

PyTorch's async tensor parallelism (torch.ops.symm_mem.fused_all_gather_matmul
and fused_matmul_reduce_scatter over symmetric memory) and PyTorch's own
sequential pair (all_gather_into_tensor + matmul, matmul +
reduce_scatter_tensor), on W GPUs of one machine (torch.multiprocessing
spawn, NCCL; no torchrun), on loom-bench's shapes: Flux's GPT-3 175B and
Llama-3-70B with the weight split W ways, bf16, B as a Linear weight
([n, k], used as W.t()), m = 64 .. 8192 (--quick: 64, 512, 2048, 8192).
Timed with CUDA events after --warmup rounds; each repetition runs the
variants one after the other (interleaved), every rank lined up by a
barrier first; the time of a repetition is the maximum over ranks; the
median over --reps is reported.
Writes one JSON object (device, torch version, options, rows: op, model, m,
async_tp_us, torch_seq_us) to --json and prints one line per shape.
loom-bench ag_gemm / gemm_rs run it and read the JSON (the peer column).
Exit status 2 when PyTorch, its symmetric memory or a GPU is missing
(nothing measured).
Usage: python3 bench/peers/tp_torch.py --op ag_gemm|gemm_rs [--world 2] [--reps 20] [--quick]
       [--model gpt3|llama] [--m M] [--json FILE]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import interleaved_medians, peer_arguments, spawn_ranks, write_results  # noqa: E402

MODELS = {"gpt3": ("gpt3-175b", 12288, 49152), "llama": ("llama3-70b", 8192, 28672)}
MS = [64, 128, 256, 512, 1024, 2048, 4096, 8192]
MS_QUICK = [64, 512, 2048, 8192]


def worker(rank, world, args, port, result_path):
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    group = dist.group.WORLD
    symm_mem.enable_symm_mem_for_group(group.group_name)
    models = [args.model] if args.model else ["gpt3", "llama"]
    ms = [args.m] if args.m else (MS_QUICK if args.quick else MS)
    results = []
    g = torch.Generator(device="cuda").manual_seed(1234 + rank)
    for mk in models:
        name, hidden, ffn = MODELS[mk]
        for m in ms:
            S = m // world
            if args.op == "ag_gemm":
                n, k = ffn // world, hidden
                a = torch.empty(S, k, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=g)
            else:
                n, k = hidden, ffn // world
                a = torch.empty(m, k, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=g)
            w = torch.empty(n, k, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=g)
            full = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)
            out = torch.empty(S, n, device="cuda", dtype=torch.bfloat16)

            if args.op == "ag_gemm":
                def fused():
                    return torch.ops.symm_mem.fused_all_gather_matmul(a, [w.t()], gather_dim=0,
                                                                       group_name=group.group_name)

                def seq():
                    dist.all_gather_into_tensor(full, a)
                    return full @ w.t()
            else:
                def fused():
                    return torch.ops.symm_mem.fused_matmul_reduce_scatter(a, w.t(), "sum", scatter_dim=0,
                                                                           group_name=group.group_name)

                def seq():
                    p = a @ w.t()
                    dist.reduce_scatter_tensor(out, p)
                    return out

            ops = [fused, seq]
            med = interleaved_medians(torch, dist, ops, args.warmup, args.reps)
            if rank == 0:
                row = {"op": args.op, "model": name, "m": m, "n": n, "k": k, "world": world,
                       "async_tp_us": round(med[0], 1), "torch_seq_us": round(med[1], 1)}
                results.append(row)
                print("tp_torch: " + json.dumps(row), flush=True)
            del a, w, full, out
            torch.cuda.empty_cache()
    if rank == 0 and result_path:
        write_results(result_path, torch, args, world, "torch async-TP", results)
    dist.destroy_process_group()


def main():
    ap = peer_arguments()
    ap.add_argument("--op", choices=["ag_gemm", "gemm_rs"], required=True)
    ap.add_argument("--model", choices=["gpt3", "llama"], default="")
    ap.add_argument("--m", type=int, default=0)
    return spawn_ranks("tp_torch.py", worker, ap.parse_args(), "async-TP",
                       modules=("torch.distributed._symmetric_memory",))


if __name__ == "__main__":
    sys.exit(main())
