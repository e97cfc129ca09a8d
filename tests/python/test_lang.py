"""The language from Python (loom.lang, no GPU): the paper's Figure 3 built
with the builder mirror is the graph its text parses to and prints as that
text; a schedule computes what the program computes; refusals and parse
errors come back as InvalidArgumentError with loom's message; a value of
another program is refused; the reductions are .loom's; an output keeps
its name through schedules; `loom schedules` lists what it counts."""
import re
import subprocess

import pytest

import loom
from conftest import REPO, libloom_path
from loom.lang import FP16, FP32, Local, Program, Replicated, Sliced

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


def test_a_value_of_another_program_is_refused_naming_both(lib):
    p, q = build_fig3(), Program()
    x = q.tensor("x", FP16, "B, S, H", Replicated)
    b = p.tensor("b2", FP16, "H", Replicated)
    with pytest.raises(loom.InvalidArgumentError,
                       match=r"operand 1 is a value of program #\d+, not of `self_attention`"):
        b + x
    with pytest.raises(loom.InvalidArgumentError, match=r"`y` is a value of `self_attention`, not of program #\d+"):
        q.var("y", b * 2)
    with pytest.raises(loom.InvalidArgumentError, match=r"output 0 is a value of `self_attention`, not of program"):
        q.execute("f", [x], [b])


def test_reductions_are_the_loom_ones(lib):
    text = """Tensor g(FP32, [N], Local, WORLD);
Var hi = AllReduce("max", g);
Var lo = ReduceScatter("min", g);
Execute f({g}, {hi, lo});
"""
    p = Program()
    g = p.tensor("g", FP32, "N", Local)
    hi = p.var("hi", p.all_reduce(g, reduce="max"))
    lo = p.var("lo", p.reduce_scatter(g, reduce="min"))
    p.execute("f", [g], [hi, lo])
    assert p == Program.parse(text) and p.text() == text
    q = Program.parse(text.replace("{hi, lo}", "{hi, lo, g}"))  # g's three Local copies come back too
    copies = q.interp("#2", 3, "N=5")
    ranks = [copies[5 * r:5 * r + 5] for r in range(3)]
    assert q.interp("hi", 3, "N=5") == [max(c) for c in zip(*ranks)]
    assert q.interp("lo", 3, "N=5") == [min(c) for c in zip(*ranks)]
    with pytest.raises(loom.InvalidArgumentError, match=r"reduce='avg': expected \"\+\", \"max\" or \"min\""):
        p.all_reduce(g, reduce="avg")


def test_an_output_keeps_its_name_through_schedules(lib):
    p = Program.parse((REPO / "examples" / "lang" / "model_parallel.loom").read_text(), "model_parallel.loom")
    for name in ("best", "reduce_broadcast"):
        q = p.schedule(name)
        assert "agOut" in q.text() or "bcOut" in q.text()
        assert q.interp("out", 3, "B=2,S=3,H=8") == p.interp("out", 3, "B=2,S=3,H=8")


def test_loom_schedules_lists_what_it_counts_with_the_refused_one(tmp_path):
    tool = libloom_path().parent.parent / "bin" / "loom"
    if not tool.exists():
        pytest.fail(f"{tool} missing: run `make` first (make test does)")
    prog = tmp_path / "mp.loom"
    prog.write_text((REPO / "examples" / "lang" / "model_parallel.loom").read_text() +
                    "Schedule wrong {\n  k = fuse(d, out);\n  (a, c) = split(d);\n}\n")
    out = subprocess.run([str(tool), "schedules", str(prog), "--depth", "2"], capture_output=True, text=True,
                         check=True).stdout
    header = re.match(r".*: (\d+) schedules \(the unscheduled program, 3 of the program's own, 1 of them refused", out)
    assert header, out[:400]
    rows = re.findall(r"^#(\d+) ", out, re.M)
    assert len(rows) == int(header.group(1)) and rows[-1] == header.group(1)
    assert re.search(r"^#\d+ wrong \(the program's\): refused: .*mp.loom:\d+:3: split: `d` is Dropout", out, re.M)
