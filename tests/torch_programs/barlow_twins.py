"""Barlow Twins (Zbontar et al.) as its reference training script writes the loss and the
optimiser: two augmented views through a backbone and a projector, an affine-free
``nn.BatchNorm1d`` on each embedding, the cross-correlation ``c = self.bn(z1).T @
self.bn(z2)`` divided in place (``c.div_(batch)``), its diagonal pushed to one in place on
a view (``torch.diagonal(c).add_(-1).pow_(2).sum()``) and its off-diagonal read through the
``x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()`` trick and squared in place
(``pow_(2)``); a VICReg-style variance term (``F.relu(1 - torch.sqrt(z.var(dim=0) +
1e-4))``) added to it. The optimiser is the script's own ``LARS(optim.Optimizer)`` subclass:
``defaults`` dicts, ``@torch.no_grad() def step``, weight decay and the trust ratio
``torch.where(param_norm > 0., torch.where(update_norm > 0, eta * param_norm / update_norm,
one), one)`` skipped for 1-d parameters by a filter, a momentum buffer created in
``self.state[p]`` on first use; two parameter groups (weights and biases/norms) whose
``lr`` is set by hand every step from a warm-up and cosine schedule. The learned backbone
is read by a ``no_grad`` linear probe at the end."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim


def off_diagonal(x):
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


class BarlowTwins(nn.Module):
    def __init__(self, d_in=10, width=24, sizes=(16, 16), lambd=0.05, batch=16):
        super().__init__()
        self.batch, self.lambd = batch, lambd
        self.backbone = nn.Sequential(nn.Linear(d_in, width), nn.ReLU(), nn.Linear(width, width))
        layers, last = [], width
        for i, s in enumerate(sizes):
            layers.append(nn.Linear(last, s, bias=False))
            if i < len(sizes) - 1:
                layers += [nn.BatchNorm1d(s), nn.ReLU(inplace=True)]
            last = s
        self.projector = nn.Sequential(*layers)
        self.bn = nn.BatchNorm1d(sizes[-1], affine=False)

    def forward(self, y1, y2):
        z1 = self.projector(self.backbone(y1))
        z2 = self.projector(self.backbone(y2))
        c = self.bn(z1).T @ self.bn(z2)
        c.div_(self.batch)
        on_diag = torch.diagonal(c).add_(-1).pow_(2).sum()
        off_diag = off_diagonal(c).pow_(2).sum()
        std = torch.sqrt(z1.var(dim=0) + 1e-4)
        variance = torch.mean(F.relu(1 - std))
        return on_diag + self.lambd * off_diag + variance


class LARS(optim.Optimizer):
    def __init__(self, params, lr, weight_decay=0, momentum=0.9, eta=0.001,
                 weight_decay_filter=False, lars_adaptation_filter=False):
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, eta=eta,
                        weight_decay_filter=weight_decay_filter,
                        lars_adaptation_filter=lars_adaptation_filter)
        super().__init__(params, defaults)

    def exclude_bias_and_norm(self, p):
        return p.ndim == 1

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g["params"]:
                dp = p.grad
                if dp is None:
                    continue
                if not g["weight_decay_filter"] or not self.exclude_bias_and_norm(p):
                    dp = dp.add(p, alpha=g["weight_decay"])
                if not g["lars_adaptation_filter"] or not self.exclude_bias_and_norm(p):
                    param_norm = torch.norm(p)
                    update_norm = torch.norm(dp)
                    one = torch.ones_like(param_norm)
                    q = torch.where(param_norm > 0.,
                                    torch.where(update_norm > 0,
                                                (g["eta"] * param_norm / update_norm), one), one)
                    dp = dp.mul(q)
                state = self.state[p]
                if "mu" not in state:
                    state["mu"] = torch.zeros_like(p)
                mu = state["mu"]
                mu.mul_(g["momentum"]).add_(dp)
                p.add_(mu, alpha=-g["lr"])


def adjust_learning_rate(optimizer, step, total, base_lr, warmup=2):
    if step < warmup:
        lr = base_lr * (step + 1) / warmup
    else:
        q = math.cos(math.pi * (step - warmup) / max(1, total - warmup))
        lr = base_lr * (0.5 * (1 + q) * 0.9 + 0.1)
    optimizer.param_groups[0]["lr"] = lr * 0.2
    optimizer.param_groups[1]["lr"] = lr * 0.0048


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.4 if p.ndim > 1 else 0.1 if name.endswith("bias") else 0.0
            if scale:
                p.copy_(torch.from_numpy(rng.normal(0, scale, tuple(p.shape)).astype(np.float32)))


def views(rng, x):
    """Two 'augmentations': independent noise and feature dropping, drawn in NumPy."""
    out = []
    for _ in range(2):
        keep = rng.random(x.shape) > 0.2
        out.append(torch.from_numpy((x * keep + rng.normal(0, 0.3, x.shape)).astype(np.float32)))
    return out


def main(steps=4, compile=False, seed=0, batch=16):
    rng = np.random.default_rng(seed)
    model = BarlowTwins(batch=batch)
    init_weights(model, seed + 1)
    param_weights = [p for p in model.parameters() if p.ndim != 1]
    param_biases = [p for p in model.parameters() if p.ndim == 1]
    optimizer = LARS([{"params": param_weights}, {"params": param_biases}], lr=0,
                     weight_decay=1e-4, weight_decay_filter=True, lars_adaptation_filter=True,
                     eta=0.02)
    centers = rng.normal(0, 2, (4, 10))
    data = [centers[rng.integers(0, 4, batch)] for _ in range(steps)]
    net = model

    def step(y1, y2):
        optimizer.zero_grad()
        loss = net(y1, y2)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, lrs = [], []
    for i, x in enumerate(data):
        adjust_learning_rate(optimizer, i, steps, base_lr=1.0)
        y1, y2 = views(rng, x)
        losses.append(step(y1, y2).item())
        lrs.append(optimizer.param_groups[1]["lr"])
    model.eval()
    labels = rng.integers(0, 4, 24)
    x = torch.from_numpy((centers[labels] + rng.normal(0, 0.3, (24, 10))).astype(np.float32))
    with torch.no_grad():
        feats = model.backbone(x)
        means = torch.stack([feats[torch.from_numpy(labels == k)].mean(0) for k in range(4)])
        pred = torch.cdist(feats, means).argmin(1)
    return {"losses": losses, "lrs": lrs, "probe_correct": [int((pred.numpy() == labels).sum())],
            "feats": feats[:3].flatten().tolist(),
            "running_var": model.bn.running_var.tolist(),
            "mu": optimizer.state[param_weights[0]]["mu"][:2].flatten().tolist()}
