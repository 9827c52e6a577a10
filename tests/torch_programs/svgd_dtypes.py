"""Stein variational gradient descent as the widely copied PyTorch SVGD notebook writes
it, run as numerical experiments are, once per default dtype (``torch.set_default_dtype``
float32, then float64, then back) with one step function (compiled once) serving every
run: an ``RBF`` kernel module computing squared distances from ``X.matmul(X.t())`` and the
diagonals (``torch.einsum("ii->i", XX)``), its bandwidth by the median heuristic
(``torch.median`` of the detached distances); the particles' update ``phi`` from
``autograd.grad`` of the target's ``log_prob`` (a two-component Gaussian mixture by
``torch.logsumexp`` over ``MultivariateNormal`` log-densities) and of the kernel's sum
with respect to the particles, written into ``X.grad`` for ``Adam``; the result scored by
an MMD between particles and reference samples with ``torch.cdist(...,
compute_mode="donot_use_mm_for_euclid_dist")`` and ``torch.pdist``; the kernel built of
``torch.zeros``/``arange``/``linspace`` of the default dtype."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import math

import numpy as np
import torch
import torch.autograd as autograd
from torch.distributions import MultivariateNormal


class RBF(torch.nn.Module):
    def __init__(self, sigma=None):
        super().__init__()
        self.sigma = sigma

    def forward(self, X, Y):
        XX = X.matmul(X.t())
        XY = X.matmul(Y.t())
        YY = Y.matmul(Y.t())
        dnorm2 = -2 * XY + torch.einsum("ii->i", XX).unsqueeze(1) + YY.diag().unsqueeze(0)
        if self.sigma is None:
            h = torch.median(dnorm2.detach()) / (2 * math.log(X.size(0) + 1))
            sigma = torch.sqrt(h)
        else:
            sigma = self.sigma
        gamma = 1.0 / (1e-8 + 2 * sigma ** 2)
        return (-gamma * dnorm2).exp()


class Mixture:
    def __init__(self, means, scale):
        d = means.shape[1]
        self.components = [MultivariateNormal(m, covariance_matrix=scale * torch.eye(d))
                           for m in means]
        self.log_weights = torch.log(torch.tensor([0.3, 0.7]))

    def log_prob(self, x):
        lp = torch.stack([c.log_prob(x) for c in self.components], dim=-1)
        return torch.logsumexp(lp + self.log_weights, dim=-1)


def mmd(x, y):
    def k(a, b):
        d = torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist") ** 2
        return sum(torch.exp(-d / bw) for bw in torch.linspace(0.5, 2.0, 3))
    return k(x, x).mean() + k(y, y).mean() - 2 * k(x, y).mean()


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    K = RBF()
    net = torch.compile(K) if compile == "model" else K

    def svgd_step(X, target, optimizer):
        optimizer.zero_grad()
        X_ = X.detach().requires_grad_(True)
        log_prob = target.log_prob(X_)
        score_func = autograd.grad(log_prob.sum(), X_)[0]
        K_XX = net(X_, X_.detach())
        grad_K = -autograd.grad(K_XX.sum(), X_)[0]
        phi = (K_XX.detach().matmul(score_func) + grad_K) / X_.size(0)
        X.grad = -phi
        optimizer.step()
        offsets = torch.arange(X.size(0)) * 0.5 + torch.zeros(X.size(0))
        return log_prob.mean().detach(), offsets.sum()

    if compile is True:
        svgd_step = torch.compile(svgd_step)
    out = {}
    try:
        for dtype in (torch.float32, torch.float64, torch.float32):
            torch.set_default_dtype(dtype)
            means = torch.from_numpy(np.array([[-1.5, 0.0], [1.5, 0.5]])).to(dtype)
            target = Mixture(means, 0.5)
            X = torch.from_numpy(rng.normal(0, 1, (10, 2))).to(dtype)
            optimizer = torch.optim.Adam([X], lr=0.1)
            log = []
            for _ in range(steps):
                lp, off = svgd_step(X, target, optimizer)
                log.append([lp.item(), off.item(), str(off.dtype).split(".")[-1]])
            reference = torch.from_numpy(rng.normal(0, 1, (12, 2))).to(dtype) * 0.7 + means[1]
            name = str(dtype).split(".")[-1] + ("_again" if name_seen(out, dtype) else "")
            out[name] = {"log": [row[:2] for row in log], "dtypes": [row[2] for row in log],
                         "mmd": mmd(X.detach(), reference).item(),
                         "pdist": torch.pdist(X.detach())[:5].tolist(),
                         "X": X.detach().flatten().tolist()}
    finally:
        torch.set_default_dtype(torch.float32)
    return {f"{run}_{k}": v for run, d in out.items() for k, v in d.items()}


def name_seen(out, dtype):
    return str(dtype).split(".")[-1] in out
