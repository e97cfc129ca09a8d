#!/usr/bin/env python3
"""grouped_torch.py - the PyTorch baseline of loom-bench grouped.

One MoE layer's expert GEMMs on one GPU, as a PyTorch MoE layer runs them
after its dispatch: T tokens routed top-k over E experts give R = T x k rows
sorted by expert, and every expert's weights ([E, n, k], nn.Linear's layout)
multiply their rows in one call,
    torch._grouped_mm(A, W.transpose(-2, -1), offs=row_ends)
(CUTLASS grouped kernels on Hopper), row_ends the int32 cumulative row counts
on the device. gate_up: n = 2 x ffn, k = hidden; down: n = hidden, k = ffn.
bf16 in and out.
Routing: the same synthetic router outputs as loom-bench's (the generator of
support/moe_routing.h, moe_torch.route_ids: same seed, rank 0, round 0,
Zipf 1.2), so both sides group the same rows; each row names the busiest
expert's rows ("hot") among its shape fields, which proves it.
Shapes: --models name:H:E:k:F,... --gemms gate_up,down --tokens 1,8,...
--routings uniform,zipf: the peer runs their product, in that order (model,
gemm, tokens, routing), which is exactly loom-bench grouped's list of rows.
Inputs: call j of a timing reads input set j mod S (A and all weights, random
bf16), S from rotation_sets (support/grouped_cases.h's rule: the fewest
sets whose bytes touched per call reach 4 x L2, at most 16, within half the
free memory, at most 48 GiB), as loom's side does.
Timing (peer_timing.py): --graph-calls calls captured in one CUDA graph, per
call (loom-bench pairs these with its own graph-timed rows only). Where
torch._grouped_mm is missing or refuses a shape, that row has no time and
the JSON says why.
Writes one JSON object (device, torch version, options, rows) to --json:
one row per shape, variant "grouped_mm", with its fields (op, model, gemm,
tokens, routing, experts, topk, rows, n, k, hot, dtype) and, outside the
shape, the input sets and a check of the busiest expert's rows against
torch.mm.
Exit status 2 when PyTorch or a GPU is missing (nothing measured).
Usage: python3 bench/peers/grouped_torch.py --models Mixtral-8x7B:4096:8:2:14336 [--gemms gate_up,down]
       [--tokens 1,64,8192] [--routings uniform,zipf] [--reps 20] [--warmup 5] [--graph-calls 16] [--json FILE]
"""
import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from moe_torch import MOE_SEED, route_ids  # noqa: E402
from peer_timing import (NONE, join_ranks, peer_arguments, spawn_ranks, time_variants, tuples,  # noqa: E402
                         variant_rows, write_results)

VARIANTS = ["grouped_mm"]
GEMMS = ("gate_up", "down")
ROUTINGS = ("uniform", "zipf")
MAX_SETS = 16          # LOOM_GROUPED_GRAPH_CALLS
BUDGET_MAX = 48 << 30  # bench_grouped.c's GROUPED_BUDGET_MAX


def name_list(allowed):
    """An argparse type: "a,b" -> ["a", "b"], each one of `allowed`."""
    import argparse

    def parse(text):
        out = text.split(",")
        for x in out:
            if x not in allowed:
                raise argparse.ArgumentTypeError(f"{x!r}: needs one of {', '.join(allowed)}")
        return out
    return parse


def token_list(text):
    """"1,8,64" -> [1, 8, 64], each >= 1."""
    import argparse
    out = [t for (t,) in tuples(int)(text)]
    if any(t < 1 for t in out):
        raise argparse.ArgumentTypeError(f"{text!r}: tokens must be >= 1")
    return out


def gemm_dims(gemm, H, F):
    """(n, k) of the gate/up or the down projection."""
    return (2 * F, H) if gemm == "gate_up" else (H, F)


def cases(args):
    """The product of the lists, in loom-bench grouped's order: (model tuple,
    gemm, tokens, routing)."""
    return list(itertools.product(args.models, args.gemms, args.tokens, args.routings))


def expert_rows(route, T, E, k):
    """Rows per expert of the routing (support/grouped_cases.c:
    loom_grouped_offsets' counts)."""
    counts = [0] * E
    for e in route_ids(route, MOE_SEED, 0, 0, T, E, k):
        counts[e] += 1
    return counts


def touched_bytes(R, n, k, active):
    """loom_grouped_touched_bytes: A, C and the weights of the experts with rows (bf16)."""
    return 2.0 * (R * k + R * n + active * n * k)


def set_bytes(R, n, k, E):
    """loom_grouped_set_bytes: A and every expert's weights (bf16)."""
    return 2.0 * (R * k + E * n * k)


def rotation_sets(touched, one_set, l2, budget):
    """loom_grouped_sets: the fewest sets with sets x touched >= 4 x l2, at
    most MAX_SETS, at most budget / one_set, at least 1."""
    sets = 1
    while sets < MAX_SETS and sets * touched < 4.0 * l2:
        sets += 1
    while sets > 1 and sets * one_set > budget:
        sets -= 1
    return sets


