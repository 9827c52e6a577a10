"""A Longformer-style encoder classifier: sliding-window self-attention written the way
the Hugging Face implementation builds its bands, from strided views rather than a full
T x T matrix: keys padded by ``w`` on each side and read as overlapping windows by
``Tensor.as_strided(size, stride)`` built from ``.stride()``, values windowed by
``Tensor.unfold``, the band's validity taken from the padded ``attention_mask`` by
``unfold`` and applied by ``masked_fill(~valid, float("-inf"))``; global attention for the
first token (its scores against every key, and every token's score against it
concatenated to the band before one ``softmax``), ``torch.einsum`` for the band products,
``nn.functional.dropout`` with ``p=0`` in eval, a classifier on the first token; batches
of varying real lengths padded by hand, ``AdamW`` with a linear warm-up ``LambdaLR``
and ``clip_grad_norm_``."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def sliding_windows(x, w):
    """(n, t, d) -> (n, t, 2w + 1, d): each position's neighbours, as overlapping strides."""
    x = F.pad(x, (0, 0, w, w)).contiguous()
    n, tp, d = x.size()
    s0, s1, s2 = x.stride()
    return x.as_strided(size=(n, tp - 2 * w, 2 * w + 1, d), stride=(s0, s1, s1, s2))


class WindowAttention(nn.Module):
    def __init__(self, dim, heads, window):
        super().__init__()
        self.h, self.w, self.dk = heads, window, dim // heads
        self.query, self.key, self.value = (nn.Linear(dim, dim) for _ in range(3))
        self.query_global = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, attention_mask):
        b, t, _ = x.shape
        split = lambda y: y.view(b, t, self.h, self.dk).transpose(1, 2).reshape(b * self.h,
                                                                                 t, self.dk)
        q = split(self.query(x)) / math.sqrt(self.dk)
        k, v = split(self.key(x)), split(self.value(x))
        keys = sliding_windows(k, self.w)
        band = torch.einsum("ntd,ntwd->ntw", q, keys)
        mask = attention_mask.repeat_interleave(self.h, dim=0).bool()
        valid = F.pad(mask, (self.w, self.w), value=False).unfold(-1, 2 * self.w + 1, 1)
        band = band.masked_fill(~valid, float("-inf"))
        to_global = torch.einsum("ntd,nd->nt", q, k[:, 0]).unsqueeze(-1)
        probs = torch.softmax(torch.cat([to_global, band], dim=-1), dim=-1)
        probs = F.dropout(probs, p=0.1, training=False)
        values = F.pad(v, (0, 0, self.w, self.w)).unfold(1, 2 * self.w + 1, 1)
        ctx = probs[..., :1] * v[:, :1] + torch.einsum("ntw,ntdw->ntd", probs[..., 1:],
                                                       values)
        qg = split(self.query_global(x))[:, 0] / math.sqrt(self.dk)
        g = (k @ qg.unsqueeze(-1)).squeeze(-1).masked_fill(~mask, float("-inf"))
        ctx = torch.cat([(g.softmax(-1).unsqueeze(1) @ v), ctx[:, 1:]], dim=1)
        ctx = ctx.view(b, self.h, t, self.dk).transpose(1, 2).reshape(b, t, -1)
        return self.out(ctx)


class Layer(nn.Module):
    def __init__(self, dim, heads, window):
        super().__init__()
        self.attn = WindowAttention(dim, heads, window)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, attention_mask):
        x = self.ln1(x + self.attn(x, attention_mask))
        return self.ln2(x + self.ff(x))


class Longformer(nn.Module):
    def __init__(self, vocab=20, dim=16, heads=2, window=2, layers=2, classes=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.pos = nn.Embedding(32, dim)
        self.layers = nn.ModuleList(Layer(dim, heads, window) for _ in range(layers))
        self.classifier = nn.Linear(dim, classes)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.size(1)).unsqueeze(0)
        x = self.embed(input_ids) + self.pos(positions)
        for layer in self.layers:
            x = layer(x, attention_mask)
        return self.classifier(x[:, 0])


def batch(rng, n=4, t=12):
    lengths = rng.integers(5, t + 1, n)
    ids = np.zeros((n, t), np.int64)
    for i, length in enumerate(lengths):
        ids[i, :length] = rng.integers(1, 20, length)
        ids[i, 0] = 1
    mask = (np.arange(t)[None] < lengths[:, None]).astype(np.int64)
    labels = (ids[:, 1] + ids[:, 2]) % 3
    return torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(labels)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Longformer()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    warmup = 2
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup))
    net = torch.compile(model) if compile == "model" else model

    def step(ids, mask, labels):
        optimizer.zero_grad()
        logits = net(ids, mask)
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss, norm

    if compile is True:
        step = torch.compile(step)
    losses, norms = [], []
    for _ in range(steps):
        loss, norm = step(*batch(rng))
        scheduler.step()
        losses.append(loss.item())
        norms.append(norm.item())
    model.eval()
    ids, mask, labels = batch(rng)
    with torch.no_grad():
        logits = net(ids, mask)
    return {"losses": losses, "norms": norms, "logits": logits.flatten().tolist(),
            "predicted": logits.argmax(-1).tolist()}
