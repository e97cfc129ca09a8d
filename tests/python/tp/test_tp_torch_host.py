"""The autograd design of loom.nn's tensor-parallel layers, on the CPU.

loom's ops need GPUs; what is tested here is everything around them: which
op each forward and backward calls, with which operands, weight layout,
rows and dtypes, which gathered tensor the weight gradient reads, and what
the layers return, against the same model in plain PyTorch. The two plan
factories the layers use (loom.tp.ag_gemm_plan / gemm_rs_plan) are replaced
by stand-ins that do what loom.h says the ops do, with torch.distributed
collectives over gloo on W CPU processes (or none, on one rank). The real
ops are tested against torch in tests/python/gpu/test_tp_gpu.py.

Skipped, saying so, where torch is not installed.
"""
import math

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch-specific host tests are skipped "
                                            "(the binding's own logic is tested without it)")

import loom  # noqa: E402
from loom import tp  # noqa: E402
from loom._checks import dtype_name  # noqa: E402


# ---- stand-ins for the ops (loom.h's definitions, in torch) -------------------------------

class EmuComm:
    """A loom.Comm stand-in: this process's rank in torch.distributed (or
    rank 0 of 1), CPU tensors as 'symmetric memory'."""

    def __init__(self):
        import torch.distributed as dist
        self.dist = dist if dist.is_initialized() else None
        self.rank = dist.get_rank() if self.dist else 0
        self.size = dist.get_world_size() if self.dist else 1
        self.device = None
        self.allocs = []
        self.calls = []
        self.plans = {}
        self.freed = []

    def empty(self, shape, dtype, _internal=False):
        t = torch.empty(shape, dtype=getattr(torch, dtype_name(dtype)))
        self.allocs.append((tuple(t.shape), dtype_name(t.dtype), _internal))
        return t

    def free(self, t):
        self.freed.append(t)


def _op(w, layout):
    """weight -> the matrix B of C = A B for a layout ("nk": weight [n, k])."""
    return w.double().t() if layout == "nk" else w.double()


class EmuPlan:
    def __init__(self, comm, op, m, n, k, ab, c, layout, has_bias):
        self.comm, self.op, self.m, self.n, self.k = comm, op, m, n, k
        self.ab, self.c, self.layout, self.has_bias = ab, c, layout, has_bias
        self.rows = tp.shard_range(m, comm.size, comm.rank)
        self.buf = None

    def gathered_buffer(self):
        if self.buf is None:
            self.buf = self.comm.empty((self.m, self.k), self.ab, _internal=True)
        return self.buf

    def _check(self, a, weight, bias):
        assert dtype_name(a.dtype) == dtype_name(weight.dtype) == self.ab
        assert a.is_contiguous() and weight.is_contiguous()
        assert tuple(weight.shape) == ((self.n, self.k) if self.layout == "nk" else (self.k, self.n))
        assert (bias is not None) == self.has_bias
        assert bias is None or (dtype_name(bias.dtype) == self.c and tuple(bias.shape) == (self.n,))

    def ag_gemm(self, a_shard, weight, bias=None, *, out=None, gathered=None, stream=None):
        self._check(a_shard, weight, bias)
        b, e = self.rows
        assert tuple(a_shard.shape) == (e - b, self.k), (tuple(a_shard.shape), self.rows)
        W, S = self.comm.size, tp.shard_rows(self.m, self.comm.size)
        if self.comm.dist:
            pad = torch.zeros(S, self.k, dtype=a_shard.dtype)
            pad[:e - b] = a_shard
            parts = [torch.empty_like(pad) for _ in range(W)]
            self.comm.dist.all_gather(parts, pad)
            full = torch.cat([parts[p][:tp.shard_len(self.m, W, p)] for p in range(W)])
        else:
            full = a_shard.clone()
        if gathered is not None:
            assert tuple(gathered.shape) == (self.m, self.k) and gathered.dtype == a_shard.dtype
            gathered.copy_(full)
        y = full.double() @ _op(weight, self.layout)
        if bias is not None:
            y = y + bias.double()
        self.comm.calls.append(("ag_gemm", self.layout, self.m, tuple(a_shard.shape), tuple(weight.shape),
                                gathered is not None))
        return y.to(getattr(torch, self.c))

    def gemm_rs(self, a, weight, bias=None, *, out=None, stream=None):
        self._check(a, weight, bias)
        assert tuple(a.shape) == (self.m, self.k)
        # each rank's partial rounded to the output dtype once, summed in fp32 (the fused path)
        part = (a.double() @ _op(weight, self.layout)).to(getattr(torch, self.c)).float()
        if self.comm.dist:
            self.comm.dist.all_reduce(part)
        y = part[self.rows[0]:self.rows[1]].double()
        if bias is not None:
            y = y + bias.double()
        self.comm.calls.append(("gemm_rs", self.layout, self.m, tuple(a.shape), tuple(weight.shape), False))
        return y.to(getattr(torch, self.c))


