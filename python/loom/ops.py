"""ops.py - loom's operations as functions on torch tensors.

Every op checks its tensors first (dtype, shape against the other tensors,
device, contiguity: _checks.py), runs on torch's current stream of the
tensors' device (or the `stream` given: a torch.cuda.Stream, or an int
cudaStream_t), and raises loom's own message as an exception (errors.py)
when libloom refuses. Ops are asynchronous like torch's.

  gemm(a, b, bias, layout="kn"|"nk")     C = A B (+ bias) / A B^T (+ bias)
  linear(x, weight, bias)                x [..., k] @ weight[n, k]^T (+ bias), like F.linear
  gemm_tune(...)                         records the fastest configuration for a shape
  gemm_grouped(a, b, offsets)            G GEMMs over the row groups of one stacked A (offsets on the GPU)
  EmbeddingA2A(comm, ...)                a plan of the fused embedding-bag + All-to-All
  embedding_a2a(comm, tables, ...)       the same through a per-shape plan cache
  embedding_a2a_backward(comm, ...)      its backward (table gradients)

The tensor-parallel ops (AllGather+GEMM, GEMM+ReduceScatter) are in tp.py.

Plans are cached per shape: gemm keeps one loom_gemm_desc_t per shape and
dtype (it needs no plan); embedding plans live in their comm's cache, keyed
by the layout and dtypes (plan creation is collective, so every rank must
make the same calls in the same order, as with any collective).

Outputs of the embedding op live in symmetric memory that peers store into:
without out=, it is the plan's own buffer, which the next call on the plan
overwrites; each call increments that tensor's autograd version counter, so
autograd refuses a backward that still needs the old contents. clone() the
output to keep it past the next call.
"""
import ctypes
import sys

from . import _lib, _torch
from ._checks import (check_same_device, check_tensor, dtype_name, embedding_shapes, gemm_shapes, loom_dtype,
                      shape_of)
from ._plan import PlanHandle
from ._structs import DType, EmbeddingDesc, EmbeddingPath, EmbeddingPlanInfo, GemmDesc, GroupedGemmDesc, Layout, Pooling
from .errors import InvalidArgumentError

_LAYOUTS = {"kn": Layout.KN, "nk": Layout.NK}
_AB = ("bfloat16", "float16")
_C = ("bfloat16", "float16", "float32")
_gemm_descs = {}
_GEMM_DESC_CACHE_MAX = 4096


def _gemm_desc(m, n, k, ab, c, layout, has_bias):
    key = (m, n, k, ab, c, layout, has_bias)
    d = _gemm_descs.get(key)
    if d is None:
        if len(_gemm_descs) >= _GEMM_DESC_CACHE_MAX:
            _gemm_descs.clear()
        d = GemmDesc(m=m, n=n, k=k, ab_type=int(ab), c_type=int(c), b_layout=int(layout), has_bias=int(has_bias))
        _gemm_descs[key] = d
    return d


def _gemm_prepare(fn, a, b, bias, layout, out, out_dtype):
    """Checks; returns (desc, out or None to allocate, out dtype name, device)."""
    ab = check_tensor(fn, "a", a, dtypes=_AB)
    dev = a.device.index
    check_tensor(fn, "b", b, dtypes=(ab,), device=dev, why="must match a")
    m, n, k = gemm_shapes(fn, shape_of(a), shape_of(b), layout)
    if out_dtype is not None:
        c = dtype_name(out_dtype)
        loom_dtype(c, fn, "out_dtype", _C)
    elif out is not None:
        c = dtype_name(out.dtype)
    else:
        c = ab
    if out is not None:
        check_tensor(fn, "out", out, dtypes=(c,), shape=(m, n), device=dev, why="out_dtype / (m, n) of a and b")
    if bias is not None:
        check_tensor(fn, "bias", bias, dtypes=(c,), shape=(n,), device=dev, why="the output dtype, n of b")
    desc = _gemm_desc(m, n, k, loom_dtype(ab, fn, "a.dtype", _AB), loom_dtype(c, fn, "out dtype", _C),
                      _LAYOUTS[layout], bias is not None)
    return desc, c, dev


