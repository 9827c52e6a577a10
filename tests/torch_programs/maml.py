"""MAML on sine-wave regression, written the way the PyTorch MAML re-implementations are:
a model whose ``forward(x, params=None)`` runs on its own parameters or on an
``OrderedDict`` of adapted ones through ``F.linear``, an inner loop of
``torch.autograd.grad(loss, params.values(), create_graph=True)`` and
``OrderedDict((name, p - inner_lr * g) for ...)`` (second-order: the meta-gradient flows
through the inner gradients), the query losses of a batch of tasks ``torch.stack``-ed and
averaged into the meta-loss, Adam on the meta-parameters with ``clip_grad_norm_``, a
learned per-parameter inner learning rate (Meta-SGD's ``nn.ParameterList``), and at test
time adaptation with ``create_graph=False`` followed by ``torch.no_grad()`` evaluation."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class SineNet(nn.Module):
    def __init__(self, hidden=24):
        super().__init__()
        self.net = nn.Sequential(OrderedDict([
            ("l1", nn.Linear(1, hidden)), ("relu1", nn.ReLU()),
            ("l2", nn.Linear(hidden, hidden)), ("relu2", nn.ReLU()),
            ("out", nn.Linear(hidden, 1))]))

    def forward(self, x, params=None):
        if params is None:
            return self.net(x)
        x = F.relu(F.linear(x, params["net.l1.weight"], params["net.l1.bias"]))
        x = F.relu(F.linear(x, params["net.l2.weight"], params["net.l2.bias"]))
        return F.linear(x, params["net.out.weight"], params["net.out.bias"])


class MetaSGD(nn.Module):
    def __init__(self, model, init_lr=0.05):
        super().__init__()
        self.model = model
        self.lrs = nn.ParameterList([nn.Parameter(torch.ones_like(p) * init_lr)
                                     for p in model.parameters()])

    def adapt(self, x, y, steps, first_order=False):
        params = OrderedDict(self.model.named_parameters())
        for _ in range(steps):
            loss = F.mse_loss(self.model(x, params), y)
            grads = torch.autograd.grad(loss, params.values(), create_graph=not first_order)
            params = OrderedDict((name, p - lr * g) for ((name, p), g, lr)
                                 in zip(params.items(), grads, self.lrs))
        return params


def sample_tasks(rng, n_tasks, k):
    amp = rng.uniform(0.1, 5.0, n_tasks)
    phase = rng.uniform(0, np.pi, n_tasks)
    xs = rng.uniform(-5, 5, (n_tasks, 2 * k, 1))
    ys = amp[:, None, None] * np.sin(xs - phase[:, None, None])
    f = np.float32
    return (torch.tensor(xs[:, :k].astype(f)), torch.tensor(ys[:, :k].astype(f)),
            torch.tensor(xs[:, k:].astype(f)), torch.tensor(ys[:, k:].astype(f)))


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor(rng.normal(0, 0.4, tuple(v.shape)).astype(np.float32))
        if "lrs" not in k else v for k, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, n_tasks=3, k=5, inner_steps=2):
    model = SineNet()
    meta = MetaSGD(model)
    init_weights(meta, seed)
    meta_opt = torch.optim.Adam(meta.parameters(), lr=1e-3)
    rng = np.random.default_rng(seed + 1)

    def meta_step(x_s, y_s, x_q, y_q):
        meta_opt.zero_grad()
        query_losses = []
        for i in range(x_s.shape[0]):
            fast = meta.adapt(x_s[i], y_s[i], inner_steps)
            query_losses.append(F.mse_loss(meta.model(x_q[i], fast), y_q[i]))
        meta_loss = torch.stack(query_losses).mean()
        meta_loss.backward()
        torch.nn.utils.clip_grad_norm_(meta.parameters(), 10.0)
        meta_opt.step()
        return meta_loss

    if compile == "model":
        model = meta.model = torch.compile(model)
    elif compile:
        meta_step = torch.compile(meta_step)
    losses = [meta_step(*sample_tasks(rng, n_tasks, k)).item() for _ in range(steps)]
    x_s, y_s, x_q, y_q = sample_tasks(rng, 1, k)
    fast = meta.adapt(x_s[0], y_s[0], 3, first_order=True)
    with torch.no_grad():
        before = F.mse_loss(model(x_q[0]), y_q[0]).item()
        after = F.mse_loss(model(x_q[0], fast), y_q[0]).item()
    return {"losses": losses, "test": [before, after],
            "lrs": [lr.mean().item() for lr in meta.lrs]}
