"""A hand-written optimiser as AdaBelief's and timm's ``torch.optim.Optimizer`` subclasses
write it: ``defaults`` dict, ``__setstate__`` filling a missing ``amsgrad``, a
``@torch.no_grad()`` ``step(closure)`` calling the closure under ``torch.enable_grad()``,
lazily created state (``torch.zeros_like(p, memory_format=torch.preserve_format)``, a
Python int ``step``), decoupled weight decay ``p.mul_(1 - lr * wd)``, moments by
``mul_(beta1).add_(grad, alpha=1 - beta1)`` and ``addcmul_(diff, diff, value=1 - beta2)``,
AMSGrad's ``torch.max(max_s, s, out=max_s)``, bias corrections with ``math.sqrt``, the
update ``p.addcdiv_(exp_avg, denom, value=-step_size)`` and a rectification switch
computed in Python. The model is a small residual MLP trained by ``optimizer.step(closure)``
with ``clip_grad_value_`` inside the closure; its state dict is saved and reloaded into a
fresh optimiser mid-run (``optimizer.load_state_dict``), and ``zero_grad(set_to_none=False)``
keeps zeroed gradients."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class AdaBelief(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-16, weight_decay=0.0,
                 amsgrad=False, rectify=True):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad, rectify=rectify)
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_var"] = torch.zeros_like(p,
                                                            memory_format=torch.preserve_format)
                    if group["amsgrad"]:
                        state["max_exp_avg_var"] = torch.zeros_like(p)
                p.mul_(1.0 - group["lr"] * group["weight_decay"])
                exp_avg, exp_avg_var = state["exp_avg"], state["exp_avg_var"]
                state["step"] += 1
                bias_correction1 = 1 - beta1 ** state["step"]
                bias_correction2 = 1 - beta2 ** state["step"]
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                diff = grad - exp_avg
                exp_avg_var.mul_(beta2).addcmul_(diff, diff, value=1 - beta2)
                if group["amsgrad"]:
                    max_var = state["max_exp_avg_var"]
                    torch.max(max_var, exp_avg_var.add_(group["eps"]), out=max_var)
                    denom = (max_var.sqrt() / math.sqrt(bias_correction2)).add_(group["eps"])
                else:
                    denom = (exp_avg_var.add_(group["eps"]).sqrt()
                             / math.sqrt(bias_correction2)).add_(group["eps"])
                rho_inf = 2 / (1 - beta2) - 1
                rho_t = rho_inf - 2 * state["step"] * beta2 ** state["step"] / bias_correction2
                if not group["rectify"] or rho_t > 4:
                    rect = 1.0
                    if group["rectify"]:
                        rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf
                                         / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
                    step_size = group["lr"] * rect / bias_correction1
                    p.addcdiv_(exp_avg, denom, value=-step_size)
                else:
                    p.add_(exp_avg, alpha=-group["lr"] / bias_correction1)
        return loss


class ResMLP(nn.Module):
    def __init__(self, dim=12):
        super().__init__()
        self.inp = nn.Linear(4, dim)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim),
                                                  nn.GELU()) for _ in range(2))
        self.out = nn.Linear(dim, 1)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.out(h).squeeze(-1)


def batch(rng, n=16):
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (np.tanh(x[:, 0] * x[:, 1]) + 0.5 * x[:, 2] ** 2 - x[:, 3]).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(y)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = ResMLP()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and p.dim() > 1]
    other = [p for n, p in model.named_parameters() if not (n.endswith("weight")
                                                            and p.dim() > 1)]
    groups = [{"params": decay, "weight_decay": 1e-2, "amsgrad": True}, {"params": other}]
    optimizer = AdaBelief(groups, lr=1e-2, betas=(0.9, 0.6))
    net = torch.compile(model) if compile == "model" else model

    def train_step(x, y):
        def closure():
            optimizer.zero_grad(set_to_none=False)
            loss = F.smooth_l1_loss(net(x), y, beta=0.5)
            loss.backward()
            nn.utils.clip_grad_value_(model.parameters(), clip_value=0.5)
            return loss
        return optimizer.step(closure)

    if compile is True:
        train_step = torch.compile(train_step)
    losses = []
    for i in range(steps):
        if i == steps // 2:
            saved = optimizer.state_dict()
            optimizer = AdaBelief(groups, lr=1e-2, betas=(0.9, 0.6))
            optimizer.load_state_dict(saved)
        losses.append(train_step(*batch(rng)).item())
    state = optimizer.state[model.inp.weight]
    return {"losses": losses, "step": [state["step"]],
            "max_var": state["max_exp_avg_var"].flatten()[:12].tolist(),
            "grad_zeroed": model.out.bias.grad.tolist(),
            "out": model.out.weight.flatten().tolist()}