def _emu_factory(op):
    def make(comm, a, weight, *, bias=False, m=None, layout="nk", out_dtype=None, transfer="auto", chunk_rows=0,
             comm_blocks=0):
        rows, k = a.shape
        n = weight.shape[0] if layout == "nk" else weight.shape[1]
        if op == "ag_gemm":
            m = rows * comm.size if m is None else m
        else:
            m = rows
        c = dtype_name(out_dtype) if out_dtype is not None else dtype_name(a.dtype)
        key = (op, m, n, k, dtype_name(a.dtype), c, layout, bias is not None and bias is not False,
               tp._transfer("emu", transfer).name)
        if key not in comm.plans:
            comm.plans[key] = EmuPlan(comm, op, m, n, k, dtype_name(a.dtype), c, layout, key[7])
        return comm.plans[key]
    return make


@pytest.fixture
def emulated(monkeypatch):
    monkeypatch.setattr(tp, "ag_gemm_plan", _emu_factory("ag_gemm"))
    monkeypatch.setattr(tp, "gemm_rs_plan", _emu_factory("gemm_rs"))


def _install_emulation():
    tp.ag_gemm_plan = _emu_factory("ag_gemm")
    tp.gemm_rs_plan = _emu_factory("gemm_rs")


# ---- the model: a sequence-parallel MLP and its plain-PyTorch twin --------------------------

H, F = 32, 96  # hidden, ffn (a multiple of 2 and 3)


def _full_params(seed):
    g = torch.Generator().manual_seed(seed)
    return {"w1": torch.randn(F, H, generator=g) / math.sqrt(H), "b1": torch.randn(F, generator=g) * 0.1,
            "w2": torch.randn(H, F, generator=g) / math.sqrt(F), "b2": torch.randn(H, generator=g) * 0.1}


def _reference(p, x, r):
    """Plain PyTorch in float64: y = fc2(gelu(fc1(x))), loss = sum(y * r); returns (y, grads)."""
    q = {k: v.double().clone().requires_grad_(True) for k, v in p.items()}
    xx = x.double().clone().requires_grad_(True)
    y = torch.nn.functional.linear(torch.nn.functional.gelu(torch.nn.functional.linear(xx, q["w1"], q["b1"])),
                                   q["w2"], q["b2"])
    (y * r.double()).sum().backward()
    return y.detach(), {"x": xx.grad, **{k: v.grad for k, v in q.items()}}


def _rel(got, want):
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.numel() == 0:
        return 0.0
    return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()


