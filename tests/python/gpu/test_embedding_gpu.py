"""loom.embedding_a2a / _backward / nn.ShardedEmbeddingBag on 2 ranks
against torch's embedding_bag in float64 (uneven tables per rank, empty
bags, outputs poisoned with NaN before each call)."""
import pytest
import torch
import torch.distributed as dist
from dist_harness import run_ranks
from emb_ref import local_inputs, local_rows, make_problem, reference

import loom

pytestmark = pytest.mark.two_gpus

TPR, ROWS, D, B = [3, 2], [100, 37, 250, 64, 129], 64, 200  # Bl = 100: not a multiple of the slice


def _tol(dtype):
    return 2e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-5


CASES = [  # pooling, per-sample weights, table dtype, output dtype
    ("sum", False, "float32", "float32"),
    ("mean", False, "float32", "float32"),
    ("sum", True, "float32", "float32"),
    ("sum", False, "float32", "bfloat16"),
    ("sum", False, "bfloat16", "float32"),
]


def _forward_backward_case(comm, rank, world, pooling, weighted, table_dtype, out_dtype):
    table_dtype, out_dtype = getattr(torch, table_dtype), getattr(torch, out_dtype)
    dev = f"cuda:{rank}"
    p = make_problem(11, TPR, ROWS, D, B, weighted=weighted)
    x = local_inputs(p, rank, dev, table_dtype)
    ref, leaves = reference(p, pooling, table_dtype)
    out = comm.empty((B // world, sum(TPR) * D), out_dtype)
    out.fill_(float("nan"))
    y = loom.embedding_a2a(comm, x["tables"], x["indices"], x["offsets"], tables_per_rank=TPR, rows=ROWS,
                           global_batch=B, pooling=pooling, per_sample_weights=x["weights"], out=out)
    assert y is out
    torch.cuda.synchronize()
    mine = local_rows(ref, rank, world)
    assert not torch.isnan(y).any(), "an output element was not written"
    err = ((y.double().cpu() - mine.detach()).abs().max() / mine.abs().max()).item()
    assert err < _tol(out_dtype), f"forward: relative error {err}"

    # backward: each rank's output gradient, rebuilt by everybody from the seed
    gen = torch.Generator().manual_seed(99)
    grads = [torch.rand(B // world, sum(TPR) * D, generator=gen, dtype=torch.float64) - 0.5 for _ in range(world)]
    (ref * torch.cat(grads)).sum().backward()
    g = grads[rank].to(out_dtype).to(dev)
    tg = loom.embedding_a2a_backward(comm, g, x["indices"], x["offsets"], tables_per_rank=TPR, rows=ROWS,
                                     global_batch=B, dim=D, table_dtype=table_dtype, pooling=pooling,
                                     per_sample_weights=x["weights"])
    torch.cuda.synchronize()
    want = torch.cat([leaves[t].grad for t in x["tables_idx"]])
    err = ((tg.double().cpu() - want).abs().max() / want.abs().max()).item()
    # low-precision tables accumulate their gradient with atomic adds in that precision
    tol = 6e-2 if table_dtype != torch.float32 else _tol(out_dtype)
    assert err < tol, f"backward: relative error {err}"
    comm.free(out)
    return err


def _forward_backward(rank, world):
    """Every case on one comm; a failing case is reported by name, the
    others still run (each is collective and symmetric on both ranks)."""
    failures = []
    with loom.Comm.from_process_group() as comm:
        for case in CASES:
            try:
                _forward_backward_case(comm, rank, world, *case)
            except AssertionError as e:
                failures.append(f"{case}: {e}")
        keys = [k for k in comm._plan_cache if k[0] == "embedding_a2a"]
        assert len(keys) == len(CASES), f"one cached plan per layout and dtype pair: {keys}"
    assert not failures, "\n".join(failures)


def test_forward_and_backward_match_torch():
    """sum, mean, per-sample weights, bf16 output, bf16 tables."""
    run_ranks(_forward_backward, 2)


def _module_trains(rank, world):
    """ShardedEmbeddingBag + a replicated linear head: 3 SGD steps equal the
    same model in plain PyTorch (full tables on every rank, global batch)."""
    torch.manual_seed(0)
    dev = f"cuda:{rank}"
    p = make_problem(21, TPR, ROWS, D, B)
    x = local_inputs(p, rank, dev)
    head_w = torch.randn(1, sum(TPR) * D, dtype=torch.float64) * 0.05
    target = torch.randn(B, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    lr = 0.05
    ref_tables = [t.float().double() for t in p.tables]
    ref_head = head_w.clone()
    with loom.Comm.from_process_group() as comm:
        emb = loom.nn.ShardedEmbeddingBag(comm, TPR, ROWS, D, B)
        with torch.no_grad():
            emb.weight.copy_(x["tables"])
        head = torch.nn.Linear(sum(TPR) * D, 1, bias=False, device=dev)
        with torch.no_grad():
            head.weight.copy_(head_w)
        opt = torch.optim.SGD(list(emb.parameters()) + list(head.parameters()), lr=lr)
        for step in range(3):
            # plain PyTorch, float64, whole batch
            out_ref, leaves = reference(p, "sum", tables=ref_tables)
            hw = ref_head.clone().requires_grad_(True)
            loss_ref = ((out_ref @ hw.t() - target) ** 2).mean()
            loss_ref.backward()
            ref_tables = [t.detach() - lr * t.grad for t in leaves]
            ref_head = (hw - lr * hw.grad).detach()
            # loom: each rank its share of the batch; the head's gradient summed over ranks
            opt.zero_grad()
            out = emb(x["indices"], x["offsets"])
            bl = B // world
            loss = ((head(out) - target[rank * bl:(rank + 1) * bl].float().to(dev)) ** 2).sum() / B
            loss.backward()
            dist.all_reduce(head.weight.grad)
            lsum = loss.detach().clone()
            dist.all_reduce(lsum)
            assert abs(lsum.item() - loss_ref.item()) < 1e-4 * max(1.0, abs(loss_ref.item())), (step, lsum, loss_ref)
            opt.step()
        torch.cuda.synchronize()
        got = emb.weight.detach().double().cpu()
        want = torch.cat([ref_tables[t] for t in x["tables_idx"]])
        assert (got - want).abs().max().item() < 1e-4, "tables after 3 steps"
        assert (head.weight.detach().double().cpu() - ref_head).abs().max().item() < 1e-4, "head after 3 steps"


def test_sharded_embedding_bag_trains_like_plain_pytorch():
    run_ranks(_module_trains, 2)


def _inputs(seed, rank):
    """This rank's inputs of a float32 problem of the shared layout."""
    return local_inputs(make_problem(seed, TPR, ROWS, D, B), rank, f"cuda:{rank}")


def _version_guard(rank, world):
    x = _inputs(3, rank)
    with loom.Comm.from_process_group() as comm:
        emb = loom.nn.ShardedEmbeddingBag(comm, TPR, ROWS, D, B)
        y1 = emb(x["indices"], x["offsets"])
        l1 = (y1 * y1).sum()  # saves y1 for backward
        y2 = emb(x["indices"], x["offsets"])  # overwrites the buffer y1 lives in
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            l1.backward()
        (y2 * y2).sum().backward()  # the current output is fine
        assert emb.weight.grad is not None and torch.isfinite(emb.weight.grad).all()
        # functional form: each call bumps the plan buffer's version as well
        plan = loom.embedding_plan(comm, TPR, ROWS, D, B)
        v0 = plan.output_buffer()._version
        plan(x["tables"], x["indices"], x["offsets"])
        assert plan.output_buffer()._version > v0
        torch.cuda.synchronize()
        dist.barrier()


def test_reusing_the_output_buffer_is_caught_by_autograd():
    run_ranks(_version_guard, 2)


def _bad_inputs(rank, world):
    dev = f"cuda:{rank}"
    x = _inputs(4, rank)
    with loom.Comm.from_process_group() as comm:
        plan = loom.EmbeddingA2A(comm, TPR, ROWS, D, B, check_indices_sync=True)
        with pytest.raises(loom.InvalidArgumentError, match=r"offsets has shape \(\d+,\); expected"):
            plan(x["tables"], x["indices"], x["offsets"][:-1])
        with pytest.raises(loom.InvalidArgumentError, match="tables has dtype torch.float16"):
            plan(x["tables"].half(), x["indices"], x["offsets"])
        with pytest.raises(loom.InvalidArgumentError, match="indices has dtype torch.int32"):
            plan(x["tables"], x["indices"].int(), x["offsets"])
        with pytest.raises(loom.InvalidArgumentError, match="not symmetric memory of this comm"):
            plan(x["tables"], x["indices"], x["offsets"], out=torch.empty(plan.out_shape, device=dev))
        with pytest.raises(loom.InvalidArgumentError, match="per_sample_weights given but the plan was made without"):
            plan(x["tables"], x["indices"], x["offsets"], torch.ones(x["indices"].numel(), device=dev))
        with pytest.raises(loom.InvalidArgumentError, match="tables_per_rank has 3 entries; the comm has 2 ranks"):
            loom.EmbeddingA2A(comm, [1, 1, 1], [5, 5, 5], D, B)
        # an index past its table: skipped on the device, reported by libloom naming it
        bad = x["indices"].clone()
        bad[0] = ROWS[sum(TPR[:rank])] + 5
        with pytest.raises(loom.InvalidArgumentError, match=str(ROWS[sum(TPR[:rank])] + 5)):
            plan(x["tables"], bad, x["offsets"])
        torch.cuda.synchronize()
        dist.barrier()
        plan(x["tables"], x["indices"], x["offsets"])  # the plan works on afterwards
        torch.cuda.synchronize()
        plan.check()


def test_bad_inputs_are_exceptions_naming_the_argument():
    run_ranks(_bad_inputs, 2)
