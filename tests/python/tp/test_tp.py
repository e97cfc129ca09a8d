"""The tensor-parallel ops' binding (loom.tp: ag_gemm, gemm_rs, gemm_ar) on the host.

No GPU and no torch: stand-in tensors (test_checks.FakeTensor) and a
HostComm, a loom.Comm with the host bookkeeping only (its handle is an
address libloom does not know, its "symmetric memory" allocation records
with no memory behind them). What is tested:
  - the shard rows against the C functions the library uses (tp_schedule.h);
  - every argument check, by argument name, before any plan is made;
  - the plan-cache key: what makes a new plan and what reuses one;
  - libloom's refusals as exceptions, through the real library;
  - the calls themselves, through a stub libloom compiled from C against
    loom.h that records the descriptions, pointers and streams it receives
    and fails on demand (a fresh process: one libloom per process).
"""
import json
from types import SimpleNamespace

import pytest
from conftest import REPO, compile_c, run_python
from test_checks import FakeTensor

import loom
from loom import errors, tp
from loom.comm import Comm, _Alloc
from loom._structs import TpTransfer

SYM_BASE = 0x7e0000000000


class HostComm(Comm):
    """A loom.Comm without GPU or NCCL (see the top of this file)."""

    def __init__(self, rank=0, size=2, device=0, handle=0x5000):
        self._handle, self._nccl, self._owns_nccl = handle, None, False
        self.rank, self.size, self.device = rank, size, device
        self._allocs, self._seq, self._plans, self._plan_cache = {}, 0, [], {}
        self.timeout_s = 5.0
        self.freed = []

    def _bounded(self, fn, what):
        return fn()

    def _free_alloc(self, a):
        self.freed.append(a.ptr)
        del self._allocs[a.ptr]

    def symmetric(self, shape, dtype="bfloat16", offset=0, nbytes=1 << 24):
        """A stand-in tensor at `offset` bytes into a new 'symmetric' allocation."""
        ptr = SYM_BASE + 0x10000000 * (self._seq + 1)
        self._allocs[ptr] = _Alloc(ptr, nbytes, self._seq, False)
        self._seq += 1
        return FakeTensor(shape, dtype=dtype, ptr=ptr + offset)

    def empty(self, shape, dtype, *, _internal=False):
        t = self.symmetric(shape, dtype)
        self._allocs[t.data_ptr()].internal = _internal
        return t


def T(*shape, dtype="bfloat16", device=("cuda", 0), contiguous=True, ptr=0x7f0000000000):
    return FakeTensor(shape, dtype=dtype, device=device, contiguous=contiguous, ptr=ptr)


# ---- rows -----------------------------------------------------------------------

def test_shard_rows_match_the_library(tmp_path):
    """loom.tp.shard_range against loom__tp_shard_begin / _len (the functions
    libloom's plans use) for every rank of many (m, W), uneven and empty
    shards included."""
    cases = [(m, w) for w in (1, 2, 3, 4, 7, 8, 64) for m in (1, 2, 3, 5, 7, 8, 63, 64, 65, 300, 1000, 4097)]
    body = "\n".join(f"  for (int p = 0; p < {w}; ++p) printf(\"%lld %lld\\n\", (long long)loom__tp_shard_begin({m}, "
                     f"{w}, p), (long long)loom__tp_shard_len({m}, {w}, p));" for m, w in cases)
    exe = compile_c(tmp_path, "shards", f"""
        #include <stdio.h>
        #include "ops/tp/tp_schedule.h"
        int main(void) {{
        {body}
          return 0;
        }}
        """, extra=[f"-I{REPO / 'src'}"])
    import subprocess
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    want = []
    for m, w in cases:
        covered = 0
        for p in range(w):
            b, e = tp.shard_range(m, w, p)
            assert e - b == tp.shard_len(m, w, p) and b == min(m, covered)
            covered = e
            want.append(f"{b} {e - b}")
        assert covered == m  # every row once, in rank order
    assert got[:-1] == want
    assert [tp.shard_len(5, 4, p) for p in range(4)] == [2, 2, 1, 0]  # loom.h's example


# ---- argument checks ----------------------------------------------------------------

def _ag_ok(comm):
    """A valid ag_gemm call on rank 1 of 2: m = 7 rows (shards 4 and 3), k = 32, n = 16."""
    return dict(a_shard=T(3, 32), weight=T(16, 32), bias=T(16), m=7, out=T(7, 16),
                gathered=comm.symmetric((7, 32)))