def _mlp_case(comm, m, param_dtype, out_dtype, modules, seed=3):
    """One forward and backward of the sequence-parallel MLP against the
    reference; returns the largest relative differences by name."""
    W, p = comm.size, comm.rank
    params = _full_params(seed)
    g = torch.Generator().manual_seed(seed + 1)
    x_full = torch.randn(m, H, generator=g).bfloat16()
    r = torch.randn(m, H, generator=g)
    b, e = tp.shard_range(m, W, p)
    ref_y, ref_g = _reference({k: v.to(param_dtype) for k, v in params.items()}, x_full, r)
    x = x_full[b:e].clone().requires_grad_(True)
    kw = dict(compute_dtype=torch.bfloat16, dtype=param_dtype, out_dtype=out_dtype, device="cpu")
    if modules:
        fc1 = loom.nn.ColumnParallelLinear(comm, H, F, **kw).load_full(params["w1"], params["b1"])
        fc2 = loom.nn.RowParallelLinear(comm, F, H, **kw).load_full(params["w2"], params["b2"])
        h = fc1(x, m=m)
        y = fc2(torch.nn.functional.gelu(h))
        w1, b1, w2, b2 = fc1.weight, fc1.bias, fc2.weight, fc2.bias
    else:  # the functional form, weights in layout "kn" ([k, n])
        n1, k2 = F // W, F // W
        w1 = params["w1"][p * n1:(p + 1) * n1].t().contiguous().to(param_dtype).requires_grad_(True)
        b1 = params["b1"][p * n1:(p + 1) * n1].to(param_dtype).requires_grad_(True)
        w2 = params["w2"][:, p * k2:(p + 1) * k2].t().contiguous().to(param_dtype).requires_grad_(True)
        b2 = params["b2"].to(param_dtype).requires_grad_(True)
        h = loom.nn.column_parallel_linear(comm, x, w1, b1, m=m, layout="kn",
                                           out_dtype=out_dtype)
        y = loom.nn.row_parallel_linear(comm, torch.nn.functional.gelu(h).to(torch.bfloat16), w2, b2, layout="kn",
                                        out_dtype=out_dtype)
    assert y.shape == (e - b, H) and y.dtype == (out_dtype or torch.bfloat16)
    (y.float() * r[b:e]).sum().backward()
    n1, k2 = F // W, F // W
    want_w1, want_w2 = ref_g["w1"][p * n1:(p + 1) * n1], ref_g["w2"][:, p * k2:(p + 1) * k2]
    got_w1, got_w2 = (w1.grad, w2.grad) if modules else (w1.grad.t(), w2.grad.t())
    for t, dt in ((w1, param_dtype), (b1, param_dtype), (w2, param_dtype), (b2, param_dtype)):
        assert t.grad.dtype == dt and t.grad.shape == t.shape
    assert x.grad.dtype == torch.bfloat16 and x.grad.shape == x.shape
    return {"y": _rel(y, ref_y[b:e]), "dx": _rel(x.grad, ref_g["x"][b:e]),
            "dw1": _rel(got_w1, want_w1), "db1": _rel(b1.grad, ref_g["b1"][p * n1:(p + 1) * n1]),
            "dw2": _rel(got_w2, want_w2), "db2": _rel(b2.grad, ref_g["b2"])}


CASES = [  # m, parameter dtype, output dtype, modules (else the functions with layout "kn")
    (8, torch.float32, torch.float32, True),
    (7, torch.bfloat16, None, True),
    (7, torch.float32, torch.float32, False),
    (1, torch.float32, torch.float32, True),  # W = 2: rank 1 owns no row
]


def _world_body(rank, world, port, q):
    import torch.distributed as dist
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        _install_emulation()
        torch.manual_seed(rank)
        out = []
        for case in CASES:
            comm = EmuComm()
            out.append((_mlp_case(comm, *case), comm.calls))
        dist.destroy_process_group()
        q.put((rank, "ok", out))
    except BaseException:  # noqa
        import traceback
        q.put((rank, "error", traceback.format_exc()))


def _run_world(world):
    import multiprocessing as mp
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_world_body, args=(r, world, port, q)) for r in range(world)]
    for p in ps:
        p.start()
    got = dict((r, (s, v)) for r, s, v in (q.get(timeout=240) for _ in ps))
    for p in ps:
        p.join(30)
    bad = [f"rank {r}: {v}" for r, (s, v) in sorted(got.items()) if s != "ok"]
    assert not bad, "\n".join(bad)
    return [got[r][1] for r in range(world)]


TOL = 1.5e-2  # bf16 operands (8 bits of mantissa) against float64: the errors seen are 0.2-0.6%


