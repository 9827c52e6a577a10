"""A classifier trained the way large-batch recipes are written: gradient accumulation
over micro-batches (the loss divided by the accumulation steps, ``optimizer.step()`` every
``accum`` calls), a ``torch.amp.GradScaler`` (``scale(loss).backward()``, ``unscale_``
before ``clip_grad_norm_``, ``scaler.step`` / ``scaler.update``, the scale growing every
two steps),
``torch.autocast(device_type="cpu", enabled=use_amp)`` around the forward (off here, as a
float32 CPU run has it), a linear warmup then cosine decay written as a ``LambdaLR``
function of ``math.cos``, ``optimizer.zero_grad(set_to_none=True)``, parameter groups
that exclude norms and biases from weight decay, an ``nn.LayerNorm`` MLP with
``nn.Dropout(p=0.0)``, and an EMA of the weights kept with ``torch._foreach``-free
``ema_p.mul_(d).add_(p.detach(), alpha=1 - d)`` under ``torch.no_grad()``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d_in=12, width=32, classes=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, width), nn.LayerNorm(width), nn.GELU(),
                                 nn.Dropout(p=0.0), nn.Linear(width, width), nn.LayerNorm(width),
                                 nn.GELU(), nn.Linear(width, classes))

    def forward(self, x):
        return self.net(x)


def warmup_cosine(warmup, total):
    def fn(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return fn


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor((rng.standard_normal(tuple(v.shape)) * 0.3).astype(np.float32))
        for k, v in model.state_dict().items()})


def main(steps=6, compile=False, seed=0, accum=3, micro=4, use_amp=False):
    model = MLP()
    init_weights(model, seed)
    ema = copy.deepcopy(model)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in name else decay).append(p)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=3e-3, betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(2, steps))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16, growth_interval=2)
    rng = np.random.default_rng(seed + 1)
    xs = torch.tensor(rng.standard_normal((steps, accum, micro, 12)).astype(np.float32))
    ys = torch.tensor(rng.integers(0, 4, (steps, accum, micro)))

    def micro_step(x, y):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=use_amp):
            loss = F.cross_entropy(model(x), y) / accum
        scaler.scale(loss).backward()
        return loss.detach()

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        micro_step = torch.compile(micro_step)
    losses, scales, norms = [], [], []
    for s in range(steps):
        total = 0.0
        for k in range(accum):
            total += micro_step(xs[s, k], ys[s, k]).item()
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(0.9).add_(p.detach(), alpha=0.1)
        losses.append(total)
        scales.append(math.log2(scaler.get_scale()))
        norms.append(float(norm) if math.isfinite(float(norm)) else -1.0)
    with torch.no_grad():
        ema_out = ema(xs[0, 0])
    return {"losses": losses, "log2_scales": scales, "norms": norms,
            "ema_out": ema_out.flatten().tolist()}
