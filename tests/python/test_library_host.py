"""The registered ops (torch.ops.loom.*, library.py) without a GPU: their
schemas, their fake implementations' shapes, the autograd formulas' shapes
and the ops they call, and torch.compile(fullgraph=True) tracing a
sequence-parallel block of loom.nn layers into forward and backward graphs
that hold loom's ops, all on meta tensors over a stand-in comm (the real
ops run in tests/python/gpu/test_library_gpu.py). Skipped, saying so, where
torch is not installed."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the registered ops' host tests are skipped")

import loom  # noqa: E402
import loom.comm as lcomm  # noqa: E402
import loom.functional as LF  # noqa: E402
import loom.nn as lnn  # noqa: E402
from llama_layer import Layer  # noqa: E402
from loom import library  # noqa: E402

BF16 = torch.bfloat16


class StandInComm:
    """What the fake implementations and the compiled path read of a comm."""

    def __init__(self, size, rank):
        self.size, self.rank, self.device, self._handle = size, rank, 0, 1
        self.name = f"standin{size}_{rank}"
        lcomm._LIVE[self.name] = self


def _meta(*shape, dtype=BF16, grad=False):
    return torch.randn(*shape, device="meta", dtype=dtype, requires_grad=grad)


def test_every_op_is_registered_tensors_first_comm_after():
    for name in library.OPS:
        schema = getattr(torch.ops.loom, name).default._schema
        args = [a for a in schema.arguments if not a.kwarg_only]
        kinds = [str(a.type) for a in args]
        assert kinds[-1] == "str" and args[-1].name == "comm", (name, kinds)
        assert all(k in ("Tensor", "Optional[Tensor]") for k in kinds[:-1]), (name, kinds)
        assert all(a.kwarg_only for a in schema.arguments[len(args):])


@pytest.mark.parametrize("world,rank", [(2, 0), (2, 1), (3, 2), (8, 5)])
def test_fake_shapes_follow_the_sharding(world, rank):
    c = StandInComm(world, rank)
    x = _meta(4, 3, 64)
    y, g = torch.ops.loom.ag_gemm(x, _meta(32, 64), None, c.name, keep_gathered=True)
    assert (y.shape, g.shape) == ((4 * world, 3, 32), (4 * world, 3, 64))
    y, g = torch.ops.loom.ag_gemm(x, _meta(64, 48), None, c.name, layout="kn", out_dtype=torch.float32)
    assert (y.shape, y.dtype, g.shape) == ((4 * world, 3, 48), torch.float32, (0,))
    m = 5 * world - 3  # uneven 2-D shards: rank's share of m rows
    rows = library.tp.shard_len(m, world, rank)
    y, _ = torch.ops.loom.ag_gemm(_meta(rows, 64), _meta(16, 64), None, c.name, m=m)
    assert y.shape == (m, 16)
    assert torch.ops.loom.gemm_rs(_meta(2 * world, 5, 64), _meta(24, 64), None, c.name).shape == (2, 5, 24)
    assert torch.ops.loom.gemm_rs(_meta(m, 64), _meta(24, 64), None, c.name).shape == (rows, 24)
    assert torch.ops.loom.gemm_ar(x, _meta(40, 64), None, None, c.name).shape == (4, 3, 40)
    t = _meta(m, 4, 8, dtype=torch.float32)
    assert torch.ops.loom.all_reduce(t, None, None, None, None, c.name, out_dtype=BF16).dtype == BF16
    assert torch.ops.loom.reduce_scatter(t, None, None, None, None, c.name).shape == (rows, 4, 8)
    assert torch.ops.loom.all_gather(_meta(rows, 4, 8), c.name, size=m).shape == (m, 4, 8)


def test_gradients_have_the_inputs_shapes():
    c = StandInComm(2, 1)
    x, w1, b1, w2, b2 = _meta(4, 2, 64, grad=True), _meta(96, 64, grad=True), _meta(96, grad=True), \
        _meta(64, 96, grad=True), _meta(64, grad=True)
    z = LF.gemm_rs(torch.nn.functional.gelu(LF.ag_gemm(x, w1, c, b1)), w2, c, b2)
    assert z.shape == x.shape
    z.float().sum().backward()
    for t in (x, w1, b1, w2, b2):
        assert t.grad is not None and t.grad.shape == t.shape and t.grad.dtype == t.dtype
    # the weight gradient without the kept copy: gathered again in the backward
    w1.grad = None
    LF.ag_gemm(x, w1, c, keep_gathered=False).float().sum().backward()
    assert w1.grad.shape == w1.shape
    r, w, b = _meta(4, 2, 32, grad=True), _meta(32, 64, grad=True), _meta(32, grad=True)
    LF.gemm_ar(x, w, c, b, residual=r, scale=0.5).float().sum().backward()
    assert r.grad.shape == r.shape and b.grad.shape == b.shape
    t, tb, tr = _meta(5, 16, grad=True), _meta(16, grad=True), _meta(3, 16, grad=True)
    s = LF.reduce_scatter(t, c, bias=tb, residual=_meta(2, 16), scale=2.0)
    LF.all_gather(s, c, size=5).sum().backward()
    assert t.grad.shape == t.shape and tb.grad.shape == tb.shape
    LF.all_reduce(tr, c).sum().backward()
    assert tr.grad.shape == tr.shape


def test_no_gradient_through_fused_nonlinear_steps():
    c = StandInComm(2, 0)
    x, w = _meta(8, 64, grad=True), _meta(32, 64)
    with pytest.raises(loom.UnsupportedError, match=r"loom.functional.gemm_ar: no gradient through the fused "
                                                    r"activation='gelu_tanh'"):
        LF.gemm_ar(x, w, c, activation="gelu_tanh")
    with pytest.raises(loom.UnsupportedError, match=r"all_reduce: no gradient through the fused dropout_p=0.1, "
                                                    r"norm='rms'"):
        LF.all_reduce(x, c, norm="rms", norm_weight=_meta(64), dropout_p=0.1)
    with torch.no_grad():  # inference may fuse them
        assert LF.gemm_ar(x, w, c, activation="gelu_tanh", dropout_p=0.1).shape == (8, 32)
    # the raw op with a gradient asked for later: the backward refuses
    y = torch.ops.loom.gemm_ar(x, w, None, None, c.name, activation="relu")
    with pytest.raises(loom.UnsupportedError, match="loom::gemm_ar backward: no gradient through the fused "
                                                    "activation='relu'"):
        y.sum().backward()


def test_unknown_comm_is_named():
    with pytest.raises(loom.InvalidArgumentError, match="no open loom comm is called 'nobody'"):
        torch.ops.loom.all_gather(_meta(4, 8), "nobody")


def _recording_backend(graphs):
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def record(kind):
        def compiler(gm, example_inputs):
            graphs.append((kind, [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]))
            return make_boxed_func(gm.forward)
        return compiler

    return aot_autograd(fw_compiler=record("forward"), bw_compiler=record("backward"))


class Block(torch.nn.Module):
    """A Llama-style block, sequence parallel: x [s / W, b, h]."""

    def __init__(self, comm, h, heads, f):
        super().__init__()
        self.heads = heads // comm.size
        self.norm1, self.norm2 = torch.nn.RMSNorm(h, device="meta"), torch.nn.RMSNorm(h, device="meta")
        self.qkv = lnn.ColumnParallelLinear(comm, h, 3 * h, bias=False, device="meta")
        self.o = lnn.RowParallelLinear(comm, h, h, bias=False, device="meta")
        self.up = lnn.ColumnParallelLinear(comm, h, f, device="meta")
        self.down = lnn.RowParallelLinear(comm, f, h, device="meta")

    def forward(self, x):
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)  # [s, b, h / W] each
        s, b = q.shape[:2]
        q, k, v = (t.reshape(s, b, self.heads, -1).permute(1, 2, 0, 3) for t in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.permute(2, 0, 1, 3).reshape(s, b, -1))
        return x + self.down(torch.nn.functional.silu(self.up(self.norm2(x))))


def test_compile_traces_a_block_whole_into_loom_ops():
    c = StandInComm(2, 0)
    block = Block(c, 64, 4, 128).to(BF16)
    graphs = []
    compiled = torch.compile(block, fullgraph=True, backend=_recording_backend(graphs))
    x = _meta(8, 2, 64, grad=True)
    y = compiled(x)
    assert y.shape == x.shape
    y.float().sum().backward()
    assert x.grad.shape == x.shape and block.qkv.weight.grad.shape == block.qkv.weight.shape
    ops = {kind: targets for kind, targets in graphs}
    assert set(ops) == {"forward", "backward"}, [k for k, _ in graphs]  # one graph each: no break
    fw, bw = ops["forward"], ops["backward"]
    assert fw.count("loom.ag_gemm.default") == 2 and fw.count("loom.gemm_rs.default") == 2, fw
    # backward: column-parallel dx = gemm_rs, row-parallel dx = ag_gemm
    assert bw.count("loom.gemm_rs.default") == 2 and bw.count("loom.ag_gemm.default") == 2, bw


@pytest.mark.parametrize("hf,fused", [(True, False), (False, False), (False, True)])
def test_parallelize_swaps_the_llama_projections(hf, fused):
    c = StandInComm(2, 1)
    model = torch.nn.Sequential(*[Layer(64, 4, 96, hf, length_from_input=not fused, device="meta", dtype=BF16)
                                  for _ in range(2)])
    loom.parallelize(model, c, fused_gather=fused, device="meta")
    assert len(model.loom_parallelized) == 14
    kinds = [type(m).__name__ for n, m in model.named_modules() if n in model.loom_parallelized]
    assert kinds.count("RowParallelLinear") == 4  # o / down per layer
    assert kinds.count("ColumnParallelLinear" if fused else "Linear") == 10  # q, k, v, gate, up per layer
    q = model[0].self_attn.q_proj if hf else model[0].self_attn.wq
    down = model[1].mlp.down_proj if hf else model[1].mlp.w2
    assert tuple(q.weight.shape) == (32, 64) and tuple(down.weight.shape) == (64, 48)
    assert down.sequence_dim == 1
    graphs = []
    compiled = torch.compile(model, fullgraph=True, backend=_recording_backend(graphs))
    x = _meta(2, 8, 64, grad=True)  # [b, s / W, h]
    y = compiled(x)
    assert y.shape == x.shape
    y.float().sum().backward()
    assert x.grad.shape == x.shape and q.weight.grad.shape == q.weight.shape
    fw, bw = dict(graphs)["forward"], dict(graphs)["backward"]
    assert fw.count("loom.gemm_rs.default") == 4 and bw.count("loom.ag_gemm.default") == 4
    if fused:
        assert fw.count("loom.ag_gemm.default") == 10 and "loom.all_gather.default" not in fw
    else:  # one gather per attention and MLP, reduce-scattered back in the backward
        assert fw.count("loom.all_gather.default") == 4 and "loom.ag_gemm.default" not in fw
        assert bw.count("loom.reduce_scatter.default") == 4


def test_parallelize_refusals():
    c = StandInComm(2, 0)
    with pytest.raises(loom.InvalidArgumentError, match="no nn.Linear of the model matches the plan"):
        loom.parallelize(torch.nn.Sequential(torch.nn.Linear(8, 8, device="meta")), c)
    with pytest.raises(loom.InvalidArgumentError, match=r"plan\['0'\]='diagonal'"):
        loom.parallelize(torch.nn.Sequential(torch.nn.Linear(8, 8, device="meta")), c, {"0": "diagonal"})
    with pytest.raises(loom.InvalidArgumentError, match="is a direct child of the model: its input is gathered"):
        loom.parallelize(torch.nn.Sequential(torch.nn.Linear(8, 8, device="meta")), c, {"0": "colwise"},
                         device="meta")
    with pytest.raises(loom.InvalidArgumentError, match="0 has 7 output features, not a multiple of the world "
                                                        "size 2"):
        loom.parallelize(torch.nn.Sequential(torch.nn.Linear(8, 7, device="meta")), c, {"0": "colwise"},
                         device="meta")
    with pytest.raises(loom.InvalidArgumentError, match="plan names '1', a ReLU, not an nn.Linear"):
        loom.parallelize(torch.nn.Sequential(torch.nn.Linear(8, 8, device="meta"), torch.nn.ReLU()), c,
                         {"1": "rowwise"})
    m = torch.nn.Sequential(torch.nn.Linear(8, 16, device="meta"), torch.nn.Linear(16, 8, device="meta"))
    loom.parallelize(m, c, {"0": "colwise", "1": "rowwise"}, sequence_dim=0, fused_gather=True, device="meta")
    assert type(m[0]).__name__ == "ColumnParallelLinear" and m[1].sequence_dim == 0


def test_embedding_a2a_registered_with_its_backward():
    c = StandInComm(2, 1)
    tpr, rows, B, D = [2, 1], [10, 20, 30], 8, 16  # rank 1 holds table 2 (30 rows)
    w = _meta(30, D, dtype=torch.float32, grad=True)
    idx = torch.empty(12, dtype=torch.int64, device="meta")
    off = torch.empty(1 * B + 1, dtype=torch.int64, device="meta")
    graphs = []

    def f(w):
        return LF.embedding_a2a(w, idx, off, c, tables_per_rank=tpr, rows=rows, global_batch=B)

    y = torch.compile(f, fullgraph=True, backend=_recording_backend(graphs))(w)
    assert y.shape == (B // 2, 3 * D) and y.dtype == torch.float32
    y.sum().backward()
    assert w.grad.shape == w.shape
    assert "loom.embedding_a2a.default" in dict(graphs)["forward"]
    assert "loom.embedding_a2a_backward.default" in dict(graphs)["backward"]
    with pytest.raises(loom.InvalidArgumentError, match="global_batch=7 must be a positive multiple"):
        LF.embedding_a2a(w, idx, off, c, tables_per_rank=tpr, rows=rows, global_batch=7)


def test_moe_mlp_registered_forward_only():
    c = StandInComm(2, 0)
    x = _meta(24, 64, grad=True)
    ids = torch.empty(24, 2, dtype=torch.int32, device="meta")
    w = torch.empty(24, 2, dtype=torch.float32, device="meta")
    gu, dn = _meta(4, 256, 64), _meta(4, 64, 128)
    graphs = []
    f = torch.compile(lambda x: LF.moe_mlp(x, ids, w, gu, dn, c, experts=8, max_tokens=64), fullgraph=True,
                      backend=_recording_backend(graphs))
    with torch.no_grad():
        y = f(x)
    assert y.shape == x.shape and "loom.moe_mlp.default" in dict(graphs)["forward"]
    y = LF.moe_mlp(x, ids, w, gu, dn, c, experts=8, max_tokens=64)
    with pytest.raises(loom.UnsupportedError, match="loom::moe_mlp: no backward .* loom.nn.MoE"):
        y.float().sum().backward()


def test_gemm_grouped_refusals_name_the_argument():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        a = torch.empty(100, 64, device="cuda", dtype=BF16)
        b = torch.empty(4, 32, 64, device="cuda", dtype=BF16)
        off = torch.empty(5, device="cuda", dtype=torch.int64)
        with pytest.raises(loom.InvalidArgumentError, match=r"b has shape \(4, 32, 64\); expected \[G, n, k=32\]"):
            loom.gemm_grouped(torch.empty(100, 32, device="cuda", dtype=BF16), b, off)
        with pytest.raises(loom.InvalidArgumentError, match=r"offsets has shape \(4,\); expected \(5,\)"):
            loom.gemm_grouped(a, b, off[:4])
        with pytest.raises(loom.InvalidArgumentError, match="offsets has dtype torch.int32"):
            loom.gemm_grouped(a, b, off.int())
        with pytest.raises(loom.InvalidArgumentError, match="layout='tn'"):
            loom.gemm_grouped(a, b, off, layout="tn")
        with pytest.raises(loom.InvalidArgumentError, match="b has dtype torch.float16"):
            loom.gemm_grouped(a, b.half(), off)
        with pytest.raises(loom.InvalidArgumentError, match=r"bias has shape \(32,\); expected \(4, 32\)"):
            loom.gemm_grouped(a, b, off, bias=torch.empty(32, device="cuda", dtype=BF16))


class _HostBuffers(StandInComm):
    """A stand-in comm whose symmetric memory is plain CPU tensors."""

    def empty(self, shape, dtype):
        return torch.empty(shape, dtype=dtype)

    def zeros(self, shape, dtype):
        return torch.zeros(shape, dtype=dtype)


class _RecordingAdamW(loom.optim.AdamW):
    """loom.optim.AdamW without a GPU: its own flattening and step(), the
    plan's step replaced by a record of what loom::optimizer_step passed."""

    def __init__(self, params, comm, lr):
        torch.optim.Optimizer.__init__(self, params, dict(lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0))
        self._fn, self.comm, self.calls = "test", comm, []
        self._params = [p for g in self.param_groups for p in g["params"]]
        self._dtype = self._params[0].dtype
        self._flatten(comm)
        self._lr, self._found_inf_agreed = torch.empty(1), False
        self.name = loom.optim.OPTIMIZERS.add(self)

    def run_step(self, params, grads, lr, grad_scale=None, found_inf=None):
        call = (params.data_ptr() == self._param_buf.data_ptr(), grads.sum().item(), lr.item())
        self.calls.append(call if grad_scale is None else call + (grad_scale.item(), found_inf.item()))


