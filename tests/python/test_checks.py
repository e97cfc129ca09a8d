"""The binding's argument checks, on stand-in tensors (no torch needed).

A stand-in answers what the checks ask a torch tensor (dtype, shape,
device, is_contiguous, data_ptr); a call that passes the checks reaches
libloom with the stand-in's pointer, and libloom's answer comes back as an
exception too.
"""
from types import SimpleNamespace

import pytest

import loom
from loom import _checks, ops


class FakeDtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return "torch." + self.name


class FakeTensor:
    def __init__(self, shape, dtype="bfloat16", device=("cuda", 0), contiguous=True, ptr=0x7f0000000000):
        self.shape = tuple(shape)
        self.dtype = FakeDtype(dtype)
        self.device = SimpleNamespace(type=device[0], index=device[1])
        self._contiguous = contiguous
        self._ptr = ptr

    def __repr__(self):
        return f"FakeTensor({self.shape}, {self.dtype})"

    def is_contiguous(self):
        return self._contiguous

    def data_ptr(self):
        return self._ptr

    def dim(self):
        return len(self.shape)


def T(*shape, **kw):
    return FakeTensor(shape, **kw)


@pytest.mark.parametrize("kwargs, args, message", [
    ({}, (T(64, 32, dtype="float32"), T(32, 16)), "a has dtype torch.float32; expected torch.bfloat16 or torch.float16"),
    ({}, (T(64, 32), T(32, 16, dtype="float16")), "b has dtype torch.float16; expected torch.bfloat16 (must match a)"),
    ({}, (T(64, 32), T(16, 32)), "b has shape (16, 32); expected (k=32, n) with k from a (64, 32)"),
    ({"layout": "nk"}, (T(64, 32), T(32, 16)), "b has shape (32, 16); expected (n, k=32)"),
    ({"layout": "nt"}, (T(64, 32), T(32, 16)), "layout='nt'; expected 'kn'"),
    ({}, (T(64, 32, 2), T(32, 16)), "a has shape (64, 32, 2); expected 2 dimensions (m, k)"),
    ({}, (T(64, 32, device=("cpu", None)), T(32, 16)), "a is on device"),
    ({}, (T(64, 32), T(32, 16, device=("cuda", 1))), "b is on cuda:1, expected cuda:0 (must match a)"),
    ({}, (T(64, 32, contiguous=False), T(32, 16)), "a (shape (64, 32)) is not contiguous; pass a.contiguous()"),
    ({"out": T(64, 8)}, (T(64, 32), T(32, 16)), "out has shape (64, 8); expected (64, 16)"),
    ({"out": T(64, 16, dtype="float32"), "out_dtype": "bfloat16"}, (T(64, 32), T(32, 16)),
     "out has dtype torch.float32; expected torch.bfloat16"),
    ({"out_dtype": "int8"}, (T(64, 32), T(32, 16)), "out_dtype=torch.int8 is not supported"),
    ({"out": T(64, 16)}, (T(64, 32), T(32, 16), T(8)), "bias has shape (8,); expected (16,)"),
    ({"out": T(64, 16, dtype="float32")}, (T(64, 32), T(32, 16), T(16)),
     "bias has dtype torch.bfloat16; expected torch.float32 (the output dtype"),
])
def test_gemm_refuses_bad_tensors_naming_the_argument(kwargs, args, message):
    with pytest.raises(loom.InvalidArgumentError) as ei:
        ops.gemm(*args, stream=0, **kwargs)
    assert message in str(ei.value)
    assert str(ei.value).startswith("loom.gemm: ")
    assert ei.value.code == loom.errors.ERR_INVALID_ARGUMENT


@pytest.mark.parametrize("fn, args, message", [
    (loom.linear, (None, None), "loom.linear: x is None; expected a CUDA tensor"),
    (loom.linear, (T(4, 8), None), "loom.linear: weight is None; expected a CUDA tensor"),
    (loom.linear, ([1, 2], T(16, 8)), "loom.linear: x is a list, not a tensor"),
    (loom.linear, (T(4, 8), T(16, 8, dtype="float16")), "loom.linear: weight has dtype torch.float16; expected "
                                                       "torch.bfloat16"),
    (loom.linear, (T(4, 8), T(2, 16, 8)), "loom.linear: weight has shape (2, 16, 8); expected (*, *)"),
    (loom.linear, (T(4, 8, contiguous=False), T(16, 8)), "loom.linear: x (shape (4, 8)) is not contiguous"),
    (loom.linear, (T(), T(16, 8)), "loom.linear: x is a scalar"),
    (loom.gemm, (T(64, 32), None), "loom.gemm: b is None; expected a CUDA tensor"),
    (loom.gemm, (None, T(32, 16)), "loom.gemm: a is None; expected a CUDA tensor"),
])
def test_none_and_non_tensors_are_refused_as_loom_errors(fn, args, message):
    """Not an AttributeError or TypeError from deep inside: the argument, named."""
    with pytest.raises(loom.InvalidArgumentError) as ei:
        fn(*args, stream=0)
    assert str(ei.value).startswith(message), str(ei.value)


