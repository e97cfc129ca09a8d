"""moe.py - mixture-of-experts expert parallelism on torch tensors
(loom_plan_moe, loom_moe_dispatch / _combine / _mlp).

    moe = loom.MoE(comm, hidden=4096, experts=8, topk=2, max_tokens=4096, ffn=14336)   # collective
    out = moe.mlp(x, ids, weights, gate_up, down)     # the whole expert MLP layer
    moe.mlp_tune(x, ids, weights, gate_up, down)      # optional: the fastest form and tiles for this shape
    moe.mlp_form(tokens)                              # "fused" or "unfused": how mlp runs for tokens
    rows, offsets = moe.dispatch(x, ids)              # or step by step: rows grouped by local expert
    out = moe.combine(y, weights)                     # y in the layout of the last dispatch

Shapes (W ranks, E experts split over them as loom.h says: rank r owns
experts first_expert .. first_expert + local_experts - 1):
  x        [tokens, H] dtype, tokens <= max_tokens (may differ per rank)
  ids      [tokens, k] int32, each token's experts (a router's top-k)
  weights  [tokens, k] float32, the router's weights
  gate_up  [local_experts, 2F, H] dtype: per expert the gate's [F, H] then
           the up projection's [F, H] (nn.Linear's [out, in] layout)
  down     [local_experts, H, F] dtype
  out      [tokens, H] dtype: sum over j of weights[t, j] x expert_{ids[t, j]}(x[t])
dispatch returns the plan's receive buffer [R, H] (rows [0, offsets[-1])
hold this rank's received rows, expert l's at [offsets[l], offsets[l+1]))
and the offsets [local_experts + 1] int64, both on the device and valid
until the plan's next call (no host synchronisation: the counts never
leave the GPU). mlp_path: "auto" (per call: the tuned form for the
tokens, else fused-all from 512 tokens on and fused below), "fused" (the
combine in the down GEMM's epilogue),
"fused_all" (and the dispatch in the gate/up GEMM's prologue) or
"unfused"; the forms give the same bits. Forward only: no autograd
(loom.nn.MoE trains).
Every call is collective: every rank calls the plan's methods in the same
order.
"""
import ctypes

from . import _lib, _torch
from ._checks import check_tensor, dtype_name, loom_dtype, shape_of
from ._plan import PlanHandle
from ._structs import MoeDesc, MoeMlpPath, MoePlanInfo
from .errors import InvalidArgumentError

_ROW_DTYPES = ("bfloat16", "float16", "float32")
_MLP_PATHS = {"auto": int(MoeMlpPath.AUTO), "fused": int(MoeMlpPath.FUSED), "unfused": int(MoeMlpPath.UNFUSED),
              "fused_all": int(MoeMlpPath.FUSED_ALL)}


