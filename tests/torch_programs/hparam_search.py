"""A hand-written hyper-parameter search loop (no Optuna), the way quick sweeps are
scripted: for each trial the model's initial ``state_dict`` is restored from a
``copy.deepcopy``, weights re-initialised by ``model.apply(init_fn)`` where ``init_fn``
tests ``isinstance(m, nn.Linear)`` and the head is found by ``named_modules()`` name
filters; a fresh optimiser per trial (SGD with Nesterov momentum or AdamW, chosen by a
string) with per-group lrs (the head's ten times the body's), the body frozen at first and
added by ``optimizer.add_param_group`` halfway, every group's lr edited in place
mid-training (``for g in optimizer.param_groups: g["lr"] *= gamma``); metrics by
``F.one_hot(pred, C)`` confusion counts and ``argmax``, ``torch.where`` with scalar
branches (a float and an int) and bool/int promotion, ``logits.new_zeros``,
``new_full`` and ``new_tensor``, each trial's scores ``torch.stack``-ed from a Python
list of 0-d tensors and the best trial picked by ``torch.argmax``."""
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = 3


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh())
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x):
        return self.head(self.body(x))


def init_fn(m):
    if isinstance(m, nn.Linear):
        with torch.no_grad():
            m.weight.mul_(0.8)
            nn.init.zeros_(m.bias)


def data(rng, n=24):
    x = rng.normal(0, 1, (n, 6)).astype(np.float32)
    y = (np.argmax(x[:, :3] + 0.5 * x[:, 3:], 1)).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def metrics(logits, y):
    pred = logits.argmax(dim=1)
    confusion = F.one_hot(y, CLASSES).T.float() @ F.one_hot(pred, CLASSES).float()
    correct = torch.where(pred == y, 1.0, 0.0).mean()
    per_class = confusion.diag() / confusion.sum(1).clamp(min=1)
    hits = torch.where(pred == y, pred, -1)               # int with an int scalar
    flagged = torch.where(pred > 0, True, y > 1).sum()    # bool branches
    counts = logits.new_zeros(CLASSES).index_add_(0, pred, logits.new_full((len(y),), 1.0))
    prior = logits.new_tensor([1.0, 2.0, 1.0]) / 4
    weighted = (per_class * prior).sum()
    return correct, weighted, counts, hits.max(), flagged


def trial(model, initial, config, rng, steps, compile):
    model.load_state_dict(initial)
    model.apply(init_fn)
    for name, module in model.named_modules():
        if name.startswith("head") and isinstance(module, nn.Linear):
            with torch.no_grad():
                module.weight.mul_(config["head_scale"])
    for p in model.body.parameters():
        p.requires_grad_(False)
    head = [{"params": model.head.parameters(), "lr": config["lr"] * 10}]
    if config["optimizer"] == "sgd":
        optimizer = torch.optim.SGD(head, lr=config["lr"], momentum=0.9, nesterov=True)
    else:
        optimizer = torch.optim.AdamW(head, lr=config["lr"], weight_decay=0.1)
    net = torch.compile(model) if compile == "model" else model

    def step(x, y):
        optimizer.zero_grad()
        logits = net(x)
        loss = F.cross_entropy(logits, y, label_smoothing=config["smoothing"])
        loss.backward()
        optimizer.step()
        return loss, logits.detach()

    if compile is True:
        step = torch.compile(step)
    losses, scores = [], []
    for i in range(steps):
        if i == steps // 2:
            for p in model.body.parameters():
                p.requires_grad_(True)
            optimizer.add_param_group({"params": list(model.body.parameters())})
        x, y = data(rng)
        loss, logits = step(x, y)
        for g in optimizer.param_groups:
            g["lr"] *= config["gamma"]
        losses.append(loss.item())
        correct, weighted, counts, top, flagged = metrics(logits, y)
        scores.append(weighted)
    return losses, torch.stack(scores), [correct.item(), top.item(), flagged.item()] \
        + counts.tolist(), [g["lr"] for g in optimizer.param_groups]


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Net()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.4, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    initial = copy.deepcopy(model.state_dict())
    configs = [{"optimizer": "sgd", "lr": 0.01, "gamma": 0.9, "smoothing": 0.0, "head_scale": 1},
               {"optimizer": "adamw", "lr": 0.003, "gamma": 0.8, "smoothing": 0.1,
                "head_scale": 0.5}]
    results, summaries, lrs = [], [], []
    for config in configs:
        losses, scores, summary, lr = trial(model, initial, config, rng, steps, compile)
        results.append(losses)
        summaries.append(scores.mean())
        lrs.append(lr)
    best = torch.argmax(torch.stack(summaries)).item()
    return {"losses": results, "scores": [s.item() for s in summaries], "best": best,
            "summary": summary, "lrs": lrs, "initial": initial["head.weight"].sum().item()}
