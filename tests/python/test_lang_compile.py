"""loom.lang.compile's host side (no GPU, no torch): the inputs a call
passes are checked against the plan's pieces by name before anything
reaches libloom (count, dtype, shape, device; None where this rank holds
nothing), and compile refuses what is no Program. The GPU side (compile,
call, torch.compile, CUDA graphs) is tests/python/gpu/test_lang_gpu.py."""
import pytest
from test_checks import FakeTensor

from loom import lang
from loom.errors import InvalidArgumentError

SPECS = [lang.IoSpec("w", "float16", (3, 8)), lang.IoSpec("in", "float16", (2, 3, 3)),
         lang.IoSpec("b", "float16", None)]


def test_inputs_are_checked_by_name_against_this_ranks_pieces():
    fn = "loom.lang.compile(`self_attention`)"
    lang.check_inputs(fn, SPECS, [FakeTensor((3, 8), "float16"), FakeTensor((2, 3, 3), "float16"), None], 0)
    with pytest.raises(InvalidArgumentError, match=r"2 tensors; the program takes 3 inputs \(w, in, b\)"):
        lang.check_inputs(fn, SPECS, [FakeTensor((3, 8), "float16"), None], 0)
    with pytest.raises(InvalidArgumentError, match=r"input 1 \(`in`\) has shape \(2, 3, 4\)"):
        lang.check_inputs(fn, SPECS, [FakeTensor((3, 8), "float16"), FakeTensor((2, 3, 4), "float16"), None], 0)
    with pytest.raises(InvalidArgumentError, match=r"input 0 \(`w`\) has dtype torch.bfloat16"):
        lang.check_inputs(fn, SPECS, [FakeTensor((3, 8)), FakeTensor((2, 3, 3), "float16"), None], 0)
    with pytest.raises(InvalidArgumentError, match=r"input 2 \(`b`\): this rank holds no piece of it; pass None"):
        lang.check_inputs(fn, SPECS, [FakeTensor((3, 8), "float16"), FakeTensor((2, 3, 3), "float16"),
                                      FakeTensor((8,), "float16")], 0)
    with pytest.raises(InvalidArgumentError, match=r"input 1 \(`in`\) is on cuda:1, expected cuda:0"):
        lang.check_inputs(fn, SPECS, [FakeTensor((3, 8), "float16"), FakeTensor((2, 3, 3), "float16", ("cuda", 1)),
                                      None], 0)


def test_compile_takes_a_program():
    with pytest.raises(InvalidArgumentError, match="program is a str; expected a loom.lang.Program"):
        lang.compile("Tensor x(FP32, [N], Local);", comm=None, N=4)
