"""A TabTransformer on a synthetic table, written the way tabular deep-learning code is:
categorical columns encoded with ``torch.unique(col, return_inverse=True)``, a numeric
column binned into a categorical one by ``torch.quantile`` and ``torch.bucketize``, one
shared ``nn.Embedding`` for all the categorical columns with per-column offsets
``F.pad(torch.tensor(categories), (1, 0), value=special).cumsum(dim=-1)[:-1]`` in a
non-persistent buffer, a column embedding added per column, an ``nn.TransformerEncoder``
(``batch_first=True``, ``norm_first=True``) over the columns, the continuous features
normalised by ``nn.LayerNorm`` and concatenated to the flattened column embeddings, an MLP
head, ``nn.BCEWithLogitsLoss(pos_weight=...)``, ``torch.manual_seed`` and a
``torch.Generator`` checked for determinism (their draws are compared within one run
only: each framework draws its own numbers), ``OneCycleLR`` stepped per batch,
``clip_grad_norm_`` whose returned norm is logged, and a ``state_dict`` round trip of
the model, the optimiser and the scheduler through ``torch.save`` mid-training."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class TabTransformer(nn.Module):
    def __init__(self, categories, num_continuous, dim=8, depth=1, heads=2,
                 num_special_tokens=2):
        super().__init__()
        self.num_categories = len(categories)
        total_tokens = sum(categories) + num_special_tokens
        categories_offset = F.pad(torch.tensor(list(categories)), (1, 0),
                                  value=num_special_tokens)
        categories_offset = categories_offset.cumsum(dim=-1)[:-1]
        self.register_buffer("categories_offset", categories_offset, persistent=False)
        self.category_embed = nn.Embedding(total_tokens, dim)
        self.column_embed = nn.Parameter(torch.zeros(1, self.num_categories, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.transformer = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(num_continuous)
        input_size = dim * self.num_categories + num_continuous
        self.mlp = nn.Sequential(nn.Linear(input_size, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x_categ, x_cont):
        assert x_categ.shape[-1] == self.num_categories
        x_categ = x_categ + self.categories_offset
        x = self.category_embed(x_categ) + self.column_embed
        x = self.transformer(x)
        flat_categ = x.flatten(1)
        normed_cont = self.norm(x_cont)
        return self.mlp(torch.cat((flat_categ, normed_cont), dim=-1)).squeeze(-1)


def make_table(rng, n):
    city = rng.choice(np.array([11, 42, 7, 99]), n)
    plan = rng.choice(np.array([3, 5, 8]), n)
    age = rng.uniform(18, 80, n)
    income = rng.normal(50, 15, n)
    logit = 0.8 * (city == 42) - 0.5 * (plan == 3) + 0.03 * (age - 50) + 0.02 * (income - 50)
    label = (logit + rng.normal(0, 0.5, n) > 0.3).astype(np.float32)
    return city, plan, age.astype(np.float32), income.astype(np.float32), label


def encode(city, plan, age, income):
    _, city_idx = torch.unique(torch.tensor(city), return_inverse=True)
    _, plan_idx = torch.unique(torch.tensor(plan), return_inverse=True)
    age_t = torch.tensor(age)
    edges = torch.quantile(age_t, torch.tensor([0.25, 0.5, 0.75]))
    age_bin = torch.bucketize(age_t, edges)
    x_categ = torch.stack([city_idx, plan_idx, age_bin], dim=1)
    x_cont = torch.stack([age_t / 100.0, torch.tensor(income) / 100.0], dim=1)
    return x_categ, x_cont


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor((1.0 + rng.normal(0, 0.05, tuple(v.shape)) if "norm" in k and
                         k.endswith("weight") else rng.normal(0, 0.3, tuple(v.shape)))
                        .astype(np.float32))
        for k, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch=16):
    torch.manual_seed(0)
    a = torch.randn(3)
    torch.manual_seed(0)
    assert torch.equal(a, torch.randn(3)), "manual_seed must make draws repeat"
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert torch.equal(torch.rand(4, generator=g1), torch.rand(4, generator=g2))

    rng = np.random.default_rng(seed + 1)
    city, plan, age, income, label = make_table(rng, batch * steps)
    x_categ, x_cont = encode(city, plan, age, income)
    y = torch.tensor(label)
    categories = tuple(int(x_categ[:, i].max()) + 1 for i in range(x_categ.shape[1]))
    model = TabTransformer(categories, num_continuous=2)
    init_weights(model, seed)
    pos_weight = (y == 0).sum() / (y == 1).sum().clamp(min=1)
    criterion = nn.BCEWithLogitsLoss(pos_weight=pos_weight)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=steps,
                                                    pct_start=0.3)

    def train_step(xc, xn, target):
        optimizer.zero_grad()
        loss = criterion(model(xc, xn), target)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        return loss, grad_norm

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, norms, lrs = [], [], []
    for step in range(steps):
        if step == steps // 2:   # checkpoint, then resume from it into fresh objects
            path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict()}, path)
            ckpt = torch.load(path)
            assert "categories_offset" not in ckpt["model"]
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            scheduler.load_state_dict(ckpt["scheduler"])
        model.train()
        sl = slice(step * batch, (step + 1) * batch)
        loss, grad_norm = train_step(x_categ[sl], x_cont[sl], y[sl])
        losses.append(loss.item())
        norms.append(float(grad_norm))
        lrs.append(scheduler.get_last_lr()[0])
        scheduler.step()
    model.eval()
    with torch.no_grad():
        probs = torch.sigmoid(model(x_categ[:8], x_cont[:8]))
    return {"losses": losses, "grad_norms": norms, "lrs": lrs, "probs": probs.tolist(),
            "categories": list(categories)}
