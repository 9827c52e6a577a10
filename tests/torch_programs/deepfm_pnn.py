"""A click-through-rate model in the style of DeepCTR-Torch and pytorch-fm: categorical
fields looked up in one shared ``nn.Embedding`` after adding each field's offset (a
``register_buffer(..., persistent=False)``, so ``state_dict`` leaves it out and a
round trip through ``torch.save``/``torch.load`` of the state restores the model), a
first-order ``nn.EmbeddingBag(mode="sum")`` over a multi-hot field given by ``offsets`` and
``per_sample_weights``, FM's second-order term as ``0.5 * (sum ** 2 - sum of squares)``,
PNN's inner products of field pairs indexed by ``torch.combinations`` and the outer
product's upper triangle by ``torch.triu_indices``, a DNN tower, ``BCEWithLogitsLoss``
with ``pos_weight``, Adagrad with ``initial_accumulator_value`` and L2 on the embeddings
added by hand (``embedding.weight.pow(2).sum()``); the AUC by ranking (``argsort``)."""
import io

import numpy as np
import torch
import torch.nn as nn

FIELDS = [5, 7, 4, 6]


class DeepFM(nn.Module):
    def __init__(self, dim=4, tags=9):
        super().__init__()
        self.embedding = nn.Embedding(sum(FIELDS), dim)
        self.register_buffer("offsets", torch.tensor(np.cumsum([0] + FIELDS[:-1])),
                             persistent=False)
        self.linear = nn.Embedding(sum(FIELDS), 1)
        self.tags = nn.EmbeddingBag(tags, 1, mode="sum")
        n = len(FIELDS)
        self.register_buffer("pairs", torch.combinations(torch.arange(n), r=2),
                             persistent=False)
        rows, cols = torch.triu_indices(dim, dim, offset=1)
        self.rows, self.cols = rows, cols
        pairs = n * (n - 1) // 2
        self.mlp = nn.Sequential(nn.Linear(n * dim + pairs + rows.numel(), 16), nn.ReLU(),
                                 nn.Linear(16, 1))
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, fields, tags, tag_offsets, tag_weights):
        idx = fields + self.offsets.unsqueeze(0)
        e = self.embedding(idx)
        first = self.linear(idx).sum(dim=1) + self.tags(tags, tag_offsets,
                                                       per_sample_weights=tag_weights)
        square_of_sum = e.sum(dim=1).pow(2)
        sum_of_square = (e * e).sum(dim=1)
        fm = 0.5 * (square_of_sum - sum_of_square).sum(dim=1, keepdim=True)
        inner = (e[:, self.pairs[:, 0]] * e[:, self.pairs[:, 1]]).sum(-1)
        pooled = e.sum(dim=1)
        outer = torch.einsum("bi,bj->bij", pooled, pooled)[:, self.rows, self.cols]
        deep = self.mlp(torch.cat([e.flatten(1), inner, outer], dim=1))
        return (first + fm + deep + self.bias).squeeze(1)


def batch(rng, n=16):
    fields = np.stack([rng.integers(0, f, n) for f in FIELDS], 1)
    counts = rng.integers(1, 4, n)
    tags = rng.integers(0, 9, counts.sum())
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    weights = rng.uniform(0.5, 1.5, counts.sum()).astype(np.float32)
    y = ((fields[:, 0] + fields[:, 2]) % 3 == 0).astype(np.float32)
    return (torch.from_numpy(fields), torch.from_numpy(tags), torch.from_numpy(offsets),
            torch.from_numpy(weights), torch.from_numpy(y))


def auc(scores, labels):
    order = torch.argsort(scores)
    ranks = torch.empty_like(order)
    ranks[order] = torch.arange(1, len(scores) + 1)
    pos = labels.bool()
    npos, nneg = int(pos.sum()), int((~pos).sum())
    return (ranks[pos].sum().item() - npos * (npos + 1) / 2) / max(npos * nneg, 1)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = DeepFM()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    assert "offsets" not in model.state_dict() and "pairs" not in model.state_dict()
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.05, initial_accumulator_value=0.1)
    criterion = nn.BCEWithLogitsLoss(pos_weight=torch.tensor(2.0))
    net = torch.compile(model) if compile == "model" else model

    def step(fields, tags, tag_offsets, tag_weights, y):
        optimizer.zero_grad()
        logits = net(fields, tags, tag_offsets, tag_weights)
        loss = criterion(logits, y) + 1e-3 * model.embedding.weight.pow(2).sum()
        loss.backward()
        optimizer.step()
        return loss, logits.detach()

    if compile is True:
        step = torch.compile(step)
    losses, aucs = [], []
    for _ in range(steps):
        *inputs, y = batch(rng)
        loss, logits = step(*inputs, y)
        losses.append(loss.item())
        aucs.append(auc(logits, y))
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    restored = DeepFM()
    restored.load_state_dict(torch.load(buffer))
    *inputs, y = batch(rng)
    with torch.no_grad():
        scores = torch.sigmoid(restored(*inputs))
    return {"losses": losses, "auc": aucs, "scores": scores.tolist(),
            "pairs": restored.pairs.flatten().tolist()}
