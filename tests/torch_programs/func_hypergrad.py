"""Meta-learning plumbing as functorch-era research code writes it: per-example
gradients by ``torch.func.vmap(torch.func.grad(loss_fn), in_dims=(None, 0, 0))`` over
``torch.func.functional_call`` with a dict of detached parameters, their norms clipped and
averaged by hand (a DP-style update written into ``p.grad``); a one-step look-ahead
hypergradient for a learnable per-parameter log learning rate (the inner step built with
``create_graph=True``, the outer loss differentiated into the learning rates); and
``torch.autograd.functional``'s ``vjp``, ``jacobian`` and ``hessian`` of a small scalar
function of the output layer for a Newton-style step on a temperature."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 10)
        self.fc2 = nn.Linear(10, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Net()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.5, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    log_lrs = {k: torch.full_like(p, -2.0, requires_grad=True)
               for k, p in model.named_parameters()}
    meta_opt = torch.optim.Adam(log_lrs.values(), lr=0.05)
    temperature = torch.tensor(1.0)
    net = torch.compile(model) if compile == "model" else model

    def sample_loss(params, x, y):
        out = functional_call(model, params, (x.unsqueeze(0),))
        return F.cross_entropy(out, y.unsqueeze(0))

    def step(x, y, xv, yv, temperature):
        params = {k: p.detach() for k, p in model.named_parameters()}
        per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, x, y)
        norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in per_sample.values()))
        factor = (1.0 / torch.clamp(norms / 1.0, min=1.0)).view(-1, 1)
        for k, p in model.named_parameters():
            g = per_sample[k].flatten(1) * factor
            p.grad = g.mean(0).view_as(p)
        # look-ahead: the inner step as a function of the learning rates
        inner = F.cross_entropy(net(x), y)
        grads = torch.autograd.grad(inner, list(model.parameters()), create_graph=True)
        fast = {k: p - log_lrs[k].exp() * g
                for (k, p), g in zip(model.named_parameters(), grads)}
        outer = F.cross_entropy(functional_call(model, fast, (xv,)), yv)
        meta_opt.zero_grad()
        outer.backward(inputs=list(log_lrs.values()))
        meta_opt.step()
        with torch.no_grad():
            for k, p in model.named_parameters():
                p.sub_(log_lrs[k].exp() * p.grad)
        logits = net(xv).detach()

        def nll_of_t(t):
            return F.cross_entropy(logits / t, yv)
        _, v = torch.autograd.functional.vjp(nll_of_t, temperature, torch.tensor(1.0))
        jac = torch.autograd.functional.jacobian(nll_of_t, temperature)
        hess = torch.autograd.functional.hessian(nll_of_t, temperature)
        new_t = (temperature - jac / hess.clamp(min=1e-3)).clamp(0.2, 5.0)
        return inner.detach(), outer.detach(), norms, v, new_t

    if compile is True:
        step = torch.compile(step)
    losses = []
    for _ in range(steps):
        x = torch.from_numpy(rng.normal(0, 1, (5, 4)).astype(np.float32))
        y = torch.from_numpy(rng.integers(0, 3, 5))
        xv = torch.from_numpy(rng.normal(0, 1, (7, 4)).astype(np.float32))
        yv = torch.from_numpy(rng.integers(0, 3, 7))
        inner, outer, norms, v, temperature = step(x, y, xv, yv, temperature)
        losses.append([inner.item(), outer.item(), v.item(), temperature.item()]
                      + norms.tolist())
    return {"losses": losses,
            "log_lrs": torch.cat([t.detach().flatten() for t in log_lrs.values()]).tolist()}
