"""Adversarial training (Madry et al.'s PGD, with an FGSM start as "fast adversarial
training" writes it), as robustness repositories write the step: the input cloned and
``requires_grad_(True)``-ed, its gradient by ``torch.autograd.grad(loss, x)`` and the FGSM
point ``x + eps * grad.sign()``; PGD's perturbation ``delta`` made ``requires_grad_()``
again at each of its iterations, ``loss.backward()`` filling ``delta.grad``, the ascent
``(delta + alpha * delta.grad.sign()).clamp(-eps, eps)`` and ``torch.min(torch.max(x +
delta, lo), hi) - x`` to stay in the data range, then ``.detach()``; the model's gradients
from those passes cleared by ``optimizer.zero_grad()``, the clean and adversarial losses
back-propagated together with weights by ``torch.autograd.backward([l_clean, l_adv],
[torch.tensor(0.5), torch.tensor(1.0)])``. Gradient norms of the last layer are logged by
a hook registered once on its weight (``register_hook(lambda g: grad_norms.append(
g.norm()))``) into a list the training step never names; ``eps`` grows over the first
steps (a Python float argument). SGD with Nesterov momentum; clean and FGSM accuracy at
the end."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, d=6, width=16, classes=3):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, width), nn.ReLU(), nn.Linear(width, width),
                                 nn.ReLU(), nn.Linear(width, classes))

    def forward(self, x):
        return self.net(x)


def fgsm(model, x, y, eps):
    x = x.clone().detach().requires_grad_(True)
    loss = F.cross_entropy(model(x), y)
    grad, = torch.autograd.grad(loss, x)
    return (x + eps * grad.sign()).detach()


def main(steps=4, compile=False, seed=0, batch=16, pgd_steps=2):
    rng = np.random.default_rng(seed)
    model = Net()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.5, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    grad_norms = []
    model.net[4].weight.register_hook(lambda g: grad_norms.append(g.norm()))
    lo, hi = torch.full((6,), -3.0), torch.full((6,), 3.0)
    ys = [rng.integers(0, 3, batch) for _ in range(steps)]
    data = [(torch.from_numpy(np.clip(rng.normal(0, 1, (batch, 6)) + np.eye(3, 6)[y] * 2,
                                      -3, 3).astype(np.float32)), torch.from_numpy(y))
            for y in ys]
    net = model

    def step(x, y, eps):
        x_fgsm = fgsm(net, x, y, eps)
        delta = x_fgsm - x
        for _ in range(pgd_steps):
            delta.requires_grad_()
            loss = F.cross_entropy(net(x + delta), y)
            loss.backward()
            delta = (delta + 0.5 * eps * delta.grad.sign()).clamp(-eps, eps)
            delta = (torch.min(torch.max(x + delta, lo), hi) - x).detach()
        optimizer.zero_grad()
        l_clean = F.cross_entropy(net(x), y)
        l_adv = F.cross_entropy(net(x + delta), y)
        torch.autograd.backward([l_clean, l_adv], [torch.tensor(0.5), torch.tensor(1.0)])
        optimizer.step()
        return l_clean.detach(), l_adv.detach(), delta.abs().max()

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    clean, adv, radii = [], [], []
    for i, (x, y) in enumerate(data):
        eps = 0.1 * min(i + 1, 2)
        l_clean, l_adv, radius = step(x, y, eps)
        clean.append(l_clean.item())
        adv.append(l_adv.item())
        radii.append(radius.item())
    x, y = data[0]
    x_adv = fgsm(net, x, y, 0.2)
    with torch.no_grad():
        correct = [int((net(x).argmax(1) == y).sum()), int((net(x_adv).argmax(1) == y).sum())]
    return {"clean": clean, "adversarial": adv, "radii": radii, "correct": correct,
            "grad_norms": [float(g) for g in grad_norms], "n_grad_norms": [len(grad_norms)],
            "last": model.net[4].weight[:2].flatten().tolist()}
