#!/usr/bin/env python3
"""optim_torch.py - the PyTorch baseline of loom-bench adam and lamb.

A data-parallel optimizer step as PyTorch runs it on W GPUs of one machine
(torch.multiprocessing spawn, NCCL; no torchrun): the gradients of a list of
tensors live in one flat buffer (as DDP's buckets), dist.all_reduce sums it
in place (NCCL), then
  adam: torch._fused_adam_ (AdamW: adamw=True) over the list, the gradients
        divided by W through grad_scale (one multi-tensor kernel);
  lamb: PyTorch has no fused LAMB: the update with torch._foreach_* ops
        (Adam moments, AdamW decay, per-tensor norms of weights and update
        by torch._foreach_norm, the trust ratio, the step), as a user of
        torch without apex writes it.
Precision: fp32 (fp32 parameters and gradients) or mixed (bf16 parameters
and gradients all-reduced in bf16, fp32 master weights and moments: the
gradients are cast to fp32, the fp32 step runs, the master weights are cast
back to the bf16 parameters).
Cases: --cases N,N,bert (one tensor of N elements, or the BERT-large-like
list of 360 tensors: 24 layers x 15 tensors, H = 1024) and --dtypes
fp32,mixed are what loom-bench passes, its rows' exact cases; without
them loom-bench's defaults (2^20, 2^24, 2^27, bert; --quick: 2^20, 2^24;
both precisions).
Hyper-parameters as loom-bench's: lr 1e-3, betas (0.9, 0.999), eps 1e-8,
weight decay 0.01.
Timing (peer_timing.py): per call, N calls in a CUDA graph where PyTorch
lets the step be captured, else call by call ("eager"); the variants
interleaved in each repetition after a barrier; the slowest rank; median
over --reps.
Writes one JSON object (device, torch version, options, rows) to --json:
one row per (case, variant), variant step (all_reduce + update), allreduce
or update, with the shape's fields (op, elements, tensors, dtype, world),
the case's name, us, timing and shape_keys, and prints one line per case;
loom-bench adam / lamb run it and pair its rows with theirs by the
complete shape. Exit status 2 when PyTorch or two GPUs are missing
(nothing measured).
Usage: python3 bench/peers/optim_torch.py --op adam|lamb [--world 2] [--reps 20] [--warmup 5]
       [--quick] [--cases N,N,bert] [--dtypes fp32,mixed] [--eager] [--json FILE]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import (join_ranks, peer_arguments, spawn_ranks, time_variants, tuples,  # noqa: E402
                         variant_rows, write_results)

LR, BETA1, BETA2, EPS, WD = 1e-3, 0.9, 0.999, 1e-8, 0.01
VARIANTS = ["step", "allreduce", "update"]


def case_arg(text):
    """A case of --cases: "bert" or a number of elements (> 0)."""
    if text == "bert":
        return text
    n = int(text)
    if n < 1:
        raise ValueError("a case needs 1 or more elements")
    return n


def dtype_arg(text):
    """A precision of --dtypes: fp32 or mixed."""
    if text not in ("fp32", "mixed"):
        raise ValueError("a precision is fp32 or mixed")
    return text


def case_name(case):
    """As loom-bench's rows print it: "bert", "2^20", or the element count."""
    if case == "bert":
        return case
    return f"2^{case.bit_length() - 1}" if case & (case - 1) == 0 else str(case)


def shape_fields(op, case, mixed, world):
    """The complete shape of a row, as loom-bench's adam / lamb rows name it."""
    sizes = case_sizes(case)
    return {"op": op, "elements": sum(sizes), "tensors": len(sizes), "dtype": "bf16+fp32" if mixed else "fp32",
            "world": world}


def case_sizes(case):
    if case != "bert":
        return [case]
    H = 1024
    layer = [H * H, H, H * H, H, H * H, H, H * H, H, H, H, 4 * H * H, 4 * H, 4 * H * H, H, H]
    return layer * 24


