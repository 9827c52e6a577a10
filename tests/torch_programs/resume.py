"""Checkpointing and resuming a training run, written the way the PyTorch "saving and
loading a general checkpoint" recipe and most training scripts do it: a CNN with
``nn.BatchNorm2d``, ``nn.Dropout(p=0)``, a ``register_buffer("mean", ..., persistent=False)``
input normaliser (absent from ``state_dict``, so rebuilt by ``__init__``) and a persistent
``register_buffer("steps_seen", torch.zeros((), dtype=torch.long))`` counter incremented in
place with ``+= 1`` in ``forward`` while training; ``torch.optim.RMSprop(momentum=0.9,
centered=True)`` with a warmup ``LinearLR`` and ``ExponentialLR`` chained by
``ChainedScheduler``; ``torch.save({'epoch': ..., 'model_state_dict': ...,
'optimizer_state_dict': ..., 'scheduler_state_dict': ..., 'loss': ...}, PATH)`` halfway,
then a new model, optimiser and scheduler built from scratch and restored by
``load_state_dict(checkpoint[...])``, training continued; an uninterrupted run alongside
gives the reference. Evaluation under ``torch.no_grad()`` toggles ``model.eval()`` and
``model.train()`` and keeps the best ``copy.deepcopy(model.state_dict())``, restored at the
end (``strict=True`` returning its ``missing_keys``)."""
import copy
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import ChainedScheduler, ExponentialLR, LinearLR


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.5, 0.4, 0.3]).view(1, 3, 1, 1),
                             persistent=False)
        self.register_buffer("std", torch.tensor([0.25, 0.2, 0.3]).view(1, 3, 1, 1),
                             persistent=False)
        self.register_buffer("steps_seen", torch.zeros((), dtype=torch.long))
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 12, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(12)
        self.dropout = nn.Dropout(p=0.0)
        self.fc = nn.Linear(12, 4)

    def forward(self, x):
        if self.training:
            self.steps_seen += 1
        x = (x - self.mean) / self.std
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(self.dropout(x))


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, v in model.state_dict().items():
        if name.startswith("bn") or name == "steps_seen":
            state[name] = v
        else:
            state[name] = torch.tensor(rng.normal(0, 0.3, tuple(v.shape)).astype(np.float32))
    model.load_state_dict(state)


def build(seed):
    model = Net()
    init_weights(model, seed)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-2, momentum=0.9, centered=True)
    scheduler = ChainedScheduler([LinearLR(optimizer, start_factor=0.25, total_iters=3),
                                  ExponentialLR(optimizer, gamma=0.9)])
    return model, optimizer, scheduler


def evaluate(model, batches):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in batches:
            total += F.cross_entropy(model(x), y, reduction="sum").item()
    model.train()
    return total / sum(len(y) for _, y in batches)


def run(batches, val, compile, checkpoint_at=None, path=None, seed=0):
    model, optimizer, scheduler = build(seed)

    def make_step(model, optimizer):
        def train_step(x, y):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            return loss
        return torch.compile(train_step) if compile is True else train_step

    if compile == "model":
        model = torch.compile(model)
    train_step = make_step(model, optimizer)
    losses, val_losses = [], []
    best, best_state = float("inf"), None
    for epoch, (x, y) in enumerate(batches):
        if epoch == checkpoint_at:
            torch.save({'epoch': epoch, 'model_state_dict': model.state_dict(),
                        'optimizer_state_dict': optimizer.state_dict(),
                        'scheduler_state_dict': scheduler.state_dict(),
                        'loss': losses[-1]}, path)
            model, optimizer, scheduler = build(seed + 7)
            checkpoint = torch.load(path)
            model.load_state_dict(checkpoint['model_state_dict'])
            optimizer.load_state_dict(checkpoint['optimizer_state_dict'])
            scheduler.load_state_dict(checkpoint['scheduler_state_dict'])
            assert checkpoint['epoch'] == epoch
            if compile == "model":
                model = torch.compile(model)
            train_step = make_step(model, optimizer)
        model.train()
        losses.append(train_step(x, y).item())
        scheduler.step()
        val_losses.append(evaluate(model, val))
        if val_losses[-1] < best:
            best, best_state = val_losses[-1], copy.deepcopy(model.state_dict())
    result = model.load_state_dict(best_state, strict=True)
    return {"losses": losses, "val_losses": val_losses,
            "lr": optimizer.param_groups[0]["lr"], "steps_seen": int(model.steps_seen),
            "missing": len(result.missing_keys), "best": evaluate(model, val)}


def main(steps=10, compile=False, seed=0, batch=8):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    proto = rng.random((4, 3, 8, 8))

    def draw(n):
        y = rng.integers(0, 4, n)
        x = proto[y] + rng.normal(0, 0.3, (n, 3, 8, 8))
        return torch.tensor(x, dtype=torch.float32), torch.tensor(y)

    batches = [draw(batch) for _ in range(steps)]
    val = [draw(batch) for _ in range(2)]
    straight = run(batches, val, compile, seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        resumed = run(batches, val, compile, checkpoint_at=steps // 2,
                      path=os.path.join(tmp, "checkpoint.pt"), seed=seed)
    out = {"straight_" + k: v for k, v in straight.items()}
    out.update({"resumed_" + k: v for k, v in resumed.items()})
    out["lr"] = [straight.pop("lr"), resumed.pop("lr")]
    out.pop("straight_lr"), out.pop("resumed_lr")
    return out
