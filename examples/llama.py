"""A small Llama-style decoder in plain PyTorch (random weights, nothing downloaded), the model
regen.patch() and benchmarks/model_bench.py run on.

Shapes default to Llama-3.2-1B (16 layers, hidden 2048, 32 query / 8 key-value heads of 64, MLP
8192, vocabulary 128256, RoPE theta 500000); Config.tiny() is the same architecture small enough
for a CPU test. The pieces regen has kernels for are modules of their own, each naming its kernel
(`regen_kernel`), so regen.patch(model) can swap them: RMSNorm, RotaryEmbedding (rotate-half
RoPE on [B, S, H, D]), SwiGLU (gate and value packed in one projection, gate first), Softmax
(attention probabilities with attn="eager", and next-token probabilities) and CrossEntropy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Config:
    vocab: int = 128256
    hidden: int = 2048
    intermediate: int = 8192
    layers: int = 16
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 64
    rope_theta: float = 500000.0
    eps: float = 1e-5
    max_positions: int = 8192
    attn: str = "sdpa"      # "sdpa" (fused attention) or "eager" (explicit softmax)

    @classmethod
    def tiny(cls, **kw) -> "Config":
        return replace(cls(vocab=512, hidden=64, intermediate=160, layers=2, heads=4, kv_heads=2,
                           head_dim=16, max_positions=256), **kw)


class RMSNorm(nn.Module):
    regen_kernel = "rmsnorm"

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class RotaryEmbedding(nn.Module):
    """Rotate-half RoPE: y = [x1 cos - x2 sin, x2 cos + x1 sin] over the two halves of the head
    dimension, positions 0..S-1 (prefill)."""

    regen_kernel = "rope"

    def __init__(self, head_dim: int, max_positions: int, theta: float):
        super().__init__()
        inv = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv[None, :]
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x):  # x: [B, S, H, D]
        s = x.shape[1]
        cos = self.cos[:s].to(x.dtype)[None, :, None, :]
        sin = self.sin[:s].to(x.dtype)[None, :, None, :]
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class SwiGLU(nn.Module):
    regen_kernel = "swiglu"

    def forward(self, x):  # x: [..., 2 * I], gate first
        a, b = x.chunk(2, dim=-1)
        return F.silu(a) * b


class Softmax(nn.Module):
    regen_kernel = "softmax"

    def forward(self, x):
        return torch.softmax(x, dim=-1)


class CrossEntropy(nn.Module):
    """Mean cross-entropy over tokens whose target is not -100."""

    regen_kernel = "cross_entropy"

    def forward(self, logits, targets):  # [N, V], [N]
        return F.cross_entropy(logits, targets, ignore_index=-100)


class Attention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.q = nn.Linear(cfg.hidden, cfg.heads * cfg.head_dim, bias=False)
        self.k = nn.Linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=False)
        self.v = nn.Linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=False)
        self.o = nn.Linear(cfg.heads * cfg.head_dim, cfg.hidden, bias=False)
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.max_positions, cfg.rope_theta)
        self.softmax = Softmax()

    def forward(self, x):
        cfg = self.cfg
        b, s, _ = x.shape
        q = self.rope(self.q(x).view(b, s, cfg.heads, cfg.head_dim)).transpose(1, 2)
        k = self.rope(self.k(x).view(b, s, cfg.kv_heads, cfg.head_dim)).transpose(1, 2)
        v = self.v(x).view(b, s, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
        groups = cfg.heads // cfg.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        if cfg.attn == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(cfg.head_dim)
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            probs = self.softmax(scores.masked_fill(mask, float("-inf")).contiguous())
            out = probs @ v
        return self.o(out.transpose(1, 2).reshape(b, s, cfg.heads * cfg.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.gate_up = nn.Linear(cfg.hidden, 2 * cfg.intermediate, bias=False)
        self.act = SwiGLU()
        self.down = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, x):
        return self.down(self.act(self.gate_up(x)))


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(cfg.hidden, cfg.eps), Attention(cfg)
        self.mlp_norm, self.mlp = RMSNorm(cfg.hidden, cfg.eps), MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        self.loss_fn = CrossEntropy()
        self.probs = Softmax()

    def forward(self, ids):  # [B, S] -> logits [B, S, V]
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm(x))

    def loss(self, ids, targets):
        logits = self.forward(ids)
        return self.loss_fn(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def next_token_probs(self, ids):
        return self.probs(self.forward(ids)[:, -1, :].contiguous())


def build(cfg: Config, dtype=torch.float32, device="cpu", seed: int = 0) -> Llama:
    """Random weights at the scale of an initialised Llama (std 0.02; norms at 1 + noise so
    they are not the identity)."""
    torch.manual_seed(seed)
    model = Llama(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.02)
    return model.to(device=device, dtype=dtype).eval()