def lamb_step(torch, params, grads, m, v, step, inv_w):
    """LAMB (adam_w_mode) with torch._foreach ops: one list-wide kernel per op."""
    torch._foreach_mul_(grads, inv_w)
    torch._foreach_mul_(m, BETA1)
    torch._foreach_add_(m, grads, alpha=1 - BETA1)
    torch._foreach_mul_(v, BETA2)
    torch._foreach_addcmul_(v, grads, grads, value=1 - BETA2)
    bc1, bc2 = 1 - BETA1 ** step, 1 - BETA2 ** step
    upd = torch._foreach_div(m, bc1)
    den = torch._foreach_div(v, bc2)
    torch._foreach_sqrt_(den)
    torch._foreach_add_(den, EPS)
    torch._foreach_div_(upd, den)
    torch._foreach_add_(upd, params, alpha=WD)
    wn = torch.stack(torch._foreach_norm(params))
    un = torch.stack(torch._foreach_norm(upd))
    ratio = torch.where((wn > 0) & (un > 0), wn / un, torch.ones_like(wn))
    torch._foreach_mul_(upd, list(torch.unbind(-LR * ratio)))
    torch._foreach_add_(params, upd)


def worker(rank, world, args, port, result_path):
    import torch
    import torch.distributed as dist

    join_ranks(torch, dist, rank, world, port)
    cases = [c for (c,) in args.cases] if args.cases else (
        [1 << 20, 1 << 24] if args.quick else [1 << 20, 1 << 24, 1 << 27, "bert"])
    precisions = [d == "mixed" for (d,) in args.dtypes] if args.dtypes else [False, True]
    log = (lambda s: print("optim_torch: " + s, file=sys.stderr, flush=True)) if rank == 0 else None
    g = torch.Generator(device="cuda").manual_seed(777 + rank)
    results = []
    for mixed in precisions:
        for case in cases:
            sizes = case_sizes(case)
            total = sum(sizes)
            low = torch.bfloat16 if mixed else torch.float32
            flat_g = torch.empty(total, device="cuda", dtype=low).uniform_(-1, 1, generator=g)
            flat_p = torch.empty(total, device="cuda", dtype=low).uniform_(-1, 1, generator=g)
            grads = list(torch.split(flat_g, sizes))
            params = list(torch.split(flat_p, sizes))
            master = [p.float() for p in params] if mixed else params
            grads32 = [torch.empty_like(p) for p in master] if mixed else grads
            m = [torch.zeros_like(p) for p in master]
            v = [torch.zeros_like(p) for p in master]
            steps = [torch.zeros((), device="cuda", dtype=torch.float32) for _ in master]
            scale = torch.tensor(float(world), device="cuda", dtype=torch.float32)  # grads / W (AMP's unscale)
            count = [0]

            def update():
                if mixed:
                    torch._foreach_copy_(grads32, grads)
                if args.op == "adam":
                    torch._foreach_add_(steps, 1.0)
                    torch._fused_adamw_(master, grads32, m, v, [], steps, amsgrad=False, lr=LR, beta1=BETA1,
                                        beta2=BETA2, weight_decay=WD, eps=EPS, maximize=False, grad_scale=scale,
                                        found_inf=None)
                else:
                    count[0] += 1
                    lamb_step(torch, master, grads32, m, v, count[0], 1.0 / world)
                if mixed:
                    torch._foreach_copy_(params, master)

            def step_fn():
                dist.all_reduce(flat_g)
                update()

            def allreduce_fn():
                dist.all_reduce(flat_g)

            timed = time_variants(torch, dist, [step_fn, allreduce_fn, update], args, VARIANTS, log)
            if rank == 0:
                shape = shape_fields(args.op, case, mixed, world)
                rows = variant_rows(shape, VARIANTS, timed)
                for r in rows:
                    r["case"] = case_name(case)  # a label, not part of the shape
                results += rows
                print("optim_torch: " + json.dumps(dict(shape, case=case_name(case),
                                                        **{v: t for v, t in zip(VARIANTS, timed)})), flush=True)
            del flat_g, flat_p, grads, params, master, grads32, m, v, steps
            torch.cuda.empty_cache()
    if rank == 0 and result_path:
        what = "all_reduce + torch._fused_adamw_" if args.op == "adam" else "all_reduce + LAMB in torch._foreach_ ops"
        write_results(result_path, torch, args, world, what, results)
    dist.destroy_process_group()


def main():
    ap = peer_arguments()
    ap.add_argument("--op", choices=["adam", "lamb"], required=True)
    ap.add_argument("--cases", type=tuples(case_arg), default=None,
                    help="N,N,bert: the exact cases to run (loom-bench passes its rows')")
    ap.add_argument("--dtypes", type=tuples(dtype_arg), default=None,
                    help="fp32,mixed: the precisions to run (default both)")
    return spawn_ranks("optim_torch.py", worker, ap.parse_args(), "the all-reduce")


if __name__ == "__main__":
    sys.exit(main())