AG_BAD = [  # (changes to the valid call, the message)
    ({"a_shard": T(3, 32, dtype="float32")}, "a_shard has dtype torch.float32; expected torch.bfloat16 or torch.float16"),
    ({"a_shard": T(3, 32, 1)}, "a_shard has shape (3, 32, 1); expected 2 dimensions (this rank's rows of A, columns)"),
    ({"a_shard": T(3, 32, device=("cpu", None))}, "a_shard is on device"),
    ({"a_shard": T(3, 32, device=("cuda", 1))}, "a_shard is on cuda:1, expected cuda:0"),
    ({"a_shard": T(3, 32, contiguous=False)}, "a_shard (shape (3, 32)) is not contiguous; pass a_shard.contiguous()"),
    ({"a_shard": T(4, 32)}, "a_shard has 4 rows; rank 1 of 2 owns rows [4, 7) of m=7 (3 rows; S = ceil(m/W) = 4)"),
    ({"m": 0}, "m=0 must be >= 1"),
    ({"m": 7.0}, "m=7.0 is not an integer"),
    ({"weight": T(16, 32, dtype="float16")}, "weight has dtype torch.float16; expected torch.bfloat16 (must match a_shard)"),
    ({"weight": T(32, 16)}, "weight has shape (32, 16); expected (n, k=32) with k from a_shard (3, 32) (layout='nk'"),
    ({"weight": T(16, 32), "layout": "kn"}, "weight has shape (16, 32); expected (k=32, n) with k from a_shard"),
    ({"layout": "tn"}, "layout='tn'; expected 'nk' (weight [n, k], a Linear weight) or 'kn'"),
    ({"weight": T(16, 32, device=("cuda", 1))}, "weight is on cuda:1, expected cuda:0 (must match a_shard)"),
    ({"bias": T(8)}, "bias has shape (8,); expected (16,) (the output dtype, n of the weight)"),
    ({"bias": T(16, dtype="float32")}, "bias has dtype torch.float32; expected torch.bfloat16"),
    ({"out": T(7, 16, dtype="float32"), "out_dtype": "bfloat16"}, "out has dtype torch.float32; expected torch.bfloat16"),
    ({"out": T(6, 16), "m": 7}, "out has shape (6, 16); expected (7, 16) ([m, n] of bfloat16)"),
    ({"out_dtype": "int8", "out": None}, "out_dtype=torch.int8 is not supported; expected torch.bfloat16 or"),
    ({"gathered": T(7, 32)}, "gathered (at 0x7f0000000000, 448 bytes) is not symmetric memory of this comm: peers "
                             "store their rows into it, so make it with comm.empty"),
    ({"gathered": "sym", "gathered_nbytes": 447}, "gathered (at 0x7e0000000000, 448 bytes) is not inside symmetric"),
    ({"gathered": "sym", "gathered_shape": (7, 16)}, "gathered has shape (7, 16); expected (7, 32) ([m, k] of"),
    ({"gathered": "sym", "gathered_dtype": "float16"}, "gathered has dtype torch.float16; expected torch.bfloat16"),
    ({"transfer": "nvlink"}, "transfer='nvlink'; expected one of 'auto', 'sequential', 'copy_engine', 'sm_copy'"),
    ({"chunk_rows": -1}, "chunk_rows=-1 must be >= 0 (0: chosen by the plan)"),
    ({"comm_blocks": "4"}, "comm_blocks='4' is not an integer"),
]


@pytest.mark.parametrize("change, message", AG_BAD, ids=[m.split(";")[0][:40] for _, m in AG_BAD])
def test_ag_gemm_refuses_bad_arguments_by_name_before_any_plan(change, message):
    comm = HostComm(rank=1, size=2)
    kw = _ag_ok(comm)
    change = dict(change)
    shape, dt = change.pop("gathered_shape", (7, 32)), change.pop("gathered_dtype", "bfloat16")
    nbytes = change.pop("gathered_nbytes", 1 << 24)
    if change.get("gathered") == "sym":
        comm._allocs.clear()
        comm._seq = -1  # the next allocation at SYM_BASE
        change["gathered"] = comm.symmetric(shape, dt, nbytes=nbytes)
    kw.update(change)
    with pytest.raises(loom.InvalidArgumentError) as ei:
        tp.ag_gemm(comm, kw.pop("a_shard"), kw.pop("weight"), kw.pop("bias"), stream=0, **kw)
    assert str(ei.value).startswith("loom.ag_gemm: ") and message in str(ei.value), str(ei.value)
    assert ei.value.code == errors.ERR_INVALID_ARGUMENT
    assert comm._plan_cache == {} and comm._plans == []  # nothing reached libloom


def _rs_ok():
    """A valid gemm_rs call on rank 1 of 2: m = 7 (this rank owns rows [4, 7)), k = 32, n = 16."""
    return dict(a=T(7, 32), weight=T(16, 32), bias=T(16, dtype="float32"), out=T(3, 16, dtype="float32"))


RS_BAD = [
    ({"a": T(7, 32, dtype="float32")}, "a has dtype torch.float32; expected torch.bfloat16 or torch.float16"),
    ({"a": T(7)}, "a has shape (7,); expected 2 dimensions (m, columns)"),
    ({"a": T(0, 32)}, "a has shape (0, 32); expected m >= 1 rows"),
    ({"a": T(7, 32, contiguous=False)}, "a (shape (7, 32)) is not contiguous"),
    ({"weight": T(16, 24)}, "weight has shape (16, 24); expected (n, k=32) with k from a (7, 32)"),
    ({"weight": T(16, 32, dtype="float16")}, "weight has dtype torch.float16; expected torch.bfloat16 (must match a)"),
    ({"out": T(4, 16, dtype="float32")}, "out has shape (4, 16); expected (3, 16) ([this rank's rows, n] of float32)"),
    ({"out": None, "out_dtype": "float32", "bias": T(16)}, "bias has dtype torch.bfloat16; expected torch.float32"),
    ({"bias": T(16, 1, dtype="float32")}, "bias has shape (16, 1); expected (16,)"),
    ({"bias": T(16, dtype="float32", device=("cuda", 1))}, "bias is on cuda:1, expected cuda:0"),
    ({"layout": "KN"}, "layout='KN'; expected 'nk'"),
    ({"transfer": 3}, "transfer=3; expected one of"),
    ({"comm_blocks": -2}, "comm_blocks=-2 must be >= 0"),
]


@pytest.mark.parametrize("change, message", RS_BAD, ids=[m.split(";")[0][:40] for _, m in RS_BAD])
def test_gemm_rs_refuses_bad_arguments_by_name_before_any_plan(change, message):
    comm = HostComm(rank=1, size=2)
    kw = _rs_ok()
    kw.update(change)
    with pytest.raises(loom.InvalidArgumentError) as ei:
        tp.gemm_rs(comm, kw.pop("a"), kw.pop("weight"), kw.pop("bias"), stream=0, **kw)
    assert str(ei.value).startswith("loom.gemm_rs: ") and message in str(ei.value), str(ei.value)
    assert comm._plan_cache == {} and comm._plans == []


