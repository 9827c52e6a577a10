"""Attention variants written with ``torch.einsum``, as research code writes them: grouped-
query attention (``k``/``v`` with fewer heads, ``repeat_interleave`` over the head dim),
ALiBi biases from per-head slopes (``2 ** (-8 / H * (h + 1))``) and a distance matrix built
with ``torch.arange`` and broadcasting, talking-heads mixing of the logits across heads
(``einsum('bhij,hg->bgij')``) before and after the softmax, a causal mask filled with
``torch.finfo(dtype).min`` by ``masked_fill``, a key-padding mask combined with it by
``&``, the softmax guarded by ``torch.nan_to_num`` for fully masked rows (padded queries),
``einsum('bhij,bhjd->bihd')`` to the output and ``rearrange``-free ``reshape``; an
``einsum('bnd,de->bne')`` projection for the outputs; ``addcmul`` in a scale-norm; a
language-model loss with ``F.cross_entropy(..., ignore_index=-1)`` on padded targets; AdamW
and ``clip_grad_value_``."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def alibi_slopes(n_heads):
    return torch.tensor([2 ** (-8 / n_heads * (h + 1)) for h in range(n_heads)])


class GQATalkingHeads(nn.Module):
    def __init__(self, dim=16, n_heads=4, n_kv_heads=2):
        super().__init__()
        self.h, self.kv, self.d = n_heads, n_kv_heads, dim // n_heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv_proj = nn.Linear(dim, 2 * n_kv_heads * self.d, bias=False)
        self.pre_mix = nn.Parameter(torch.eye(n_heads))
        self.post_mix = nn.Parameter(torch.eye(n_heads))
        self.out = nn.Parameter(torch.zeros(dim, dim))
        self.register_buffer("slopes", alibi_slopes(n_heads))

    def forward(self, x, pad):
        B, N, _ = x.shape
        q = self.q(x).view(B, N, self.h, self.d)
        k, v = self.kv_proj(x).view(B, N, 2, self.kv, self.d).unbind(dim=2)
        k = k.repeat_interleave(self.h // self.kv, dim=2)
        v = v.repeat_interleave(self.h // self.kv, dim=2)
        logits = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(self.d)
        pos = torch.arange(N)
        distance = (pos[None, :] - pos[:, None]).clamp(max=0).float()
        logits = logits + self.slopes[:, None, None] * distance
        logits = torch.einsum("bhij,hg->bgij", logits, self.pre_mix)
        causal = torch.ones(N, N, dtype=torch.bool).tril()
        allowed = causal[None, None] & ~pad[:, None, None, :] & ~pad[:, None, :, None]
        logits = logits.masked_fill(~allowed, float("-inf"))
        attn = torch.nan_to_num(logits.softmax(dim=-1), nan=0.0)
        attn = torch.einsum("bhij,hg->bgij", attn, self.post_mix)
        out = torch.einsum("bhij,bjhd->bihd", attn, v).reshape(B, N, self.h * self.d)
        return torch.einsum("bnd,de->bne", out, self.out)


class ScaleNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.g = nn.Parameter(torch.tensor(math.sqrt(dim)))
        self.shift = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        n = x.norm(dim=-1, keepdim=True).clamp(min=1e-5)
        return torch.addcmul(self.shift, x / n, self.g)


class TinyLM(nn.Module):
    def __init__(self, vocab=11, dim=16, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(GQATalkingHeads(dim) for _ in range(layers))
        self.norms = nn.ModuleList(ScaleNorm(dim) for _ in range(layers))
        self.ff = nn.ModuleList(nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(approximate="tanh"),
                                              nn.Linear(2 * dim, dim)) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens, pad):
        x = self.embed(tokens)
        for attn, norm, ff in zip(self.blocks, self.norms, self.ff):
            x = x + attn(norm(x), pad)
            x = x + ff(x)
        return self.head(x)


def sequences(rng, n, length=8, vocab=11):
    """Counting sequences (each token the previous + a per-sequence step, mod vocab - 1),
    right-padded: targets -1 there."""
    tokens = np.zeros((n, length), dtype=np.int64)
    pad = np.zeros((n, length), dtype=bool)
    for i in range(n):
        start, step, size = rng.integers(0, 10), rng.integers(1, 3), rng.integers(5, length + 1)
        tokens[i, :size] = (start + step * np.arange(size)) % (vocab - 1) + 1
        pad[i, size:] = True
    targets = np.where(np.roll(pad, -1, axis=1) | pad, -1, np.roll(tokens, -1, axis=1))
    targets[:, -1] = -1
    return torch.from_numpy(tokens), torch.from_numpy(pad), torch.from_numpy(targets)


def init_weights(model, rng):
    for name, p in model.named_parameters():
        if p.dim() == 2 and "mix" not in name:
            std = 0.02 if name.endswith("out") else 1 / np.sqrt(p.shape[-1])
            p.data.copy_(torch.from_numpy(rng.normal(0, std, tuple(p.shape)).astype(np.float32)))
        elif name.endswith("bias"):
            p.data.zero_()


def main(steps=10, compile=False, seed=0, batch=8):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = TinyLM()
    init_weights(model, rng)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95))
    data = [sequences(rng, batch) for _ in range(steps)]
    net = model

    def step(tokens, pad, targets):
        optimizer.zero_grad()
        logits = net(tokens, pad)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                               ignore_index=-1)
        loss.backward()
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
        optimizer.step()
        return loss

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses = [step(*batch_).item() for batch_ in data]
    tokens, pad, targets = sequences(rng, 4)
    with torch.no_grad():
        logits = model(tokens, pad)
    valid = targets != -1
    return {"losses": losses,
            "correct": [int((logits.argmax(-1) == targets)[valid].sum())],
            "logits": logits[0, :3, :5].flatten().tolist(),
            "pad_logits": logits[pad][:2, :4].flatten().tolist(),
            "mix": model.blocks[0].post_mix.flatten().tolist()}