def test_optimizer_step_is_one_registered_op_that_compile_traces():
    schema = torch.ops.loom.optimizer_step.default._schema
    assert [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write] == ["params"]
    assert not schema.returns
    comm = _HostBuffers(2, 0)
    params = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(7))]
    lr = torch.tensor(0.01)
    opt = _RecordingAdamW(params, comm, lr)
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    step = torch.compile(opt.step, backend=backend, fullgraph=True)
    for s in (1, 2, 3):
        lr.fill_(0.01 * s)  # a device lr: no recompilation
        for p in params:
            p.grad.fill_(float(s))
        if s == 3:  # a replaced .grad (a new object: one recompilation) is copied into the optimizer's buffer
            params[1].grad = torch.full((7,), 3.0)
        step()
        assert len(graphs) == (1 if s < 3 else 2)
    for gm in graphs:
        targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        assert any(t in (torch.ops.loom.optimizer_step, torch.ops.loom.optimizer_step.default) for t in targets)
    assert opt.calls == [(True, 22.0, pytest.approx(0.01)), (True, 44.0, pytest.approx(0.02)),
                         (True, 66.0, pytest.approx(0.03))]
    assert params[1].grad.data_ptr() == opt._grad_buf.data_ptr() + 15 * 4
    with pytest.raises(loom.InvalidArgumentError, match="optimizer='nobody' is not an open loom.optim optimizer"):
        torch.ops.loom.optimizer_step(opt._param_buf, opt._grad_buf, lr, None, None, comm.name, optimizer="nobody")
    with pytest.raises(loom.InvalidArgumentError, match="comm='elsewhere'"):
        torch.ops.loom.optimizer_step(opt._param_buf, opt._grad_buf, lr, None, None, "elsewhere", optimizer=opt.name)


