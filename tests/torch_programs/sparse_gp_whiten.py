"""A sparse variational GP regression written as GPflow/GPyTorch-style research code does
by hand: inducing points as a Parameter, an RBF kernel by ``torch.cdist(...).pow(2)``, the
Cholesky factor with jitter added to ``torch.eye``, the whitened projection by
``torch.linalg.solve_triangular(Luu, Kuf, upper=False)``, the variational posterior's
``q_sqrt`` kept lower-triangular by ``torch.tril`` and its KL term by the older
``torch.triangular_solve(..., upper=False)`` (with ``.solution``), a second solve from the
right (``left=False``) for the predictive mean, ``torch.linalg.matrix_rank`` of the
kernel matrix logged for diagnostics, softplus-constrained hyper-parameters, the
evidence lower bound in float64 and Adam."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class SVGP(nn.Module):
    def __init__(self, Z, jitter=1e-6):
        super().__init__()
        m = Z.shape[0]
        self.Z = nn.Parameter(Z.clone())
        self.raw_lengthscale = nn.Parameter(torch.tensor(0.3, dtype=torch.float64))
        self.raw_variance = nn.Parameter(torch.tensor(0.5, dtype=torch.float64))
        self.raw_noise = nn.Parameter(torch.tensor(-1.0, dtype=torch.float64))
        self.q_mu = nn.Parameter(torch.zeros(m, 1, dtype=torch.float64))
        self.q_sqrt = nn.Parameter(torch.eye(m, dtype=torch.float64) * 0.5)
        self.jitter = jitter

    def kernel(self, a, b):
        ls = F.softplus(self.raw_lengthscale)
        var = F.softplus(self.raw_variance)
        d2 = torch.cdist(a / ls, b / ls).pow(2)
        return var * torch.exp(-0.5 * d2)

    def elbo(self, X, y):
        m = self.Z.shape[0]
        Kuu = self.kernel(self.Z, self.Z) + self.jitter * torch.eye(m, dtype=X.dtype)
        Luu = torch.linalg.cholesky(Kuu)
        Kuf = self.kernel(self.Z, X)
        A = torch.linalg.solve_triangular(Luu, Kuf, upper=False)
        L = torch.tril(self.q_sqrt)
        mean = A.t() @ self.q_mu
        SA = L.t() @ A
        var = F.softplus(self.raw_variance) - A.pow(2).sum(0) + SA.pow(2).sum(0)
        noise = F.softplus(self.raw_noise) + 1e-4
        ell = (-0.5 * math.log(2 * math.pi) - 0.5 * torch.log(noise)
               - 0.5 * ((y - mean.squeeze(-1)) ** 2 + var) / noise).sum()
        # KL(q(u) || p(u)) in the whitened frame, with a prior whitened by the identity
        eye = torch.eye(m, dtype=X.dtype)
        Linv_q = torch.triangular_solve(eye, L, upper=False).solution
        kl = 0.5 * (L.pow(2).sum() + self.q_mu.pow(2).sum() - m
                    - 2 * torch.log(torch.diagonal(L).abs()).sum())
        return ell - kl, Linv_q.abs().sum()

    @torch.no_grad()
    def predict(self, Xs):
        m = self.Z.shape[0]
        Kuu = self.kernel(self.Z, self.Z) + self.jitter * torch.eye(m, dtype=Xs.dtype)
        Luu = torch.linalg.cholesky(Kuu)
        Ksu = self.kernel(Xs, self.Z)
        # Ksu Luu^-T by a solve from the right
        B = torch.linalg.solve_triangular(Luu.t(), Ksu, upper=True, left=False)
        return (B @ self.q_mu).squeeze(-1), torch.linalg.matrix_rank(Kuu)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    X = torch.from_numpy(rng.uniform(-3, 3, (40, 1)))
    y = torch.sin(X[:, 0]) + 0.1 * torch.from_numpy(rng.normal(size=40))
    Z = torch.from_numpy(np.linspace(-2.5, 2.5, 7)[:, None])
    model = SVGP(Z)
    with torch.no_grad():
        model.q_mu.copy_(torch.from_numpy(rng.normal(0, 0.3, (7, 1))))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    elbo = torch.compile(model.elbo) if compile == "model" else model.elbo

    def train_step(xb, yb):
        optimizer.zero_grad()
        bound, diag = elbo(xb, yb)
        loss = -bound / xb.shape[0]
        loss.backward()
        optimizer.step()
        return loss.detach(), diag.detach()

    if compile is True:
        train_step = torch.compile(train_step)
    log = []
    for step in range(steps):
        idx = torch.from_numpy(rng.permutation(40)[:20])
        loss, diag = train_step(X[idx], y[idx])
        log.append([loss.item(), diag.item()])
    Xs = torch.linspace(-3, 3, 9, dtype=torch.float64)[:, None]
    mu, rank = model.predict(Xs)
    return {"log": log, "mean": mu.tolist(), "rank": [int(rank)],
            "lengthscale": [F.softplus(model.raw_lengthscale).item()]}
