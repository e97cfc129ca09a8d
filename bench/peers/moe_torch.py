#!/usr/bin/env python3
"""moe_torch.py - the PyTorch baseline of loom-bench moe.

Expert-parallel dispatch and combine as a PyTorch layer runs them (the
"all-to-all token dispatcher" of Megatron-style MoE layers) on W GPUs of one
machine (torch.multiprocessing spawn, NCCL; no torchrun):
  dispatch  the (token, j) rows sorted by destination rank (a stable argsort
            of the owners of their experts, index_select), the counts per
            rank exchanged (all_to_all_single) and copied to the host (the
            split sizes), the rows and their expert ids exchanged
            (all_to_all_single with splits), then sorted by local expert
            (a stable argsort, index_select): the grouped GEMM's input
  combine   the expert outputs back to the received order (index_copy), the
            reverse all_to_all_single, back to (token, j) order, and the
            weighted sum over j as one batched GEMM (torch.bmm of the [T, 1, k]
            weights and the [T, k, H] rows: fp32 accumulation, no fp32 copy of
            the rows)
With --layer (loom-bench moe --layer) the whole expert MLP instead, two
variants: layer (dispatch, the gate/up projection of every local expert as
one torch._grouped_mm over the expert-sorted rows, silu(gate) x up, the
down projection as another torch._grouped_mm, combine) and experts (the
two grouped GEMMs and the SwiGLU alone, on the dispatched rows). The
groups' offsets are computed on the device (bincount, cumsum); where
torch._grouped_mm is missing or refuses the shape, a loop of torch.mm per
expert over host counts (said in the JSON). Weights random bf16, [E_local,
out, in] as nn.Linear stores them.
Routing: the same synthetic router outputs as loom-bench's (the generator of
support/moe_routing.h, rewritten here: same seed, same ids), so both move
the same rows. Experts split over the ranks as loom does (the first E mod W
ranks one more).
Shapes: --shapes name:H:E:k:T:route,... (route uniform or zipf; with
--layer name:H:E:k:T:route:F) are what loom-bench passes, its rows' exact
shapes. bf16 rows.
Timing (peer_timing.py): the split sizes go through the host, so neither
call can be captured in a CUDA graph: loom-bench passes --eager (each call
timed from Python: the times include Python's host time).
Writes one JSON object (device, torch version, options, rows) to --json: one
row per (shape, variant), variants dispatch and combine, with the shape's
fields (op, model, tokens, routing, hidden, experts, topk, world, dtype).
Exit status 2 when PyTorch or two GPUs are missing (nothing measured).
Usage: python3 bench/peers/moe_torch.py --shapes Mixtral-8x7B:4096:8:2:4096:uniform [--world 2] [--reps 20]
       [--warmup 5] [--eager] [--json FILE] [--layer (shapes ...:F)]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import (join_ranks, peer_arguments, spawn_ranks, time_variants, tuples,  # noqa: E402
                         variant_rows, write_results)

MOE_SEED = 0x6D6F65  # loom-bench moe's
MASK = (1 << 64) - 1
VARIANTS = ["dispatch", "combine"]
LAYER_VARIANTS = ["layer", "experts"]
ZIPF_S = 1.2


def route_mix(x):
    """support/moe_routing.h: loom_route_mix (splitmix64's finaliser)."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def route_ids(kind, seed, rank, rnd, T, E, k, s=ZIPF_S):
    """support/moe_routing.h: loom_route_make's ids, [T * k] (its weights are
    drawn from the same stream and do not change the ids)."""
    cdf = None
    if kind == "zipf":
        acc, cdf = 0.0, []
        for e in range(E):
            acc += float(e + 1) ** (-s)
            cdf.append(acc)
        cdf = [c / acc for c in cdf]
    ids = []
    for t in range(T):
        st = route_mix(seed ^ (rank << 44) ^ (rnd << 32) ^ t)
        mine = []
        for j in range(k):
            e = j
            if kind != "skew":
                while True:
                    st = route_mix(st)
                    if kind == "uniform":
                        e = st % E
                    else:
                        u = (st >> 11) * 2.0 ** -53
                        lo, hi = 0, E - 1
                        while lo < hi:
                            mid = (lo + hi) // 2
                            if cdf[mid] < u:
                                lo = mid + 1
                            else:
                                hi = mid
                        e = lo
                    if e not in mine:
                        break
            mine.append(e)
            st = route_mix(st)  # the weight's draw
        ids += mine
    return ids


def expert_rank(E, W, e):
    """The owner of expert e (loom.h's split)."""
    base, extra = E // W, E % W
    big = extra * (base + 1)
    return e // (base + 1) if e < big else extra + (e - big) // base


def shape_arg(text):
    """name:H:E:k:T:route or, for --layer, name:H:E:k:T:route:F."""
    try:
        return tuples(str, int, int, int, int, str, int)(text)
    except Exception:
        return [t + (0,) for t in tuples(str, int, int, int, int, str)(text)]


def grouped_mm_or_none(torch):
    """torch._grouped_mm where this torch has it, else None."""
    return getattr(torch, "_grouped_mm", None)


def experts_fn(torch, F, w1, w2, state, gmm):
    """The local experts on the expert-sorted rows state["rows"] with group
    ends state["offs"] (int32, on the device): gate/up, silu x up, down."""
    import torch.nn.functional as fn

    def run():
        rows, offs = state["rows"], state["offs"]
        if gmm is not None and state.get("gmm", True):
            act = gmm(rows, w1.transpose(-2, -1), offs=offs)
            h = fn.silu(act[:, :F]) * act[:, F:]
            return gmm(h, w2.transpose(-2, -1), offs=offs)
        ends = [0] + offs.tolist()  # host counts: the loop's fallback
        out = rows.new_empty(rows.shape[0], w2.shape[1])
        for e in range(w1.shape[0]):
            a, b = ends[e], ends[e + 1]
            if b > a:
                act = rows[a:b] @ w1[e].t()
                out[a:b] = (fn.silu(act[:, :F]) * act[:, F:]) @ w2[e].t()
        return out
    return run


def worker(rank, world, args, port, result_path):
    import torch
    import torch.distributed as dist

    join_ranks(torch, dist, rank, world, port)
    log = (lambda s: print("moe_torch: " + s, file=sys.stderr, flush=True)) if rank == 0 else None
    g = torch.Generator(device="cuda").manual_seed(1234 + rank)
    results = []
    gmm = grouped_mm_or_none(torch)
    fallback = []
    for name, H, E, k, T, route, F in args.shapes:
        nloc = sum(1 for e in range(E) if expert_rank(E, world, e) == rank)
        ids = torch.tensor(route_ids(route, MOE_SEED, rank, 0, T, E, k), device="cuda", dtype=torch.int64)
        owner_of = torch.tensor([expert_rank(E, world, e) for e in range(E)], device="cuda", dtype=torch.int64)
        first = torch.tensor([min(e for e in range(E) if expert_rank(E, world, e) == p) if p < min(E, world) else E
                              for p in range(world)], device="cuda", dtype=torch.int64)
        x = torch.empty(T, H, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=g)
        w = torch.rand(T, k, device="cuda", dtype=torch.float32, generator=g)
        wb = w.to(torch.bfloat16)  # the weighted sum as one batched GEMM (fp32 accumulation)
        state = {}

        def dispatch():
            flat = ids.view(-1)
            dest = owner_of[flat]
            order = torch.argsort(dest, stable=True)
            rows = x.index_select(0, order // k)
            send_counts = torch.bincount(dest, minlength=world)
            recv_counts = torch.empty_like(send_counts)
            dist.all_to_all_single(recv_counts, send_counts)
            sc, rc = send_counts.tolist(), recv_counts.tolist()  # the split sizes, on the host
            recv = rows.new_empty(sum(rc), H)
            dist.all_to_all_single(recv, rows, rc, sc)
            recv_e = flat.new_empty(sum(rc))
            dist.all_to_all_single(recv_e, flat[order], rc, sc)
            local = recv_e - first[rank]
            by_expert = torch.argsort(local, stable=True)
            offs = torch.cumsum(torch.bincount(local, minlength=nloc), 0).to(torch.int32) if nloc else None
            state.update(order=order, sc=sc, rc=rc, by_expert=by_expert, offs=offs)
            return recv.index_select(0, by_expert)

        def combine():
            y = state["y"]
            back = torch.empty_like(y)
            back.index_copy_(0, state["by_expert"], y)
            mine = back.new_empty(sum(state["sc"]), H)
            dist.all_to_all_single(mine, back, state["sc"], state["rc"])
            rows = torch.empty_like(mine)
            rows.index_copy_(0, state["order"], mine)
            return torch.bmm(wb.unsqueeze(1), rows.view(T, k, H)).squeeze(1)  # [T, 1, k] x [T, k, H]

        state["y"] = dispatch().clone()  # the expert outputs' stand-in: the rows themselves
        names, fns = VARIANTS, [dispatch, combine]
        if args.layer:
            w1 = torch.empty(nloc, 2 * F, H, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=g) / H ** 0.5
            w2 = torch.empty(nloc, H, F, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1, generator=g) / F ** 0.5
            state["rows"] = state["y"]
            experts = experts_fn(torch, F, w1, w2, state, gmm)
            try:
                experts()
            except RuntimeError as e:  # this shape or GPU refused by torch._grouped_mm: the loop instead
                state["gmm"] = False
                fallback.append(f"{name}: {e}"[:200])

            def layer():
                state["rows"] = dispatch()
                state["y"] = experts() if nloc else state["rows"]
                return combine()
            names, fns = LAYER_VARIANTS, [layer, experts]
        timed = time_variants(torch, dist, fns, args, names, log)
        if rank == 0:
            shape = {"op": "moe_layer" if args.layer else "moe", "model": name, "tokens": T, "routing": route,
                     "hidden": H, "experts": E, "topk": k, "world": world, "dtype": "bf16"}
            if args.layer:
                shape["ffn"] = F
            results += variant_rows(shape, names, timed)
            print("moe_torch: " + json.dumps(dict(shape, **{v: t for v, t in zip(names, timed)})), flush=True)
        del x, w, wb, ids, state
        torch.cuda.empty_cache()
    if rank == 0 and result_path:
        peer = ("argsort + index_select + all_to_all_single (split sizes via the host) dispatch; reverse + "
                "weighted sum combine")
        if args.layer:
            peer += "; experts: " + ("torch._grouped_mm, silu x up, torch._grouped_mm" if gmm else "a loop of torch.mm")
        write_results(result_path, torch, args, world, peer, results, grouped_mm_fallback=fallback)
    dist.destroy_process_group()


def main():
    ap = peer_arguments()
    ap.add_argument("--shapes", type=shape_arg, required=True,
                    help="name:H:E:k:T:route[:F],... (route uniform|zipf|skew; F with --layer): the exact shapes")
    ap.add_argument("--layer", action="store_true",
                    help="the whole expert MLP (layer) and its grouped GEMMs + SwiGLU (experts) instead")
    return spawn_ranks("moe_torch.py", worker, ap.parse_args(), "the all-to-all")


if __name__ == "__main__":
    sys.exit(main())