class _StandInMoE(lnn.MoE):
    """loom.nn.MoE without its plans: what the registered ops' fake
    implementations and the compiled forward read of a layer."""

    def __init__(self, comm, hidden, ffn, local_experts, recv_rows):
        torch.nn.Module.__init__(self)
        self.comm, self.hidden, self.ffn, self.dtype = comm, hidden, ffn, BF16
        self.local_experts, self.first_expert = local_experts, 0
        self._fwd = type("Plan", (), {"info": {"max_recv_rows": recv_rows}})()
        self.gate_up = torch.nn.Parameter(_meta(local_experts, 2 * ffn, hidden))
        self.down = torch.nn.Parameter(_meta(local_experts, hidden, ffn))
        self.name = lnn.MOE_LAYERS.add(self)


@pytest.mark.parametrize("local_experts", [4, 0])
def test_moe_layer_compiles_forward_and_backward_into_loom_ops(local_experts):
    c = StandInComm(2, 1)
    layer = _StandInMoE(c, 64, 96, local_experts, recv_rows=80)
    x = _meta(24, 64, grad=True)
    ids = torch.empty(24, 2, dtype=torch.int32, device="meta")
    w = torch.empty(24, 2, dtype=torch.float32, device="meta", requires_grad=True)
    out = torch.ops.loom.moe_layer(x, ids, w, layer.gate_up, layer.down, c.name, layer=layer.name)
    r = 80 if local_experts else 0
    assert [tuple(t.shape) for t in out] == [(24, 64), (80, 64), (local_experts + 1,), (r, 192), (r, 96), (r, 64)]
    assert out[2].dtype == torch.int64
    graphs = []
    y = torch.compile(layer, fullgraph=True, backend=_recording_backend(graphs))(x, ids, w)
    assert y.shape == (24, 64) and y.dtype == BF16
    y.float().sum().backward()
    for t in (x, w, layer.gate_up, layer.down):
        assert t.grad is not None and t.grad.shape == t.shape and t.grad.dtype == t.dtype
    ops = dict(graphs)
    assert set(ops) == {"forward", "backward"}, list(ops)  # one graph each: no break
    assert "loom.moe_layer.default" in ops["forward"] and "loom.moe_layer_backward.default" in ops["backward"]
    with pytest.raises(loom.InvalidArgumentError, match="layer='gone' is not an open loom.nn.MoE"):
        torch.ops.loom.moe_layer(x, ids, w, layer.gate_up, layer.down, c.name, layer="gone")


