"""Sharpness-aware minimisation (Foret et al.) as the popular ``SAM(torch.optim.Optimizer)``
wrapper writes it: the base optimiser built on SAM's own ``self.param_groups`` (then shared,
``self.param_groups = self.base_optimizer.param_groups``), ``first_step`` saving each weight
in ``self.state[p]["old_p"] = p.data.clone()`` and climbing to ``p + e_w`` with ``e_w =
(torch.pow(p, 2) if adaptive else 1.0) * p.grad * scale.to(p)`` where ``scale = rho /
(grad_norm + 1e-12)`` and the norm is ``torch.norm(torch.stack([... .norm(p=2) ...]),
p=2)``; ``second_step`` restoring the weights by rebinding ``p.data = self.state[p]
["old_p"]`` before ``self.base_optimizer.step()``. The training step runs two forward and
backward passes, the second with batch-norm statistics frozen by ``model.apply`` of
functions that save ``momentum`` in ``module.backup_momentum`` and set it to 0 (and restore
it), a label-smoothed cross-entropy written with ``scatter_`` on a one-hot, and
``zero_grad=True`` inside the steps. ``adaptive`` (ASAM) is turned on halfway through by
setting the parameter groups' flag from outside, as a recipe change would."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, adaptive=False, **kwargs):
        assert rho >= 0.0, f"Invalid rho, should be non-negative: {rho}"
        defaults = dict(rho=rho, adaptive=adaptive, **kwargs)
        super(SAM, self).__init__(params, defaults)
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups
        self.defaults.update(self.base_optimizer.defaults)

    @torch.no_grad()
    def first_step(self, zero_grad=False):
        grad_norm = self._grad_norm()
        for group in self.param_groups:
            scale = group["rho"] / (grad_norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                self.state[p]["old_p"] = p.data.clone()
                e_w = (torch.pow(p, 2) if group["adaptive"] else 1.0) * p.grad * scale.to(p)
                p.add_(e_w)
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.data = self.state[p]["old_p"]
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad()

    def _grad_norm(self):
        return torch.norm(torch.stack([
            ((torch.abs(p) if group["adaptive"] else 1.0) * p.grad).norm(p=2)
            for group in self.param_groups for p in group["params"] if p.grad is not None]),
            p=2)


def disable_running_stats(model):
    def _disable(module):
        if isinstance(module, nn.BatchNorm1d):
            module.backup_momentum = module.momentum
            module.momentum = 0
    model.apply(_disable)


def enable_running_stats(model):
    def _enable(module):
        if isinstance(module, nn.BatchNorm1d) and hasattr(module, "backup_momentum"):
            module.momentum = module.backup_momentum
    model.apply(_enable)


def smooth_crossentropy(pred, gold, smoothing=0.1):
    n_class = pred.size(1)
    one_hot = torch.full_like(pred, fill_value=smoothing / (n_class - 1))
    one_hot.scatter_(dim=1, index=gold.unsqueeze(1), value=1.0 - smoothing)
    log_prob = F.log_softmax(pred, dim=1)
    return F.kl_div(input=log_prob, target=one_hot, reduction="none").sum(-1)


class Net(nn.Module):
    def __init__(self, d=8, width=20, classes=3):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, width), nn.BatchNorm1d(width), nn.ReLU(),
                                  nn.Linear(width, width), nn.BatchNorm1d(width), nn.ReLU())
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.body(x))


def main(steps=4, compile=False, seed=0, batch=16):
    rng = np.random.default_rng(seed)
    model = Net()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "body.1" not in name and "body.4" not in name:
                p.copy_(torch.from_numpy(rng.normal(0, 0.4, tuple(p.shape)).astype(np.float32)))
    optimizer = SAM(model.parameters(), torch.optim.SGD, rho=0.1, adaptive=False, lr=0.1,
                    momentum=0.9, weight_decay=5e-4)
    ys = [rng.integers(0, 3, batch) for _ in range(steps)]
    xs = [torch.from_numpy((rng.normal(0, 1, (batch, 8)) + np.eye(3, 8)[y] * 2)
                           .astype(np.float32)) for y in ys]
    net = model

    def step(x, y):
        enable_running_stats(model)
        predictions = net(x)
        loss = smooth_crossentropy(predictions, y)
        loss.mean().backward()
        optimizer.first_step(zero_grad=True)
        disable_running_stats(model)
        smooth_crossentropy(net(x), y).mean().backward()
        optimizer.second_step(zero_grad=True)
        correct = torch.argmax(predictions.data, 1) == y
        return loss.detach(), correct

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, correct = [], []
    for i, (x, y) in enumerate(zip(xs, ys)):
        if i == steps // 2:
            for group in optimizer.param_groups:
                group["adaptive"], group["rho"] = True, 0.5
        loss, ok = step(x, torch.from_numpy(y))
        losses.append(loss.mean().item())
        correct.append(int(ok.sum()))
    model.eval()
    with torch.no_grad():
        out = net(xs[0])
    bn = model.body[1]
    return {"losses": losses, "correct": correct, "out": out[:4].flatten().tolist(),
            "running_mean": bn.running_mean.tolist(), "momentum": [float(bn.momentum)],
            "head": model.head.weight.flatten().tolist()}