def _run_on_device(dev, fn, tensor):
    """fn() with cuda:dev current (loom ops use the current device). A
    `tensor` that is not torch's (the host tests' stand-ins) has no torch
    device to select."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(tensor, torch.Tensor) or torch.cuda.current_device() == dev:
        return fn()
    with torch.cuda.device(dev):
        return fn()


def _gemm_call(name, a, b, bias, layout, out, out_dtype, stream):
    fn = "loom." + name[5:]
    desc, c, dev = _gemm_prepare(fn, a, b, bias, layout, out, out_dtype)
    lib = _lib.load()
    cfn = getattr(lib, name)

    def run():
        o = out
        if o is None:
            torch = _torch.torch()
            o = torch.empty((desc.m, desc.n), dtype=getattr(torch, c), device=a.device)
        s = _torch.stream_handle(stream, dev)
        r = cfn(ctypes.byref(desc), a.data_ptr(), b.data_ptr(), o.data_ptr(),
                bias.data_ptr() if bias is not None else None, s)
        if r:
            _lib.check(r, name)
        return o

    return _run_on_device(dev, run, a)


def gemm(a, b, bias=None, *, layout="kn", out=None, out_dtype=None, stream=None):
    """C [m, n] = a [m, k] @ b (+ bias [n]); a, b bf16 or fp16 (same),
    C bf16/fp16/fp32 (out_dtype, default a's dtype), fp32 accumulation.
    layout "kn": b is [k, n]; "nk": b is [n, k] (a Linear weight: a @ b.T).
    n and k multiples of 8, tensors contiguous and 16-byte aligned."""
    return _gemm_call("loom_gemm", a, b, bias, layout, out, out_dtype, stream)


def gemm_tune(a, b, bias=None, *, layout="kn", out=None, out_dtype=None, stream=None):
    """Times loom's GEMM configurations for this shape on these tensors and
    records the fastest (loom_gemm_tune; synchronizes; overwrites out)."""
    return _gemm_call("loom_gemm_tune", a, b, bias, layout, out, out_dtype, stream)


def linear(x, weight, bias=None, *, out_dtype=None, stream=None):
    """torch.nn.functional.linear through loom_gemm: x [..., k], weight
    [n, k], bias [n] -> [..., n]."""
    fn = "loom.linear"
    ab = check_tensor(fn, "x", x, dtypes=_AB)
    check_tensor(fn, "weight", weight, dtypes=(ab,), shape=(None, None), device=x.device.index,
                 why="[n, k] of x's dtype, on x's device")
    sx = shape_of(x)
    if not sx:
        raise InvalidArgumentError(f"{fn}: x is a scalar; expected [..., k]")
    y = _gemm_call("loom_gemm", x.view(-1, sx[-1]), weight, bias, "nk", None, out_dtype, stream)
    return y.view(*sx[:-1], y.shape[-1])


# ---- embedding-bag + All-to-All ---------------------------------------------

_POOLING = {"sum": Pooling.SUM, "mean": Pooling.MEAN}


def gemm_grouped(a, b, offsets, *, layout="nk", bias=None, out=None, out_dtype=None, rows_hint=0, stream=None):
    """G GEMMs over one stacked A (loom_gemm_grouped): rows [offsets[g],
    offsets[g+1]) of a [R, k] times b[g] ("nk": b [G, n, k], C = A B^T,
    nn.Linear weights; "kn": b [G, k, n]) (+ bias [G, n]) into the same rows
    of out [R, n]. offsets: [G + 1] int64 on the GPU, read by the kernel only
    (no host synchronisation: graph-capturable). Rows of out outside
    [offsets[0], offsets[G]) are not written (a new out: uninitialised
    there). a, b bf16 or fp16; out bf16, fp16 or fp32 (default a's)."""
    fn = "loom.gemm_grouped"
    ab = check_tensor(fn, "a", a, dtypes=_AB)
    dev = a.device.index
    sa, sb = shape_of(a), shape_of(b)
    if len(sa) != 2:
        raise InvalidArgumentError(f"{fn}: a has shape {sa}; expected [rows, k]")
    if layout not in _LAYOUTS:
        raise InvalidArgumentError(f"{fn}: layout={layout!r}; expected 'nk' (b [G, n, k]) or 'kn' (b [G, k, n])")
    check_tensor(fn, "b", b, dtypes=(ab,), device=dev, why="must match a")
    if len(sb) != 3 or sb[2 if layout == "nk" else 1] != sa[1]:
        raise InvalidArgumentError(f"{fn}: b has shape {sb}; expected [G, n, k={sa[1]}] (layout 'nk') or "
                                   f"[G, k={sa[1]}, n] (layout 'kn') for a {sa}")
    G, k = sb[0], sa[1]
    n = sb[1] if layout == "nk" else sb[2]
    check_tensor(fn, "offsets", offsets, dtypes=("int64",), shape=(G + 1,), device=dev, why="[G + 1] int64")
    c = dtype_name(out_dtype) if out_dtype is not None else (dtype_name(out.dtype) if out is not None else ab)
    loom_dtype(c, fn, "out dtype", _C)
    if out is not None:
        check_tensor(fn, "out", out, dtypes=(c,), shape=(sa[0], n), device=dev, why="[rows of a, n]")
    if bias is not None:
        check_tensor(fn, "bias", bias, dtypes=(c,), shape=(G, n), device=dev, why="[G, n] of the output dtype")
    desc = GroupedGemmDesc(groups=G, max_rows=sa[0], n=n, k=k, rows_hint=int(rows_hint),
                           ab_type=int(loom_dtype(ab, fn, "a.dtype", _AB)), c_type=int(loom_dtype(c, fn, "out", _C)),
                           b_layout=int(_LAYOUTS[layout]), has_bias=int(bias is not None))

    def run():
        o = out
        if o is None:
            torch = _torch.torch()
            o = torch.empty((sa[0], n), dtype=getattr(torch, c), device=a.device)
        _lib.call("loom_gemm_grouped", ctypes.byref(desc), a.data_ptr(), b.data_ptr(), o.data_ptr(),
                  bias.data_ptr() if bias is not None else None, offsets.data_ptr(), _torch.stream_handle(stream, dev))
        return o

    return _run_on_device(dev, run, a)


def _torch_stream(stream, device):
    """A torch.cuda.Stream for internal torch work, from None/int/Stream."""
    torch = _torch.torch()
    if stream is None:
        return torch.cuda.current_stream(device)
    if isinstance(stream, int):
        return torch.cuda.ExternalStream(stream, device=device)
    return stream


class EmbeddingA2A(PlanHandle):
    """A plan of the fused embedding-bag + All-to-All (loom_plan_embedding_a2a).

    W ranks; rank p owns tables_per_rank[p] tables (T on this rank); rows:
    the row count of every table, rank-major; dim D; global batch B (a
    multiple of W), local batch Bl = B / W. Per call on this rank:
      tables   [sum of this rank's rows, D] table_dtype, its tables stacked
      offsets  [T * B + 1] int64: bag (t, b) is indices[offsets[t*B+b] : offsets[t*B+b+1]]
      indices  [n] int64, rows within their own table
      per_sample_weights [n] float32 when the plan was made with per_sample_weights=True
      out      [Bl, sum(tables_per_rank) * D] out_dtype: row i is global sample rank*Bl + i,
               columns [g*D, (g+1)*D) global table g (the layout DLRM's interaction takes)
    Creation is collective (same arguments on every rank); close() too."""

    def __init__(self, comm, tables_per_rank, rows, dim, global_batch, *, pooling="sum",
                 per_sample_weights=False, table_dtype="float32", out_dtype="float32", slice_samples=0,
                 grid_blocks=0, check_indices_sync=False):
        fn = "loom.EmbeddingA2A"
        tpr = [int(t) for t in tables_per_rank]
        if len(tpr) != comm.size:
            raise InvalidArgumentError(f"{fn}: tables_per_rank has {len(tpr)} entries; the comm has {comm.size} ranks")
        T, t_total, bl, table_rows = embedding_shapes(fn, tpr, rows, dim, int(global_batch), comm.rank)
        if pooling not in _POOLING:
            raise InvalidArgumentError(f"{fn}: pooling={pooling!r}; expected 'sum' or 'mean'")
        self.comm = comm
        self.tables_per_rank, self.rows = tuple(tpr), tuple(int(r) for r in rows)
        self.dim, self.global_batch = int(dim), int(global_batch)
        self.local_tables, self.total_tables, self.local_batch, self.table_rows = T, t_total, bl, table_rows
        self.pooling, self.weighted = pooling, bool(per_sample_weights)
        self.table_dtype = dtype_name(table_dtype)
        self.out_dtype = dtype_name(out_dtype)
        tt = loom_dtype(self.table_dtype, fn, "table_dtype")
        ot = loom_dtype(self.out_dtype, fn, "out_dtype")
        self._tpr_c = (ctypes.c_int * len(tpr))(*tpr)
        self._rows_c = (ctypes.c_int64 * t_total)(*self.rows)
        self._desc = EmbeddingDesc(
            world_size=comm.size, tables_per_rank=self._tpr_c, rows=self._rows_c, dim=self.dim,
            global_batch=self.global_batch, pooling=int(_POOLING[pooling]), per_sample_weights=int(self.weighted),
            table_type=int(tt), out_type=int(ot), slice_samples=int(slice_samples), grid_blocks=int(grid_blocks),
            check_indices_sync=int(check_indices_sync))
        self._plan = None
        self._out = None
        self._grad = None
        plan = ctypes.c_void_p()
        comm._bounded(lambda: _lib.call("loom_plan_embedding_a2a", ctypes.c_void_p(comm.handle),
                                        ctypes.byref(self._desc), ctypes.byref(plan)), "loom_plan_embedding_a2a")
        self._plan = plan.value
        comm._register_plan(self)
        pi = EmbeddingPlanInfo()
        _lib.call("loom_embedding_a2a_plan_info", ctypes.c_void_p(self._plan), ctypes.byref(pi))
        self.info = pi.as_dict()
        self.info["path"] = EmbeddingPath(self.info["path"]).name.lower()

    @property
    def out_shape(self):
        return (self.local_batch, self.total_tables * self.dim)

    def output_buffer(self):
        """The plan's symmetric output tensor [Bl, T_total * D] (collective
        the first time: every rank allocates it at the same point)."""
        if self._out is None:
            self._out = self.comm.empty(self.out_shape, self.out_dtype, _internal=True)
        return self._out

    def grad_buffer(self):
        """The plan's symmetric buffer for the gradient of the output (collective the first time)."""
        if self._grad is None:
            self._grad = self.comm.empty(self.out_shape, self.out_dtype, _internal=True)
        return self._grad

    def _check_inputs(self, fn, indices, offsets, weights):
        dev = self.comm.device
        check_tensor(fn, "offsets", offsets, dtypes=("int64",), shape=(self.local_tables * self.global_batch + 1,),
                     device=dev, why=f"T*B+1 with T={self.local_tables} tables on this rank, B={self.global_batch}")
        check_tensor(fn, "indices", indices, dtypes=("int64",), shape=(None,), device=dev)
        n = shape_of(indices)[0]
        if self.weighted:
            if weights is None:
                raise InvalidArgumentError(f"{fn}: the plan was made with per_sample_weights=True; pass them")
            check_tensor(fn, "per_sample_weights", weights, dtypes=("float32",), shape=(n,), device=dev,
                         why="one per index")
        elif weights is not None:
            raise InvalidArgumentError(f"{fn}: per_sample_weights given but the plan was made without them")
        return n

    def forward(self, tables, indices, offsets, per_sample_weights=None, *, out=None, stream=None):
        """Pools this rank's tables over the global batch and delivers every
        rank its share (collective, asynchronous). Returns `out`, or the
        plan's output buffer (see the top of this file)."""
        fn = "loom.embedding_a2a"
        dev = self.comm.device
        check_tensor(fn, "tables", tables, dtypes=(self.table_dtype,), shape=(self.table_rows, self.dim), device=dev,
                     why="this rank's tables stacked, the plan's table_dtype")
        n = self._check_inputs(fn, indices, offsets, per_sample_weights)
        if out is None:
            out = self.output_buffer()
            _torch.torch().autograd.graph.increment_version(out)
        else:
            check_tensor(fn, "out", out, dtypes=(self.out_dtype,), shape=self.out_shape, device=dev,
                         why="[Bl, T_total*D] of the plan's out_dtype")
            self.comm.offset_of(out, fn)
        plan = self.handle

        def run():
            s = _torch.stream_handle(stream, dev)
            _lib.call("loom_embedding_a2a", ctypes.c_void_p(plan), tables.data_ptr(), indices.data_ptr(),
                      offsets.data_ptr(), n, per_sample_weights.data_ptr() if per_sample_weights is not None else None,
                      out.data_ptr(), s)
            return out

        return _run_on_device(dev, run, tables)

    __call__ = forward

    def backward(self, grad_out, indices, offsets, per_sample_weights=None, *, table_grad=None, scale=1.0,
                 stream=None, grad_out_symmetric=False):
        """table_grad [rows, D] (table_dtype) += scale * the gradient of the
        tables for grad_out ([Bl, T_total*D], out_dtype); collective.
        table_grad None: a new zero tensor. Peers load grad_out from this
        rank's memory at the same offset as their own, so it is first copied
        into the plan's grad buffer (grad_buffer()), unless it is that buffer
        or grad_out_symmetric=True promises symmetric memory of this comm at
        the same offset on every rank."""
        fn = "loom.embedding_a2a_backward"
        dev = self.comm.device
        check_tensor(fn, "grad_out", grad_out, dtypes=(self.out_dtype,), shape=self.out_shape, device=dev,
                     why="the shape and dtype of the forward's output")
        n = self._check_inputs(fn, indices, offsets, per_sample_weights)
        plan = self.handle

        def run():
            torch = _torch.torch()
            ts = _torch_stream(stream, dev)
            g = grad_out
            with torch.cuda.stream(ts):
                if grad_out_symmetric:
                    self.comm.offset_of(grad_out, fn)
                elif self._grad is None or grad_out.data_ptr() != self._grad.data_ptr():
                    g = self.grad_buffer()
                    g.copy_(grad_out)
                tg = table_grad
                if tg is None:
                    tg = torch.zeros((self.table_rows, self.dim), dtype=getattr(torch, self.table_dtype),
                                     device=f"cuda:{dev}")
                else:
                    check_tensor(fn, "table_grad", tg, dtypes=(self.table_dtype,), shape=(self.table_rows, self.dim),
                                 device=dev, why="the shape and dtype of the tables")
            _lib.call("loom_embedding_a2a_backward", ctypes.c_void_p(plan), g.data_ptr(), indices.data_ptr(),
                      offsets.data_ptr(), n, per_sample_weights.data_ptr() if per_sample_weights is not None else None,
                      float(scale), tg.data_ptr(), ts.cuda_stream)
            return tg

        return _run_on_device(dev, run, grad_out)

    def pool(self, tables, indices, offsets, per_sample_weights=None, *, out=None, stream=None):
        """Pooling alone, no communication: [B, T*D] (out_dtype), row b =
        global sample b, columns [t*D, (t+1)*D) this rank's table t."""
        fn = "loom.embedding_pool"
        dev = self.comm.device
        check_tensor(fn, "tables", tables, dtypes=(self.table_dtype,), shape=(self.table_rows, self.dim), device=dev)
        n = self._check_inputs(fn, indices, offsets, per_sample_weights)
        shape = (self.global_batch, self.local_tables * self.dim)
        if out is not None:
            check_tensor(fn, "out", out, dtypes=(self.out_dtype,), shape=shape, device=dev)
        plan = self.handle

        def run():
            torch = _torch.torch()
            o = out if out is not None else torch.empty(shape, dtype=getattr(torch, self.out_dtype),
                                                        device=f"cuda:{dev}")
            _lib.call("loom_embedding_pool", ctypes.c_void_p(plan), tables.data_ptr(), indices.data_ptr(),
                      offsets.data_ptr(), n, per_sample_weights.data_ptr() if per_sample_weights is not None else None,
                      o.data_ptr(), _torch.stream_handle(stream, dev))
            return o

        return _run_on_device(dev, run, tables)

    def check(self):
        """Raises (and clears) an index or offset error this plan's kernels
        recorded (synchronize the stream of the calls first)."""
        _lib.call("loom_embedding_a2a_check", ctypes.c_void_p(self.handle))

    def close(self):
        """Collective: destroys the plan and frees its buffers."""
        if not self._destroy_plan():
            return
        for buf in (self._out, self._grad):
            if buf is not None:
                self.comm._free_alloc(self.comm._alloc_of(buf, "loom.EmbeddingA2A.close"))
        self._out = self._grad = None

    def __repr__(self):
        return (f"loom.EmbeddingA2A(tables_per_rank={list(self.tables_per_rank)}, dim={self.dim}, "
                f"global_batch={self.global_batch}, pooling={self.pooling!r}, {self.table_dtype}->{self.out_dtype}, "
                f"path={self.info['path']})")


def embedding_plan(comm, tables_per_rank, rows, dim, global_batch, *, pooling="sum", per_sample_weights=False,
                   table_dtype="float32", out_dtype="float32"):
    """The comm's cached EmbeddingA2A plan for this layout (made on first use: collective)."""
    key = ("embedding_a2a", tuple(int(t) for t in tables_per_rank), tuple(int(r) for r in rows), int(dim),
           int(global_batch), pooling, bool(per_sample_weights), dtype_name(table_dtype), dtype_name(out_dtype))
    return comm.cached_plan(key, lambda: EmbeddingA2A(
        comm, tables_per_rank, rows, dim, global_batch, pooling=pooling, per_sample_weights=per_sample_weights,
        table_dtype=table_dtype, out_dtype=out_dtype))


def embedding_a2a(comm, tables, indices, offsets, *, tables_per_rank, rows, global_batch, pooling="sum",
                  per_sample_weights=None, out_dtype=None, out=None, stream=None):
    """The fused embedding-bag + All-to-All (see EmbeddingA2A) through the
    comm's plan cache. Returns out [Bl, T_total * D]."""
    check_same_device("loom.embedding_a2a", [("tables", tables), ("indices", indices), ("offsets", offsets)])
    if len(shape_of(tables)) != 2:
        raise InvalidArgumentError(f"loom.embedding_a2a: tables has shape {shape_of(tables)}; expected [rows, D]")
    od = out_dtype if out_dtype is not None else (out.dtype if out is not None else tables.dtype)
    plan = embedding_plan(comm, tables_per_rank, rows, shape_of(tables)[1], global_batch, pooling=pooling,
                          per_sample_weights=per_sample_weights is not None, table_dtype=tables.dtype, out_dtype=od)
    return plan.forward(tables, indices, offsets, per_sample_weights, out=out, stream=stream)


def embedding_a2a_backward(comm, grad_out, indices, offsets, *, tables_per_rank, rows, global_batch, dim,
                           table_dtype, pooling="sum", per_sample_weights=None, table_grad=None, scale=1.0,
                           stream=None):
    """The backward of embedding_a2a (same layout arguments): returns
    table_grad [this rank's rows, D] += scale * d(loss)/d(tables)."""
    plan = embedding_plan(comm, tables_per_rank, rows, dim, global_batch, pooling=pooling,
                          per_sample_weights=per_sample_weights is not None, table_dtype=table_dtype,
                          out_dtype=grad_out.dtype)
    return plan.backward(grad_out, indices, offsets, per_sample_weights, table_grad=table_grad, scale=scale,
                         stream=stream)