def _ar_ok():
    """A valid gemm_ar call on rank 1 of 2: m = 7, k = 32, n = 16, fp32 out, the Megatron epilogue."""
    return dict(a=T(7, 32), weight=T(16, 32), bias=T(16, dtype="float32"), residual=T(7, 16, dtype="float32"),
                out=T(7, 16, dtype="float32"), dropout_p=0.1, seed=5, offset=0)


AR_BAD = [
    ({"a": T(7, 32, dtype="float32")}, "a has dtype torch.float32; expected torch.bfloat16 or torch.float16"),
    ({"a": T(0, 32)}, "a has shape (0, 32); expected m >= 1 rows"),
    ({"a": T(7, 32, contiguous=False)}, "a (shape (7, 32)) is not contiguous"),
    ({"weight": T(16, 24)}, "weight has shape (16, 24); expected (n, k=32) with k from a (7, 32)"),
    ({"weight": T(16, 32, dtype="float16")}, "weight has dtype torch.float16; expected torch.bfloat16 (must match a)"),
    ({"out": T(3, 16, dtype="float32")}, "out has shape (3, 16); expected (7, 16) ([m, n] of float32)"),
    ({"bias": T(16)}, "bias has dtype torch.bfloat16; expected torch.float32"),
    ({"bias": T(8, dtype="float32")}, "bias has shape (8,); expected (16,)"),
    ({"residual": T(3, 16, dtype="float32")}, "residual has shape (3, 16); expected (7, 16) ([m, n] of float32, like out)"),
    ({"residual": T(7, 16)}, "residual has dtype torch.bfloat16; expected torch.float32"),
    ({"residual": T(7, 16, dtype="float32", device=("cuda", 1))}, "residual is on cuda:1, expected cuda:0"),
    ({"dropout_p": 1.0}, "dropout_p=1.0 must be in [0, 1)"),
    ({"dropout_p": -0.5}, "dropout_p=-0.5 must be in [0, 1)"),
    ({"dropout_p": "x"}, "dropout_p='x' and scale=1.0 must be numbers"),
    ({"scale": float("inf")}, "scale=inf must be finite"),
    ({"seed": -1}, "seed=-1 must be >= 0"),
    ({"offset": 1.5}, "offset=1.5 is not an integer"),
    ({"activation": "tanh"}, "activation='tanh'; expected one of"),
    ({"transfer": "copy_engine"}, "transfer='copy_engine': gemm_ar takes 'auto', 'sequential', 'sm_copy'"),
    ({"transfer": "sm_atomic"}, "transfer='sm_atomic': gemm_ar takes"),
    ({"transfer": "decomposed"}, "transfer='decomposed': gemm_ar takes"),
    ({"layout": "tn"}, "layout='tn'; expected 'nk'"),
    ({"comm_blocks": -1}, "comm_blocks=-1 must be >= 0"),
]


@pytest.mark.parametrize("change, message", AR_BAD, ids=[m.split(";")[0][:40] for _, m in AR_BAD])
def test_gemm_ar_refuses_bad_arguments_by_name_before_any_plan(change, message):
    comm = HostComm(rank=1, size=2)
    kw = _ar_ok()
    kw.update(change)
    with pytest.raises(loom.InvalidArgumentError) as ei:
        tp.gemm_ar(comm, kw.pop("a"), kw.pop("weight"), kw.pop("bias"), stream=0, **kw)
    assert str(ei.value).startswith("loom.gemm_ar: ") and message in str(ei.value), str(ei.value)
    assert ei.value.code == errors.ERR_INVALID_ARGUMENT
    assert comm._plan_cache == {} and comm._plans == []  # nothing reached libloom


