"""Deep ensembles for predictive uncertainty (Lakshminarayanan et al.), as uncertainty
tutorials write them: an ``nn.ModuleList`` of small regressors, each predicting a mean and
a variance through ``F.softplus(...) + 1e-6``, trained with ``nn.GaussianNLLLoss(full=True)``
and a count head with ``nn.PoissonNLLLoss(log_input=True, full=True)`` (Stirling's term);
each member sees its own bootstrap resample (``np.random`` indices through
``torch.as_tensor``) and fast-gradient-sign adversarial inputs (``x.requires_grad_()``,
``torch.autograd.grad`` of the loss, ``x + eps * grad.sign()``); one RMSprop over
``model.parameters()``; the ensemble's prediction is the Gaussian mixture's mean and
variance (``stack``, ``mean(0)``, ``var`` by hand), scored by ``F.gaussian_nll_loss``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Member(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2, hidden), nn.SiLU(), nn.Linear(hidden, hidden),
                                  nn.SiLU())
        self.head = nn.Linear(hidden, 3)

    def forward(self, x):
        out = self.head(self.body(x))
        mean, var = out[:, 0], F.softplus(out[:, 1]) + 1e-6
        return mean, var, out[:, 2]


class Ensemble(nn.Module):
    def __init__(self, members=3):
        super().__init__()
        self.members = nn.ModuleList(Member() for _ in range(members))

    def forward(self, x):
        return [m(x) for m in self.members]


def data(rng, n=24):
    x = rng.uniform(-2, 2, (n, 2)).astype(np.float32)
    noise = rng.normal(0, 0.1 + 0.3 * np.abs(x[:, 0]))
    y = (np.sin(2 * x[:, 0]) + 0.5 * x[:, 1] + noise).astype(np.float32)
    counts = rng.poisson(np.exp(0.5 * x[:, 1] + 0.3)).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(counts)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Ensemble()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.5, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.RMSprop(model.parameters(), lr=3e-3, alpha=0.9, centered=True)
    gaussian = nn.GaussianNLLLoss(full=True)
    poisson = nn.PoissonNLLLoss(log_input=True, full=True)
    net = torch.compile(model) if compile == "model" else model

    def member_loss(member, x, y, counts):
        mean, var, log_rate = member(x)
        return gaussian(mean, y, var) + 0.5 * poisson(log_rate, counts)

    def step(x, y, counts, resamples, eps=0.05):
        optimizer.zero_grad()
        total = 0.0
        for member, idx in zip(model.members, resamples):
            xb, yb, cb = x[idx], y[idx], counts[idx]
            xb = xb.clone().requires_grad_()
            grad, = torch.autograd.grad(member_loss(member, xb, yb, cb), xb)
            x_adv = (xb + eps * grad.sign()).detach()
            total = total + member_loss(member, xb.detach(), yb, cb) \
                + member_loss(member, x_adv, yb, cb)
        total.backward()
        optimizer.step()
        return total

    if compile is True:
        step = torch.compile(step)
    losses = []
    for _ in range(steps):
        x, y, counts = data(rng)
        resamples = [torch.as_tensor(rng.integers(0, len(x), len(x))) for _ in model.members]
        losses.append(step(x, y, counts, resamples).item())
    x, y, counts = data(rng)
    with torch.no_grad():
        outputs = net(x)
        means = torch.stack([o[0] for o in outputs])
        variances = torch.stack([o[1] for o in outputs])
        mean = means.mean(0)
        var = (variances + means.pow(2)).mean(0) - mean.pow(2)
        score = F.gaussian_nll_loss(mean, y, var, full=True)
    return {"losses": losses, "mean": mean.tolist(), "var": var.tolist(),
            "score": [score.item()]}
