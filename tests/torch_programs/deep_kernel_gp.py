"""Deep kernel learning: a float32 feature extractor feeding an exact Gaussian process whose
algebra runs in float64, as hand-written GP regression code does: hyper-parameters as float64
``nn.Parameter``s through ``F.softplus`` (``torch.tensor(0.0, dtype=torch.float64)``), the
features cast by ``.double()``, an RBF kernel from ``torch.cdist(x1 / ls, x2 / ls).pow(2)``,
``K + noise * torch.eye(n, dtype=torch.float64)``, ``torch.linalg.cholesky``, the weights
``torch.cholesky_solve(y, L)``, the negative log marginal likelihood ``0.5 * y^T alpha +
L.diagonal().log().sum() + 0.5 * n * math.log(2 * math.pi)`` divided by ``n`` and cast back
with ``.float()``; one Adam over parameters of both dtypes with a separate group (and
learning rate) for the GP's; ``clip_grad_norm_`` over both; the predictive mean and variance
at test points by ``torch.linalg.solve_triangular(L, Ks, upper=False)`` in an evaluation
under ``torch.no_grad()``, and the RMSE computed in NumPy."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class FeatureExtractor(nn.Sequential):
    def __init__(self, d_in=3, hidden=16, d_out=2):
        super().__init__(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, d_out))


class ExactGP(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.features = features
        self.raw_lengthscale = nn.Parameter(torch.tensor(0.0, dtype=torch.float64))
        self.raw_outputscale = nn.Parameter(torch.tensor(0.5, dtype=torch.float64))
        self.raw_noise = nn.Parameter(torch.tensor(-2.0, dtype=torch.float64))
        self.mean = nn.Parameter(torch.zeros((), dtype=torch.float64))

    def kernel(self, a, b):
        ls = F.softplus(self.raw_lengthscale)
        return F.softplus(self.raw_outputscale) * torch.exp(
            -0.5 * torch.cdist(a / ls, b / ls).pow(2))

    def factor(self, x):
        z = self.features(x).double()
        n = z.shape[0]
        K = self.kernel(z, z) + (F.softplus(self.raw_noise) + 1e-6) * torch.eye(
            n, dtype=torch.float64)
        return z, torch.linalg.cholesky(K)

    def forward(self, x, y):
        """The negative log marginal likelihood of ``y`` per point."""
        _, L = self.factor(x)
        r = (y.double() - self.mean).unsqueeze(-1)
        alpha = torch.cholesky_solve(r, L)
        n = y.shape[0]
        nll = 0.5 * (r * alpha).sum() + L.diagonal().log().sum() + 0.5 * n * math.log(
            2 * math.pi)
        return (nll / n).float()

    def predict(self, x, y, x_test):
        z, L = self.factor(x)
        zs = self.features(x_test).double()
        Ks = self.kernel(z, zs)
        v = torch.linalg.solve_triangular(L, Ks, upper=False)
        r = torch.linalg.solve_triangular(L, (y.double() - self.mean).unsqueeze(-1),
                                          upper=False)
        mean = self.mean + (v * r).sum(0)
        var = F.softplus(self.raw_outputscale) - v.pow(2).sum(0)
        return mean, var


def dataset(rng, n):
    x = rng.uniform(-2, 2, (n, 3)).astype(np.float32)
    y = np.sin(2 * x[:, 0]) + 0.5 * x[:, 1] ** 2 + rng.normal(0, 0.05, n)
    return torch.from_numpy(x), torch.from_numpy(y.astype(np.float32))


def main(steps=10, compile=False, seed=0, n=24):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = ExactGP(FeatureExtractor())
    for p in model.features.parameters():
        p.data.copy_(torch.from_numpy(rng.normal(0, 0.5, tuple(p.shape)).astype(np.float32)))
    gp_params = [model.raw_lengthscale, model.raw_outputscale, model.raw_noise, model.mean]
    optimizer = torch.optim.Adam([{"params": model.features.parameters()},
                                  {"params": gp_params, "lr": 0.05}], lr=1e-2)
    x, y = dataset(rng, n)
    net = model

    def step(x, y):
        optimizer.zero_grad()
        loss = net(x, y)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        return loss, norm

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, norms = [], []
    for _ in range(steps):
        loss, norm = step(x, y)
        assert loss.dtype == torch.float32 and norm.dtype == torch.float64
        losses.append(loss.item())
        norms.append(norm.item())
    x_test, y_test = dataset(rng, 10)
    with torch.no_grad():
        mean, var = model.predict(x, y, x_test)
    rmse = float(np.sqrt(((mean.numpy() - y_test.numpy()) ** 2).mean()))
    assert mean.dtype == torch.float64
    return {"losses": losses, "norms": norms, "mean": mean.tolist(), "var": var.tolist(),
            "rmse": [rmse], "noise": [F.softplus(model.raw_noise).item()],
            "lengthscale": [F.softplus(model.raw_lengthscale).item()]}
