"""loom.gemm / loom.linear on one GPU against torch in fp32 (fresh random
inputs, outputs poisoned with NaN before the call so an unwritten element
shows)."""
import pytest
import torch

import loom

DEV = "cuda:0"


def _rand(*shape, dtype=torch.bfloat16, device=DEV):
    return (torch.rand(*shape, device=device) * 2 - 1).to(dtype)


def _tol(dtype):
    return {torch.float32: 2e-3, torch.float16: 5e-3, torch.bfloat16: 2e-2}[dtype]


def _close(y, ref, dtype):
    err = ((y.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()
    assert err < _tol(dtype), f"relative error {err} (dtype {dtype})"
    assert not torch.isnan(y).any(), "an element was left unwritten"


@pytest.mark.parametrize("m,n,k", [(128, 256, 512), (77, 64, 96), (1, 128, 64), (1024, 1024, 512)])
@pytest.mark.parametrize("ab", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("c", [None, torch.float32])
@pytest.mark.parametrize("layout", ["kn", "nk"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_gemm_matches_torch(m, n, k, ab, c, layout, with_bias):
    torch.manual_seed(m * 7 + n + k)
    a = _rand(m, k, dtype=ab)
    b = _rand(k, n, dtype=ab) if layout == "kn" else _rand(n, k, dtype=ab)
    cd = c or ab
    bias = _rand(n, dtype=cd) if with_bias else None
    out = torch.full((m, n), float("nan"), dtype=cd, device=DEV)
    y = loom.gemm(a, b, bias, layout=layout, out=out)
    assert y is out
    ref = a.float() @ (b.float() if layout == "kn" else b.float().t())
    if bias is not None:
        ref = ref + bias.float()
    torch.cuda.synchronize()
    _close(y, ref, cd)
    y2 = loom.gemm(a, b, bias, layout=layout, out_dtype=c)  # allocating form
    assert y2.dtype == cd and y2.shape == (m, n)
    _close(y2, ref, cd)


def test_linear_matches_F_linear():
    x = _rand(4, 33, 256)
    w = _rand(512, 256)
    bias = _rand(512)
    y = loom.linear(x, w, bias)
    ref = torch.nn.functional.linear(x.float(), w.float(), bias.float())
    assert y.shape == (4, 33, 512)
    _close(y, ref, torch.bfloat16)


def test_gemm_runs_on_the_current_stream_and_in_a_cuda_graph():
    a, b = _rand(256, 512), _rand(512, 256)
    ref = a.float() @ b.float()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = loom.gemm(a, b)
    s.synchronize()
    _close(y, ref, torch.bfloat16)
    # capture: a launch on any other stream than the capturing one fails the capture
    out = torch.full((256, 256), float("nan"), dtype=torch.bfloat16, device=DEV)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        loom.gemm(a, b, out=out)
    torch.cuda.synchronize()
    assert torch.isnan(out).all(), "capture ran the GEMM"
    g.replay()
    torch.cuda.synchronize()
    _close(out, ref, torch.bfloat16)
    a.copy_(_rand(256, 512))  # replay reads the new inputs
    g.replay()
    torch.cuda.synchronize()
    _close(out, a.float() @ b.float(), torch.bfloat16)


def test_gemm_refusals_on_real_tensors():
    a, b = _rand(64, 128), _rand(128, 64)
    with pytest.raises(loom.InvalidArgumentError, match="a is on device cpu"):
        loom.gemm(a.cpu(), b)
    with pytest.raises(loom.InvalidArgumentError, match=r"b \(shape \(128, 64\)\) is not contiguous"):
        loom.gemm(a, _rand(64, 128).t())
    with pytest.raises(loom.InvalidArgumentError, match="b has dtype torch.float16"):
        loom.gemm(a, b.half())
    # 2 bytes past a 16-byte boundary: libloom's alignment rule, in its words
    big = _rand(64 * 128 + 8)
    with pytest.raises(loom.InvalidArgumentError, match=r"loom_gemm: a=0x[0-9a-f]+ is not 16-byte aligned"):
        loom.gemm(big[1:1 + 64 * 128].view(64, 128), b)


@pytest.mark.two_gpus
def test_gemm_on_another_device_than_the_current_one():
    torch.cuda.set_device(0)
    a, b = _rand(128, 256, device="cuda:1"), _rand(256, 128, device="cuda:1")
    y = loom.gemm(a, b)
    assert y.device == torch.device("cuda:1")
    assert torch.cuda.current_device() == 0
    _close(y, a.float() @ b.float(), torch.bfloat16)
    with pytest.raises(loom.InvalidArgumentError, match="b is on cuda:0, expected cuda:1"):
        loom.gemm(a, b.to("cuda:0"))