def test_gemm_ar_plans_out_and_epilogue(lib):
    """gemm_ar's spec, key and plan object: another op than gemm_rs on the
    same numbers; a plan not made sequential refuses an out outside
    symmetric memory whatever its transfer resolved to, and otherwise uses
    its own symmetric buffer; the call reaches libloom with
    the epilogue (which refuses the fake plan handle, naming it)."""
    comm = HostComm(rank=1, size=2)
    a, w = T(7, 32), T(16, 32)
    spec = tp._ar_spec("f", comm, a, w, "nk", "float32", "auto", 0)
    assert spec.out_shape == (7, 16) and spec.a_shape == (7, 32)
    rs = tp._rs_spec("f", comm, a, w, False, "nk", "float32", "auto", 0)
    assert spec.key[1] == "gemm_ar" and spec.key[2:] == rs.key[2:]
    with pytest.raises(loom.InvalidArgumentError, match="gemm_ar plans take no bias or activation"):
        tp.TpSpec(comm, "gemm_ar", 7, 16, 32, "bfloat16", "float32", bias=True)
    plan = _inject(comm, spec, 0x4242)
    plan.info = {"transfer": "sm_copy"}
    with pytest.raises(loom.InvalidArgumentError, match="loom.gemm_rs: this is a gemm_ar plan"):
        plan.gemm_rs(a, w, stream=0)
    with pytest.raises(loom.InvalidArgumentError, match="loom.ag_gemm: this is a gemm_ar plan"):
        plan.ag_gemm(T(3, 32), w, stream=0)
    with pytest.raises(loom.InvalidArgumentError,
                       match=r"loom.gemm_ar: out \(at 0x7f0000000000, 448 bytes\) is not symmetric memory of this comm: "
                             r"peers store their reduced rows into it"):
        plan.gemm_ar(a, w, out=T(7, 16, dtype="float32"), stream=0)
    with pytest.raises(loom.InvalidArgumentError, match="loom_gemm_ar: plan=0x4242 is not a live loom plan"):
        plan.gemm_ar(a, w, T(16, dtype="float32"), residual=T(7, 16, dtype="float32"), dropout_p=0.1, stream=0)
    own = plan.output_buffer()
    assert own is plan.output_buffer() and own.shape == (7, 16) and comm._allocs[own.data_ptr()].internal
    # AUTO resolved to the sequential path: the same call is refused the same way
    plan.info = {"transfer": "sequential"}
    with pytest.raises(loom.InvalidArgumentError, match=r"loom.gemm_ar: out \(at 0x7f0000000000, 448 bytes\) is not "
                                                         r"symmetric memory of this comm"):
        plan.gemm_ar(a, w, out=T(7, 16, dtype="float32"), stream=0)
    # a plan made sequential: any tensor as out (libloom refuses the fake handle next)
    seq = _inject(comm, tp._ar_spec("f", comm, a, w, "nk", "float32", "sequential", 0), 0x4243)
    seq.info = {"transfer": "sequential"}
    with pytest.raises(loom.InvalidArgumentError, match="loom_gemm_ar: plan=0x4243 is not a live loom plan"):
        seq.gemm_ar(a, w, out=T(7, 16, dtype="float32"), stream=0)
    with pytest.raises(loom.InvalidArgumentError, match="only gemm_ar plans have one"):
        tp.TpPlan.output_buffer(SimpleNamespace(spec=SimpleNamespace(op="gemm_rs")))
    assert tp._epilogue("f", None, None, 0.0, 0, 0, 1.0, "none") is None  # the identity: NULL
    e = tp._epilogue("f", T(16, ptr=0xB1A5), None, 0.25, 7, 9, 0.5, "gelu_tanh")
    assert (e.bias, e.residual, e.dropout_p, e.dropout_seed, e.dropout_offset, e.scale, e.activation) == (
        0xB1A5, None, 0.25, 7, 9, 0.5, int(loom.Activation.GELU_TANH))


def test_an_empty_shard_is_a_valid_call():
    """m = 5 on 4 ranks: rank 3 owns no row; its a_shard / out have 0 rows."""
    comm = HostComm(rank=3, size=4)
    spec = tp._ag_spec("f", comm, T(0, 32), T(16, 32), False, 5, "nk", None, "auto", 0, 0)
    assert spec.rows == (5, 5) and spec.a_shape == (0, 32) and spec.out_shape == (5, 16)
    spec.check("f", comm, T(0, 32), T(16, 32), None, T(5, 16))
    rs = tp._rs_spec("f", comm, T(5, 32), T(16, 32), False, "nk", None, "auto", 0)
    assert rs.out_shape == (0, 16)
    rs.check("f", comm, T(5, 32), T(16, 32), None, T(0, 16))
    with pytest.raises(loom.InvalidArgumentError, match=r"rank 3 of 4 owns rows \[5, 5\) of m=5 \(0 rows"):
        tp._ag_spec("f", comm, T(1, 32), T(16, 32), False, 5, "nk", None, "auto", 0, 0)


def test_m_comes_from_m_gathered_out_or_the_shard_times_w():
    comm = HostComm(rank=0, size=4)
    a, w = T(3, 32), T(16, 32)
    assert tp._ag_spec("f", comm, a, w, False, None, "nk", None, "auto", 0, 0).m == 12
    assert tp._ag_spec("f", comm, a, w, False, 10, "nk", None, "auto", 0, 0).m == 10  # shards 3, 3, 3, 1
    # the functions take m from gathered / out when m is not given (the check then refuses out's shape)
    with pytest.raises(loom.InvalidArgumentError, match=r"a_shard has 3 rows; rank 0 of 4 owns rows \[0, 4\) of m=13"):
        tp.ag_gemm(comm, a, w, out=T(13, 16), stream=0)
    with pytest.raises(loom.InvalidArgumentError, match=r"m=9 \(3 rows.*\n?.*") as ei:
        tp.ag_gemm(comm, T(2, 32), w, gathered=comm.symmetric((9, 32)), stream=0)
    assert "a_shard has 2 rows" in str(ei.value)


# ---- the plan cache -------------------------------------------------------------------

def _key(comm, **kw):
    base = dict(a_shard=T(4, 32), weight=T(16, 32), has_bias=True, m=None, layout="nk", out_dtype=None,
                transfer="auto", chunk_rows=0, comm_blocks=0, activation="none", sequential_gemm="auto")
    base.update(kw)
    return tp._ag_spec("f", comm, base.pop("a_shard"), base.pop("weight"), *base.values()).key


