"""Activation offloading and gradient plumbing as training scripts for memory-bound models
write them: ``torch.autograd.graph.save_on_cpu(pin_memory=False)`` around the second block
of the forward; a gradient check of the trained model (outside the training step) under
``torch.autograd.graph.saved_tensors_hooks`` whose pack hook stashes each saved activation
(detached, ``.to("cpu", copy=True)``) in a dict under a running key and whose unpack hook
pops it back; a ``Tensor.register_hook`` on an activation that scales its
gradient, gradient accumulation with ``loss / accum_steps`` and
``zero_grad(set_to_none=True)`` every k micro-batches, ``clip_grad_norm_(...,
error_if_nonfinite=True)`` whose returned tensor goes into the log, and an EMA of the
weights by ``torch._foreach_mul_`` / ``torch._foreach_add_`` under ``torch.no_grad()``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class CPUStash:
    """Pack/unpack hooks keeping each saved tensor in a dict (as offloading code does)."""

    def __init__(self):
        self.store = {}
        self.next_key = 0
        self.packed = 0

    def pack(self, t):
        key = self.next_key
        self.next_key += 1
        self.packed += 1
        self.store[key] = t.detach().to("cpu", copy=True)
        return key

    def unpack(self, key):
        return self.store.pop(key)


class Block(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        h = F.gelu(self.fc1(self.norm(x)))
        return x + self.fc2(h) * torch.sigmoid(h.mean(-1, keepdim=True))


class Net(nn.Module):
    def __init__(self, dim=12, hidden=20, classes=4, grad_scale=0.5):
        super().__init__()
        self.embed = nn.Linear(6, dim)
        self.block1 = Block(dim, hidden)
        self.block2 = Block(dim, hidden)
        self.head = nn.Linear(dim, classes)
        self.grad_scale = grad_scale

    def forward(self, x):
        h = torch.tanh(self.embed(x))
        if h.requires_grad:
            h.register_hook(lambda g: g * self.grad_scale)
        h = self.block1(h)
        with torch.autograd.graph.save_on_cpu(pin_memory=False):
            h = self.block2(h)
        return self.head(h)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Net()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.normal(0, 0.3, p.shape).astype(np.float32)))
    ema = copy.deepcopy(model)
    for p in ema.parameters():
        p.requires_grad_(False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.01)
    accum_steps = 2
    net = torch.compile(model) if compile == "model" else model

    def micro_step(x, y):
        loss = F.cross_entropy(net(x), y) / accum_steps
        loss.backward()
        return loss.detach()

    if compile is True:
        micro_step = torch.compile(micro_step)
    log = []
    for step in range(steps * accum_steps):
        x = torch.from_numpy(rng.normal(0, 1, (7, 6)).astype(np.float32))
        y = torch.from_numpy(rng.integers(0, 4, 7))
        loss = micro_step(x, y)
        if (step + 1) % accum_steps == 0:
            total_norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0,
                                                  error_if_nonfinite=True)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            with torch.no_grad():
                ema_params = list(ema.parameters())
                torch._foreach_mul_(ema_params, 0.9)
                torch._foreach_add_(ema_params, list(model.parameters()), alpha=0.1)
            log.append([loss.item() * accum_steps, total_norm.item()])
    left = [p.grad is None for p in model.parameters()]
    x = torch.from_numpy(rng.normal(0, 1, (5, 6)).astype(np.float32))
    with torch.no_grad():
        out = ema(x)
    stash = CPUStash()
    y = torch.from_numpy(rng.integers(0, 4, 5))
    with torch.autograd.graph.saved_tensors_hooks(stash.pack, stash.unpack):
        loss = F.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, [model.block1.fc1.weight, model.embed.bias])
    return {"log": log, "ema_out": out.flatten().tolist(), "stash_left": [len(stash.store)],
            "offloaded_grads": [g.sum().item() for g in grads] + grads[1].tolist(),
            "grads_none": [int(all(left))]}
