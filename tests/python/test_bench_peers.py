"""loom-bench's PyTorch peers (bench/peers), without a GPU or torch.

What loom-bench relies on: a peer runs exactly the shapes loom-bench passes
(--shapes / --sizes / --cases parse into those shapes and nothing else),
each JSON row carries its complete shape and names it in shape_keys, and
the timing rule of peer_timing.time_variants: N calls captured in one CUDA
graph and timed per call where the op can be captured, call by call
("eager", Python's host time included) where it cannot or where any rank
could not, on a stand-in of torch that keeps a simulated device clock.
The C side's pairing of these rows is tested in
tests/host/bench/test_bench_pairing.c.
"""
import argparse
import contextlib
import importlib
import itertools
import subprocess
import sys
import types

import pytest
from conftest import REPO, compile_c

PEERS = REPO / "bench" / "peers"
sys.path.insert(0, str(PEERS))
import peer_timing as pt  # noqa: E402


def parsed(module, argv):
    """The arguments a peer's main parses from argv (its ranks not spawned)."""
    mod = importlib.import_module(module)
    seen = {}

    def no_spawn(script, worker, args, *a, **k):
        seen["args"] = args
        return 0

    saved, mod.spawn_ranks = mod.spawn_ranks, no_spawn
    saved_argv, sys.argv = sys.argv, [module] + argv
    try:
        assert mod.main() == 0
    finally:
        mod.spawn_ranks, sys.argv = saved, saved_argv
    return mod, seen["args"]


def test_tuples_parse_exactly_or_refuse():
    parse = pt.tuples(str, int, int, int)
    assert parse("llama3-70b:64:3584:8192,gpt3-175b:128:6144:12288") == [
        ("llama3-70b", 64, 3584, 8192), ("gpt3-175b", 128, 6144, 12288)]
    for bad in ("llama3-70b:64:3584", "llama3-70b:64:3584:8192:1", "llama3-70b:x:3584:8192"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)
    assert pt.tuples(int, int, sep="x")("4096x64") == [(4096, 64)]