def test_grad_scaler_makes_the_ranks_agree_on_found_inf():
    comm = _HostBuffers(2, 0)
    peer = iter([0.0, 1.0, 0.0])  # what the other rank found at each check: an inf at the second step

    def all_reduce_(t, op, what):
        assert op == "max" and "GradScaler" in what
        t.copy_(torch.maximum(t, torch.full_like(t, next(peer))))
    comm._all_reduce_ = all_reduce_
    p = torch.nn.Parameter(torch.ones(4))
    opt = _RecordingAdamW([p], comm, 0.01)
    scaler = loom.optim.GradScaler("cpu", init_scale=1024.0, growth_interval=1000)
    for _ in range(3):
        scaler.scale((p * p).sum()).backward()  # this rank's gradient: 2 p, finite
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    # (buffer is this optimizer's, grad sum 4 x 2 x scale, lr, scale, agreed found_inf): the second step skipped
    assert [c[3:] for c in opt.calls] == [(1024.0, 0.0), (1024.0, 1.0), (512.0, 0.0)]
    assert [c[1] for c in opt.calls] == [8192.0, 8192.0, 4096.0]
    assert scaler.get_scale() == 512.0  # backed off on this rank too, as on the one that found the inf
    q = torch.nn.Parameter(torch.ones(4))
    other = _RecordingAdamW([q], comm, 0.01)
    with pytest.raises(loom.UnsupportedError, match="use loom.optim.GradScaler"):
        torch_scaler = torch.amp.GradScaler("cpu")
        torch_scaler.scale((q * q).sum()).backward()
        torch_scaler.step(other)
