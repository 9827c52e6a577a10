"""A spiking neural network trained with surrogate gradients, as snnTorch-style tutorials
and SpyTorch write it: a Heaviside spike as a ``torch.autograd.Function`` whose forward is
``(mem > 0).float()`` with ``ctx.save_for_backward(mem)`` and whose backward is the fast
sigmoid's ``grad_output / (slope * torch.abs(mem) + 1.0) ** 2`` (``ctx.slope`` a Python
float); leaky integrate-and-fire layers looping over time steps in Python, the membrane
``mem = beta * mem + cur - reset * threshold`` reset by subtraction where ``reset =
spk.detach()``, hidden state made by ``torch.zeros_like``, spikes and membranes recorded in
lists and ``torch.stack``-ed; the loss summed over the output membrane of every step
(``loss += loss_fn(mem_rec[t], y)``); the decay ``beta`` a learnable parameter clamped to
[0, 1] in place after the step (``model.lif1.beta.data.clamp_(0.0, 1.0)``). Inputs are
Poisson-rate-coded spike trains drawn in NumPy; spike counts decide the prediction."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class SpikeFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, mem, slope=5.0):
        ctx.save_for_backward(mem)
        ctx.slope = slope
        return (mem > 0).float()

    @staticmethod
    def backward(ctx, grad_output):
        (mem,) = ctx.saved_tensors
        grad = grad_output / (ctx.slope * torch.abs(mem) + 1.0) ** 2
        return grad, None


spike_fn = SpikeFn.apply


class Leaky(nn.Module):
    def __init__(self, beta, threshold=1.0):
        super().__init__()
        self.beta = nn.Parameter(torch.tensor(beta))
        self.threshold = threshold

    def forward(self, cur, mem, spk):
        reset = spk.detach()
        mem = self.beta * mem + cur - reset * self.threshold
        spk = spike_fn(mem - self.threshold)
        return spk, mem


class SNN(nn.Module):
    def __init__(self, n_in=10, hidden=24, n_out=3):
        super().__init__()
        self.fc1, self.lif1 = nn.Linear(n_in, hidden), Leaky(0.9)
        self.fc2, self.lif2 = nn.Linear(hidden, n_out), Leaky(0.8)

    def forward(self, x):                     # x: (time, batch, n_in)
        mem1 = torch.zeros_like(self.fc1(x[0]))
        spk1 = torch.zeros_like(mem1)
        mem2 = torch.zeros(x.shape[1], self.fc2.out_features)
        spk2 = torch.zeros_like(mem2)
        spk2_rec, mem2_rec = [], []
        for t in range(x.shape[0]):
            spk1, mem1 = self.lif1(self.fc1(x[t]), mem1, spk1)
            spk2, mem2 = self.lif2(self.fc2(spk1), mem2, spk2)
            spk2_rec.append(spk2)
            mem2_rec.append(mem2)
        return torch.stack(spk2_rec, dim=0), torch.stack(mem2_rec, dim=0)


def encode(rng, y, steps_t=6, n_in=10):
    rates = np.full((len(y), n_in), 0.1)
    for i, c in enumerate(y):
        rates[i, c * 3:c * 3 + 4] = 0.8
    return torch.from_numpy((rng.random((steps_t,) + rates.shape) < rates).astype(np.float32))


def main(steps=4, compile=False, seed=0, batch=16):
    rng = np.random.default_rng(seed)
    model = SNN()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("fc"):
                p.copy_(torch.from_numpy(rng.normal(0.2, 0.5, tuple(p.shape)).astype(np.float32)))
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, betas=(0.9, 0.999))
    loss_fn = nn.CrossEntropyLoss()
    ys = [rng.integers(0, 3, batch) for _ in range(steps)]
    data = [(encode(rng, y), torch.from_numpy(y)) for y in ys]
    net = model

    def step(x, y):
        spk_rec, mem_rec = net(x)
        loss = torch.zeros((), dtype=torch.float32)
        for t in range(x.shape[0]):
            loss += loss_fn(mem_rec[t], y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        model.lif1.beta.data.clamp_(0.0, 1.0)
        model.lif2.beta.data.clamp_(0.0, 1.0)
        return loss, spk_rec.sum(0)

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, counts = [], []
    for x, y in data:
        loss, spikes = step(x, y)
        losses.append(loss.item())
        counts.append(int(spikes.sum()))
    with torch.no_grad():
        y = rng.integers(0, 3, 30)
        spk, mem = net(encode(rng, y))
    return {"losses": losses, "spike_counts": counts,
            "correct": [int((spk.sum(0).argmax(1) == torch.from_numpy(y)).sum())],
            "betas": [model.lif1.beta.item(), model.lif2.beta.item()],
            "mem": mem[-1, :4].flatten().tolist()}