def test_tp_peer_runs_the_given_shapes_and_names_n():
    mod, args = parsed("tp_torch", ["--op", "ag_gemm", "--world", "2", "--shapes", "llama3-70b:64:3584:8192"])
    assert args.shapes == [("llama3-70b", 64, 3584, 8192)]
    row = mod.shape_fields(args.op, *args.shapes[0], 2)
    assert row == {"op": "ag_gemm", "model": "llama3-70b", "m": 64, "n": 3584, "k": 8192, "world": 2, "dtype": "bf16"}
    # the defaults split the weights --tp ways, not world ways (the 14336-for-3584 mix-up)
    _, args = parsed("tp_torch", ["--op", "ag_gemm", "--tp", "8", "--model", "llama", "--m", "64"])
    assert mod.default_shapes(args, 2) == [("llama3-70b", 64, 28672 // 8, 8192)]
    _, args = parsed("tp_torch", ["--op", "gemm_rs", "--model", "llama", "--m", "64"])
    assert mod.default_shapes(args, 2) == [("llama3-70b", 64, 8192, 28672 // 2)]


def test_every_peer_parses_loom_benchs_lists():
    _, args = parsed("coll_torch", ["--sizes", "4096,16384"])
    assert args.sizes == [(4096,), (16384,)]
    _, args = parsed("gemm_ar_torch", ["--shapes", "mlp:8:8192:3072:3072"])
    assert args.shapes == [("mlp", 8, 8192, 3072, 3072)]
    _, args = parsed("embedding_torch", ["--shapes", "1024x64,4096x128", "--variable", "--zipf", "1.05"])
    assert args.shapes == [(1024, 64), (4096, 128)] and args.variable and args.zipf == 1.05
    mod, args = parsed("optim_torch", ["--op", "lamb", "--cases", "1048576,1000,bert", "--dtypes", "mixed"])
    assert args.cases == [(1 << 20,), (1000,), ("bert",)] and args.dtypes == [("mixed",)]
    assert [mod.case_name(c) for (c,) in args.cases] == ["2^20", "1000", "bert"]
    with pytest.raises(SystemExit):
        parsed("optim_torch", ["--op", "adam", "--dtypes", "fp16"])
    mod, args = parsed("lang_torch", ["--cases", "ar_norm/R=1024/C=4096,adam/N=65537,gemm_bias/M=64/N=64/K=64"])
    assert args.cases == [("ar_norm", "R=1024,C=4096"), ("adam", "N=65537"), ("gemm_bias", "M=64,N=64,K=64")]
    assert mod.shape_fields("ar_norm", "R=1024,C=4096", 1) == {"op": "ar_norm", "shape": "R=1024,C=4096",
                                                               "dtype": "bf16", "world": 1}
    mod, args = parsed("lang_torch", ["--cases", "mp_layer/B=8/S=1024/H=3072,mp_layer_bf16/B=8/S=1024/H=8192"])
    assert args.cases == [("mp_layer", "B=8,S=1024,H=3072"), ("mp_layer_bf16", "B=8,S=1024,H=8192")]
    assert mod.shape_fields("mp_layer_b16", "B=16,S=1024,H=3072", 2)["dtype"] == "fp16"
    assert mod.shape_fields("mp_layer_bf16", "B=8,S=1024,H=8192", 2)["dtype"] == "bf16"
    for bad in ("adam/M=5", "lamb/N=0", "gemm_bias/M=1/N=2", "sgd/N=4", "mp_layer/B=8/S=1024"):
        with pytest.raises(SystemExit):
            parsed("lang_torch", ["--cases", bad])


def test_rows_carry_their_complete_shape():
    emb = importlib.import_module("embedding_torch")
    ns = types.SimpleNamespace(dim=256, pooling=32, rows=100000, variable=True, zipf=1.05)
    shapes = {
        "tp": importlib.import_module("tp_torch").shape_fields("gemm_rs", "gpt3-175b", 512, 12288, 24576, 2),
        "gemm_ar": importlib.import_module("gemm_ar_torch").shape_fields("attn", 8, 8192, 3072, 1536, 2),
        "embedding": emb.shape_fields(ns, 4096, 64, 2),
        "optim": importlib.import_module("optim_torch").shape_fields("adam", "bert", True, 2),
    }
    assert shapes["embedding"]["bags"] == "variable" and shapes["embedding"]["zipf"] == 1.05
    assert shapes["optim"]["tensors"] == 360 and shapes["optim"]["dtype"] == "bf16+fp32"
    for shape in shapes.values():
        rows = pt.variant_rows(shape, ["a", "b"], [(12.345, pt.GRAPH), (None, pt.NONE)])
        assert [r["variant"] for r in rows] == ["a", "b"]
        for r in rows:
            assert {k: r[k] for k in shape} == shape
            assert r["shape_keys"].split(",") == list(shape)
        assert rows[0]["us"] == 12.35 and rows[0]["timing"] == "graph"
        assert rows[1]["us"] is None and rows[1]["timing"] == "none"
    coll = importlib.import_module("coll_torch")
    rows = coll.rows_of(4096, 2, [(1.0, pt.GRAPH)] * 4)
    assert [r["variant"] for r in rows] == coll.VARIANTS
    assert "cols" not in rows[0] and rows[3]["cols"] == 2048 and rows[3]["shape_keys"].endswith(",cols")
    assert rows[0]["count"] == 2048


class FakeTorch:
    """torch, as far as time_variants uses it: a device clock that ops
    advance, events that read it, CUDA graphs that record calls and replay
    their device cost (no host cost), and all-reduces where another rank
    may report a failed capture."""

    def __init__(self):
        self.clock, self.graph_now, self.other_rank_fails = 0.0, None, False
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = fake.clock

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return (other.t - self.t) / 1000.0  # ms

        class Graph:
            def __init__(self):
                self.calls = []

            def replay(self):
                for op in self.calls:
                    op.device()

        @contextlib.contextmanager
        def graph(g, capture_error_mode="global"):
            assert capture_error_mode == "thread_local"  # PyTorch's NCCL watchdog may go on
            fake.graph_now = g
            try:
                yield
            finally:
                fake.graph_now = None

        class Stream:
            def wait_stream(self, s):
                pass

        class Tensor:
            def __init__(self, v):
                self.v = v

            def item(self):
                return self.v[0]

            def tolist(self):
                return self.v

        def all_reduce(t, op=None):
            if op == "min" and fake.other_rank_fails:
                t.v = [0]

        self.cuda = types.SimpleNamespace(Event=Event, CUDAGraph=Graph, graph=graph, Stream=Stream,
                                          synchronize=lambda: None, current_stream=Stream,
                                          stream=lambda s: contextlib.nullcontext())
        self.tensor = lambda v, device=None, dtype=None: Tensor(v)
        self.int32 = self.float64 = None
        self.dist = types.SimpleNamespace(barrier=lambda: None, all_reduce=all_reduce,
                                          ReduceOp=types.SimpleNamespace(MIN="min", MAX="max"))

    def op(self, device_us, host_us, capturable=True):
        """An operation of device_us on the GPU and host_us of Python per call."""
        fake = self

        def call():
            if fake.graph_now is not None:
                if not capturable:
                    raise RuntimeError("operation not permitted when stream is capturing")
                fake.graph_now.calls.append(call)
                return
            fake.clock += host_us  # eager: the GPU waits for the host between the events
            call.device()

        def device():
            fake.clock += device_us
        call.device = device
        return call


def test_graph_timing_excludes_host_time_and_falls_back_eagerly():
    t = FakeTorch()
    args = types.SimpleNamespace(eager=False, graph_calls=16, warmup=2, reps=5)
    said = []
    got = pt.time_variants(t, t.dist, [t.op(10, 40), t.op(7, 40, capturable=False)], args, ["nccl", "fused"],
                           said.append)
    assert got == [(10.0, pt.GRAPH), (47.0, pt.EAGER)]
    assert len(said) == 1 and said[0].startswith("fused: not captured")
    t.other_rank_fails = True  # every rank uses its graph, or none does
    assert pt.time_variants(t, t.dist, [t.op(10, 40)], args, ["nccl"], said.append) == [(50.0, pt.EAGER)]
    t.other_rank_fails = False
    args.eager = True
    assert pt.time_variants(t, t.dist, [t.op(10, 40)], args, ["nccl"], said.append) == [(50.0, pt.EAGER)]


def test_a_peer_without_torch_says_so_and_exits_2():
    try:
        import torch  # noqa: F401
        pytest.skip("torch is installed here: the no-torch exit is not reachable")
    except ImportError:
        pass
    for argv in (["tp_torch.py", "--op", "ag_gemm", "--shapes", "llama3-70b:64:3584:8192"],
                 ["coll_torch.py", "--sizes", "4096"], ["optim_torch.py", "--op", "adam", "--cases", "bert"],
                 ["lang_torch.py", "--cases", "adam/N=4096"],
                 ["moe_torch.py", "--shapes", "Mixtral-8x7B:4096:8:2:128:uniform"],
                 ["gemm_torch.py", "--weights", "8192:8192", "--ms", "1,64"],
                 ["grouped_torch.py", "--models", "Mixtral-8x7B:4096:8:2:14336", "--tokens", "64"]):
        r = subprocess.run([sys.executable, str(PEERS / argv[0]), *argv[1:]], capture_output=True, text=True)
        assert r.returncode == 2 and "needs torch" in r.stderr, (argv, r.returncode, r.stderr)


def test_moe_peer_parses_its_shapes_and_routes_as_loom_bench(tmp_path):
    """moe_torch.py runs loom-bench's exact shapes and draws the same expert
    ids as support/moe_routing.h (built here from the header with cc): both
    sides move the same rows."""
    _, args = parsed("moe_torch", ["--shapes", "Mixtral-8x7B:4096:8:2:128:uniform,DeepSeek-V3:7168:256:8:4096:zipf"])
    assert args.shapes == [("Mixtral-8x7B", 4096, 8, 2, 128, "uniform", 0),
                           ("DeepSeek-V3", 7168, 256, 8, 4096, "zipf", 0)]
    _, args = parsed("moe_torch", ["--layer", "--shapes", "Qwen3-30B-A3B:2048:128:8:128:zipf:768"])
    assert args.layer and args.shapes == [("Qwen3-30B-A3B", 2048, 128, 8, 128, "zipf", 768)]
    src = tmp_path / "route.c"
    src.write_text('#include <stdio.h>\n#include <stdlib.h>\n#include "support/moe_routing.h"\n'
                   "int main(int c, char **v) {\n"
                   "  int kind = atoi(v[1]), rank = atoi(v[2]), T = atoi(v[3]), E = atoi(v[4]), k = atoi(v[5]);\n"
                   "  int32_t *ids = malloc(sizeof *ids * T * k); float *w = malloc(sizeof *w * T * k);\n"
                   "  if (loom_route_make((loom_route_kind_t)kind, 0x6d6f65ull, rank, 0, T, E, k, 1.2, ids, w)) return 1;\n"
                   '  for (int i = 0; i < T * k; ++i) printf("%d ", ids[i]);\n  return 0;\n}\n')
    exe = tmp_path / "route"
    r = subprocess.run(["cc", "-O1", f"-I{REPO}", "-o", str(exe), str(src), "-lm"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"no C compiler to build the C side: {r.stderr[:200]}")
    mod = importlib.import_module("moe_torch")
    for kind, name in ((0, "uniform"), (1, "zipf"), (2, "skew")):
        for rank, T, E, k in ((0, 50, 8, 2), (1, 40, 128, 8), (1, 33, 256, 8)):
            out = subprocess.run([str(exe), str(kind), str(rank), str(T), str(E), str(k)], capture_output=True,
                                 text=True, check=True).stdout
            assert [int(x) for x in out.split()] == mod.route_ids(name, mod.MOE_SEED, rank, 0, T, E, k), (name, rank)
    assert [mod.expert_rank(6, 4, e) for e in range(6)] == [0, 0, 1, 1, 2, 3]


def test_gemm_peer_runs_loom_benchs_gemms_in_their_variants(tmp_path):
    """gemm_torch.py runs every (m, n, k) of the weights and m list
    loom-bench passes, each in the set's variant drawn as
    loom__gemm_shape_variant draws it (src/gemm/gemm_shapes.h, built here
    with cc) for every weight of every group; its rows carry the complete
    shape loom-bench gemm pairs by (op, m, n, k, dtype, layout, bias)."""
    from conftest import compile_c
    mod, args = parsed("gemm_torch", ["--weights", "8192:8192,1408:2048", "--ms", "1,1000,8192"])
    assert args.weights == [(8192, 8192), (1408, 2048)] and args.ms == [1, 1000, 8192]
    assert mod.selection(args) == ([(8192, 8192), (1408, 2048)], [1, 1000, 8192])
    _, args = parsed("gemm_torch", [])
    assert mod.selection(args) == (mod.DEFAULT_WEIGHTS, mod.DEFAULT_MS)
    for bad in (["--weights", "8192:8190"], ["--weights", "8192"], ["--ms", "0,8"], ["--ms", "x"]):
        with pytest.raises(SystemExit):
            parsed("gemm_torch", bad)
    shape = mod.shape_fields(1000, 8192, 8192)
    assert list(shape) == ["op", "m", "n", "k", "dtype", "layout", "bias"] and shape["op"] == "gemm"
    rows = pt.variant_rows(shape, mod.VARIANTS, [(12.5, pt.GRAPH)])
    assert rows[0]["variant"] == "matmul" and rows[0]["shape_keys"] == "op,m,n,k,dtype,layout,bias"
    exe = compile_c(tmp_path, "variants", r"""
        #include <stdio.h>
        #include "gemm/gemm_shapes.h"
        int main(void) {
          static const int groups[] = {-1, 2};
          loom_gemm_weight_t w[512];
          for (int g = 0; g < 2; ++g) {
            const int nw = loom__gemm_weights(groups[g], w, 512);
            for (int i = 0; i < nw; ++i)
              for (int j = 0; j < LOOM_GEMM_SHAPE_NMS; ++j) {
                const loom_gemm_desc_t d = loom__gemm_shape_variant(loom_gemm_shape_ms[j], w[i].n, w[i].k);
                printf("%lld %lld %lld %s %s %d\n", (long long)d.m, (long long)d.n, (long long)d.k,
                       d.ab_type == LOOM_FP16 ? "fp16" : "bf16", d.b_layout == LOOM_B_KN ? "KN" : "NK", d.has_bias);
              }
          }
          return 0;
        }
        """, extra=[f"-I{REPO / 'src'}"])
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    seen = set()
    for line in filter(None, lines):
        m, n, k, dtype, layout, bias = line.split()
        got = mod.shape_fields(int(m), int(n), int(k))
        assert (got["dtype"], got["layout"], got["bias"]) == (dtype, layout, int(bias)), line
        seen.add((dtype, layout, int(bias)))
    assert len(lines) > 4000 and len(seen) == 8


def test_gemm_peer_rotates_its_inputs_like_loom():
    """Copies: powers of two, 4 x L2 between two uses of one copy where the
    budget allows (at most 32); calls per graph: a multiple of the copies
    (no copy twice in a row across replays), about 1 ms per replay, at most
    --graph-calls unless the copies need more."""
    mod = importlib.import_module("gemm_torch")
    l2 = 50 << 20
    assert mod.pow2_copies(1 << 30, 24 << 30, l2) == 1          # a big weight: one copy
    assert mod.pow2_copies(16 << 20, 24 << 30, l2) == 16        # 13 wanted -> 16
    assert mod.pow2_copies(1 << 10, 24 << 30, l2) == 32         # the cap
    assert mod.pow2_copies(16 << 20, 100 << 20, l2) == 4        # the budget: 6 fit -> 4
    assert mod.pow2_copies(0, 1, l2) == 1
    for t_us in (1.0, 5.0, 70.0, 400.0, 5000.0):
        for ring in (1, 2, 8, 32):
            g = mod.graph_calls(t_us, ring, 16)
            assert g % ring == 0 and g >= ring and g <= max(16, ring)
            turns = [(j % g) % ring for j in range(3 * g)]  # replay after replay
            assert ring == 1 or all(a != b for a, b in zip(turns, turns[1:]))
    assert mod.graph_calls(5000.0, 1, 16) == 1 and mod.graph_calls(5.0, 1, 16) == 16
    assert mod.graph_calls(250.0, 1, 16) == 4


def test_grouped_peer_runs_loom_benchs_product_in_its_order():
    mod, args = parsed("grouped_torch", ["--models", "Mixtral-8x7B:4096:8:2:14336,OLMoE-1B-7B:2048:64:8:1024",
                                         "--gemms", "gate_up,down", "--tokens", "1,64", "--routings", "uniform,zipf"])
    got = [(m[0], g, t, r) for m, g, t, r in mod.cases(args)]
    assert len(got) == 16 and got[:3] == [("Mixtral-8x7B", "gate_up", 1, "uniform"),
                                          ("Mixtral-8x7B", "gate_up", 1, "zipf"),
                                          ("Mixtral-8x7B", "gate_up", 64, "uniform")]
    assert got[4] == ("Mixtral-8x7B", "down", 1, "uniform") and got[8][0] == "OLMoE-1B-7B"
    assert args.world == 1 and mod.gemm_dims("gate_up", 4096, 14336) == (28672, 4096)
    assert mod.gemm_dims("down", 4096, 14336) == (4096, 14336)
    _, args = parsed("grouped_torch", ["--models", "gpt-oss-120b:2880:128:4:2880"])
    assert args.gemms == ["gate_up", "down"] and args.routings == ["uniform", "zipf"]
    assert args.tokens == [1, 8, 64, 512, 1024, 2048, 8192]
    for bad in (["--gemms", "up"], ["--routings", "skew"], ["--tokens", "0"], ["--tokens", "x"]):
        with pytest.raises(SystemExit):
            parsed("grouped_torch", ["--models", "gpt-oss-120b:2880:128:4:2880", *bad])
    assert mod.rotation_sets(50 << 20, 1e9, 50 << 20, 1e12) == 4
    assert mod.rotation_sets(1000, 1e3, 50 << 20, 1e12) == mod.MAX_SETS == 16
    assert mod.rotation_sets(50 << 20, 1e9, 50 << 20, 2.5e9) == 2


def test_grouped_peer_agrees_with_loom_benchs_c_side(tmp_path):
    """support/grouped_cases.c (built here with cc) and grouped_torch.py: the
    same argument list, rows per expert, input sets and complete shape for
    every model at T = 1 and 64, both GEMMs and routings."""
    exe = compile_c(tmp_path, "grouped", f"""
        #include <stdio.h>
        #include "support/grouped_cases.h"
        int main(void) {{
          loom_grouped_sel_t s; loom_grouped_case_t c[512]; char buf[1024];
          loom_grouped_sel_init(&s); s.tokens = 64;
          if (loom_grouped_peer_args(&s, buf, sizeof buf)) return 1;
          printf("%s\\n", buf);
          for (int t = 0; t < 2; ++t) {{
            s.tokens = t ? 64 : 1;
            const int n = loom_grouped_cases(&s, c, 512);
            for (int i = 0; i < n; ++i) {{
              int64_t off[257], hot = 0; int active = 0;
              if (loom_grouped_offsets(&c[i], 0x6d6f65ull, off, &active, &hot)) return 1;
              const int sets = loom_grouped_sets(loom_grouped_touched_bytes(&c[i], active),
                                                 loom_grouped_set_bytes(&c[i]), 50.0 * (1 << 20), 2e9);
              loom_bench_shape_t p; loom_grouped_pair_shape(&c[i], hot, &p);
              printf("%d", sets);
              for (int e = 0; e <= loom_grouped_models[c[i].model].experts; ++e) printf(" %lld", (long long)off[e]);
              for (int f = 0; f < p.n; ++f) printf(" %s=%s", p.key[f], p.val[f]);
              printf("\\n");
            }}
          }}
          return 0;
        }}
    """, extra=[f"-I{REPO}", str(REPO / "support" / "grouped_cases.c"), str(REPO / "support" / "bench_pair.c"), "-lm"])
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    mod, args = parsed("grouped_torch", out[0].split())
    lines = iter(out[1:])
    for T in (1, 64):
        args.tokens = [T]
        for (name, H, E, k, F), gemm, t, route in mod.cases(args):
            counts = mod.expert_rows(route, t, E, k)
            n, kk = mod.gemm_dims(gemm, H, F)
            active = sum(1 for x in counts if x)
            sets = mod.rotation_sets(mod.touched_bytes(t * k, n, kk, active), mod.set_bytes(t * k, n, kk, E),
                                     50 << 20, 2e9)
            shape = mod.shape_fields(name, gemm, t, route, E, k, n, kk, max(counts))
            want = " ".join([str(sets), "0", *(str(x) for x in itertools.accumulate(counts)),
                             *(f"{key}={val}" for key, val in shape.items())])
            assert next(lines) == want, (name, gemm, t, route)
    assert next(lines, None) is None


class FakeGroupedTorch(types.ModuleType):
    """torch, as far as grouped_torch.worker uses it: tensors that carry
    their shapes only, torch._grouped_mm checking its operands' shapes."""

    class T:
        def __init__(self, shape):
            self.shape = tuple(shape)

        def uniform_(self, *a, **k):
            return self

        def transpose(self, i, j):
            s = list(self.shape)
            s[i], s[j] = s[j], s[i]
            return FakeGroupedTorch.T(s)

        def __getitem__(self, idx):
            if isinstance(idx, int):
                return FakeGroupedTorch.T(self.shape[1:])
            return FakeGroupedTorch.T((len(range(*idx.indices(self.shape[0]))),) + self.shape[1:])

        def float(self):
            return self

        def t(self):
            return FakeGroupedTorch.T(self.shape[::-1])

        def __matmul__(self, o):
            assert self.shape[1] == o.shape[0]
            return FakeGroupedTorch.T((self.shape[0], o.shape[1]))

        def __sub__(self, o):
            assert self.shape == o.shape
            return self

        def abs(self):
            return self

        def max(self):
            return types.SimpleNamespace(item=lambda: 0.0)

    def __init__(self):
        super().__init__("torch")
        self.calls = []
        T = FakeGroupedTorch.T
        self.__version__, self.bfloat16, self.int32 = "fake", "bf16", "int32"
        self.empty = lambda *s, device=None, dtype=None: T(s)
        self.tensor = lambda v, device=None, dtype=None: T((len(v),))
        self.Generator = lambda device=None: types.SimpleNamespace(manual_seed=lambda s: None)
        self.cuda = types.SimpleNamespace(get_device_properties=lambda i: types.SimpleNamespace(L2_cache_size=50 << 20),
                                          mem_get_info=lambda: (4e9, 141e9), empty_cache=lambda: None,
                                          get_device_name=lambda i: "fake")
        self.distributed = types.ModuleType("torch.distributed")
        self.distributed.destroy_process_group = lambda: None

    def _grouped_mm(self, a, b, offs=None):
        assert len(a.shape) == 2 and len(b.shape) == 3 and a.shape[1] == b.shape[1] and offs.shape == (b.shape[0],)
        self.calls.append(a.shape[0])
        return FakeGroupedTorch.T((a.shape[0], b.shape[2]))


def test_grouped_peer_rows_pair_with_loom_benchs_rows(tmp_path, monkeypatch):
    """grouped_torch.worker on a stand-in of torch (shapes only): one row per
    case in loom-bench's order, each pairing with loom-bench's row of the
    same case (support/bench_pair.c, built here), input sets rotated."""
    fake = FakeGroupedTorch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setitem(sys.modules, "torch.distributed", fake.distributed)
    mod, args = parsed("grouped_torch", ["--models", "Qwen3-30B-A3B:2048:128:8:768,OLMoE-1B-7B:2048:64:8:1024",
                                         "--tokens", "1,64"])
    monkeypatch.setattr(mod, "join_ranks", lambda *a: None)
    monkeypatch.setattr(mod, "time_variants", lambda torch, dist, fns, a, names, log: [
        (12.5 if fns[0]() is not None else None, pt.GRAPH)])
    path = tmp_path / "peer.json"
    mod.worker(0, 1, args, 0, str(path))
    import json
    rows = json.loads(path.read_text())["rows"]
    assert [(r["model"], r["gemm"], r["tokens"], r["routing"]) for r in rows] == [
        (m[0], g, t, r) for m, g, t, r in mod.cases(args)]
    assert all(r["us"] == 12.5 and r["checked"] for r in rows)
    # Qwen3 gate_up T=1 touches 50 MiB (5 sets for 4 x L2) but half the free 4 GB holds 2 sets of 805 MB;
    # T=64 touches nearly every expert: 1
    assert rows[0]["sets"] == 2 and rows[2]["sets"] == 1
    exe = compile_c(tmp_path, "pair", f"""
        #include <stdio.h>
        #include "support/grouped_cases.h"
        int main(void) {{
          loom_grouped_sel_t s; loom_grouped_case_t c[512]; int paired = 0, cases = 0;
          loom_grouped_sel_init(&s);
          const int n = loom_grouped_cases(&s, c, 512);
          for (int i = 0; i < n; ++i) {{
            if (!(c[i].model == 1 || c[i].model == 4) || !(c[i].tokens == 1 || c[i].tokens == 64)) continue;
            int64_t off[257], hot = 0;
            if (loom_grouped_offsets(&c[i], 0x6d6f65ull, off, NULL, &hot)) return 1;
            loom_bench_shape_t p; loom_grouped_pair_shape(&c[i], hot, &p);
            loom_bench_pair_t r; loom_bench_pair_file("{path}", "grouped_mm", &p, 1, &r);
            cases++, paired += r.paired;
            if (!r.paired) printf("%s\\n", r.why);
            loom_bench_shape_int(&p, "hot", hot + 1); /* another routing's busiest expert: no pair */
            loom_bench_pair_file("{path}", "grouped_mm", &p, 1, &r);
            paired -= r.paired;
          }}
          printf("%d of %d\\n", paired, cases);
          return 0;
        }}
    """, extra=[f"-I{REPO}", str(REPO / "support" / "grouped_cases.c"), str(REPO / "support" / "bench_pair.c"), "-lm"])
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "16 of 16", out
