#!/usr/bin/env python3
"""dlrm_embedding.py - a DLRM's sparse part on loom, checked against plain PyTorch.

    torchrun --nproc_per_node=2 examples/python/dlrm_embedding.py [--steps 5]

The model (DLRM-shaped, small): dense features -> bottom MLP; T embedding
tables pooled per sample (sum); concatenation -> top MLP -> one logit; BCE
loss; SGD.

  loom: the tables are sharded table-wise over the ranks (model parallel,
        uneven: rank 0 holds more tables). loom.nn.ShardedEmbeddingBag pools
        this rank's tables over the global batch and delivers each rank its
        share of the batch for all tables in one fused kernel
        (loom_embedding_a2a); its backward sends the output gradient back
        and accumulates every table's gradient on its owner
        (loom_embedding_a2a_backward). The MLPs are data parallel: each rank
        runs its share of the batch and their gradients are summed with
        torch.distributed.all_reduce.
  reference: the same model in plain PyTorch on every rank: all tables as
        torch.nn.EmbeddingBag, the whole global batch, no communication.

Both start from the same weights and see the same data. Each step checks
the loss, this rank's embedding output rows, the gradients of this rank's
tables and of the MLPs, and at the end the weights; prints the largest
differences and exits 1 if any exceeds its tolerance (fp32 everywhere,
tolerances a few ulp of the values' scale).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import loom  # noqa: E402


def mlp(sizes, device, gen):
    layers = []
    for i in range(len(sizes) - 1):
        lin = torch.nn.Linear(sizes[i], sizes[i + 1], device=device)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(sizes[i + 1], sizes[i], generator=gen) / sizes[i] ** 0.5)
            lin.bias.copy_(torch.randn(sizes[i + 1], generator=gen) * 0.1)
        layers.append(lin)
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def make_batch(step, args, rows, device):
    """The global batch of a step: dense [B, 13], labels [B, 1], and per
    table its bags (lengths [B], indices) - identical on every rank."""
    g = torch.Generator().manual_seed(1000 + step)
    B = args.batch
    dense = torch.randn(B, 13, generator=g)
    labels = torch.randint(0, 2, (B, 1), generator=g).float()
    bags = []
    for r in rows:
        lengths = torch.randint(0, args.pooling + 1, (B,), generator=g)
        idx = torch.randint(0, r, (int(lengths.sum()),), generator=g)
        bags.append((lengths, idx))
    return dense.to(device), labels.to(device), bags


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=512, help="global batch (a multiple of the world size)")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--pooling", type=int, default=12, help="largest bag (lengths uniform in 0..pooling)")
    ap.add_argument("--lr", type=float, default=0.1)
    args = ap.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)

    # tables: rank r owns world - r + 2 of them (uneven), of various sizes
    tables_per_rank = [world - r + 2 for r in range(world)]
    T_total = sum(tables_per_rank)
    rows = [1000 + 371 * g for g in range(T_total)]
    D, B, Bl = args.dim, args.batch, args.batch // world
    first = sum(tables_per_rank[:rank])
    mine = list(range(first, first + tables_per_rank[rank]))

    gen = torch.Generator().manual_seed(7)
    init_tables = [torch.randn(r, D, generator=gen) * 0.1 for r in rows]
    bottom_ref, top_ref = mlp([13, 64, D], dev, gen), mlp([D + T_total * D, 128, 1], dev, gen)

    # ---- the reference: everything on every rank, plain PyTorch -------------
    emb_ref = torch.nn.ModuleList(torch.nn.EmbeddingBag(r, D, mode="sum", device=dev) for r in rows)
    with torch.no_grad():
        for e, w in zip(emb_ref, init_tables):
            e.weight.copy_(w)
    ref_params = list(emb_ref.parameters()) + list(bottom_ref.parameters()) + list(top_ref.parameters())
    opt_ref = torch.optim.SGD(ref_params, lr=args.lr)

    # ---- loom: tables sharded, MLPs data parallel ----------------------------
    comm = loom.Comm.from_process_group()
    emb = loom.nn.ShardedEmbeddingBag(comm, tables_per_rank, rows, D, B)
    with torch.no_grad():
        emb.weight.copy_(torch.cat([init_tables[t] for t in mine]))
    bottom = mlp([13, 64, D], dev, torch.Generator())
    top = mlp([D + T_total * D, 128, 1], dev, torch.Generator())
    bottom.load_state_dict(bottom_ref.state_dict())
    top.load_state_dict(top_ref.state_dict())
    dense_params = list(bottom.parameters()) + list(top.parameters())
    opt = torch.optim.SGD([emb.weight] + dense_params, lr=args.lr)
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    if rank == 0:
        print(f"dlrm_embedding: {world} ranks, tables per rank {tables_per_rank}, D={D}, B={B}; "
              f"loom plan: {emb.plan.info}; NCCL: {loom.nccl_report()['loom_loaded']} "
              f"(torch {loom.nccl_report()['torch_version']})", flush=True)

    worst = {}

    def record(name, got, want):
        d = ((got.double() - want.double()).abs().max() / want.double().abs().max().clamp_min(1e-12)).item()
        worst[name] = max(worst.get(name, 0.0), d)
        return d

    for step in range(args.steps):
        dense, labels, bags = make_batch(step, args, rows, dev)

        # reference step
        opt_ref.zero_grad()
        pooled_ref = torch.cat([e(idx.to(dev), torch.cat([torch.zeros(1, dtype=torch.int64), L.cumsum(0)[:-1]]).to(dev))
                                for e, (L, idx) in zip(emb_ref, bags)], dim=1)
        z_ref = torch.cat([bottom_ref(dense), pooled_ref], dim=1)
        loss_ref = bce(top_ref(z_ref), labels)
        loss_ref.backward()

        # loom step: this rank's tables' bags over the global batch in, its batch share out
        opt.zero_grad()
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64)] + [bags[t][0].cumsum(0) + sum(
            int(bags[u][0].sum()) for u in mine[:i]) for i, t in enumerate(mine)]).to(dev)
        indices = torch.cat([bags[t][1] for t in mine]).to(dev)
        pooled = emb(indices, offsets)                                    # [Bl, T_total * D]
        sl = slice(rank * Bl, (rank + 1) * Bl)
        z = torch.cat([bottom(dense[sl]), pooled], dim=1)
        loss = bce(top(z), labels[sl], reduction="sum") / B               # this rank's share of the mean
        loss.backward()
        for p in dense_params:
            dist.all_reduce(p.grad)
        total = loss.detach().clone()
        dist.all_reduce(total)

        # compare
        record("loss", total, loss_ref.detach())
        record("pooled output (this rank's rows)", pooled.detach(), pooled_ref.detach()[sl])
        got_g = emb.weight.grad
        want_g = torch.cat([emb_ref[t].weight.grad for t in mine])
        record("table gradients (this rank's tables)", got_g, want_g)
        record("MLP gradients", torch.cat([p.grad.flatten() for p in dense_params]),
               torch.cat([p.grad.flatten() for p in list(bottom_ref.parameters()) + list(top_ref.parameters())]))
        opt_ref.step()
        opt.step()
        if rank == 0:
            print(f"step {step}: loss loom {total.item():.6f} plain {loss_ref.item():.6f}", flush=True)

    record("tables after training", emb.weight.detach(), torch.cat([emb_ref[t].weight.detach() for t in mine]))
    record("MLP weights after training", torch.cat([p.detach().flatten() for p in dense_params]),
           torch.cat([p.detach().flatten() for p in list(bottom_ref.parameters()) + list(top_ref.parameters())]))
    torch.cuda.synchronize()
    comm.check()

    tol = 1e-4
    bad = [k for k, v in worst.items() if not v <= tol]
    flag = torch.tensor([len(bad)], device=dev)
    dist.all_reduce(flag)
    for r in range(world):
        if r == rank:
            print(f"rank {rank}: largest relative differences loom vs plain PyTorch over {args.steps} steps "
                  f"(tolerance {tol}):", flush=True)
            for k, v in worst.items():
                print(f"  {'ok  ' if v <= tol else 'FAIL'} {k}: {v:.2e}", flush=True)
        dist.barrier()
    emb.plan.close()
    comm.close()
    dist.destroy_process_group()
    if rank == 0:
        print("dlrm_embedding: " + ("OK: loom trains like plain PyTorch" if flag.item() == 0 else "MISMATCH"),
              flush=True)
    return 0 if flag.item() == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
