"""Microscaling (MX-style) block floating-point fake quantisation and a robust regression
loss over targets with missing entries, written the way quantisation-research and
forecasting code is: each block of 8 weights shares an exponent taken by ``torch.frexp``
of its ``amax`` (the mantissa discarded, ``shared_exp - (bits - 2)`` the scale's exponent),
scaled by ``torch.ldexp(torch.ones_like(amax), ...)``, rounded and clamped, with a
straight-through estimator ``w + (q - w).detach()``; the targets' NaNs (missing readings)
masked by ``torch.isnan``, replaced by ``torch.nan_to_num`` for the forward and skipped
by the loss; a Huber loss whose delta is the detached ``torch.nanquantile`` (0.9) of the
absolute residuals with NaN where targets are missing, per output column
(``dim=0``, ``keepdim=True``) and over the batch; the loss averaged by ``torch.nanmean``;
per-feature input scaling by ``torch.nanquantile(x, [0.25, 0.75], dim=0)`` (a robust
scaler written into buffers); AdamW with ``amsgrad=True`` and a ``StepLR``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def mx_quantize(w, bits=4, block=8):
    shape = w.shape
    blocks = w.reshape(-1, block)
    amax = blocks.abs().amax(dim=1, keepdim=True).clamp_min(1e-12)
    _, shared_exp = torch.frexp(amax)
    scale = torch.ldexp(torch.ones_like(amax), shared_exp - (bits - 1))
    qmax = 2 ** (bits - 1) - 1
    q = torch.clamp(torch.round(blocks / scale), -qmax - 1, qmax) * scale
    return q.reshape(shape)


class MXLinear(nn.Linear):
    def forward(self, input):
        w = self.weight
        w_q = w + (mx_quantize(w) - w).detach()
        return F.linear(input, w_q, self.bias)


class RobustScaler(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.register_buffer("center", torch.zeros(features))
        self.register_buffer("scale", torch.ones(features))

    @torch.no_grad()
    def fit(self, x):
        q = torch.nanquantile(x, torch.tensor([0.25, 0.5, 0.75]), dim=0)
        self.center.copy_(q[1])
        self.scale.copy_((q[2] - q[0]).clamp_min(1e-3))

    def forward(self, x):
        return torch.nan_to_num((x - self.center) / self.scale, nan=0.0)


class Regressor(nn.Module):
    def __init__(self, features=6, hidden=16, outputs=3):
        super().__init__()
        self.scaler = RobustScaler(features)
        self.net = nn.Sequential(MXLinear(features, hidden), nn.GELU(),
                                 MXLinear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, outputs))

    def forward(self, x):
        return self.net(self.scaler(x))


def robust_loss(pred, target):
    missing = torch.isnan(target)
    resid = pred - torch.nan_to_num(target)
    abs_resid = torch.where(missing, torch.full_like(resid, float("nan")), resid.abs())
    delta = torch.nanquantile(abs_resid.detach(), 0.9, dim=0, keepdim=True).clamp_min(0.1)
    overall = torch.nanquantile(abs_resid.detach(), 0.5, interpolation="midpoint")
    huber = torch.where(abs_resid < delta, 0.5 * abs_resid ** 2,
                        delta * (abs_resid - 0.5 * delta))
    return torch.nanmean(huber), delta.squeeze(0), overall


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Regressor()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.normal(0, 0.5, p.shape).astype(np.float32)))
    x_all = rng.normal(0, 1, (64, 6)) * [1, 5, 0.2, 2, 1, 3] + [0, 2, -1, 0, 4, 0]
    x_all[rng.random(x_all.shape) < 0.1] = np.nan
    model.scaler.fit(torch.from_numpy(x_all.astype(np.float32)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, amsgrad=True)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    net = torch.compile(model) if compile == "model" else model

    def train_step(x, y):
        optimizer.zero_grad()
        loss, delta, overall = robust_loss(net(x), y)
        loss.backward()
        optimizer.step()
        return loss, delta, overall

    if compile is True:
        train_step = torch.compile(train_step)
    log = []
    for i in range(steps):
        rows = rng.choice(64, 16, replace=False)
        x = torch.from_numpy(x_all[rows].astype(np.float32))
        y = torch.from_numpy(rng.normal(0, 1, (16, 3)).astype(np.float32))
        y[torch.from_numpy(rng.random((16, 3)) < 0.25)] = float("nan")
        loss, delta, overall = train_step(x, y)
        log.append([loss.item(), overall.item()] + delta.tolist())
        scheduler.step()
    w = model.net[0].weight.detach()
    mantissa, exponent = w.frexp()
    return {"log": log, "quantized": mx_quantize(w).flatten()[:16].tolist(),
            "exponents": exponent.flatten()[:16].tolist(),
            "mantissas": mantissa.flatten()[:8].tolist(),
            "scaler": torch.cat([model.scaler.center, model.scaler.scale]).tolist()}
