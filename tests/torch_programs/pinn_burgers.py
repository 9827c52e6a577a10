"""A physics-informed neural network for the viscous Burgers equation
``u_t + u u_x = (0.01 / pi) u_xx`` on x in [-1, 1], t in [0, 1], as PINN tutorials write
it: a ``nn.Tanh`` MLP of ``torch.cat([x, t], dim=1)``, the derivatives of its output taken
with ``torch.autograd.grad(u, x, grad_outputs=torch.ones_like(u), create_graph=True)`` (a
second derivative from the first), collocation points that ``requires_grad_(True)``, the
initial condition ``-sin(pi x)`` and zero boundaries as MSE terms, a few ``Adam`` steps
and then ``torch.optim.LBFGS`` with a closure (``line_search_fn="strong_wolfe"``), and the
residual's size evaluated on a grid from ``torch.meshgrid(..., indexing="ij")``."""
import math

import numpy as np
import torch
import torch.nn as nn

NU = 0.01 / math.pi


class PINN(nn.Module):
    def __init__(self, width=16, depth=3):
        super().__init__()
        layers, d = [], 2
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.Tanh()]
            d = width
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x, t):
        return self.net(torch.cat([x, t], dim=1))


def residual(model, x, t):
    u = model(x, t)
    ones = torch.ones_like(u)
    u_x, u_t = torch.autograd.grad(u, (x, t), grad_outputs=ones, create_graph=True)
    u_xx = torch.autograd.grad(u_x, x, grad_outputs=torch.ones_like(u_x), create_graph=True)[0]
    return u_t + u * u_x - NU * u_xx


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for p in model.parameters():
            fan_in = p.shape[1] if p.dim() == 2 else p.shape[0]
            p.copy_(torch.tensor(rng.normal(0, 1 / math.sqrt(fan_in), tuple(p.shape))
                                 .astype(np.float32)))


def main(steps=10, compile=False, seed=0, points=64):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = PINN()
    init_weights(model, seed)
    x_f = torch.tensor(rng.uniform(-1, 1, (points, 1)), dtype=torch.float32).requires_grad_(True)
    t_f = torch.tensor(rng.uniform(0, 1, (points, 1)), dtype=torch.float32).requires_grad_(True)
    x_0 = torch.linspace(-1, 1, 16).unsqueeze(1)
    t_0 = torch.zeros_like(x_0)
    u_0 = -torch.sin(math.pi * x_0)
    t_b = torch.linspace(0, 1, 8).unsqueeze(1).repeat(2, 1)
    x_b = torch.cat([-torch.ones(8, 1), torch.ones(8, 1)])
    mse = nn.MSELoss()

    def loss_fn():
        f = residual(model, x_f, t_f)
        return (mse(f, torch.zeros_like(f)) + mse(model(x_0, t_0), u_0)
                + mse(model(x_b, t_b), torch.zeros_like(t_b)))

    adam = torch.optim.Adam(model.parameters(), lr=5e-3)

    def adam_step():
        adam.zero_grad()
        loss = loss_fn()
        loss.backward()
        adam.step()
        return loss

    lbfgs = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5,
                              line_search_fn="strong_wolfe")

    def closure():
        lbfgs.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        adam_step, closure = torch.compile(adam_step), torch.compile(closure)
    losses = [adam_step().item() for _ in range(steps)]
    lbfgs_losses = [lbfgs.step(closure).item() for _ in range(2)]
    xs, ts = torch.meshgrid(torch.linspace(-1, 1, 5), torch.linspace(0, 1, 4), indexing="ij")
    xs = xs.reshape(-1, 1).requires_grad_(True)
    ts = ts.reshape(-1, 1).requires_grad_(True)
    res = residual(model, xs, ts).detach()
    u = model(xs, ts).detach()   # (its values pass through 0: compared as a size)
    return {"losses": losses, "lbfgs_losses": lbfgs_losses,
            "residual_rms": [res.pow(2).mean().sqrt().item()],
            "u_rms": [u.pow(2).mean().sqrt().item()]}