def _check(results, W):
    for rank, per_case in enumerate(results):
        for case, (errs, calls) in zip(CASES, per_case):
            bad = {k: v for k, v in errs.items() if not v < TOL}
            assert not bad, f"rank {rank} of {W}, case {case}: {errs}"
            m, _, _, modules = case
            lay = "nk" if modules else "kn"
            other = {"nk": "kn", "kn": "nk"}[lay]
            rows = tp.shard_len(m, W, rank)
            # forward: AG+GEMM (fc1, keeping the gathered input), GEMM+RS (fc2);
            # backward: AG+GEMM of fc2's output gradient (gathered: for fc2's weight), GEMM+RS for fc1's input
            k2 = F // W
            w2_shape = (H, k2) if modules else (k2, H)
            w1_shape = (F // W, H) if modules else (H, F // W)
            assert calls == [
                ("ag_gemm", lay, m, (rows, H), w1_shape, True),
                ("gemm_rs", lay, m, (m, k2), w2_shape, False),
                ("ag_gemm", other, m, (rows, H), w2_shape, True),
                ("gemm_rs", other, m, (m, F // W), w1_shape, False),
            ], (rank, case, calls)


def test_the_layers_train_like_plain_pytorch_on_one_rank(emulated):
    for case in CASES[:3]:
        comm = EmuComm()
        errs = _mlp_case(comm, *case)
        assert all(v < TOL for v in errs.values()), (case, errs)


def test_the_layers_train_like_plain_pytorch_on_two_ranks():
    """W = 2 processes over gloo: even and uneven shards, an empty shard,
    fp32 and bf16 parameters, fp32 and bf16 outputs, modules and functions."""
    _check(_run_world(2), 2)


def test_the_layers_train_like_plain_pytorch_on_three_ranks():
    _check(_run_world(3), 3)


def test_the_stand_ins_would_catch_a_wrong_layout(emulated):
    """A backward that read the weight in the forward's layout would fail:
    the stand-in ops refuse a weight of the wrong shape (the test above
    relies on them for that)."""
    comm = EmuComm()
    plan = tp.gemm_rs_plan(comm, torch.zeros(4, 8, dtype=torch.bfloat16), torch.zeros(16, 8, dtype=torch.bfloat16))
    with pytest.raises(AssertionError):
        plan.gemm_rs(torch.zeros(4, 8, dtype=torch.bfloat16), torch.zeros(8, 16, dtype=torch.bfloat16))


def test_the_column_layer_keeps_its_gathered_input_without_a_copy(emulated):
    comm = EmuComm()
    fc = loom.nn.ColumnParallelLinear(comm, H, F, device="cpu", dtype=torch.float32)
    x = torch.randn(6, H, dtype=torch.bfloat16, requires_grad=True)
    y = fc(x)
    assert comm.allocs == [((6, H), "bfloat16", False)]  # the layer's own buffer, nothing else
    buf = fc._gathered
    assert torch.equal(buf, x.detach())
    fc(torch.randn(4, H, dtype=torch.bfloat16))  # a smaller m: a view of the same buffer
    assert fc._gathered is buf and len(comm.allocs) == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()  # the second forward overwrote what the first one kept
    fc.weight.grad = None
    y3 = fc(torch.randn(9, H, dtype=torch.bfloat16))  # a larger m: a new buffer
    assert fc._gathered is not buf and comm.allocs[-1] == ((9, H), "bfloat16", False)
    y3.sum().backward()
    assert fc.weight.grad is not None and fc.weight.grad.dtype == torch.float32
    big = fc._gathered
    fc.free_buffers()  # frees the current buffer (collective), the next forward makes a new one
    assert fc._gathered is None and len(comm.freed) == 1 and comm.freed[0] is big
    fc(torch.randn(2, H, dtype=torch.bfloat16))
    assert comm.allocs[-1] == ((2, H), "bfloat16", False)


def test_copy_gathered_keeps_a_copy_per_forward(emulated):
    comm = EmuComm()
    fc = loom.nn.ColumnParallelLinear(comm, H, F, device="cpu", copy_gathered=True)
    x1 = torch.randn(6, H, dtype=torch.bfloat16)
    y1 = fc(x1)
    fc(torch.randn(6, H, dtype=torch.bfloat16))
    y1.float().sum().backward()  # still right: the first forward kept its own copy
    want = torch.ones(6, F // comm.size).double().t() @ x1.double()
    assert _rel(fc.weight.grad, want) < 1e-2
    assert all(internal for _, _, internal in comm.allocs)  # only the plan's buffer


def test_inputs_are_cast_and_shaped_like_a_sequence():
    """[s / W, b, h] in, [s, b, n / W] out (column); [s, b, k / W] in, [s / W, b, h] out (row)."""
    import loom.nn as lnn
    comm = EmuComm()
    fc1 = lnn.ColumnParallelLinear(comm, H, F, device="cpu", out_dtype=torch.float32)
    fc2 = lnn.RowParallelLinear(comm, F, H, device="cpu")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tp, "ag_gemm_plan", _emu_factory("ag_gemm"))
        mp.setattr(tp, "gemm_rs_plan", _emu_factory("gemm_rs"))
        x = torch.randn(5, 3, H)  # float32: cast to the compute dtype
        h = fc1(x)
        assert h.shape == (5, 3, F) and h.dtype == torch.float32
        y = fc2(h)  # float32 in: cast
        assert y.shape == (5, 3, H) and y.dtype == torch.bfloat16
        ref = torch.nn.functional.linear(torch.nn.functional.linear(x.bfloat16().double(), fc1.weight.double(),
                                                                    fc1.bias.double()).float().bfloat16().double(),
                                         fc2.weight.double(), fc2.bias.double())
        assert _rel(y, ref) < TOL


def test_layer_arguments_are_refused_by_name():
    import loom.nn as lnn
    comm = EmuComm()
    comm.size = 4
    with pytest.raises(loom.InvalidArgumentError, match="out_features=30 is not a multiple of the world size 4"):
        lnn.ColumnParallelLinear(comm, 32, 30, device="cpu")
    with pytest.raises(loom.InvalidArgumentError, match="in_features=30 is not a multiple of the world size 4"):
        lnn.RowParallelLinear(comm, 30, 32, device="cpu")
    with pytest.raises(loom.InvalidArgumentError, match="compute_dtype=torch.float32; expected torch.bfloat16"):
        lnn.ColumnParallelLinear(comm, 32, 32, device="cpu", compute_dtype=torch.float32)
    with pytest.raises(loom.InvalidArgumentError, match="transfer='copy_engine': the forward of this layer is a GEMM\\+"):
        lnn.RowParallelLinear(comm, 32, 32, device="cpu", transfer="copy_engine")
    with pytest.raises(loom.InvalidArgumentError, match="backward_transfer='copy_engine': the backward of this layer"):
        lnn.ColumnParallelLinear(comm, 32, 32, device="cpu", backward_transfer="copy_engine")
    lnn.ColumnParallelLinear(comm, 32, 32, device="cpu", transfer="copy_engine")  # its forward gathers: fine
    lnn.RowParallelLinear(comm, 32, 32, device="cpu", backward_transfer="COPY_ENGINE")
    with pytest.raises(loom.InvalidArgumentError, match="transfer='fast'"):
        lnn.RowParallelLinear(comm, 32, 32, device="cpu", transfer="fast")
    fc = lnn.ColumnParallelLinear(comm, 32, 32, device="cpu")
    with pytest.raises(loom.InvalidArgumentError, match=r"x has shape \(4, 16\); expected \[rows, 32\]"):
        fc(torch.zeros(4, 16))
    with pytest.raises(loom.InvalidArgumentError, match="m= is for 2-D inputs"):
        fc(torch.zeros(2, 2, 32), m=5)
    with pytest.raises(loom.InvalidArgumentError, match=r"first \(the sequence\) a multiple of the world size 4"):
        lnn.RowParallelLinear(comm, 32, 32, device="cpu")(torch.zeros(6, 2, 8))
    with pytest.raises(loom.InvalidArgumentError, match="x has dtype torch.float32; expected torch.bfloat16"):
        lnn.column_parallel_linear(comm, torch.zeros(4, 32), torch.zeros(8, 32))
    with pytest.raises(loom.InvalidArgumentError, match="chunk_rows= is an option of the column-parallel layer"):
        lnn.row_parallel_linear(comm, torch.zeros(4, 32), torch.zeros(8, 32), chunk_rows=4)


def test_initialisation_is_that_of_the_full_linear_layer():
    import loom.nn as lnn
    comm = EmuComm()
    comm.size = 4
    torch.manual_seed(0)
    row = lnn.RowParallelLinear(comm, 4096, 64, device="cpu", dtype=torch.float32)
    col = lnn.ColumnParallelLinear(comm, 4096, 64, device="cpu", dtype=torch.float32)
    bound = 1 / math.sqrt(4096)  # the full layer's fan-in, not the shard's 1024
    for t in (row.weight, row.bias, col.weight, col.bias):
        assert t.abs().max().item() <= bound
    assert min(row.weight.abs().max().item(), col.weight.abs().max().item()) > 0.99 * bound
    assert row.weight.shape == (64, 1024) and col.weight.shape == (16, 4096) and row.bias.shape == (64,)
    full = torch.nn.Linear(4096, 64)
    comm.rank = 2
    c2 = lnn.ColumnParallelLinear.from_linear(comm, full, device="cpu")
    r2 = lnn.RowParallelLinear.from_linear(comm, full, device="cpu")
    assert torch.equal(c2.weight, full.weight[32:48]) and torch.equal(c2.bias, full.bias[32:48])
    assert torch.equal(r2.weight, full.weight[:, 2048:3072]) and torch.equal(r2.bias, full.bias)
    assert c2.weight.dtype == torch.float32 and "out_features=64 (16 on rank 2 of 4)" in repr(c2)
