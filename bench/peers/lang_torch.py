#!/usr/bin/env python3
"""lang_torch.py - the PyTorch baseline of loom-bench lang.

The computations of loom-bench lang's cases (support/lang_cases.c) as a
PyTorch user writes them, on W GPUs of one machine (torch.multiprocessing
spawn, NCCL; W = 1 runs no collective, as loom's W = 1 rows move nothing):
  ar_norm    x [R, C] bf16 summed over the ranks (dist.all_reduce of a copy
             where W > 1), then h = dropout(s + b, 0.1) + r and
             y = rms_norm(h, g, 1e-5) (torch.nn.functional.rms_norm where
             torch has it, else the same in fp32 ops)
  adam       fp32 [N]: g summed over the ranks (all_reduce in place), then
             torch._fused_adam_ at step 1 (bias correction 1 - beta^1, no
             weight decay, eps 1e-8): the program's update exactly
  lamb       fp32 [N]: the program's update in torch ops (no bias
             correction, u = m / (sqrt(v) + 1e-6) + 0.01 p, the trust ratio
             ||p|| / ||u|| kept on the device)
  gemm_bias  torch.addmm(bias, a, w), bf16 a [M, K], w [K, N], bias [N]
  mp_layer, mp_layer_b16 (fp16), mp_layer_bf16 (bf16)
             CoCoNet's Figure 11 layer as Megatron-LM writes it: this
             rank's in [B, S, H / W] times its w [H / W, H] (torch.matmul),
             dist.all_reduce of the partial sums (W > 1), then
             F.dropout(s + b, 0.1) + r (b [H], r [B, S, H])
lr 1e-3, betas (0.9, 0.999) where the programs have them.
Cases: --cases name/S=v/S=v,... (loom-bench passes its rows' exact sizes,
e.g. ar_norm/R=1024/C=4096,adam/N=1048576); by hand without them, every
case at its --quick size.
Timing (peer_timing.py): N calls in a CUDA graph where PyTorch lets the call
be captured, else call by call ("eager"); the slowest rank; median over
--reps. Writes one JSON object to --json: a row per case, variant "torch",
its complete shape (op, shape = the sizes as loom-bench's row names them
"R=1024,C=4096", dtype, world); prints one line per case. Exit status 2
when PyTorch or the GPUs are missing (nothing measured).
Usage: python3 bench/peers/lang_torch.py [--world 1] [--reps 20] [--warmup 5] [--cases ...] [--eager]
       [--json FILE]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import join_ranks, peer_arguments, spawn_ranks, time_variants, variant_rows, write_results  # noqa: E402

LR, BETA1, BETA2 = 1e-3, 0.9, 0.999
MP = ("mp_layer", "mp_layer_b16", "mp_layer_bf16")
SIZES = dict({"ar_norm": ("R", "C"), "adam": ("N",), "lamb": ("N",), "gemm_bias": ("M", "N", "K")},
             **{name: ("B", "S", "H") for name in MP})
QUICK = {"ar_norm": "R=1024,C=4096", "adam": "N=1048576", "lamb": "N=1048576", "gemm_bias": "M=1024,N=1024,K=1024",
         "mp_layer": "B=2,S=256,H=1024", "mp_layer_b16": "B=4,S=256,H=1024", "mp_layer_bf16": "B=2,S=256,H=2048"}
DTYPE = {"ar_norm": "bf16", "adam": "fp32", "lamb": "fp32", "gemm_bias": "bf16", "mp_layer": "fp16",
         "mp_layer_b16": "fp16", "mp_layer_bf16": "bf16"}


def case_arg(text):
    """One case of --cases: "name/S=v/S=v" -> (name, "S=v,S=v"), every size of the case given, each > 0."""
    name, *binds = text.split("/")
    if name not in SIZES:
        raise ValueError(f"unknown case {name!r}: one of {', '.join(SIZES)}")
    sizes = dict(b.split("=", 1) for b in binds)
    if sorted(sizes) != sorted(SIZES[name]) or any(int(v) < 1 for v in sizes.values()):
        raise ValueError(f"{name} needs {', '.join(s + '=N' for s in SIZES[name])} (each > 0), got {text!r}")
    return name, ",".join(binds)


def cases_arg(text):
    return [case_arg(c) for c in text.split(",") if c]


def sizes_of(bind):
    return {k: int(v) for k, v in (b.split("=", 1) for b in bind.split(","))}


def shape_fields(name, bind, world):
    """The complete shape of a row, as loom-bench lang's row names it."""
    return {"op": name, "shape": bind, "dtype": DTYPE[name], "world": world}


