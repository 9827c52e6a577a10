"""Streaming feature preprocessing kept in buffers and written inside ``forward``, as
tabular and speech front ends write it: a ``register_buffer`` step counter incremented in
place (``self.count += 1``) whose value sets a cumulative-average momentum, running mean
and variance updated with ``mul_``/``add_`` under ``torch.no_grad()`` while training;
quantile bin edges refreshed from a batch by ``torch.quantile`` into the buffer with
``copy_``, features bucketed by ``torch.bucketize(..., right=True)`` into embeddings;
per-bin statistics by a reversed ``cumsum``; outliers clipped in place on slices by
``torch.where``; an ``nn.ModuleDict`` of heads picked by a string attribute set between
calls; a weighted covariance of the features (``torch.cov`` with ``fweights`` and
``aweights``); ``CosineAnnealingWarmRestarts`` stepped with a fractional epoch."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RunningQuantizer(nn.Module):
    def __init__(self, features=3, bins=5, dim=6):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self.register_buffer("mean", torch.zeros(features))
        self.register_buffer("var", torch.ones(features))
        self.register_buffer("edges", torch.linspace(-1.0, 1.0, bins - 1).repeat(features, 1))
        self.embed = nn.Embedding(features * bins, dim)
        self.bins = bins

    @torch.no_grad()
    def update(self, x):
        self.count += 1
        momentum = 1.0 / self.count.float()
        self.mean.mul_(1 - momentum).add_(momentum * x.mean(0))
        self.var.mul_(1 - momentum).add_(momentum * x.var(0))
        q = torch.linspace(0, 1, self.bins + 1)[1:-1]
        self.edges.copy_(torch.quantile((x - self.mean) / self.var.sqrt(), q, dim=0).T)

    def forward(self, x):
        if self.training:
            self.update(x)
        z = (x - self.mean) / (self.var + 1e-5).sqrt()
        z[:, 1:] = torch.where(z[:, 1:].abs() > 2.0, z[:, 1:].sign() * 2.0, z[:, 1:])
        ids = torch.stack([torch.bucketize(z[:, f].contiguous(), self.edges[f], right=True)
                           for f in range(z.shape[1])], 1)
        ids = ids + torch.arange(z.shape[1]) * self.bins
        occupancy = F.one_hot(ids, self.bins * z.shape[1]).sum((0, 1)).float()
        tail = occupancy.flip(0).cumsum(0).flip(0) / occupancy.sum()
        return self.embed(ids).flatten(1), z, tail


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.quantizer = RunningQuantizer()
        self.heads = nn.ModuleDict({"click": nn.Linear(18 + 3, 2), "dwell": nn.Linear(18 + 3, 1)})
        self.task = "click"

    def forward(self, x):
        emb, z, tail = self.quantizer(x)
        return self.heads[self.task](torch.cat([emb, z], 1)), tail


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Model()
    state = model.state_dict()
    state.update({k: torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape)).astype(np.float32))
                  for k, v in state.items() if k.startswith(("heads", "quantizer.embed"))})
    model.load_state_dict(state)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=2, T_mult=2)
    net = torch.compile(model) if compile == "model" else model

    def step(x, y, r):
        optimizer.zero_grad()
        model.task = "click"
        logits, tail = net(x)
        model.task = "dwell"
        dwell, _ = net(x)
        loss = F.cross_entropy(logits, y) + F.mse_loss(dwell.squeeze(1), r)
        loss.backward()
        optimizer.step()
        spread = torch.cov(x.T, fweights=(y + 1), aweights=r.abs() + 0.1)
        return loss, tail, spread

    if compile is True:
        step = torch.compile(step)
    losses = []
    for i in range(steps):
        x = torch.from_numpy((rng.normal(0, 1, (16, 3)) * [1, 3, 0.5] + [0, 1, -2])
                             .astype(np.float32))
        y = torch.from_numpy(rng.integers(0, 2, 16))
        r = torch.from_numpy(rng.normal(0, 1, 16).astype(np.float32))
        loss, tail, spread = step(x, y, r)
        losses.append([loss.item()] + tail.tolist() + spread.flatten().tolist())
        scheduler.step(i + 0.5)
    model.eval()
    model.task = "click"
    with torch.no_grad():
        out, _ = net(torch.from_numpy(rng.normal(0, 1, (4, 3)).astype(np.float32)))
    q = model.quantizer
    return {"losses": losses, "eval": out.flatten().tolist(),
            "buffers": torch.cat([q.mean, q.var, q.edges.flatten()]).tolist(),
            "count": [int(q.count)], "lr": [scheduler.get_last_lr()[0]]}
