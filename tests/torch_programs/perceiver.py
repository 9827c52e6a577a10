"""A Perceiver-style classifier over a set of variable-length inputs, written the way
lucidrains-style attention code is: a learned latent array ``nn.Parameter(torch.randn(n,
d))`` repeated over the batch with ``expand``, cross-attention from the latents to the
inputs and self-attention among the latents in one ``Attention`` class (``context =
default(context, x)``), ``PreNorm`` wrappers with a separate context norm, GEGLU
feed-forward (``x, gates = x.chunk(2, dim=-1)``, ``x * F.gelu(gates)``), heads split by
``view(b, n, h, d).transpose(1, 2)``, ``einsum("b h i d, b h j d -> b h i j")``-style
similarities (written without spaces), a padding mask applied with
``masked_fill_(~mask, -torch.finfo(sim.dtype).max)``, Fourier position features from
``torch.linspace`` and ``torch.cat([x.sin(), x.cos()])`` scaled by ``math.pi``, weights
shared across repeated layers (the same modules called again), and a mean-pooled latent
head; trained with Adam and ``clip_grad_norm_``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def default(val, d):
    return val if val is not None else d


def fourier_encode(x, max_freq, num_bands):
    x = x.unsqueeze(-1)
    scales = torch.linspace(1.0, max_freq / 2, num_bands, dtype=x.dtype)
    x = x * scales * math.pi
    return torch.cat([x.sin(), x.cos()], dim=-1)


class PreNorm(nn.Module):
    def __init__(self, dim, fn, context_dim=None):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)
        self.norm_context = nn.LayerNorm(context_dim) if context_dim is not None else None

    def forward(self, x, **kwargs):
        x = self.norm(x)
        if self.norm_context is not None:
            kwargs["context"] = self.norm_context(kwargs["context"])
        return self.fn(x, **kwargs)


class GEGLU(nn.Module):
    def forward(self, x):
        x, gates = x.chunk(2, dim=-1)
        return x * F.gelu(gates)


class FeedForward(nn.Module):
    def __init__(self, dim, mult=2):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim * mult * 2), GEGLU(),
                                 nn.Linear(dim * mult, dim))

    def forward(self, x):
        return self.net(x)


class Attention(nn.Module):
    def __init__(self, query_dim, context_dim=None, heads=2, dim_head=8):
        super().__init__()
        inner = dim_head * heads
        context_dim = default(context_dim, query_dim)
        self.scale, self.heads = dim_head ** -0.5, heads
        self.to_q = nn.Linear(query_dim, inner, bias=False)
        self.to_kv = nn.Linear(context_dim, inner * 2, bias=False)
        self.to_out = nn.Linear(inner, query_dim)

    def forward(self, x, context=None, mask=None):
        h = self.heads
        context = default(context, x)
        q = self.to_q(x)
        k, v = self.to_kv(context).chunk(2, dim=-1)
        q, k, v = (t.view(t.shape[0], t.shape[1], h, -1).transpose(1, 2) for t in (q, k, v))
        sim = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        if mask is not None:
            sim.masked_fill_(~mask[:, None, None, :], -torch.finfo(sim.dtype).max)
        attn = sim.softmax(dim=-1)
        out = torch.einsum("bhij,bhjd->bhid", attn, v)
        out = out.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
        return self.to_out(out)


class Perceiver(nn.Module):
    def __init__(self, input_dim=3, num_bands=4, latents=6, latent_dim=16, depth=2, classes=4):
        super().__init__()
        self.num_bands = num_bands
        in_dim = input_dim + 2 * num_bands
        self.latents = nn.Parameter(torch.randn(latents, latent_dim))
        self.cross_attn = PreNorm(latent_dim, Attention(latent_dim, in_dim), context_dim=in_dim)
        self.cross_ff = PreNorm(latent_dim, FeedForward(latent_dim))
        self.self_attn = PreNorm(latent_dim, Attention(latent_dim))
        self.self_ff = PreNorm(latent_dim, FeedForward(latent_dim))
        self.depth = depth
        self.to_logits = nn.Sequential(nn.LayerNorm(latent_dim), nn.Linear(latent_dim, classes))

    def forward(self, data, mask):
        b, n, _ = data.shape
        pos = torch.linspace(-1.0, 1.0, n)
        enc = fourier_encode(pos, 8.0, self.num_bands).unsqueeze(0).expand(b, -1, -1)
        data = torch.cat((data, enc), dim=-1)
        x = self.latents.unsqueeze(0).expand(b, -1, -1)
        x = self.cross_attn(x, context=data, mask=mask) + x
        x = self.cross_ff(x) + x
        for _ in range(self.depth):   # (weights shared across the repeats)
            x = self.self_attn(x) + x
            x = self.self_ff(x) + x
        return self.to_logits(x.mean(dim=-2))


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor((rng.standard_normal(tuple(v.shape)) * 0.3).astype(np.float32))
        for k, v in model.state_dict().items()})


def main(steps=6, compile=False, seed=0, batch=4, length=10):
    model = Perceiver()
    init_weights(model, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(seed + 1)
    data = torch.tensor(rng.standard_normal((steps, batch, length, 3)).astype(np.float32))
    lengths = rng.integers(4, length + 1, (steps, batch))
    masks = torch.tensor(np.arange(length)[None, None] < lengths[..., None])
    labels = torch.tensor(rng.integers(0, 4, (steps, batch)))

    def train_step(x, mask, y):
        loss = F.cross_entropy(model(x, mask), y)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses = [train_step(data[s], masks[s], labels[s]).item() for s in range(steps)]
    with torch.no_grad():
        probs = model(data[0], masks[0]).softmax(-1)
    return {"losses": losses, "probs": probs.flatten().tolist()}
