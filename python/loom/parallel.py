"""parallel.py - loom.parallelize: a model's linear layers split over the
ranks the way torchtitan's tensor-parallel plan or Megatron's layers split
a Llama-style block (sequence parallelism), on loom's ops.

    model = Transformer(...)                      # full weights, the same on every rank
    loom.parallelize(model, comm)                 # collective: this rank's shards, in place
    y = model(x_shard)                            # x_shard: this rank's tokens [b, s / W, h]

The default plan, by a module's own name (its last dotted component):
  column-parallel  q_proj k_proj v_proj gate_proj up_proj (Hugging Face
                   Llama / Mistral / Qwen), wq wk wv w1 w3 (torchtitan, Meta
                   Llama): this rank's 1/W of the output features
  row-parallel     o_proj down_proj (HF), wo w2 (torchtitan): this rank's
                   1/W of the input features; the output's sequence
                   reduce-scattered in the GEMM (loom_gemm_rs, fused)
`plan` ({module name or dotted path: "colwise" | "rowwise" | None}) adds to
or overrides it (None: leave that module alone).

Where the sequence is gathered:
  fused_gather=False (default; any model): the module holding
      column-parallel layers (an attention, an MLP) gets its input gathered
      once (loom's all_gather, differentiable), as torchtitan's
      PrepareModuleInput does, and its column-parallel layers become plain
      nn.Linear shards on the gathered input. Attention code sees the whole
      sequence, whatever it reads its length from.
  fused_gather=True: each column-parallel layer gathers its own input in
      its GEMM (loom.nn.ColumnParallelLinear, loom_ag_gemm): the gather
      hidden behind the GEMM, but one per layer (q, k and v each gather),
      and the module around them sees this rank's rows only: its code must
      take the sequence length from the projections' outputs.
Either way: reshape heads with -1 (this rank's heads; heads and kv heads
multiples of W), give attention position information for the whole
sequence (RoPE of all s positions), and feed the model this rank's rows of
the sequence (rank p: tokens [p s / W, (p+1) s / W)). Norms and pointwise
work between the modules run on the sequence shard. sequence_dim: 1 for
batch-first [b, s, h] (HF, torchtitan), 0 for Megatron's [s, b, h].

The layers copy their shard of the full nn.Linear they replace (the full
weights must be the same on every rank), in its dtype; the loom layers
compute in compute_dtype (default bf16); `layer_options` go to them
(transfer, compute_dtype, out_dtype, device, ...). Returns the model; the
swapped modules' names are in model.loom_parallelized.
"""
from ._torch import require

torch = require("loom.parallelize")

from . import nn as lnn
from .errors import InvalidArgumentError

COLWISE = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "wq", "wk", "wv", "w1", "w3")
ROWWISE = ("o_proj", "down_proj", "wo", "w2")
_KINDS = {"colwise": lnn.ColumnParallelLinear, "rowwise": lnn.RowParallelLinear}


def _style(name, plan):
    """The plan's choice for module `name` (dotted path): "colwise",
    "rowwise" or None; a dotted path in the plan wins over a module name,
    which wins over the default names."""
    short = name.rsplit(".", 1)[-1]
    if name in plan:
        return plan[name]
    if short in plan:
        return plan[short]
    if short in COLWISE:
        return "colwise"
    if short in ROWWISE:
        return "rowwise"
    return None


def _gather_hook(comm, sequence_dim):
    """A forward pre-hook: the module's first input gathered over the ranks
    along the sequence (loom's all_gather; its backward reduce-scatters)."""
    from . import functional

    def hook(module, args):
        x = args[0]
        if sequence_dim == 1 and x.dim() > 2:
            full = functional.all_gather(x.transpose(0, 1).contiguous(), comm).transpose(0, 1)
        else:
            full = functional.all_gather(x.contiguous(), comm)
        return (full,) + tuple(args[1:])

    return hook


def _shard_linear(comm, linear, layer_options):
    """An nn.Linear of this rank's output features of `linear` (no communication)."""
    n = linear.out_features // comm.size
    p = comm.rank
    dtype = layer_options.get("dtype", linear.weight.dtype)
    device = layer_options.get("device", f"cuda:{comm.device}")
    out = torch.nn.Linear(linear.in_features, n, bias=linear.bias is not None, device=device, dtype=dtype)
    with torch.no_grad():
        out.weight.copy_(linear.weight[p * n:(p + 1) * n])
        if linear.bias is not None:
            out.bias.copy_(linear.bias[p * n:(p + 1) * n])
    return out


def _swaps(fn, model, comm, plan):
    """[(dotted name, style, module)] of the plan's nn.Linear modules."""
    swaps = []
    for name, module in model.named_modules():
        style = _style(name, plan) if name else None
        if style is None:
            continue
        if not isinstance(module, torch.nn.Linear):
            if name in plan or name.rsplit(".", 1)[-1] in plan:
                raise InvalidArgumentError(f"{fn}: plan names {name!r}, a {type(module).__name__}, not an "
                                           f"nn.Linear")
            continue
        features = module.out_features if style == "colwise" else module.in_features
        if features % comm.size:
            raise InvalidArgumentError(f"{fn}: {name} has {features} {'output' if style == 'colwise' else 'input'} "
                                       f"features, not a multiple of the world size {comm.size}")
        swaps.append((name, style, module))
    if not swaps:
        raise InvalidArgumentError(f"{fn}: no nn.Linear of the model matches the plan (names: "
                                   f"{', '.join(COLWISE + ROWWISE)}, or plan=)")
    return swaps


def parallelize(model, comm, plan=None, *, sequence_dim=1, fused_gather=False, **layer_options):
    """Splits model's linear layers over the ranks in place (see the top of
    this file). Collective."""
    fn = "loom.parallelize"
    plan = dict(plan or {})
    for key, style in plan.items():
        if style not in (None, "colwise", "rowwise"):
            raise InvalidArgumentError(f"{fn}: plan[{key!r}]={style!r}; expected 'colwise', 'rowwise' or None")
    lnn._sequence_dim(fn, sequence_dim)
    swaps = _swaps(fn, model, comm, plan)
    gathered = []  # the modules whose input is gathered
    for name, style, module in swaps:  # the same order on every rank: collective buffers
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        if style == "colwise" and not fused_gather:
            if parent is model:
                raise InvalidArgumentError(f"{fn}: {name} is a direct child of the model: its input is gathered "
                                           f"in the module holding it (fused_gather=True gathers in the layer)")
            layer = _shard_linear(comm, module, layer_options)
            if all(parent is not g for g in gathered):
                parent.register_forward_pre_hook(_gather_hook(comm, sequence_dim))
                gathered.append(parent)
        else:
            layer = _KINDS[style].from_linear(comm, module, sequence_dim=sequence_dim, **layer_options)
        setattr(parent, child, layer)
    model.loom_parallelized = [n for n, _, _ in swaps]
    return model
