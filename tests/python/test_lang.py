"""The language from Python (loom.lang, no GPU): the paper's Figure 3 built
with the builder mirror is the graph its text parses to and prints as that
text; a schedule computes what the program computes; refusals and parse
errors come back as InvalidArgumentError with loom's message."""
import pytest

import loom
from conftest import REPO
from loom.lang import FP16, Program, Replicated, Sliced

FIG3 = """Tensor w(FP16, [H, H], Sliced(0), WORLD);
Tensor b(FP16, [H], Replicated, WORLD);
Tensor in(FP16, [B, S, H], Sliced(2), WORLD);
Tensor r(FP16, [B, S, H], Replicated, WORLD);
Var layer = MatMul(in, w);
Var sum = AllReduce("+", layer);
Var d = Dropout(sum + b, 0.1);
Var out = d + r;
Execute self_attention({w, in, b, r}, {out});
"""


def build_fig3():
    p = Program()
    w = p.tensor("w", FP16, "H, H", Sliced(0))
    b = p.tensor("b", FP16, "H", Replicated)
    inp = p.tensor("in", FP16, "B, S, H", Sliced(2))
    r = p.tensor("r", FP16, "B, S, H", Replicated)
    layer = p.var("layer", p.matmul(inp, w))
    s = p.var("sum", p.all_reduce(layer))
    d = p.var("d", p.dropout(s + b, 0.1))
    out = p.var("out", d + r)
    p.execute("self_attention", [w, inp, b, r], [out])
    return p


def test_python_builder_text_and_parser_make_the_same_graph(lib):
    built, parsed = build_fig3(), Program.parse(FIG3)
    assert built == parsed
    assert built.text() == FIG3
    assert "// fp16 [B, S, H] Local" in built.text(typed=True)


def test_a_schedule_computes_what_the_program_computes(lib):
    p = Program.parse((REPO / "examples" / "lang" / "adam.loom").read_text(), "adam.loom")
    q = p.schedule("best")
    assert not (p == q)
    for world in (1, 3, 8):
        assert p.compare(q, world, "N=20", seed=7) == 0.0
    assert len(p.interp("p", 3, "N=20")) == 20


def test_refusals_and_errors_carry_loom_messages(lib):
    p = build_fig3()
    with pytest.raises(loom.InvalidArgumentError, match="split: `d` is Dropout and no AllReduce uses it"):
        p.transform("(a, c) = split(d)")
    with pytest.raises(loom.InvalidArgumentError, match=r"x.loom:1:10: found identifier `FP8`"):
        Program.parse("Tensor x(FP8, [N], Replicated);", "x.loom")
