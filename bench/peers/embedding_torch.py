#!/usr/bin/env python3
"""embedding_torch.py - the PyTorch baseline of loom-bench embedding_a2a.

PyTorch EmbeddingBag pooling + all_to_all_single, as a DLRM runs it, on W
GPUs of one machine (torch.multiprocessing spawn, NCCL; no torchrun).
Per rank: T tables of `rows` x D fp32 held as one EmbeddingBag (indices
shifted per table: one kernel for all tables, the faster of the two ways in
ANCHORS.md), uniform (or --zipf) indices, fixed pooling L, global batch B.
Timed with CUDA events after --warmup rounds; each repetition runs the three
operations one after the other (interleaved, so that clocks and heat weigh on
each alike), every rank lined up by a barrier first; the time of a
repetition is the maximum over ranks; the median over --reps is reported:
  pool : EmbeddingBag forward -> [T*B, D]
  a2a  : all_to_all_single of the pooled bytes (already in send layout)
  seq  : pool + permute into send layout [W, Bl, T*D] + all_to_all_single +
         permute into the interaction layout [Bl, W*T*D]
Writes one JSON object (device, torch version, options, rows) to --json and
prints one line per shape. loom-bench embedding_a2a runs it and reads the
JSON. Exit status 2 when PyTorch or a GPU is missing (nothing measured).
Usage: python3 bench/peers/embedding_torch.py [--world 2] [--reps 20] [--quick] [--json FILE]
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import interleaved_medians, peer_arguments, spawn_ranks, write_results  # noqa: E402

SHAPES = [(1024, 64), (4096, 64), (4096, 128), (16384, 64)]


def parse_shapes(text):
    out = []
    for item in text.split(","):
        b, t = item.lower().split("x")
        out.append((int(b), int(t)))
    return out


def zipf_indices(torch, rows, count, alpha, gen):
    """Zipf(alpha) ranks over `rows` (inverse CDF), scattered by the
    multiplicative hash of loom's generator (support/dlrm_gen.h), so hot rows
    are not adjacent."""
    ranks = torch.arange(1, rows + 1, device="cuda", dtype=torch.float64)
    cdf = torch.cumsum(ranks.pow(-alpha), 0)
    cdf /= cdf[-1].clone()
    u = torch.rand(count, device="cuda", dtype=torch.float64, generator=gen)
    draws = torch.searchsorted(cdf, u).clamp_(max=rows - 1)
    mult = 2654435761 % rows
    while mult < 1 or math.gcd(mult, rows) != 1:
        mult = (mult + 1) % rows
    return (draws * mult) % rows


def worker(rank, world, args, port, result_path):
    import torch
    import torch.distributed as dist

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    D, L, rows = args.dim, args.pooling, args.rows
    shapes = parse_shapes(args.shapes) if args.shapes else (SHAPES[:2] if args.quick else SHAPES)
    results = []
    for B, T in shapes:
        Bl = B // world
        g = torch.Generator(device="cuda").manual_seed(1000 + rank)
        emb = torch.nn.EmbeddingBag(T * rows, D, mode="sum").cuda()
        with torch.no_grad():
            emb.weight.uniform_(-1, 1, generator=g)
        if args.zipf > 0:
            idx = zipf_indices(torch, rows, T * B * L, args.zipf, g).view(T, B * L)
        else:
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

        ops = [pool, a2a, seq]
        med = interleaved_medians(torch, dist, ops, args.warmup, args.reps)
        if rank == 0:
            rd = T * B * L * D * 4
            row = {"B": B, "T": T, "D": D, "L": L, "world": world, "pool_us": round(med[0], 1),
                   "a2a_us": round(med[1], 1), "seq_us": round(med[2], 1),
                   "pool_GBps_rows": round(rd / (med[0] * 1e-6) / 1e9, 1)}
            results.append(row)
            print("embedding_torch: " + json.dumps(row), flush=True)
        del emb, idx, offsets, send, recv, pooled
        torch.cuda.empty_cache()
    if rank == 0 and result_path:
        write_results(result_path, torch, args, world, "torch", results, zipf=args.zipf)
    dist.destroy_process_group()


def main():
    ap = peer_arguments("ranks (0: min(2, GPUs))")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--pooling", type=int, default=32)
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--zipf", type=float, default=0.0, help="Zipf exponent of the indices (0: uniform)")
    ap.add_argument("--shapes", default="", help="BxT,BxT,... (default: loom-bench's list)")
    return spawn_ranks("embedding_torch.py", worker, ap.parse_args(), "the embedding", min_world=1,
                       default_world=2)


if __name__ == "__main__":
    sys.exit(main())
