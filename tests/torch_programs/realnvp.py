"""A RealNVP normalizing flow on two-moons-like points, written the way small flow
tutorials are: alternating binary masks kept with ``register_buffer`` (``torch.tensor``
of a list, ``.float()``), coupling layers whose scale and translation networks are
``nn.Sequential``s of ``nn.Linear``/``nn.LeakyReLU``/``nn.Tanh``, the forward map
``z = x_ + (1 - mask) * (x * torch.exp(s) + t)`` with the log-determinant summed over
``dim=1``, its inverse for sampling, a ``torch.distributions.Normal`` prior (its
``log_prob(z).sum(1)``), the loss ``-(prior + logdet).mean()``, Adam on
``[p for p in flow.parameters() if p.requires_grad]``, an ``ExponentialLR`` schedule and
``no_grad`` sampling through the inverse from prior draws fixed in NumPy."""
import numpy as np
import torch
import torch.nn as nn
from torch import distributions


class Coupling(nn.Module):
    def __init__(self, mask, hidden=16):
        super().__init__()
        self.register_buffer("mask", mask)
        d = mask.numel()
        self.s = nn.Sequential(nn.Linear(d, hidden), nn.LeakyReLU(), nn.Linear(hidden, hidden),
                               nn.LeakyReLU(), nn.Linear(hidden, d), nn.Tanh())
        self.t = nn.Sequential(nn.Linear(d, hidden), nn.LeakyReLU(), nn.Linear(hidden, hidden),
                               nn.LeakyReLU(), nn.Linear(hidden, d))

    def forward(self, x):
        x_ = x * self.mask
        s = self.s(x_) * (1 - self.mask)
        t = self.t(x_) * (1 - self.mask)
        z = x_ + (1 - self.mask) * (x * torch.exp(s) + t)
        return z, s.sum(dim=1)

    def inverse(self, z):
        z_ = z * self.mask
        s = self.s(z_) * (1 - self.mask)
        t = self.t(z_) * (1 - self.mask)
        return z_ + (1 - self.mask) * (z - t) * torch.exp(-s)


class RealNVP(nn.Module):
    def __init__(self, masks, prior):
        super().__init__()
        self.prior = prior
        self.layers = nn.ModuleList([Coupling(m) for m in masks])

    def f(self, x):
        log_det_J = x.new_zeros(x.shape[0])
        z = x
        for layer in self.layers:
            z, ld = layer(z)
            log_det_J += ld
        return z, log_det_J

    def g(self, z):
        x = z
        for layer in reversed(self.layers):
            x = layer.inverse(x)
        return x

    def log_prob(self, x):
        z, logp = self.f(x)
        return self.prior.log_prob(z).sum(1) + logp

    def forward(self, x):
        return self.log_prob(x)


def moons(rng, n):
    t = rng.uniform(0, np.pi, n)
    upper = rng.random(n) < 0.5
    x = np.where(upper, np.cos(t), 1 - np.cos(t))
    y = np.where(upper, np.sin(t), 0.5 - np.sin(t))
    return np.stack([x, y], 1) + rng.normal(0, 0.05, (n, 2))


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        name: v if name.endswith("mask") else
        torch.tensor(rng.uniform(-0.4, 0.4, tuple(v.shape)).astype(np.float32))
        for name, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch=32):
    torch.manual_seed(seed)
    masks = torch.from_numpy(np.array([[0, 1], [1, 0]] * 3).astype(np.float32))
    prior = distributions.Normal(torch.zeros(2), torch.ones(2))
    flow = RealNVP([masks[i] for i in range(len(masks))], prior)
    init_weights(flow, seed)
    optimizer = torch.optim.Adam([p for p in flow.parameters() if p.requires_grad], lr=1e-2)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
    rng = np.random.default_rng(seed + 1)

    def train_step(x):
        loss = -flow(x).mean()
        optimizer.zero_grad()
        loss.backward(retain_graph=True)
        optimizer.step()
        return loss

    if compile == "model":
        flow = torch.compile(flow)
    elif compile:
        train_step = torch.compile(train_step)
    losses = []
    for t in range(steps):
        x = torch.from_numpy(moons(rng, batch).astype(np.float32))
        losses.append(train_step(x).item())
        scheduler.step()
    flow.eval()
    with torch.no_grad():
        z = torch.from_numpy(rng.normal(0, 1, (5, 2)).astype(np.float32))
        x = flow.g(z)
        test = torch.from_numpy(moons(rng, 64).astype(np.float32))
        test_nll = -flow.log_prob(test).mean().item()
    return {"losses": losses, "samples": x.flatten().tolist(), "test_nll": [test_nll]}