def test_plan_keys_tell_apart_everything_a_plan_is_made_for():
    comm = HostComm(rank=0, size=2)
    k0 = _key(comm)
    assert k0 == ("tp", "ag_gemm", 8, 16, 32, "bfloat16", "bfloat16", "nk", True, "auto", 0, 0, "none", "auto")
    assert _key(comm) == k0 and _key(comm, transfer=TpTransfer.AUTO) == k0 and _key(comm, transfer="AUTO") == k0
    assert _key(comm, m=8) == k0  # m given or implied: one plan
    others = [
        _key(comm, m=7),                                             # m
        _key(comm, weight=T(24, 32)),                                # n
        _key(comm, a_shard=T(4, 40), weight=T(16, 40)),              # k
        _key(comm, a_shard=T(4, 32, dtype="float16"), weight=T(16, 32, dtype="float16")),  # ab dtype
        _key(comm, out_dtype="float32"),                             # c dtype
        _key(comm, weight=T(32, 16), layout="kn"),                   # layout (n = 16 again)
        _key(comm, has_bias=False),                                  # bias
        _key(comm, transfer="sequential"), _key(comm, transfer="copy_engine"), _key(comm, transfer="sm_copy"),
        _key(comm, transfer="decomposed"),
        _key(comm, chunk_rows=2), _key(comm, comm_blocks=4),
        _key(comm, activation="relu"), _key(comm, sequential_gemm="loom"), _key(comm, sequential_gemm="cublaslt"),
    ]
    assert len(set(others + [k0])) == len(others) + 1, others
    assert _key(comm, transfer="decomposed")[9] == "decomposed"
    assert int(tp._transfer("f", "decomposed")) == 6  # LOOM_TP_DECOMPOSED
    rs = tp._rs_spec("f", comm, T(8, 32), T(16, 32), True, "nk", None, "auto", 0).key
    assert rs[1] == "gemm_rs" and rs[2:] == k0[2:]  # the same numbers, another op: another plan


def _inject(comm, spec, handle):
    """A TpPlan of `spec` with a fake handle in the comm's cache, as if made."""
    plan = tp.TpPlan.__new__(tp.TpPlan)
    plan.comm, plan.spec, plan._plan, plan._gathered, plan.info = comm, spec, handle, None, {"transfer": "auto"}
    plan._out = None
    comm._plan_cache[spec.key] = plan
    comm._register_plan(plan)
    return plan


def test_calls_find_their_cached_plan_and_others_make_a_new_one(lib):
    """A call whose key is cached goes straight to loom_ag_gemm with that
    plan (libloom refuses the fake handle, naming it); a call of another
    layout makes a plan (libloom refuses the fake comm, naming it)."""
    comm = HostComm(rank=0, size=2)
    a, w, out = T(4, 32), T(16, 32), T(8, 16)
    spec = tp._ag_spec("f", comm, a, w, False, None, "nk", None, "auto", 0, 0)
    _inject(comm, spec, 0x1234)
    with pytest.raises(loom.InvalidArgumentError) as ei:
        tp.ag_gemm(comm, a, w, out=out, stream=0)
    assert ei.value.function == "loom_ag_gemm"
    assert "loom_ag_gemm: plan=0x1234 is not a live loom plan" in str(ei.value)
    with pytest.raises(loom.InvalidArgumentError) as ei:
        tp.ag_gemm(comm, a, w, out=out, transfer="sequential", stream=0)
    assert ei.value.function == "loom_plan_ag_gemm"
    assert "loom_plan_ag_gemm: comm=0x5000 is not a live loom comm" in str(ei.value)
    assert list(comm._plan_cache) == [spec.key]  # the failed creation left nothing behind
    assert len(comm._plans) == 1


def test_libloom_refusals_become_the_bindings_exceptions(lib):
    comm = HostComm(rank=0, size=2)
    a, w = T(8, 32), T(16, 32)
    with pytest.raises(loom.InvalidArgumentError) as ei:
        tp.gemm_rs(comm, a, w, out=T(4, 16), stream=0)
    assert ei.value.function == "loom_plan_gemm_rs" and ei.value.code == errors.ERR_INVALID_ARGUMENT
    assert ei.value.message == "loom_plan_gemm_rs: comm=0x5000 is not a live loom comm (destroyed already, or never created)"
    rs = _inject(comm, tp._rs_spec("f", comm, a, w, False, "nk", None, "auto", 0), 0x2468)
    with pytest.raises(loom.InvalidArgumentError, match=r"loom_gemm_rs: plan=0x2468 is not a live loom plan"):
        tp.gemm_rs(comm, a, w, out=T(4, 16), stream=0)
    # a closed comm: the binding's own message, before libloom
    comm._handle = None
    with pytest.raises(loom.InvalidArgumentError, match="loom.Comm: the comm is closed"):
        tp.gemm_rs(comm, a, w, out=T(4, 16), stream=0, transfer="sequential")
    # closing a plan goes through loom_plan_destroy (libloom does not know this one)
    with pytest.raises(loom.InvalidArgumentError, match=r"loom_plan_destroy: plan=0x2468 is not a live loom plan"):
        rs.close()


def test_plan_objects_check_their_own_calls(lib):
    comm = HostComm(rank=1, size=2)
    spec = tp.TpSpec(comm, "ag_gemm", 7, 16, 32, "bfloat16", "float32", layout="kn", bias=True)
    assert spec.rows == (4, 7) and spec.a_shape == (3, 32) and spec.b_shape == (32, 16) and spec.out_shape == (7, 16)
    plan = _inject(comm, spec, 0x1357)
    assert (plan.m, plan.n, plan.k, plan.layout, plan.rows) == (7, 16, 32, "kn", (4, 7))  # the spec's fields
    with pytest.raises(loom.InvalidArgumentError, match="loom.ag_gemm: the plan was made with a bias; pass bias"):
        plan.ag_gemm(T(3, 32), T(32, 16), stream=0)
    with pytest.raises(loom.InvalidArgumentError, match="loom.gemm_rs: this is an ag_gemm plan"):
        plan.gemm_rs(T(7, 32), T(32, 16), stream=0)
    with pytest.raises(loom.InvalidArgumentError, match=r"loom.ag_gemm: weight has shape \(16, 32\); expected \(32, 16\)"):
        plan.ag_gemm(T(3, 32), T(16, 32), T(16, dtype="float32"), stream=0)
    with pytest.raises(loom.InvalidArgumentError, match="loom_ag_gemm: plan=0x1357 is not a live loom plan"):
        plan.ag_gemm(T(3, 32), T(32, 16), T(16, dtype="float32"), out=T(7, 16, dtype="float32"), stream=0)
    with pytest.raises(loom.InvalidArgumentError, match="only ag_gemm plans gather"):
        tp.TpPlan.gathered_buffer(SimpleNamespace(spec=SimpleNamespace(op="gemm_rs")))
    with pytest.raises(loom.InvalidArgumentError, match=r"loom.TpPlan\(ag_gemm\): n=0 must be >= 1"):
        tp.TpSpec(comm, "ag_gemm", 7, 0, 32, "bfloat16", "bfloat16")
    with pytest.raises(loom.InvalidArgumentError, match=r"ab dtype=torch.float32 is not supported"):
        tp.TpSpec(comm, "gemm_rs", 7, 8, 32, "float32", "float32")
    with pytest.raises(loom.InvalidArgumentError, match="op='all_reduce'"):
        tp.TpSpec(comm, "all_reduce", 7, 8, 32, "bfloat16", "float32")


