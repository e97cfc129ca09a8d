"""What needs torch but no GPU: real torch dtypes and devices through the
checks, and the autograd design of loom.nn on CPU tensors with a stand-in
plan (the real plan runs in tests/python/gpu). Skipped, saying so, where
torch is not installed; the rest of the host suite does not need it."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch-specific host tests are skipped "
                                            "(the binding's own logic is tested without it)")

import loom  # noqa: E402
from loom import _checks  # noqa: E402


def test_torch_dtypes_and_devices_through_the_checks():
    assert _checks.loom_dtype(torch.bfloat16, "f", "x") == loom.DType.BF16
    assert _checks.loom_dtype(torch.float32, "f", "x") == loom.DType.FP32
    a = torch.zeros(64, 32, dtype=torch.bfloat16)
    with pytest.raises(loom.InvalidArgumentError, match="loom.gemm: a is on device cpu; loom ops take CUDA tensors"):
        loom.gemm(a, torch.zeros(32, 16, dtype=torch.bfloat16))
    with pytest.raises(loom.InvalidArgumentError, match="loom.linear: x .* is not contiguous"):
        loom.linear(torch.zeros(8, 4, 32).transpose(0, 1), torch.zeros(16, 32))


def test_the_version_counter_api_the_ops_use_exists():
    t = torch.zeros(3)
    v = t._version
    torch.autograd.graph.increment_version(t)
    assert t._version == v + 1


class FakePlan:
    """Stands in for loom.EmbeddingA2A: out = 2 * weight[:rows of out]."""

    def __init__(self):
        self.backwards = 0

    def forward(self, weight, indices, offsets, per_sample_weights, out):
        with torch.no_grad():
            out.copy_(2 * weight[: out.shape[0]])
        return out

    def backward(self, grad_out, indices, offsets, per_sample_weights):
        self.backwards += 1
        g = torch.zeros(6, 3)
        g[: grad_out.shape[0]] = 2 * grad_out
        return g


def test_the_output_buffer_is_reused_and_autograd_catches_a_stale_backward():
    from loom.nn import EmbeddingA2AFunction as F
    plan, buf = FakePlan(), torch.zeros(4, 3)
    w = torch.nn.Parameter(torch.randn(6, 3))
    idx, off = torch.zeros(1, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)

    y1 = F.apply(plan, buf.detach(), w, idx, off, None)
    assert y1.data_ptr() == buf.data_ptr() and y1.requires_grad  # zero-copy: the buffer itself
    (y1 * y1).sum().backward()  # forward, backward: fine
    assert torch.allclose(w.grad[:4], 8 * w.detach()[:4]) and (w.grad[4:] == 0).all()

    y1 = F.apply(plan, buf.detach(), w, idx, off, None)
    l1 = (y1 * y1).sum()
    y2 = F.apply(plan, buf.detach(), w, idx, off, None)  # overwrites what l1 saved
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        l1.backward()
    w.grad = None
    (y2 * y2).sum().backward()
    assert torch.allclose(w.grad[:4], 8 * w.detach()[:4])
    assert plan.backwards == 2  # the stale backward never reached the (collective) op
    assert buf.grad_fn is None and not buf.requires_grad  # the buffer itself carries no graph


def test_the_module_refuses_weights_that_need_a_gradient():
    from loom.nn import ShardedEmbeddingBag
    m = ShardedEmbeddingBag.__new__(ShardedEmbeddingBag)  # no comm here: only forward's check runs
    torch.nn.Module.__init__(m)
    with pytest.raises(loom.InvalidArgumentError, match="per_sample_weights requires grad"):
        m.forward(torch.zeros(1, dtype=torch.int64), torch.zeros(2, dtype=torch.int64),
                  torch.ones(1, requires_grad=True))


def _run(code):
    from conftest import run_python
    return run_python(code, timeout=300)


def test_torch_first_either_shares_a_matching_nccl_or_raises_naming_both():
    """The usual program: torch, then loom. libloom's calls reach PyTorch's
    NCCL; the check passes when its major.minor is libloom's, and raises
    NcclMismatchError naming both versions otherwise (torch 2.11 ships NCCL
    2.28.9; later ones newer)."""
    r = _run("""
        import torch, loom
        from loom import nccl
        rep = loom.nccl_report()
        print("SAME", rep["same_library"], rep["loom_loaded"], rep["torch_version"], rep["loom_header"])
        try:
            nccl.check()
            print("CHECK ok")
        except loom.NcclMismatchError as e:
            print("CHECK mismatch", e)
        """)
    assert r.returncode == 0, r.stderr
    words = r.stdout.split("\n")[0].split()
    assert words[:2] == ["SAME", "True"] and words[2] == words[3], r.stdout  # one NCCL: PyTorch's
    loaded, header = words[2], words[4]
    if loaded.split(".")[:2] == header.split(".")[:2]:
        assert "CHECK ok" in r.stdout
    else:
        assert "CHECK mismatch" in r.stdout and loaded in r.stdout and header in r.stdout


def test_loom_first_never_crashes_the_process():
    """libloom (and its NCCL) first, then torch: torch either runs on that
    NCCL or fails to import with an ImportError (undefined symbol) when it
    needs a newer one; never a signal."""
    r = _run("""
        import loom
        loom.version()
        try:
            import torch
            print("TORCH imported", loom.nccl_report()["same_library"])
        except ImportError as e:
            print("TORCH ImportError", e)
        """)
    assert r.returncode == 0, r.stderr
    assert "TORCH imported True" in r.stdout or ("TORCH ImportError" in r.stdout and "nccl" in r.stdout), r.stdout


def _bootstrap_rank(rank, world, port, check_modes, q):
    """One rank of Comm.from_process_group over gloo on the CPU, with the
    GPU-side steps stood in for: what is tested is the exchange of verdicts
    and of the unique id through the group."""
    import os
    import sys
    os.environ["LOOM_NCCL_CHECK"] = check_modes[rank]
    import torch
    import torch.distributed as dist
    import loom
    from loom import comm as comm_mod, nccl
    torch.cuda.current_device = lambda: 0
    seen = {}
    nccl.comm_init_rank = lambda n, uid, r, dev, timeout_s: seen.setdefault("uid", uid) and 4242

    class StandIn(comm_mod.Comm):
        def __init__(self, address, **kw):
            seen["address"], seen["kw"] = address, kw

    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        try:
            StandIn.from_process_group(timeout_s=7)
            q.put((rank, "made", seen["uid"].hex(), seen["address"], seen["kw"]["owns_nccl"]))
        except loom.NcclMismatchError as e:
            q.put((rank, "refused", str(e), None, None))
        dist.destroy_process_group()
    except BaseException as e:  # noqa
        q.put((rank, "error", repr(e), None, None))
        sys.exit(1)


def _bootstrap(check_modes):
    import multiprocessing as mp
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_bootstrap_rank, args=(r, 2, port, check_modes, q)) for r in range(2)]
    for p in ps:
        p.start()
    out = sorted(q.get(timeout=120) for _ in ps)
    for p in ps:
        p.join(30)
    return out


def test_bootstrap_shares_rank_0s_unique_id_through_the_group():
    out = _bootstrap(["off", "off"])
    assert [o[1] for o in out] == ["made", "made"], out
    assert out[0][2] == out[1][2] and len(out[0][2]) == 256  # the same 128-byte id on both ranks
    assert out[0][3] == out[1][3] == 4242 and out[0][4] is True


def test_one_rank_that_fails_its_check_makes_every_rank_raise():
    out = _bootstrap(["off", "bogus"])
    assert [o[1] for o in out] == ["refused", "refused"], out
    for o in out:
        assert "rank 1: InvalidArgumentError: LOOM_NCCL_CHECK='bogus'" in o[2] and "rank 0" not in o[2]
