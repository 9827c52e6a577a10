"""An early-exit (BranchyNet-style) sequence classifier whose forward does what research code's
does with Python state: it returns a list of every active exit's logits in training and a
``(logits, exit_index)`` pair in evaluation (``if self.training``), the number of active
exits is a Python attribute the training loop raises halfway (a curriculum,
``model.active_exits = 3``), the evaluation threshold a Python float set from outside
between calls; ``forward`` counts its calls (``self.calls += 1``), anneals a temperature kept
as a Python float (``self.tau = max(self.min_tau, self.tau * self.decay)``) that divides
the logits, keeps the last mean confidence on the module (``self.last_confidence =
...detach()``), and caches sinusoidal position tables in a dict by sequence length
(``if T not in self._pe_cache``). Evaluation picks, per sample, the first exit whose
softmax confidence clears the threshold (``torch.where`` over stacked exits, ``gather``).
Two sequence lengths alternate; the exits' losses are weighted by a Python list; AdamW."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def sinusoid(T, d):
    pos = torch.arange(T, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(T, d)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


class EarlyExitNet(nn.Module):
    def __init__(self, d=8, width=16, classes=3, n_exits=3):
        super().__init__()
        self.inp = nn.Linear(d, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.Tanh())
                                    for _ in range(n_exits))
        self.exits = nn.ModuleList(nn.Linear(width, classes) for _ in range(n_exits))
        self.d = d
        self.active_exits = n_exits
        self.threshold = 0.8
        self.calls = 0
        self.tau, self.decay, self.min_tau = 2.0, 0.8, 1.0
        self.last_confidence = None
        self._pe_cache = {}

    def forward(self, x):
        self.calls += 1
        T = x.shape[1]
        if T not in self._pe_cache:
            self._pe_cache[T] = sinusoid(T, self.d)
        h = self.inp(x + self._pe_cache[T]).mean(dim=1)
        outs = []
        for block, head in zip(self.blocks[:self.active_exits], self.exits):
            h = h + block(h)
            outs.append(head(h) / self.tau)
        if self.training:
            self.tau = max(self.min_tau, self.tau * self.decay)
            return outs
        probs = torch.stack([F.softmax(o, dim=-1) for o in outs])      # (exits, B, C)
        conf = probs.max(dim=-1).values
        confident = conf >= self.threshold
        confident[-1] = True
        exit_index = confident.int().argmax(dim=0)                       # first confident
        logits = torch.stack(outs).gather(
            0, exit_index.view(1, -1, 1).expand(1, -1, outs[0].shape[-1])).squeeze(0)
        self.last_confidence = conf.gather(0, exit_index.view(1, -1)).mean().detach()
        return logits, exit_index


def main(steps=4, compile=False, seed=0, batch=12):
    rng = np.random.default_rng(seed)
    model = EarlyExitNet()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.5, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    model.active_exits = 2
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    exit_weights = [0.3, 0.3, 1.0]

    def batch_of(T, n=batch):
        y = rng.integers(0, 3, n)
        x = rng.normal(0, 1, (n, T, 8)) + np.eye(3, 8)[y][:, None, :] * 1.5
        return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y)

    data = [batch_of(5 if i % 2 == 0 else 7) for i in range(steps)]
    net = model

    def step(x, y):
        optimizer.zero_grad()
        outs = net(x)
        loss = sum(w * F.cross_entropy(o, y) for w, o in zip(exit_weights, outs))
        loss.backward()
        optimizer.step()
        return loss, len(outs)

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, n_outs, taus = [], [], []
    for i, (x, y) in enumerate(data):
        if i == steps // 2:
            model.active_exits = 3
        loss, n = step(x, y)
        losses.append(loss.item())
        n_outs.append(n)
        taus.append(model.tau)
    model.eval()
    exits, correct, confidences = [], [], []
    x, y = batch_of(7, 24)
    with torch.no_grad():
        for threshold in (0.5, 0.9):
            model.threshold = threshold
            logits, exit_index = net(x)
            exits += exit_index.tolist()
            correct.append(int((logits.argmax(-1) == y).sum()))
            confidences.append(float(model.last_confidence))
    return {"losses": losses, "n_outputs": n_outs, "taus": taus, "exits": exits,
            "correct": correct, "confidences": confidences, "calls": [model.calls],
            "cached_lengths": sorted(model._pe_cache), "logits": logits[:3].flatten().tolist()}