def test_the_sequential_gemm_goes_into_the_description_and_the_plan_key():
    comm = HostComm(rank=0, size=2)
    auto = tp.TpSpec(comm, "gemm_rs", 7, 16, 32, "bfloat16", "bfloat16")
    lt = tp.TpSpec(comm, "gemm_rs", 7, 16, 32, "bfloat16", "bfloat16", transfer="sequential",
                   sequential_gemm="cuBLASLt")
    assert auto.desc().sequential_gemm == int(tp.TpGemm.AUTO) == 0
    assert lt.desc().sequential_gemm == int(tp.TpGemm.CUBLASLT) == 2
    assert auto.key != lt.key and lt.key[-1] == "cublaslt"
    assert tp.TpSpec(comm, "ag_gemm", 7, 16, 32, "bfloat16", "bfloat16",
                     sequential_gemm=tp.TpGemm.LOOM).desc().sequential_gemm == 1
    with pytest.raises(loom.InvalidArgumentError, match=r"sequential_gemm='cublas'; expected one of 'auto', 'loom', "
                                                        r"'cublaslt'"):
        tp.TpSpec(comm, "gemm_ar", 7, 16, 32, "bfloat16", "bfloat16", sequential_gemm="cublas")


# ---- the calls, through a stub libloom ------------------------------------------------------

_STUB = r"""
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "loom.h"

static char log_[1 << 16];
static char err_[512];
static int plans_;
static int fail_next_; /* a loom_result_t the next op call returns */
struct loom_plan { int id; int rs; };
static struct loom_plan plan_mem_[64];

static void say(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t n = strlen(log_);
  vsnprintf(log_ + n, sizeof log_ - n, fmt, ap);
  va_end(ap);
}
const char *stub_log(void) { return log_; }
void stub_clear(void) { log_[0] = 0; }
void stub_fail_next(int r) { fail_next_ = r; }

loom_result_t loom_get_version(int *v) { *v = LOOM_VERSION_MAJOR * 10000 + LOOM_VERSION_MINOR * 100 + LOOM_VERSION_PATCH; return 0; }
const char *loom_last_error(void) { return err_; }
const char *loom_result_string(loom_result_t r) { return "LOOM_STUB"; }

static loom_result_t tp_plan(const char *fn, loom_comm_t comm, const loom_tp_desc_t *d, loom_plan_t *out) {
  say("%s comm=%p size_ok=%d m=%lld n=%lld k=%lld ab=%d c=%d layout=%d bias=%d W=%d transfer=%d chunk=%d blocks=%d\n",
      fn, (void *)comm, d->struct_size == sizeof(loom_tp_desc_t), (long long)d->m, (long long)d->n,
      (long long)d->k, (int)d->ab_type, (int)d->c_type, (int)d->b_layout, d->has_bias, d->world_size,
      (int)d->transfer, d->chunk_rows, d->comm_blocks);
  if (d->m == 999) {
    snprintf(err_, sizeof err_, "%s: desc->transfer=LOOM_TP_SM_COPY needs every peer load/store reachable", fn);
    return LOOM_ERR_UNSUPPORTED;
  }
  struct loom_plan *p = &plan_mem_[plans_++];
  p->id = plans_;
  p->rs = strcmp(fn, "loom_plan_gemm_rs") == 0;
  *out = p;
  return LOOM_SUCCESS;
}
loom_result_t loom_plan_ag_gemm(loom_comm_t c, const loom_tp_desc_t *d, loom_plan_t *o) { return tp_plan("loom_plan_ag_gemm", c, d, o); }
loom_result_t loom_plan_gemm_rs(loom_comm_t c, const loom_tp_desc_t *d, loom_plan_t *o) { return tp_plan("loom_plan_gemm_rs", c, d, o); }
loom_result_t loom_tp_plan_info(loom_plan_t p, loom_tp_plan_info_t *i) {
  say("loom_tp_plan_info plan=%d size_ok=%d\n", p->id, i->struct_size == sizeof *i);
  i->transfer = p->rs ? LOOM_TP_SM_COPY : LOOM_TP_COPY_ENGINE;
  i->shard_rows = 4; i->chunk_rows = 2; i->comm_blocks = 3; i->gemm_bn = 128; i->gemm_grid = 129;
  i->deterministic = 1; i->symmetric_bytes = 1024; i->device_bytes = 64; i->workspace_bytes = 32;
  return LOOM_SUCCESS;
}
static loom_result_t op_result(const char *fn) {
  int r = fail_next_;
  fail_next_ = 0;
  if (r) snprintf(err_, sizeof err_, "%s: a device-side wait timed out: rank 1 never signalled", fn);
  return (loom_result_t)r;
}
loom_result_t loom_ag_gemm(loom_plan_t p, const void *a, const void *b, void *c, void *a_full, const void *bias,
                           cudaStream_t s) {
  say("loom_ag_gemm plan=%d a=%p b=%p c=%p a_full=%p bias=%p stream=%p\n", p->id, a, b, c, a_full, bias, (void *)s);
  return op_result("loom_ag_gemm");
}
loom_result_t loom_gemm_rs(loom_plan_t p, const void *a, const void *b, void *c, const void *bias, cudaStream_t s) {
  say("loom_gemm_rs plan=%d a=%p b=%p c=%p bias=%p stream=%p\n", p->id, a, b, c, bias, (void *)s);
  return op_result("loom_gemm_rs");
}
loom_result_t loom_plan_destroy(loom_plan_t p) { say("loom_plan_destroy plan=%d\n", p->id); return LOOM_SUCCESS; }
loom_result_t loom_comm_destroy(loom_comm_t c) { say("loom_comm_destroy comm=%p\n", (void *)c); return LOOM_SUCCESS; }
"""

