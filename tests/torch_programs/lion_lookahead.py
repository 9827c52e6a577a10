"""Hand-written optimisers as research repositories ship them: ``Lion`` (Chen et al.) as an
``Optimizer`` subclass (decoupled decay ``p.data.mul_(1 - lr * wd)``, the update
``exp_avg * beta1 + grad * (1 - beta1)`` whose ``sign_()`` is applied, the state made when
``len(state) == 0``), wrapped in ``Lookahead`` (Zhang et al.) the way its popular port is:
a wrapper sharing the inner optimiser's ``param_groups``, a ``group["counter"]`` integer in
each parameter group counted up at every step and reset every ``k`` steps, slow weights
made lazily in ``self.state[fast]["slow_param"]`` and pulled towards the fast ones with
``slow += (fast.data - slow) * alpha`` and ``fast.data.copy_(slow)``. The step is
``optimizer.step()`` inside the training step, so the counter decides, call by call, whether
the slow weights are synchronised. A GELU MLP regressor with a ``SmoothL1Loss``, and the
slow weights read back at the end."""
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn
from torch.optim.optimizer import Optimizer


class Lion(Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        defaults = dict(lr=lr, betas=betas, weight_decay=weight_decay)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.data.mul_(1 - group["lr"] * group["weight_decay"])
                grad = p.grad
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                beta1, beta2 = group["betas"]
                update = exp_avg * beta1 + grad * (1 - beta1)
                p.add_(update.sign_(), alpha=-group["lr"])
                exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)
        return loss


class Lookahead(Optimizer):
    def __init__(self, optimizer, k=3, alpha=0.5):
        self.optimizer = optimizer
        self.k = k
        self.alpha = alpha
        self.param_groups = self.optimizer.param_groups
        self.state = defaultdict(dict)
        self.fast_state = self.optimizer.state
        for group in self.param_groups:
            group["counter"] = 0

    def update(self, group):
        for fast in group["params"]:
            param_state = self.state[fast]
            if "slow_param" not in param_state:
                param_state["slow_param"] = torch.zeros_like(fast.data)
                param_state["slow_param"].copy_(fast.data)
            slow = param_state["slow_param"]
            slow += (fast.data - slow) * self.alpha
            fast.data.copy_(slow)

    def update_lookahead(self):
        for group in self.param_groups:
            self.update(group)

    def step(self, closure=None):
        loss = self.optimizer.step(closure)
        for group in self.param_groups:
            if group["counter"] == 0:
                self.update(group)
            group["counter"] += 1
            if group["counter"] >= self.k:
                group["counter"] = 0
        return loss

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)


class Regressor(nn.Module):
    def __init__(self, d=6, width=16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, width), nn.GELU(), nn.Linear(width, width),
                                 nn.GELU(), nn.Linear(width, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


def main(steps=4, compile=False, seed=0, batch=16):
    rng = np.random.default_rng(seed)
    model = Regressor()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.4, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    base = Lion(model.parameters(), lr=3e-3, betas=(0.9, 0.99), weight_decay=0.1)
    optimizer = Lookahead(base, k=3, alpha=0.5)
    criterion = nn.SmoothL1Loss(beta=0.5)
    w = rng.normal(0, 1, 6)
    xs = [rng.normal(0, 1, (batch, 6)).astype(np.float32) for _ in range(steps)]
    data = [(torch.from_numpy(x), torch.from_numpy(np.sin(x @ w).astype(np.float32)))
            for x in xs]
    net = model

    def step(x, y):
        optimizer.zero_grad()
        loss = criterion(net(x), y)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, counters = [], []
    for x, y in data:
        losses.append(step(x, y).item())
        counters.append(optimizer.param_groups[0]["counter"])
    first = model.net[0].weight
    return {"losses": losses, "counters": counters,
            "slow": optimizer.state[first]["slow_param"][:2].flatten().tolist(),
            "fast": first[:2].flatten().tolist(),
            "exp_avg": base.state[first]["exp_avg"][:2].flatten().tolist()}
