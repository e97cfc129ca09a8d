"""A small Llama-style decoder layer for the parallelize tests (host, on
meta tensors; GPU, against the unsplit layer): batch first [b, s, h],
RMSNorm, causal attention with -1 heads, SwiGLU MLP with a bias on its
down projection; Hugging Face's module names (q_proj ... down_proj) or
torchtitan's (wq ... w2). The attention reads the sequence length from its
input (as HF and torchtitan do) or, length_from_input=False, from the
projections' outputs (what parallelize's fused_gather needs)."""
import torch


class Attention(torch.nn.Module):
    def __init__(self, h, heads, names, length_from_input=True, **factory):
        super().__init__()
        self.names, self.head_dim, self.from_input = names, h // heads, length_from_input
        for n in names:
            setattr(self, n, torch.nn.Linear(h, h, bias=False, **factory))

    def forward(self, x):
        q, k, v = (getattr(self, n)(x) for n in self.names[:3])
        b, s = x.shape[:2] if self.from_input else q.shape[:2]
        q, k, v = (t.view(b, s, -1, self.head_dim).transpose(1, 2) for t in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return getattr(self, self.names[3])(a.transpose(1, 2).reshape(b, s, -1))


class Mlp(torch.nn.Module):
    def __init__(self, h, f, names, **factory):
        super().__init__()
        self.names = names
        for n, (i, o) in zip(names, ((h, f), (h, f), (f, h))):
            setattr(self, n, torch.nn.Linear(i, o, bias=n == names[2], **factory))

    def forward(self, x):
        gate, up, down = (getattr(self, n) for n in self.names)
        return down(torch.nn.functional.silu(gate(x)) * up(x))


class Layer(torch.nn.Module):
    def __init__(self, h, heads, f, hf, length_from_input=True, **factory):
        super().__init__()
        self.self_attn = Attention(h, heads, ("q_proj", "k_proj", "v_proj", "o_proj") if hf else
                                   ("wq", "wk", "wv", "wo"), length_from_input, **factory)
        self.mlp = Mlp(h, f, ("gate_proj", "up_proj", "down_proj") if hf else ("w1", "w3", "w2"), **factory)
        self.norm1 = torch.nn.RMSNorm(h, **factory)
        self.norm2 = torch.nn.RMSNorm(h, **factory)

    def forward(self, x):
        x = x + self.self_attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))
