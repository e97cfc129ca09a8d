#!/usr/bin/env python3
"""tp_mlp.py - a Megatron-style sequence-parallel MLP on loom, checked against plain PyTorch.

    torchrun --nproc_per_node=2 examples/python/tp_mlp.py [--steps 5] [--tokens 1023]

The model (a transformer's MLP block, small): y = fc2(GeLU(fc1(x))), hidden
H -> ffn F -> H, on m tokens; it learns a fixed random map (a teacher:
target = tanh(x T^T)) from fresh tokens each step; loss: squared error
summed over the hidden features, averaged over the tokens; SGD.

  loom: tensor parallel with sequence parallelism on W ranks. Each rank
        holds its rows of the tokens (rank p: rows [p S, (p+1) S) with
        S = ceil(m / W): --tokens need not be a multiple of W) and 1/W of
        each weight: fc1 is loom.nn.ColumnParallelLinear (this rank's F/W
        output features; forward AllGather+GEMM fused in loom_ag_gemm,
        backward GEMM+ReduceScatter in loom_gemm_rs), fc2 is
        loom.nn.RowParallelLinear (this rank's F/W input features; forward
        GEMM+ReduceScatter, backward AllGather+GEMM). Parameters in fp32,
        GEMMs in bf16 (--dtype) with fp32 accumulation and fp32 outputs.
        Every gradient comes out complete on its rank: no all-reduce.
  reference: the same MLP in plain PyTorch on every rank, fp32, all tokens,
        full weights, no communication.

Both start from the same weights and see the same data. Each step checks
the loss, this rank's output rows, the input gradient of its rows, the
gradients of its weight and bias shards, and at the end its weights;
prints the largest relative differences (to the largest value of each
tensor) and PASS or FAIL (exit status 1) against a tolerance that bf16
operands allow (fp16: tighter).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import loom  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=1023, help="global tokens m (any number >= 1)")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=4096, help="a multiple of 8 * the world size")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16", help="the GEMMs' operands")
    ap.add_argument("--transfer", choices=list(loom.tp.TRANSFERS), default="auto",
                    help="how the ops communicate (copy_engine: the AllGathers; the ReduceScatters take auto)")
    args = ap.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)

    m, H, F = args.tokens, args.hidden, args.ffn
    b0, b1 = loom.shard_range(m, world, rank)
    n1 = F // world  # fc1's output features on this rank = fc2's input features on this rank
    compute = getattr(torch, args.dtype)

    # ---- the reference: the whole MLP on every rank, fp32 --------------------
    torch.manual_seed(1234)  # the same weights on every rank
    ref1, ref2 = torch.nn.Linear(H, F, device=dev), torch.nn.Linear(F, H, device=dev)
    teacher = (torch.randn(H, H, generator=torch.Generator().manual_seed(7)) / H ** 0.5).to(dev)
    opt_ref = torch.optim.SGD(list(ref1.parameters()) + list(ref2.parameters()), lr=args.lr)

    # ---- loom: this rank's shards of the same weights ------------------------
    comm = loom.Comm.from_process_group()
    # AllGather+GEMM: fc1 forward, fc2 backward; GEMM+ReduceScatter: fc2 forward, fc1 backward (no copy engine)
    ag, rs = args.transfer, ("auto" if args.transfer == "copy_engine" else args.transfer)
    kw = dict(compute_dtype=compute, out_dtype=torch.float32)
    fc1 = loom.nn.ColumnParallelLinear.from_linear(comm, ref1, transfer=ag, backward_transfer=rs, **kw)  # [F/W, H]
    fc2 = loom.nn.RowParallelLinear.from_linear(comm, ref2, transfer=rs, backward_transfer=ag, **kw)     # [H, F/W]
    opt = torch.optim.SGD(list(fc1.parameters()) + list(fc2.parameters()), lr=args.lr)
    if rank == 0:
        print(f"tp_mlp: {world} ranks, m={m} tokens (this rank: rows [{b0}, {b1})), H={H}, F={F}, "
              f"{args.dtype} GEMMs; NCCL {loom.nccl_report()['loom_loaded']}", flush=True)

    worst = {}

    def record(name, got, want):
        d = ((got.double() - want.double()).abs().max() / want.double().abs().max().clamp_min(1e-12)).item()
        worst[name] = max(worst.get(name, 0.0), d)

    for step in range(args.steps):
        g = torch.Generator(device="cpu").manual_seed(100 + step)  # the same batch on every rank
        x_full = torch.randn(m, H, generator=g).to(dev)
        target = torch.tanh(x_full @ teacher.t())

        # reference step
        opt_ref.zero_grad()
        xr = x_full.clone().requires_grad_(True)
        y_ref = ref2(torch.nn.functional.gelu(ref1(xr)))
        loss_ref = ((y_ref - target) ** 2).sum() / m
        loss_ref.backward()

        # loom step: this rank's tokens in, this rank's tokens out
        opt.zero_grad()
        x = x_full[b0:b1].clone().requires_grad_(True)
        h = fc1(x, m=m)                                   # [m, F/W]: every token, this rank's features
        y = fc2(torch.nn.functional.gelu(h))              # [rows of this rank, H]
        loss = ((y - target[b0:b1]) ** 2).sum() / m       # this rank's share of the loss
        loss.backward()
        total = loss.detach().clone()
        dist.all_reduce(total)

        record("loss", total, loss_ref.detach())
        record("output (this rank's rows)", y.detach(), y_ref.detach()[b0:b1])
        if b1 > b0:
            record("input gradient (this rank's rows)", x.grad, xr.grad[b0:b1])
        record("fc1 weight gradient (shard)", fc1.weight.grad, ref1.weight.grad[rank * n1:(rank + 1) * n1])
        record("fc1 bias gradient (shard)", fc1.bias.grad, ref1.bias.grad[rank * n1:(rank + 1) * n1])
        record("fc2 weight gradient (shard)", fc2.weight.grad, ref2.weight.grad[:, rank * n1:(rank + 1) * n1])
        record("fc2 bias gradient", fc2.bias.grad, ref2.bias.grad)
        opt_ref.step()
        opt.step()
        if rank == 0:
            print(f"step {step}: loss loom {total.item():.6f} plain {loss_ref.item():.6f}", flush=True)

    record("fc1 weights after training (shard)", fc1.weight.detach(), ref1.weight.detach()[rank * n1:(rank + 1) * n1])
    record("fc2 weights after training (shard)", fc2.weight.detach(),
           ref2.weight.detach()[:, rank * n1:(rank + 1) * n1])
    torch.cuda.synchronize()
    comm.check()
    plans = sorted((k[1], k[7], p.info["transfer"]) for k, p in comm._plan_cache.items() if k[0] == "tp")

    tol = 2e-2 if args.dtype == "bfloat16" else 4e-3
    bad = [k for k, v in worst.items() if not v <= tol]
    flag = torch.tensor([len(bad)], device=dev)
    dist.all_reduce(flag)
    for r in range(world):
        if r == rank:
            print(f"rank {rank}: plans (op, weight layout, transfer) {plans}", flush=True)
            print(f"rank {rank}: largest relative differences loom vs plain PyTorch over {args.steps} steps "
                  f"(tolerance {tol}):", flush=True)
            for k, v in worst.items():
                print(f"  {'ok  ' if v <= tol else 'FAIL'} {k}: {v:.2e}", flush=True)
        dist.barrier()
    fc1.free_buffers()  # collective, like every loom memory call
    comm.close()
    dist.destroy_process_group()
    if rank == 0:
        print("tp_mlp: " + ("PASS: loom's sequence-parallel MLP trains like plain PyTorch" if flag.item() == 0
                            else "FAIL"), flush=True)
    return 0 if flag.item() == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