def mp_layer(torch, dist, z, world, dtype, rnd):
    """Figure 11's layer on this rank's slices (loom's rule: ceil(H / W) each, the last ones short):
    matmul, all_reduce (W > 1), dropout(s + b, 0.1) + r."""
    F = torch.nn.functional
    B, S, H = z["B"], z["S"], z["H"]
    q, piece = dist.get_rank(), -(-H // world)
    k = min(H, (q + 1) * piece) - min(H, q * piece)
    x, w = rnd(B, S, k, dtype=dtype), rnd(k, H, dtype=dtype)
    b, r = rnd(H, dtype=dtype), rnd(B, S, H, dtype=dtype)

    def call():
        s = torch.matmul(x, w)
        if world > 1:
            dist.all_reduce(s)
        return F.dropout(s + b, 0.1, training=True) + r
    return call


def make_case(torch, dist, name, bind, world, gen):
    """The case's inputs and its call (a closure of no arguments)."""
    F = torch.nn.functional
    z = sizes_of(bind)
    dev = "cuda"

    def rnd(*shape, dtype=torch.float32):
        return torch.empty(*shape, device=dev, dtype=dtype).uniform_(-1, 1, generator=gen)

    if name in MP:
        return mp_layer(torch, dist, z, world, torch.float16 if DTYPE[name] == "fp16" else torch.bfloat16, rnd)
    if name == "ar_norm":
        R, C = z["R"], z["C"]
        x, r = rnd(R, C, dtype=torch.bfloat16), rnd(R, C, dtype=torch.bfloat16)
        b, g = rnd(C, dtype=torch.bfloat16), rnd(C, dtype=torch.bfloat16)
        s = torch.empty_like(x)
        norm = getattr(F, "rms_norm", None)

        def call():
            if world > 1:
                s.copy_(x)
                dist.all_reduce(s)
                h = F.dropout(s + b, 0.1, training=True) + r
            else:
                h = F.dropout(x + b, 0.1, training=True) + r
            if norm is not None:
                return norm(h, (C,), g, 1e-5)
            hf = h.float()
            return (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-5) * g.float()).to(torch.bfloat16)
        return call
    if name in ("adam", "lamb"):
        N = z["N"]
        g, p = rnd(N), rnd(N)
        m, v = rnd(N) * 0.01, rnd(N).abs() * 0.01
        lr = torch.tensor(LR, device=dev)
        if name == "adam":
            step = torch.ones((), device=dev)

            def call():
                if world > 1:
                    dist.all_reduce(g)
                torch._fused_adam_([p], [g], [m], [v], [], [step], amsgrad=False, lr=LR, beta1=BETA1, beta2=BETA2,
                                   weight_decay=0.0, eps=1e-8, maximize=False, grad_scale=None, found_inf=None)
            return call

        def call():
            if world > 1:
                dist.all_reduce(g)
            m.mul_(BETA1).add_(g, alpha=1 - BETA1)
            v.mul_(BETA2).addcmul_(g, g, value=1 - BETA2)
            u = m / (v.sqrt() + 1e-6) + 0.01 * p
            ratio = torch.linalg.vector_norm(p) / torch.linalg.vector_norm(u)
            p.sub_(lr * ratio * u)
        return call
    M, N, K = z["M"], z["N"], z["K"]
    a, w, bias = rnd(M, K, dtype=torch.bfloat16), rnd(K, N, dtype=torch.bfloat16), rnd(N, dtype=torch.bfloat16)
    return lambda: torch.addmm(bias, a, w)


def worker(rank, world, args, port, result_path):
    import torch
    import torch.distributed as dist

    join_ranks(torch, dist, rank, world, port)
    cases = args.cases or [(n, QUICK[n]) for n in SIZES]
    log = (lambda s: print("lang_torch: " + s, file=sys.stderr, flush=True)) if rank == 0 else None
    gen = torch.Generator(device="cuda").manual_seed(1234 + rank)
    results = []
    for name, bind in cases:
        call = make_case(torch, dist, name, bind, world, gen)
        timed = time_variants(torch, dist, [call], args, ["torch"], log)
        if rank == 0:
            shape = shape_fields(name, bind, world)
            results += variant_rows(shape, ["torch"], timed)
            print("lang_torch: " + json.dumps(dict(shape, torch=timed[0])), flush=True)
        del call
        torch.cuda.empty_cache()
    if rank == 0 and result_path:
        write_results(result_path, torch, args, world, "the lang cases in torch ops (torch._fused_adam_, addmm, "
                      "dropout + rms_norm, matmul + dropout; all_reduce where W > 1)", results)
    dist.destroy_process_group()


def main():
    ap = peer_arguments("ranks (0: every GPU, at most 8; loom-bench lang passes its own)")
    ap.add_argument("--cases", type=cases_arg, default=None,
                    help="name/S=v/S=v,...: the exact cases to run (loom-bench lang passes its rows')")
    return spawn_ranks("lang_torch.py", worker, ap.parse_args(), "the lang cases", min_world=1, default_world=1)


if __name__ == "__main__":
    sys.exit(main())