def test_gemm_that_passes_the_checks_reaches_libloom(lib):
    # n = 12: the binding has no rule of its own for it; libloom refuses
    with pytest.raises(loom.InvalidArgumentError, match=r"loom_gemm: n=12 must be a multiple of 8"):
        ops.gemm(T(64, 32), T(32, 12), out=T(64, 12), stream=0)
    # everything right: libloom gets as far as the device (none here)
    with pytest.raises(loom.LoomError) as ei:
        ops.gemm(T(64, 32), T(16, 32), layout="nk", out=T(64, 16, dtype="float32"), bias=T(16, dtype="float32"),
                 stream=0)
    assert ei.value.function == "loom_gemm"
    assert ei.value.code in (loom.errors.ERR_CUDA, loom.errors.ERR_INVALID_ARGUMENT)


def test_gemm_descriptions_are_cached_per_shape(lib):
    d1 = ops._gemm_desc(64, 16, 32, loom.DType.BF16, loom.DType.FP32, loom.Layout.NK, True)
    d2 = ops._gemm_desc(64, 16, 32, loom.DType.BF16, loom.DType.FP32, loom.Layout.NK, True)
    d3 = ops._gemm_desc(64, 16, 32, loom.DType.BF16, loom.DType.FP32, loom.Layout.NK, False)
    assert d1 is d2 and d1 is not d3
    assert (d1.m, d1.n, d1.k, d1.has_bias, d3.has_bias) == (64, 16, 32, 1, 0)
    assert d1.struct_size == 48


def test_check_tensor_wildcards_and_messages():
    assert _checks.check_tensor("f", "x", T(5, 7), shape=(None, 7)) == "bfloat16"
    with pytest.raises(loom.InvalidArgumentError, match=r"f: x has shape \(5, 7\); expected \(\*, 8\)"):
        _checks.check_tensor("f", "x", T(5, 7), shape=(None, 8))
    with pytest.raises(loom.InvalidArgumentError, match=r"expected \(3,\)"):
        _checks.check_tensor("f", "x", T(5), shape=(3,))
    with pytest.raises(loom.InvalidArgumentError, match="f: x is None"):
        _checks.check_tensor("f", "x", None)
    with pytest.raises(loom.InvalidArgumentError, match="f: x is a list, not a tensor"):
        _checks.check_tensor("f", "x", [1, 2])
    assert _checks.check_same_device("f", [("a", T(1)), ("b", None), ("c", T(2))]) == 0
    with pytest.raises(loom.InvalidArgumentError, match="f: c is on cuda:1 but a is on cuda:0"):
        _checks.check_same_device("f", [("a", T(1)), ("c", T(2, device=("cuda", 1)))])


def test_embedding_layout_checks():
    f = "loom.EmbeddingA2A"
    assert _checks.embedding_shapes(f, [3, 2], [10, 20, 30, 40, 50], 64, 256, 1) == (2, 5, 128, 90)
    assert _checks.embedding_shapes(f, [3, 2], [10, 20, 30, 40, 50], 64, 256, 0) == (3, 5, 128, 60)
    with pytest.raises(loom.InvalidArgumentError, match=r"rows has 4 entries; expected one per table, sum\(tables_per_rank\)=5"):
        _checks.embedding_shapes(f, [3, 2], [1, 2, 3, 4], 64, 256, 0)
    with pytest.raises(loom.InvalidArgumentError, match="global_batch=255 must be a positive multiple of the world size 2"):
        _checks.embedding_shapes(f, [3, 2], [1] * 5, 64, 255, 0)
    with pytest.raises(loom.InvalidArgumentError, match="holds no table"):
        _checks.embedding_shapes(f, [0, 0], [], 64, 256, 0)
    with pytest.raises(loom.InvalidArgumentError, match="negative"):
        _checks.embedding_shapes(f, [3, -1], [1, 1], 64, 256, 0)


def test_dtype_names():
    assert _checks.dtype_name(FakeDtype("bfloat16")) == "bfloat16"
    assert _checks.dtype_name("float16") == "float16"
    assert _checks.loom_dtype("bfloat16", "f", "x") == loom.DType.BF16
    with pytest.raises(loom.InvalidArgumentError, match="f: x=torch.float64 is not supported"):
        _checks.loom_dtype("float64", "f", "x")
