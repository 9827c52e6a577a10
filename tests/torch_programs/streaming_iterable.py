"""A streaming 1-D signal classifier fed by iterable datasets, as data-pipeline code writes
it: an ``IterableDataset`` that generates windows of a synthetic signal from its own NumPy
generator, splitting the work by ``torch.utils.data.get_worker_info()`` (None in the main
process: the whole range), two streams chained with ``+`` (a ``ChainDataset``), a
``DataLoader`` batching it with ``drop_last=True``; a held-out set as a ``ConcatDataset``
of two ``TensorDataset``s read by a second loader. The model is a ``nn.Conv1d`` stack with
``nn.BatchNorm1d`` and global average pooling; the step clears gradients with
``zero_grad(set_to_none=False)`` (the buffers are zeroed in place), clips them with
``clip_grad_value_`` and steps Adamax under ``CosineAnnealingWarmRestarts`` stepped with
a fractional epoch (``scheduler.step(epoch + i / iters)``). Evaluation counts correct
predictions under ``torch.no_grad()`` with ``model.eval()``."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import (ConcatDataset, DataLoader, IterableDataset, TensorDataset,
                              get_worker_info)


class SignalStream(IterableDataset):
    def __init__(self, start, end, seed):
        self.start, self.end, self.seed = start, end, seed

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            lo, hi = self.start, self.end
        else:
            per = int(math.ceil((self.end - self.start) / info.num_workers))
            lo = self.start + info.id * per
            hi = min(lo + per, self.end)
        rng = np.random.default_rng(self.seed)
        for i in range(lo, hi):
            label = i % 3
            t = np.linspace(0, 1, 32)
            x = np.sin(2 * np.pi * (label + 1) * 2 * t + rng.uniform(0, 2 * np.pi))
            x = x + rng.normal(0, 0.3, 32)
            yield torch.from_numpy(x[None].astype(np.float32)), label

    def __len__(self):
        return self.end - self.start


class Net(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.body = nn.Sequential(nn.Conv1d(1, 8, 5, padding=2, bias=False), nn.BatchNorm1d(8),
                                  nn.ReLU(), nn.Conv1d(8, 8, 5, stride=2, padding=2), nn.ReLU())
        self.head = nn.Linear(8, classes)

    def forward(self, x):
        return self.head(self.body(x).mean(-1))


def held_out(rng, n):
    labels = np.arange(n) % 3
    t = np.linspace(0, 1, 32)
    x = np.sin(2 * np.pi * (labels[:, None] + 1) * 2 * t + rng.uniform(0, 6, (n, 1)))
    return TensorDataset(torch.from_numpy(x[:, None].astype(np.float32)),
                         torch.from_numpy(labels))


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Net()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.4, tuple(v.shape))
                                               .astype(np.float32))
                           if v.dtype == torch.float32 else v
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.Adamax(model.parameters(), lr=2e-2)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=1,
                                                                     T_mult=2)
    stream = SignalStream(0, 8 * steps, seed) + SignalStream(100, 100 + 4 * steps, seed + 1)
    loader = DataLoader(stream, batch_size=12, drop_last=True)
    net = torch.compile(model) if compile == "model" else model

    def step(x, y):
        optimizer.zero_grad(set_to_none=False)
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
        optimizer.step()
        return loss

    if compile is True:
        step = torch.compile(step)
    losses, lrs = [], []
    iters = len(loader)
    for epoch in range(2):
        model.train()
        for i, (x, y) in enumerate(loader):
            losses.append(step(x, y).item())
            scheduler.step(epoch + i / iters)
            lrs.append(optimizer.param_groups[0]["lr"])
    test = DataLoader(ConcatDataset([held_out(rng, 9), held_out(rng, 6)]), batch_size=5)
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in test:
            correct += int((net(x).argmax(1) == y).sum())
    return {"losses": losses, "lrs": lrs, "correct": [correct], "batches": [iters],
            "grad_kept": [model.head.weight.grad is not None],
            "running_mean": model.body[1].running_mean.tolist()}
