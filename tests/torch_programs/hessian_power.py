"""Curvature without ``torch.func``, as PyHessian-style analysis code and gradient-penalty
training write it: Hessian-vector products by differentiating the gradient again
(``gradsH = torch.autograd.grad(loss, params, create_graph=True)`` then
``torch.autograd.grad(gradsH, params, grad_outputs=v, retain_graph=True)``), vectors kept
as Python lists of tensors with ``group_product`` (``sum(torch.sum(x * y) ...)``) and
``normalization``; the top eigenvalue by a few power iterations from a NumPy-drawn start,
the Hessian trace by Hutchinson's estimator with Rademacher vectors, and training with an
input-gradient-free gradient-norm penalty (``loss + lam * sum(g.pow(2).sum() for g in
torch.autograd.grad(loss, params, create_graph=True))``) by SGD, a curvature estimate every
other step (``lr`` capped by ``1 / eigenvalue`` through ``param_groups``). A tanh MLP
classifier with ``F.cross_entropy``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def group_product(xs, ys):
    return sum([torch.sum(x * y) for (x, y) in zip(xs, ys)])


def normalization(v):
    s = torch.sqrt(group_product(v, v))
    return [vi / (s + 1e-6) for vi in v]


def hessian_vector_product(gradsH, params, v):
    return torch.autograd.grad(gradsH, params, grad_outputs=v, only_inputs=True,
                               retain_graph=True)


def curvature(model, x, y, v0, rademacher, iters=3):
    """The top Hessian eigenvalue (power iteration) and Hutchinson's trace estimate."""
    params = [p for p in model.parameters() if p.requires_grad]
    loss = F.cross_entropy(model(x), y)
    gradsH = torch.autograd.grad(loss, params, create_graph=True)
    v = normalization(v0)
    eigenvalue = None
    for _ in range(iters):
        Hv = hessian_vector_product(gradsH, params, v)
        eigenvalue = group_product(Hv, v)
        v = normalization([h.detach() for h in Hv])
    trace = 0.0
    for r in rademacher:
        Hv = hessian_vector_product(gradsH, params, r)
        trace = trace + group_product(Hv, r)
    return eigenvalue.detach(), (trace / len(rademacher)).detach()


class MLP(nn.Module):
    def __init__(self, d=5, width=12, classes=3):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, width), nn.Linear(width, classes)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def main(steps=4, compile=False, seed=0, batch=20, lam=0.05):
    rng = np.random.default_rng(seed)
    model = MLP()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.6, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    shapes = [tuple(p.shape) for p in model.parameters()]
    ys = [rng.integers(0, 3, batch) for _ in range(steps)]
    data = [(torch.from_numpy((rng.normal(0, 1, (batch, 5)) + np.eye(3, 5)[y]).astype(np.float32)),
             torch.from_numpy(y)) for y in ys]
    probes = [([torch.from_numpy(rng.normal(0, 1, s).astype(np.float32)) for s in shapes],
               [[torch.from_numpy(rng.choice([-1.0, 1.0], s).astype(np.float32)) for s in shapes]
                for _ in range(2)]) for _ in range(steps)]
    net = model

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        grads = torch.autograd.grad(loss, list(model.parameters()), create_graph=True)
        penalty = sum(g.pow(2).sum() for g in grads)
        (loss + lam * penalty).backward()
        optimizer.step()
        return loss.detach(), penalty.detach()

    measure = curvature
    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step, measure = torch.compile(step), torch.compile(curvature)
    losses, penalties, eigs, traces, lrs = [], [], [], [], []
    for i, (x, y) in enumerate(data):
        if i % 2 == 0:
            eig, tr = measure(net, x, y, *probes[i])
            eigs.append(eig.item())
            traces.append(tr.item())
            for g in optimizer.param_groups:
                g["lr"] = min(1.0, 1.0 / max(eig.item(), 1e-3))
            lrs.append(optimizer.param_groups[0]["lr"])
        loss, penalty = step(x, y)
        losses.append(loss.item())
        penalties.append(penalty.item())
    return {"losses": losses, "penalties": penalties, "eigenvalues": eigs, "traces": traces,
            "lrs": lrs, "fc2": model.fc2.weight.flatten().tolist()}