class MoE(PlanHandle):
    """A dispatch / combine plan (and, with ffn > 0, the expert MLP) on comm."""

    def __init__(self, comm, hidden, experts, topk, max_tokens, *, ffn=0, capacity=0, dtype="bfloat16",
                 mlp_path="auto"):
        fn = "loom.MoE"
        self.comm = comm
        self.dtype = dtype_name(dtype)
        if self.dtype not in _ROW_DTYPES:
            raise InvalidArgumentError(f"{fn}: dtype={self.dtype}; expected bfloat16, float16 or float32")
        self.hidden, self.experts, self.topk = int(hidden), int(experts), int(topk)
        self.max_tokens, self.ffn, self.capacity = int(max_tokens), int(ffn), int(capacity)
        if mlp_path not in _MLP_PATHS:
            raise InvalidArgumentError(f"{fn}: mlp_path={mlp_path!r}; expected one of {sorted(_MLP_PATHS)}")
        self.mlp_path = mlp_path
        self._desc = MoeDesc(hidden=self.hidden, experts=self.experts, topk=self.topk, max_tokens=self.max_tokens,
                             capacity=self.capacity, dtype=int(loom_dtype(self.dtype, fn, "dtype")), ffn=self.ffn,
                             mlp_path=_MLP_PATHS[mlp_path])
        self._plan = None
        plan = ctypes.c_void_p()
        comm._bounded(lambda: _lib.call("loom_plan_moe", ctypes.c_void_p(comm.handle), ctypes.byref(self._desc),
                                        ctypes.byref(plan)), "loom_plan_moe")
        self._plan = plan.value
        comm._register_plan(self)
        pi = MoePlanInfo()
        _lib.call("loom_moe_plan_info", ctypes.c_void_p(self._plan), ctypes.byref(pi))
        self.info = pi.as_dict()
        self.local_experts, self.first_expert = self.info["local_experts"], self.info["first_expert"]
        self._tokens = None  # of the last dispatch
        self._views = None

    def _buffers(self):
        """The receive buffer [R, H] and the expert offsets as tensors (made once)."""
        if self._views is None:
            dev = self.comm.device
            recv, _ = _torch.own_tensor(self.info["recv"], (self.info["max_recv_rows"], self.hidden), self.dtype, dev,
                                        owner=self)
            off, _ = _torch.own_tensor(self.info["expert_offsets"], (self.local_experts + 1,), "int64", dev,
                                       owner=self)
            self._views = (recv, off)
        return self._views

    def _routing(self, fn, x, ids):
        dev = self.comm.device
        check_tensor(fn, "x", x, dtypes=(self.dtype,), shape=(None, self.hidden), device=dev,
                     why=f"[tokens, hidden={self.hidden}] of the plan's dtype")
        tokens = shape_of(x)[0]
        if tokens > self.max_tokens:
            raise InvalidArgumentError(f"{fn}: x has {tokens} tokens; the plan takes at most max_tokens="
                                       f"{self.max_tokens}")
        check_tensor(fn, "ids", ids, dtypes=("int32",), shape=(tokens, self.topk), device=dev,
                     why=f"[tokens, topk={self.topk}] int32 expert ids")
        return tokens

    def _weights(self, fn, weights, tokens):
        check_tensor(fn, "weights", weights, dtypes=("float32",), shape=(tokens, self.topk), device=self.comm.device,
                     why="[tokens, topk] float32 router weights of the dispatched tokens")

    def _run(self, stream, call):
        """call(cudaStream_t) with the comm's GPU current."""
        torch = _torch.torch()
        with torch.cuda.device(self.comm.device):
            return call(_torch.stream_handle(stream, self.comm.device))

    def dispatch(self, x, ids, *, stream=None):
        """Every (token, j) row to its expert's rank; returns (rows, offsets)
        (see the top of this file)."""
        fn = "loom.MoE.dispatch"
        tokens = self._routing(fn, x, ids)
        plan = self.handle
        self._run(stream, lambda s: _lib.call("loom_moe_dispatch", ctypes.c_void_p(plan), x.data_ptr(),
                                                     ids.data_ptr(), tokens, s))
        self._tokens = tokens
        return self._buffers()

    def combine(self, y, weights, *, out=None, stream=None):
        """y [>= offsets[-1], H] (the experts' outputs in the receive layout
        of the last dispatch; may be the receive buffer itself) back to the
        tokens, weighted and summed: [tokens, H]."""
        fn = "loom.MoE.combine"
        if self._tokens is None:
            raise InvalidArgumentError(f"{fn}: no dispatch yet: combine returns the rows of the last dispatch")
        check_tensor(fn, "y", y, dtypes=(self.dtype,), shape=(None, self.hidden), device=self.comm.device,
                     why="the experts' outputs in the receive layout")
        self._weights(fn, weights, self._tokens)
        out = self._out(fn, out, self._tokens)
        plan = self.handle
        self._run(stream, lambda s: _lib.call("loom_moe_combine", ctypes.c_void_p(plan), y.data_ptr(),
                                                     weights.data_ptr(), out.data_ptr(), s))
        return out

    def mlp(self, x, ids, weights, gate_up, down, *, out=None, stream=None):
        """The whole layer (plan made with ffn > 0): dispatch, the experts'
        gate/up GEMM with SwiGLU, their down GEMM, combine (fused into the
        down GEMM's epilogue or not: mlp_form)."""
        return self._layer("loom.MoE.mlp", "loom_moe_mlp", x, ids, weights, gate_up, down, out, stream)

    def _layer(self, fn, entry, x, ids, weights, gate_up, down, out, stream):
        """mlp or mlp_tune (the C entry point `entry`, its arguments alike)."""
        if self.ffn <= 0:
            raise InvalidArgumentError(f"{fn}: the plan was made with ffn=0; pass ffn (the experts' hidden size)")
        tokens = self._routing(fn, x, ids)
        self._weights(fn, weights, tokens)
        n, F, H, dev = self.local_experts, self.ffn, self.hidden, self.comm.device
        if n > 0:
            check_tensor(fn, "gate_up", gate_up, dtypes=(self.dtype,), shape=(n, 2 * F, H), device=dev,
                         why=f"[local_experts={n}, 2*ffn, hidden]: each expert's gate then up projection")
            check_tensor(fn, "down", down, dtypes=(self.dtype,), shape=(n, H, F), device=dev,
                         why=f"[local_experts={n}, hidden, ffn]")
        out = self._out(fn, out, tokens)
        plan = self.handle
        gp = gate_up.data_ptr() if n > 0 else None
        dp = down.data_ptr() if n > 0 else None
        self._run(stream, lambda s: _lib.call(entry, ctypes.c_void_p(plan), x.data_ptr(),
                                                     ids.data_ptr(), weights.data_ptr(), tokens, gp, dp,
                                                     out.data_ptr(), s))
        self._tokens = tokens
        return out

    def mlp_tune(self, x, ids, weights, gate_up, down, *, out=None, stream=None):
        """Collective: times mlp in its three forms with tiles of its two
        grouped GEMMs on these arguments and records the fastest for this
        shape and the tokens' bucket, which mlp (mlp_path "auto") then runs
        (loom_moe_mlp_tune; synchronizes, not while capturing a graph).
        Returns the layer's output, as mlp does."""
        return self._layer("loom.MoE.mlp_tune", "loom_moe_mlp_tune", x, ids, weights, gate_up, down, out, stream)

    def mlp_form(self, tokens):
        """How mlp runs for `tokens` on this rank: "fused", "fused_all" or "unfused"
        (loom_moe_mlp_path: mlp_path, or for "auto" the tuning cache's
        entry for this shape and the tokens' bucket, else fused_all from 512
        tokens on and fused below)."""
        p = ctypes.c_int()
        _lib.call("loom_moe_mlp_path", ctypes.c_void_p(self.handle), int(tokens), ctypes.byref(p))
        return {int(v): k for k, v in _MLP_PATHS.items()}[p.value]

    def _out(self, fn, out, tokens):
        if out is None:
            torch = _torch.torch()
            return torch.empty((tokens, self.hidden), dtype=getattr(torch, self.dtype),
                               device=f"cuda:{self.comm.device}")
        check_tensor(fn, "out", out, dtypes=(self.dtype,), shape=(tokens, self.hidden), device=self.comm.device)
        return out

    def close(self):
        """Collective: destroys the plan (the tensors dispatch returned die with it)."""
        self._destroy_plan()
        self._views = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"loom.MoE(hidden={self.hidden}, experts={self.experts}, topk={self.topk}, "
                f"max_tokens={self.max_tokens}, ffn={self.ffn}, {self.dtype}, experts here {self.first_expert}.."
                f"{self.first_expert + self.local_experts - 1})")