def shape_fields(name, gemm, T, route, E, k, n, kk, hot):
    """The complete shape of a row (support/grouped_cases.c:
    loom_grouped_pair_shape, same fields in the same order)."""
    return {"op": "grouped_gemm", "model": name, "gemm": gemm, "tokens": T, "routing": route, "experts": E,
            "topk": k, "rows": T * k, "n": n, "k": kk, "hot": hot, "dtype": "bf16"}


def worker(rank, world, args, port, result_path):
    import torch
    import torch.distributed as dist

    join_ranks(torch, dist, rank, world, port)
    log = lambda s: print("grouped_torch: " + s, file=sys.stderr, flush=True)  # noqa: E731
    gmm = getattr(torch, "_grouped_mm", None)
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20) or (50 << 20)
    free, _ = torch.cuda.mem_get_info()
    budget = min(free / 2, BUDGET_MAX)
    g = torch.Generator(device="cuda").manual_seed(4321)
    results, refused = [], []
    todo = cases(args)
    for (model, gemm), group in itertools.groupby(todo, key=lambda c: (c[0], c[1])):
        name, H, E, k, F = model
        n, kk = gemm_dims(gemm, H, F)
        plan = []
        for _, _, T, route in group:
            counts = expert_rows(route, T, E, k)
            active = sum(1 for c in counts if c)
            sets = rotation_sets(touched_bytes(T * k, n, kk, active), set_bytes(T * k, n, kk, E), l2, budget)
            plan.append((T, route, counts, sets))
        nb = max(p[3] for p in plan)
        w = [torch.empty(E, n, kk, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=g)
             for _ in range(nb)]
        for T, route, counts, sets in plan:
            R = T * k
            a = [torch.empty(R, kk, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=g)
                 for _ in range(sets)]
            ends = list(itertools.accumulate(counts))
            offs = torch.tensor(ends, device="cuda", dtype=torch.int32)
            state = {"i": 0}

            def call(a=a, offs=offs, sets=sets, state=state):
                j = state["i"] % sets
                state["i"] += 1
                return gmm(a[j], w[j].transpose(-2, -1), offs=offs)

            hot = max(counts)
            shape = shape_fields(name, gemm, T, route, E, k, n, kk, hot)
            checked, why = None, ""
            try:
                if gmm is None:
                    raise RuntimeError("this torch has no torch._grouped_mm")
                out = call()
                e = max(range(E), key=lambda x: counts[x])  # the busiest expert, up to 64 of its rows
                r0 = ends[e] - counts[e]
                r1 = min(ends[e], r0 + 64)
                ref = (a[0][r0:r1].float() @ w[0][e].float().t())
                err = (out[r0:r1].float() - ref).abs().max().item()
                checked = err <= 1e-2 * max(1.0, ref.abs().max().item())
                timed = time_variants(torch, dist, [call], args, VARIANTS, log)
            except (RuntimeError, TypeError, ValueError) as ex:  # this shape or GPU refused by torch._grouped_mm: no time
                why = f"{type(ex).__name__}: {ex}".splitlines()[0][:200]
                refused.append(f"{name} {gemm} T={T} {route}: {why}")
                timed = [(None, NONE)]
            rows = variant_rows(shape, VARIANTS, timed)
            for row in rows:
                row.update({"sets": sets, "checked": checked})
                if why:
                    row["why"] = why
            results += rows
            print("grouped_torch: " + " ".join(f"{x}={shape[x]}" for x in ("model", "gemm", "tokens", "routing")) +
                  f" sets={sets} us={rows[0]['us']} ({rows[0]['timing']}) check={checked}", flush=True)
            del a, offs, call
            torch.cuda.empty_cache()
        del w
        torch.cuda.empty_cache()
    if result_path:
        write_results(result_path, torch, args, world,
                      "torch._grouped_mm(A, W.transpose(-2, -1), offs=int32 row ends on the device)", results,
                      refused=refused, l2_bytes=l2, sets_budget_bytes=budget)
    dist.destroy_process_group()


def main():
    ap = peer_arguments(world_help="ranks (1: the grouped GEMM runs on one GPU)")
    ap.add_argument("--models", type=tuples(str, int, int, int, int), required=True,
                    help="name:H:E:k:F,...: hidden, experts, top-k, one expert's ffn")
    ap.add_argument("--gemms", type=name_list(GEMMS), default=list(GEMMS), help="gate_up,down (default both)")
    ap.add_argument("--tokens", type=token_list, default=[1, 8, 64, 512, 1024, 2048, 8192])
    ap.add_argument("--routings", type=name_list(ROUTINGS), default=list(ROUTINGS), help="uniform,zipf (default both)")
    args = ap.parse_args()
    if args.world == 0:
        args.world = 1
    return spawn_ranks("grouped_torch.py", worker, args, "the grouped GEMM", min_world=1, default_world=1)


if __name__ == "__main__":
    sys.exit(main())
