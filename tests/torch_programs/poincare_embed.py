"""Poincaré embeddings of a small hierarchy, in the style of facebookresearch's
poincare-embeddings: the hyperbolic distance as a custom ``autograd.Function`` with its
own backward (``arcosh`` of ``1 + 2|u-v|^2 / ((1-|u|^2)(1-|v|^2))``, the squared norms
clamped below 1 - eps), negatives drawn per positive pair and scored by a softmax loss over
``-dist`` (the target always index 0), the embedding kept inside the ball by
``torch.renorm`` written into ``.data``, and Riemannian SGD as an ``Optimizer`` subclass
rescaling each gradient by ``(1 - |x|^2)^2 / 4`` before ``add_`` and a retraction; then
the same loss through ``torch.atanh`` of the Möbius addition's norm (the distance written
the way hyperbolic-network code writes it), ``torch.acosh`` / ``asinh`` for reporting, and
the mean rank of the true parent by ``argsort`` of the distances."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Function
from torch.optim.optimizer import Optimizer

EPS = 1e-5


class PoincareDistance(Function):
    @staticmethod
    def grad(x, v, sqnormx, sqnormv, sqdist):
        alpha = 1 - sqnormx
        beta = 1 - sqnormv
        z = 1 + 2 * sqdist / (alpha * beta)
        a = ((sqnormv - 2 * torch.sum(x * v, dim=-1) + 1) / torch.pow(alpha, 2)).unsqueeze(-1)
        a = a.expand_as(x) * x - v / alpha.unsqueeze(-1).expand_as(v)
        z = torch.sqrt(torch.pow(z, 2) - 1)
        z = torch.clamp(z * beta, min=EPS).unsqueeze(-1)
        return 4 * a / z.expand_as(x)

    @staticmethod
    def forward(ctx, u, v):
        squnorm = torch.clamp(torch.sum(u * u, dim=-1), 0, 1 - EPS)
        sqvnorm = torch.clamp(torch.sum(v * v, dim=-1), 0, 1 - EPS)
        sqdist = torch.sum(torch.pow(u - v, 2), dim=-1)
        ctx.save_for_backward(u, v, squnorm, sqvnorm, sqdist)
        x = sqdist / ((1 - squnorm) * (1 - sqvnorm)) * 2 + 1
        z = torch.sqrt(torch.pow(x, 2) - 1)
        return torch.log(x + z)

    @staticmethod
    def backward(ctx, g):
        u, v, squnorm, sqvnorm, sqdist = ctx.saved_tensors
        g = g.unsqueeze(-1)
        gu = PoincareDistance.grad(u, v, squnorm, sqvnorm, sqdist)
        gv = PoincareDistance.grad(v, u, sqvnorm, squnorm, sqdist)
        return g.expand_as(gu) * gu, g.expand_as(gv) * gv


def mobius_add(x, y):
    xy = (x * y).sum(-1, keepdim=True)
    x2 = x.pow(2).sum(-1, keepdim=True)
    y2 = y.pow(2).sum(-1, keepdim=True)
    num = (1 + 2 * xy + y2) * x + (1 - x2) * y
    return num / (1 + 2 * xy + x2 * y2).clamp_min(1e-15)


def mobius_distance(u, v):
    norm = mobius_add(-u, v).norm(dim=-1).clamp(max=1 - EPS)
    return 2 * torch.atanh(norm)


class RiemannianSGD(Optimizer):
    def __init__(self, params, lr=0.3, max_norm=1 - EPS):
        super().__init__(params, dict(lr=lr, max_norm=max_norm))

    @torch.no_grad()
    def step(self, lr=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                d_p = p.grad
                sqnorm = torch.sum(p * p, dim=-1, keepdim=True)
                d_p = d_p * ((1 - sqnorm) ** 2 / 4).expand_as(d_p)
                p.add_(d_p, alpha=-(lr or group["lr"]))
                p.data = torch.renorm(p.data, 2, 0, group["max_norm"])


class Embedding(nn.Module):
    def __init__(self, size, dim, mobius=False):
        super().__init__()
        self.lt = nn.Embedding(size, dim)
        self.mobius = mobius

    def forward(self, inputs):
        e = self.lt(inputs)
        o = e.narrow(1, 1, e.size(1) - 1)
        s = e.narrow(1, 0, 1).expand_as(o)
        dists = mobius_distance(s, o) if self.mobius else PoincareDistance.apply(s, o)
        return -dists


def hierarchy():
    """A tree: 0 the root, 1-3 its children, 4-12 their children (transitive closure)."""
    edges = []
    for c in range(1, 4):
        edges.append((c, 0))
        for k in range(3):
            leaf = 4 + 3 * (c - 1) + k
            edges += [(leaf, c), (leaf, 0)]
    return np.array(edges)


def sample(rng, edges, n_nodes, negs):
    batch = edges[rng.choice(len(edges), 8, replace=False)]
    neg = rng.integers(0, n_nodes, (8, negs))
    return torch.from_numpy(np.concatenate([batch, neg], axis=1))


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    edges, n = hierarchy(), 13
    models, log = [], []
    for mobius in (False, True):
        model = Embedding(n, 3, mobius=mobius)
        with torch.no_grad():
            model.lt.weight.copy_(torch.from_numpy(rng.uniform(-1e-1, 1e-1, (n, 3))
                                                   .astype(np.float32)))
        optimizer = RiemannianSGD(model.parameters(), lr=0.5)
        loss_fn = nn.CrossEntropyLoss()
        net = torch.compile(model) if compile == "model" else model

        def train_step(inputs, lr):
            optimizer.zero_grad()
            preds = net(inputs)
            loss = loss_fn(preds, torch.zeros(preds.size(0), dtype=torch.long))
            loss.backward()
            optimizer.step(lr=lr)
            return loss.detach()

        if compile is True:
            train_step = torch.compile(train_step)
        for step in range(steps):
            inputs = sample(rng, edges, n, 5)
            lr = 0.5 * (0.1 if step == 0 else 1.0)   # burn-in
            log.append(train_step(inputs, lr).item())
        models.append(model)
    w = models[0].lt.weight.detach()
    d = PoincareDistance.apply(w.unsqueeze(1).expand(n, n, 3), w.unsqueeze(0).expand(n, n, 3))
    d.diagonal().fill_(float("inf"))
    children = torch.from_numpy(edges[::3][:, 0])
    ranks = (torch.argsort(d[children], dim=1) == 0).float().argmax(dim=1)
    norms = w.norm(dim=1)
    return {"log": log, "ranks": ranks.tolist(), "acosh": torch.acosh(1 + norms[:4]).tolist(),
            "asinh": torch.asinh(norms[:4]).tolist(),
            "mobius_norms": models[1].lt.weight.detach().norm(dim=1).tolist()}
