"""A text classifier over padded token batches written the way ``nn.MultiheadAttention``
users write one: ``key_padding_mask`` (True at the padding) given to a self-attention
``nn.MultiheadAttention(batch_first=True)`` that also returns per-head weights
(``need_weights=True, average_attn_weights=False``), a learned-query attention pooling
through a second ``nn.MultiheadAttention`` (sequence-first, the default layout, with
``query.expand``), a masked mean pooling written as ``x.masked_fill(pad[..., None],
float('nan')).nanmean(1)`` and a masked sum with ``torch.nansum``, per-row token counts
from ``(~pad).sum(1, keepdim=True)``, ``cummax`` of the attention weights along the
sequence as a feature, an entropy regulariser on the head weights, ``LambdaLR`` with a
linear warmup and decay, and a ``state_dict()``/``load_state_dict()`` round trip of the
model and the optimiser mid-training through an in-memory copy (``copy.deepcopy``)."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, PAD = 20, 0


class Classifier(nn.Module):
    def __init__(self, dim=16, heads=2, classes=3):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim, padding_idx=PAD)
        self.pos = nn.Parameter(torch.zeros(1, 8, dim))
        self.self_attn = nn.MultiheadAttention(dim, heads, dropout=0.0, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.query = nn.Parameter(torch.zeros(1, 1, dim))
        self.pool_attn = nn.MultiheadAttention(dim, heads)
        self.head = nn.Linear(3 * dim + 1, classes)

    def forward(self, tokens):
        pad = tokens == PAD
        x = self.embed(tokens) + self.pos[:, :tokens.size(1)]
        attended, head_weights = self.self_attn(x, x, x, key_padding_mask=pad,
                                                need_weights=True,
                                                average_attn_weights=False)
        x = self.norm(x + attended)
        seq_first = x.transpose(0, 1)
        query = self.query.expand(-1, tokens.size(0), -1)
        pooled, pool_weights = self.pool_attn(query, seq_first, seq_first,
                                              key_padding_mask=pad)
        mean = x.masked_fill(pad[..., None], float("nan")).nanmean(1)
        total = torch.nansum(x.masked_fill(pad[..., None], float("nan")), dim=1)
        count = (~pad).sum(1, keepdim=True).float()
        peak = pool_weights.squeeze(1).cummax(dim=-1).values[:, -1:]
        features = torch.cat([pooled.squeeze(0), mean, total / count, peak], dim=-1)
        entropy = -(head_weights * head_weights.clamp_min(1e-9).log()).sum(-1)
        entropy = entropy.masked_fill(pad[:, None, :], 0.0).sum() / count.sum()
        return self.head(features), entropy


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor((1.0 + rng.normal(0, 0.05, tuple(v.shape)) if "norm" in k and
                         k.endswith("weight") else rng.normal(0, 0.25, tuple(v.shape)))
                        .astype(np.float32))
        for k, v in model.state_dict().items()})


def make_batch(rng, size=5, length=8):
    """Class = which of three token ranges is most frequent; padded on the right."""
    lengths = rng.integers(3, length + 1, size)
    lengths[0] = length
    labels = rng.integers(0, 3, size)
    tokens = np.zeros((size, length), np.int64)
    for b in range(size):
        common = rng.integers(1 + 6 * labels[b], 7 + 6 * labels[b], lengths[b])
        noise = rng.integers(1, VOCAB, lengths[b])
        tokens[b, :lengths[b]] = np.where(rng.random(lengths[b]) < 0.6, common, noise)
    return torch.tensor(tokens), torch.tensor(labels)


def main(steps=10, compile=False, seed=0, warmup=2):
    model = Classifier()
    init_weights(model, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.01)
    lr_lambda = lambda step: min((step + 1) / warmup, max(0.1, (steps - step) / steps))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    rng = np.random.default_rng(seed + 1)

    def train_step(tokens, labels):
        logits, entropy = model(tokens)
        loss = F.cross_entropy(logits, labels) + 0.01 * entropy
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss, (logits.argmax(-1) == labels).sum()

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, correct = [], []
    for step in range(steps):
        if step == steps // 2:
            saved = copy.deepcopy({"model": model.state_dict(),
                                   "optimizer": optimizer.state_dict()})
            model.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
        loss, hits = train_step(*make_batch(rng))
        scheduler.step()
        losses.append(loss.item())
        correct.append(int(hits))
    model.eval()
    tokens, _ = make_batch(np.random.default_rng(4))
    with torch.no_grad():
        logits, _ = model(tokens)
    return {"losses": losses, "correct": correct, "logits": logits.flatten().tolist()}