_OWN = {"loom_get_version", "loom_last_error", "loom_result_string", "loom_plan_ag_gemm", "loom_plan_gemm_rs",
        "loom_tp_plan_info", "loom_ag_gemm", "loom_gemm_rs", "loom_plan_destroy", "loom_comm_destroy"}

_DRIVER = r"""
import json, sys
sys.path[:0] = TESTS
import loom
from loom import tp, _lib
from test_tp import HostComm, T

lib = _lib.load()
lib.stub_log.restype = __import__("ctypes").c_char_p
out = {}
import warnings
warnings.simplefilter("always")
caught = warnings.catch_warnings(record=True)
seen = caught.__enter__()

def step(name, fn):
    lib.stub_clear()
    try:
        r = fn()
        res = "ok"
    except loom.LoomError as e:
        res = f"{type(e).__name__} code={e.code} function={e.function} message={e.message}"
    out[name] = {"result": res, "log": lib.stub_log().decode().splitlines()}

comm = HostComm(rank=1, size=2, handle=0xC0FFEE)
g = comm.symmetric((7, 32), offset=0x100)
a, w, b, c = T(3, 32, ptr=0xA000), T(16, 32, ptr=0xB000), T(16, dtype="float32", ptr=0xB1A5), T(7, 16, dtype="float32", ptr=0xC000)
step("ag1", lambda: tp.ag_gemm(comm, a, w, b, m=7, out=c, gathered=g, transfer="sm_copy", chunk_rows=2, comm_blocks=5, stream=0x5151))
step("ag2", lambda: tp.ag_gemm(comm, a, w, b, out=c, gathered=g, transfer="sm_copy", chunk_rows=2, comm_blocks=5, stream=0x5252))
step("ag_kn", lambda: tp.ag_gemm(comm, a, T(32, 16, ptr=0xB100), m=7, layout="kn", out=T(7, 16, ptr=0xC100), stream=7))
out["info"] = tp.ag_gemm_plan(comm, a, w, bias=True, m=7, out_dtype="float32", transfer="sm_copy", chunk_rows=2, comm_blocks=5).info
step("rs1", lambda: tp.gemm_rs(comm, T(7, 32, dtype="float16", ptr=0xA100), T(16, 32, dtype="float16", ptr=0xB200), out=T(3, 16, dtype="float16", ptr=0xC200), stream=9))
lib.stub_fail_next(6)
step("rs_timeout", lambda: tp.gemm_rs(comm, T(7, 32, dtype="float16", ptr=0xA100), T(16, 32, dtype="float16", ptr=0xB200), out=T(3, 16, dtype="float16", ptr=0xC200), stream=9))
step("rs_empty_shard", lambda: tp.gemm_rs(HostComm(rank=3, size=4, handle=0xC0FFEE), T(5, 32, ptr=0xA200), T(16, 32, ptr=0xB300), out=T(0, 16, ptr=0), stream=1))
step("refused1", lambda: tp.ag_gemm(comm, T(499, 32), w, m=999, out=T(999, 16), stream=0))
step("refused2", lambda: tp.ag_gemm(comm, T(499, 32), w, m=999, out=T(999, 16), stream=0))
out["cached"] = sorted(str(k) for k in comm._plan_cache)
out["left_allocs"] = [a.ptr for a in sorted(comm._allocs.values(), key=lambda a: a.seq)]
step("close", lambda: comm.close())
out["freed"] = comm.freed
out["warnings"] = [f"{w.category.__name__}: {w.message}" for w in seen]
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def stub_lib(tmp_path_factory):
    from loom import _lib
    tmp = tmp_path_factory.mktemp("stub")
    rest = tmp / "rest.c"  # every other function: a stand-in (compiled without loom.h's prototypes)
    rest.write_text("\n".join(f"int {n}(void) {{ return 0; }}" for n in _lib.PROTOTYPES if n not in _OWN))
    return compile_c(tmp, "libloom.so", _STUB, shared=True, extra=[str(rest)])


def _drive(so, env=None):
    r = run_python(_DRIVER.replace("TESTS", repr([str(REPO / "tests" / "python" / d) for d in ("tp", "")])),
                   {"LOOM_LIBRARY": str(so), **(env or {})})
    assert r.returncode == 0, r.stdout + r.stderr
    line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, r.stdout + r.stderr
    return json.loads(line[0][7:])


@pytest.fixture(scope="module")
def stub_run(stub_lib):
    return _drive(stub_lib, {"CUDA_MODULE_LOADING": None})


def test_ag_gemm_sends_libloom_the_description_pointers_and_stream(stub_run):
    s = stub_run["ag1"]
    assert s["result"] == "ok", s
    assert s["log"] == [
        "loom_plan_ag_gemm comm=0xc0ffee size_ok=1 m=7 n=16 k=32 ab=2 c=0 layout=1 bias=1 W=2 transfer=3 chunk=2 "
        "blocks=5",
        "loom_tp_plan_info plan=1 size_ok=1",
        f"loom_ag_gemm plan=1 a=0xa000 b=0xb000 c=0xc000 a_full={hex(0x7e0000000000 + 0x10000000 + 0x100)} "
        "bias=0xb1a5 stream=0x5151"]
    # the same layout again (m now from gathered): no new plan, the new stream
    assert stub_run["ag2"]["log"] == [stub_run["ag1"]["log"][2].replace("0x5151", "0x5252")]
    # layout kn, no bias, no gathered buffer, out bf16: a new plan; NULLs where nothing is passed
    assert stub_run["ag_kn"]["log"] == [
        "loom_plan_ag_gemm comm=0xc0ffee size_ok=1 m=7 n=16 k=32 ab=2 c=2 layout=0 bias=0 W=2 transfer=0 chunk=0 "
        "blocks=0",
        "loom_tp_plan_info plan=2 size_ok=1",
        "loom_ag_gemm plan=2 a=0xa000 b=0xb100 c=0xc100 a_full=(nil) bias=(nil) stream=0x7"]


def test_plan_info_is_the_libraries_answer(stub_run):
    from loom._structs import TpPlanInfo
    want = {"transfer": "copy_engine", "shard_rows": 4, "chunk_rows": 2, "comm_blocks": 3, "gemm_bn": 128,
            "gemm_grid": 129, "deterministic": True, "symmetric_bytes": 1024, "device_bytes": 64,
            "workspace_bytes": 32}
    info = stub_run["info"]
    assert {k: info.get(k) for k in want} == want
    assert set(info) == {f for f, _ in TpPlanInfo._fields_} - {"struct_size"}  # every field, by its C name


def test_gemm_rs_calls_and_a_failed_call_raises_the_codes_class(stub_run):
    assert stub_run["rs1"]["log"] == [
        "loom_plan_gemm_rs comm=0xc0ffee size_ok=1 m=7 n=16 k=32 ab=1 c=1 layout=1 bias=0 W=2 transfer=0 chunk=0 "
        "blocks=0",
        "loom_tp_plan_info plan=3 size_ok=1",
        "loom_gemm_rs plan=3 a=0xa100 b=0xb200 c=0xc200 bias=(nil) stream=0x9"]
    t = stub_run["rs_timeout"]
    assert t["log"] == [stub_run["rs1"]["log"][2]]  # the cached plan
    assert t["result"] == ("WaitTimeoutError code=6 function=loom_gemm_rs message=loom_gemm_rs: a device-side wait "
                           "timed out: rank 1 never signalled")
    # rank 3 of 4 with m = 5 owns no row: its empty output goes as NULL
    e = stub_run["rs_empty_shard"]
    assert e["result"] == "ok" and e["log"][-1] == "loom_gemm_rs plan=4 a=0xa200 b=0xb300 c=(nil) bias=(nil) stream=0x1"


def test_a_refused_plan_is_not_cached_and_is_asked_for_again(stub_run):
    for step in ("refused1", "refused2"):
        s = stub_run[step]
        assert s["result"] == ("UnsupportedError code=2 function=loom_plan_ag_gemm message=loom_plan_ag_gemm: "
                               "desc->transfer=LOOM_TP_SM_COPY needs every peer load/store reachable"), s
        assert len(s["log"]) == 1 and s["log"][0].startswith("loom_plan_ag_gemm ") and "m=999" in s["log"][0]
    assert len(stub_run["cached"]) == 3 and not any("999" in k for k in stub_run["cached"])


def test_closing_the_comm_destroys_every_plan_first(stub_run):
    log = stub_run["close"]["log"]
    assert stub_run["close"]["result"] == "ok"
    assert sorted(log[:-1]) == ["loom_plan_destroy plan=1", "loom_plan_destroy plan=2", "loom_plan_destroy plan=3"]
    assert log[-1] == "loom_comm_destroy comm=0xc0ffee"
    # no plan had a gathered buffer; the caller's symmetric tensors are freed, in allocation order (the same
    # collective order on every rank), before the comm
    assert stub_run["left_allocs"] and stub_run["freed"] == stub_run["left_allocs"]




def test_activation_is_checked_and_part_of_the_plan_key():
    comm = HostComm(rank=0, size=2, handle=0xC0FFEE)
    a, w = T(4, 32, ptr=0xA000), T(16, 32, ptr=0xB000)
    with pytest.raises(loom.InvalidArgumentError, match="activation='swish'"):
        tp.ag_gemm(comm, a, w, m=8, activation="swish")
    s1 = tp._ag_spec("f", comm, a, w, False, 8, "nk", "bfloat16", "auto", 0, 0)
    s2 = tp._ag_spec("f", comm, a, w, False, 8, "nk", "bfloat16", "auto", 0, 0, "gelu_tanh")
    assert s1.key != s2.key and s2.desc().activation == int(loom.Activation.GELU_TANH)
    assert s1.desc().activation == int(loom.Activation.NONE)
    with pytest.raises(loom.InvalidArgumentError, match="gemm_rs takes none"):
        tp.TpSpec(comm, "gemm_rs", 8, 16, 32, "bfloat16", "bfloat16", activation="relu")
