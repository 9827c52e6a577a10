"""Compact embeddings for large categorical vocabularies as DLRM's QR trick and
hashing-trick recommenders write them: the quotient-remainder embedding (``input //
num_collisions`` and ``torch.remainder(input, num_collisions)``, two tables combined by
"mult" or "add"), feature hashing of raw ids by multiplicative hashing in int64 that wraps
around (``(ids * 2654435761) ^ (ids >> 7)`` with ``torch.bitwise_xor``, ``&`` masks,
``<<``/``>>`` shifts, ``torch.remainder`` of negative values, ``torch.div(...,
rounding_mode="floor")`` and ``"trunc"`` of negative ids, ``torch.fmod``); per-user
features pooled by ``index_reduce_(..., "amax", include_self=False)`` and
``scatter_reduce_(..., "mean", include_self=False)`` into zero-initialised buffers, counts
by ``torch.bincount(minlength=)``, a frequency-capped id by ``torch.clamp`` of a
``bucketize``; logistic loss with ``F.binary_cross_entropy_with_logits(weight=)``, SGD
with ``momentum`` and ``dampening``, and batches of changing size."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class QREmbedding(nn.Module):
    def __init__(self, num_categories, dim, num_collisions, operation="mult"):
        super().__init__()
        self.num_collisions = num_collisions
        self.operation = operation
        self.weight_q = nn.Parameter(torch.empty(-(-num_categories // num_collisions), dim))
        self.weight_r = nn.Parameter(torch.empty(num_collisions, dim))

    def forward(self, input):
        input_q = (input // self.num_collisions).long()
        input_r = torch.remainder(input, self.num_collisions).long()
        embed_q = F.embedding(input_q, self.weight_q)
        embed_r = F.embedding(input_r, self.weight_r)
        if self.operation == "mult":
            return embed_q * embed_r
        return embed_q + embed_r


def hash_ids(ids, buckets):
    h = ids * 2654435761
    h = torch.bitwise_xor(h, h >> 7) & 0x7FFFFFFF
    h = h ^ ((ids << 3) & 0xFFFF)
    return torch.remainder(h, buckets)


class Recommender(nn.Module):
    def __init__(self, n_items=50, n_buckets=11, dim=4, n_users=6):
        super().__init__()
        self.n_buckets, self.n_users = n_buckets, n_users
        self.items = QREmbedding(n_items, dim, 7, "mult")
        self.items_add = QREmbedding(n_items, dim, 5, "add")
        self.hashed = nn.Embedding(n_buckets, dim)
        self.signed = nn.Embedding(8, dim)
        self.register_buffer("edges", torch.tensor([1, 3, 10]))
        self.out = nn.Linear(4 * dim + 2, 1)

    def forward(self, items, raw_ids, offsets_signed, users):
        e = self.items(items) + self.items_add(items)
        hashed = self.hashed(hash_ids(raw_ids, self.n_buckets))
        floor_q = torch.div(offsets_signed, 3, rounding_mode="floor")
        trunc_q = torch.div(offsets_signed, 3, rounding_mode="trunc")
        signed = self.signed(torch.remainder(floor_q, 4) + 4 * (torch.fmod(trunc_q, 2) != 0).long())
        pooled = torch.zeros(self.n_users, e.shape[1])
        pooled = pooled.index_reduce_(0, users, e, "amax", include_self=False)
        mean = torch.zeros(self.n_users, e.shape[1])
        mean.scatter_reduce_(0, users.unsqueeze(1).expand_as(e), hashed, "mean",
                             include_self=False)
        counts = torch.bincount(users, minlength=self.n_users)
        freq = torch.clamp(torch.bucketize(counts, self.edges), max=2).float()
        user_feats = torch.cat([pooled, mean], dim=1)[users]
        extra = torch.stack([freq[users], counts[users].float().log1p()], dim=1)
        return self.out(torch.cat([e, signed, user_feats, extra], dim=1)).squeeze(1)


def make_batch(rng, n):
    items = rng.integers(0, 50, n)
    raw = rng.integers(-(2 ** 40), 2 ** 40, n)
    signed = rng.integers(-20, 20, n)
    users = rng.integers(0, 5, n)      # user 5 never appears: its rows stay zero
    y = ((items % 3 == 0) ^ (signed > 0)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, n).astype(np.float32)
    return [torch.from_numpy(a) for a in (items, raw, signed, users, y, w)]


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Recommender()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.normal(0, 0.5, p.shape).astype(np.float32)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, dampening=0.1)
    net = torch.compile(model) if compile == "model" else model

    def train_step(items, raw, signed, users, y, w):
        optimizer.zero_grad()
        logits = net(items, raw, signed, users)
        loss = F.binary_cross_entropy_with_logits(logits, y, weight=w)
        loss.backward()
        optimizer.step()
        return loss.detach(), hash_ids(raw, 11)

    if compile is True:
        train_step = torch.compile(train_step)
    log, hashes = [], []
    for step in range(steps):
        items, raw, signed, users, y, w = make_batch(rng, 12 if step % 2 == 0 else 9)
        loss, h = train_step(items, raw, signed, users, y, w)
        log.append(loss.item())
        hashes += h.tolist()
    items, raw, signed, users, y, w = make_batch(rng, 7)
    with torch.no_grad():
        scores = net(items, raw, signed, users)
    return {"log": log, "hashes": hashes, "scores": scores.tolist(),
            "floor": torch.div(signed, 3, rounding_mode="floor").tolist(),
            "remainder": torch.remainder(signed, -4).tolist(),
            "fmod": torch.fmod(signed, -4).tolist()}
