#!/usr/bin/env python3
"""embedding_torch.py - the PyTorch baseline of loom-bench embedding_a2a.

PyTorch EmbeddingBag pooling + all_to_all_single, as a DLRM runs it, on W
GPUs of one machine (torch.multiprocessing spawn, NCCL; no torchrun).
Per rank: T tables of `rows` x D fp32 held as one EmbeddingBag (indices
shifted per table: one kernel for all tables, the faster of the two ways in
ANCHORS.md), uniform indices, fixed pooling L, global batch B. Timed with
CUDA events, median of --reps after --warmup, the max over ranks per rep:
  pool : EmbeddingBag forward -> [T*B, D]
  a2a  : all_to_all_single of the pooled bytes (already in send layout)
  seq  : pool + permute into send layout [W, Bl, T*D] + all_to_all_single +
         permute into the interaction layout [Bl, W*T*D]
Prints one JSON object per shape (and a summary line) on stdout.
Usage: python3 bench/peers/embedding_torch.py [--world 2] [--reps 20] [--quick]
"""
import argparse
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SHAPES = [(1024, 64), (4096, 64), (4096, 128), (16384, 64)]


def timed(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1000.0)  # us
    t = torch.tensor(times, device="cuda", dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return statistics.median(t.tolist())


def worker(rank, world, args, port):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    D, L, rows = args.dim, args.pooling, args.rows
    shapes = SHAPES[:2] if args.quick else SHAPES
    for B, T in shapes:
        Bl = B // world
        g = torch.Generator(device="cuda").manual_seed(1000 + rank)
        emb = torch.nn.EmbeddingBag(T * rows, D, mode="sum").cuda()
        with torch.no_grad():
            emb.weight.uniform_(-1, 1, generator=g)
        idx = torch.randint(0, rows, (T, B * L), device="cuda", generator=g)
        idx = (idx + torch.arange(T, device="cuda").unsqueeze(1) * rows).reshape(-1)
        offsets = torch.arange(0, T * B * L, L, device="cuda")
        send = torch.empty(world, Bl, T * D, device="cuda")
        recv = torch.empty_like(send)

        @torch.no_grad()
        def pool():
            return emb(idx, offsets)

        pooled = pool()
        send.copy_(pooled.view(T, B, D).permute(1, 0, 2).reshape(world, Bl, T * D))

        def a2a():
            dist.all_to_all_single(recv, send)

        @torch.no_grad()
        def seq():
            p = emb(idx, offsets)
            s = p.view(T, B, D).permute(1, 0, 2).reshape(world, Bl, T * D).contiguous()
            r = torch.empty_like(s)
            dist.all_to_all_single(r, s)
            return r.permute(1, 0, 2).reshape(Bl, world * T * D).contiguous()

        t_pool = timed(pool, args.warmup, args.reps)
        t_a2a = timed(a2a, args.warmup, args.reps)
        t_seq = timed(seq, args.warmup, args.reps)
        if rank == 0:
            rd = T * B * L * D * 4
            print(json.dumps({"impl": "torch", "B": B, "T": T, "D": D, "L": L, "world": world,
                              "pool_us": round(t_pool, 1), "a2a_us": round(t_a2a, 1), "seq_us": round(t_seq, 1),
                              "pool_GBps_rows": round(rd / (t_pool * 1e-6) / 1e9, 1),
                              "device": torch.cuda.get_device_name(0), "torch": torch.__version__}), flush=True)
        del emb, idx, offsets, send, recv, pooled
        torch.cuda.empty_cache()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=min(2, torch.cuda.device_count()))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--pooling", type=int, default=32)
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.world < 1:
        print("embedding_torch.py: no CUDA GPU", file=sys.stderr)
        return 1
    port = 29500 + os.getpid() % 1000
    mp.spawn(worker, args=(args.world, args, port), nprocs=args.world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
