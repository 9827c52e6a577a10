"""A residual MLP classifier written with the module machinery real training code leans on:
a forward pre-hook that rescales a block's input (returning the new args), forward hooks
that keep per-block activation statistics in a dict (as feature extractors and activation
loggers do), ``torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)`` around
the middle blocks, ``nn.Identity`` for a disabled projection, an ``nn.ParameterList`` of
per-block gates, a ``forward(x, **kwargs)`` that returns a ``dataclass`` of outputs and an
optional dict of auxiliary losses, ``x.split([..], dim=-1)`` and ``chunk`` tuples, an
in-place write into a slice of the features (``h[:, :2] = ...``), ``label_smoothing`` in
``cross_entropy``, ``optimizer.param_groups`` with two groups at different learning
rates, and ``model.train()`` / ``model.eval()`` around an evaluation every few steps, where
a ``register_forward_hook`` handle is removed again."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass
class ClassifierOutput:
    logits: torch.Tensor
    loss: Optional[torch.Tensor] = None
    aux: Optional[dict] = None


class Block(nn.Module):
    def __init__(self, dim, project):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim) if project else nn.Identity()

    def forward(self, x):
        a, b = self.fc1(self.norm(x)).chunk(2, dim=-1)
        return self.proj(x) + self.fc2(F.gelu(a) * torch.sigmoid(b))


class Net(nn.Module):
    def __init__(self, n_in=12, dim=16, n_blocks=4, n_classes=3, use_checkpoint=True):
        super().__init__()
        self.stem = nn.Linear(n_in, dim)
        self.blocks = nn.ModuleList(Block(dim, project=i == 0) for i in range(n_blocks))
        self.gates = nn.ParameterList(nn.Parameter(torch.ones(1)) for _ in range(n_blocks))
        self.head = nn.Linear(dim, n_classes)
        self.use_checkpoint = use_checkpoint

    def forward(self, x, labels=None, **kwargs):
        main, extra = x.split([10, 2], dim=-1)
        h = self.stem(torch.cat([main, extra * kwargs.get("extra_scale", 1.0)], dim=-1))
        h[:, :2] = h[:, :2] * 0.5
        for i, (block, gate) in enumerate(zip(self.blocks, self.gates)):
            if self.use_checkpoint and self.training and 0 < i < len(self.blocks) - 1:
                h = h + gate * checkpoint(block, h, use_reentrant=False)
            else:
                h = h + gate * block(h)
        logits = self.head(h)
        out = ClassifierOutput(logits=logits)
        if labels is not None:
            out.loss = F.cross_entropy(logits, labels, label_smoothing=0.1)
            if kwargs.get("return_aux"):
                out.aux = {"gate_l2": sum((g - 1).pow(2).sum() for g in self.gates)}
        return out


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({k: torch.tensor((1.0 + rng.normal(0, 0.05, tuple(v.shape)))
                                           .astype(np.float32) if "norm.weight" in k else
                                           rng.normal(0, 0.25, tuple(v.shape)).astype(np.float32))
                           for k, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0):
    model = Net()
    init_weights(model, seed)
    stats = {}

    def keep_stats(name):
        def hook(module, inputs, output):
            stats[name] = output.detach().abs().mean()
        return hook

    def halve_input(module, args):
        return (args[0] * 0.5,)

    for i, block in enumerate(model.blocks):
        block.register_forward_hook(keep_stats(f"block{i}"))
    model.blocks[3].register_forward_pre_hook(halve_input)
    head_params = list(model.head.parameters())
    body_params = [p for n, p in model.named_parameters() if not n.startswith("head.")]
    optimizer = torch.optim.SGD([{"params": body_params},
                                 {"params": head_params, "lr": 0.05}], lr=0.1, momentum=0.9)
    rng = np.random.default_rng(seed + 1)
    xs = rng.normal(size=(steps, 8, 12)).astype(np.float32)
    ys = (xs[:, :, 0] > 0).astype(np.int64) + (xs[:, :, 1] > 0.5)

    def train_step(x, y):
        out = model(x, labels=y, return_aux=True, extra_scale=2.0)
        loss = out.loss + 0.01 * out.aux["gate_l2"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss, out.logits.detach()

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, block_stats, hooked, evals = [], [], [], []
    for step in range(steps):
        model.train()
        loss, logits = train_step(torch.tensor(xs[step]), torch.tensor(ys[step]))
        losses.append(loss.item())
        block_stats.append([float(stats[f"block{i}"]) for i in range(4)])
        if step % 3 == 2:
            model.eval()
            with torch.no_grad():
                handle = model.head.register_forward_hook(lambda m, i, o: o * 2)
                doubled = model(torch.tensor(xs[0])).logits
                handle.remove()
                plain = model(torch.tensor(xs[0]), extra_scale=2.0).logits
            hooked.append(int((doubled - 2 * plain).abs().max().item() < 1e-5))
            evals.append(plain.argmax(-1).tolist())
    return {"losses": losses, "block_stats": block_stats, "hooked": hooked, "evals": evals}
