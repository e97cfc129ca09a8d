#!/usr/bin/env python3
"""embedding_torch.py - the PyTorch baseline of loom-bench embedding_a2a.

PyTorch EmbeddingBag pooling + all_to_all_single, as a DLRM runs it, on W
GPUs of one machine (torch.multiprocessing spawn, NCCL; no torchrun).
Per rank: T tables of --rows x D fp32 held as one EmbeddingBag (indices
shifted per table: one kernel for all tables, the faster of the two ways in
the project's anchor measurements), uniform (or --zipf) indices, pooling L (--variable: bag
lengths uniform in [0, 2L], as loom-bench's --variable), global batch B.
Shapes: --shapes BxT,... is the list loom-bench passes (with its D, L,
rows, indices and bags); without it loom-bench's defaults (--quick: the
first two).
Timing (peer_timing.py): per call, N calls in a CUDA graph where PyTorch
lets the op be captured, else call by call ("eager"); the three operations
interleaved in each repetition after a barrier; the slowest rank; median
over --reps:
  pool : EmbeddingBag forward -> [T*B, D]
  a2a  : all_to_all_single of the pooled bytes (already in send layout)
  seq  : pool + permute into send layout [W, Bl, T*D] + all_to_all_single +
         permute into the interaction layout [Bl, W*T*D]
Writes one JSON object (device, torch version, options, rows) to --json:
one row per (shape, variant) with the shape's fields (op, B, T, D, L,
table_rows, world, dtype, bags, zipf), us, timing and shape_keys, and
prints one line per shape. loom-bench embedding_a2a runs it and pairs its
rows with these by the complete shape. Exit status 2 when PyTorch or a GPU
is missing (nothing measured).
Usage: python3 bench/peers/embedding_torch.py [--world 2] [--reps 20] [--quick] [--shapes BxT,...]
       [--dim D] [--pooling L] [--rows R] [--zipf A] [--variable] [--eager] [--json FILE]
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import (join_ranks, peer_arguments, spawn_ranks, time_variants, tuples,  # noqa: E402
                         variant_rows, write_results)

SHAPES = [(1024, 64), (4096, 64), (4096, 128), (16384, 64)]
VARIANTS = ["pool", "a2a", "seq"]


def shape_fields(args, B, T, world):
    """The complete shape of a row, as loom-bench's embedding_a2a rows name it."""
    return {"op": "embedding_a2a", "B": B, "T": T, "D": args.dim, "L": args.pooling, "table_rows": args.rows,
            "world": world, "dtype": "fp32", "bags": "variable" if args.variable else "fixed", "zipf": args.zipf}


def bag_offsets(torch, count, L, variable, gen):
    """Offsets of `count` bags of L indices (variable: lengths uniform in
    [0, 2L]) and the number of indices."""
    if variable:
        lengths = torch.randint(0, 2 * L + 1, (count,), device="cuda", generator=gen)
    else:
        lengths = torch.full((count,), L, device="cuda", dtype=torch.int64)
    ends = torch.cumsum(lengths, 0)
    return ends - lengths, lengths, int(ends[-1].item())


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

    join_ranks(torch, dist, rank, world, port)
    D, L, rows = args.dim, args.pooling, args.rows
    log = (lambda s: print("embedding_torch: " + s, file=sys.stderr, flush=True)) if rank == 0 else None
    results = []
    for B, T in (args.shapes or (SHAPES[:2] if args.quick else SHAPES)):
        Bl = B // world
        g = torch.Generator(device="cuda").manual_seed(1000 + rank)
        emb = torch.nn.EmbeddingBag(T * rows, D, mode="sum").cuda()
        with torch.no_grad():
            emb.weight.uniform_(-1, 1, generator=g)
        offsets, lengths, n = bag_offsets(torch, T * B, L, args.variable, g)
        if args.zipf > 0:
            idx = zipf_indices(torch, rows, n, args.zipf, g)
        else:
            idx = torch.randint(0, rows, (n,), device="cuda", generator=g)
        table = torch.repeat_interleave(torch.arange(T * B, device="cuda") // B, lengths)  # each index's table
        idx = idx + table * rows
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

        timed = time_variants(torch, dist, [pool, a2a, seq], args, VARIANTS, log)
        if rank == 0:
            shape = shape_fields(args, B, T, world)
            results += variant_rows(shape, VARIANTS, timed)
            print("embedding_torch: " + json.dumps(dict(shape, **{v: t for v, t in zip(VARIANTS, timed)})),
                  flush=True)
        del emb, idx, offsets, lengths, table, send, recv, pooled
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
    ap.add_argument("--variable", action="store_true", help="bag lengths uniform in [0, 2L] (default: all L)")
    ap.add_argument("--shapes", type=tuples(int, int, sep="x"), default=None,
                    help="BxT,BxT,... the exact shapes to run (default: loom-bench's list)")
    return spawn_ranks("embedding_torch.py", worker, ap.parse_args(), "the embedding", min_world=1,
                       default_world=2)


if __name__ == "__main__":
    sys.exit(main())
