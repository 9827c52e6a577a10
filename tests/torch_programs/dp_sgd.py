"""Differentially private SGD (Abadi et al.) with per-sample gradients computed without
``torch.func`` or Opacus, the two ways hand-written DP-SGD code does it: a loop over
micro-batches of one sample, ``torch.autograd.grad(loss, params)`` for each, its norm
``torch.sqrt(sum(g.pow(2).sum() for g in grads))`` clipped by ``torch.clamp(max_norm /
(norm + 1e-6), max=1.0)`` and accumulated with ``add_``; and Goodfellow's trick for linear
layers, each layer's input and pre-activation appended to a list the caller passes
(``model(x, keep)``), the pre-activations' gradients taken by ``torch.autograd.grad(loss,
[z for _, z in keep])``, so that the per-sample weight gradients are ``torch.einsum(
'ni,nj->nij', g, a)`` and the bias ones ``g`` itself (the loss summed over the batch, so
each sample's gradient is its own); and, once at the end, eagerly, the ``z.retain_grad()``
spelling of it, reading ``z.grad`` after ``backward()``. Gaussian noise (drawn by NumPy
outside the step) is added, ``p.grad`` is assigned by hand and an ``SGD`` with momentum
steps, the two ways taking turns; a ``no_grad`` evaluation follows each step."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, sizes=(10, 16, 12, 3)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x, keep=None, retain=False):
        for i, layer in enumerate(self.layers):
            a = x
            x = layer(x)
            if retain:
                x.retain_grad()
            if keep is not None:
                keep.append((a, x))
            if i < len(self.layers) - 1:
                x = torch.tanh(x)
        return x


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        name: torch.tensor(rng.normal(0, 0.5, tuple(v.shape)).astype(np.float32))
        for name, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch=6, max_norm=1.0, noise_multiplier=0.3):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = MLP()
    init_weights(model, seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=0.1, momentum=0.5)
    centres = rng.normal(0, 1, (3, 10))
    data = []
    for _ in range(steps):
        y = rng.integers(0, 3, batch)
        x = centres[y] + rng.normal(0, 0.7, (batch, 10))
        noise = [torch.tensor(rng.normal(0, 1, tuple(p.shape)).astype(np.float32)) for p in params]
        data.append((torch.tensor(x, dtype=torch.float32), torch.tensor(y), noise))

    def microbatch_step(x, y, noise):
        summed = [torch.zeros_like(p) for p in params]
        norms = []
        for i in range(x.size(0)):
            loss = F.cross_entropy(model(x[i:i + 1]), y[i:i + 1])
            grads = torch.autograd.grad(loss, params)
            norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
            clip = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
            for acc, g in zip(summed, grads):
                acc.add_(g * clip)
            norms.append(norm)
        for p, g, n in zip(params, summed, noise):
            p.grad = (g + noise_multiplier * max_norm * n) / x.size(0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return torch.stack(norms)

    # (the activations' gradients need the module itself: a compiled module's call is one
    # autograd node, whose kept intermediates no later op was computed from, in torch too)
    tapped = model

    def goodfellow_step(x, y, noise):
        keep = []
        loss = F.cross_entropy(tapped(x, keep), y, reduction="sum")
        z_grads = torch.autograd.grad(loss, [z for _, z in keep])
        per_sample = []
        for (a, _), g in zip(keep, z_grads):
            per_sample.append(torch.einsum('ni,nj->nij', g, a))
            per_sample.append(g)
        flat = torch.cat([g.reshape(x.size(0), -1) for g in per_sample], dim=1)
        norms = flat.norm(2, dim=1)
        clip = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        for p, g_s, n in zip(params, per_sample, noise):
            g = (g_s * clip.view(-1, *[1] * (g_s.dim() - 1))).sum(0)
            p.grad = (g + noise_multiplier * max_norm * n) / x.size(0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return norms

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        microbatch_step = torch.compile(microbatch_step)
        goodfellow_step = torch.compile(goodfellow_step)
    norms_a, norms_b, evals = [], [], []
    for k, (x, y, noise) in enumerate(data):
        model.train()
        step = microbatch_step if k % 2 == 0 else goodfellow_step
        norms = step(x, y, noise)
        (norms_a if k % 2 == 0 else norms_b).extend(norms.tolist())
        model.eval()
        with torch.no_grad():
            evals.append(F.cross_entropy(model(x), y).item())
    base = model._orig_mod if hasattr(model, "_orig_mod") else model
    with torch.no_grad():
        weights = base.layers[-1].weight.flatten()[:6].tolist()
    keep = []   # (the retain_grad spelling, eagerly: .grad of the kept pre-activations)
    x, y, _ = data[0]
    F.cross_entropy(base(x, keep, retain=True), y, reduction="sum").backward()
    norms = torch.cat([torch.cat([torch.einsum('ni,nj->nij', z.grad, a).flatten(1), z.grad], 1)
                       for a, z in keep], 1).norm(2, dim=1)
    return {"microbatch_norms": norms_a, "goodfellow_norms": norms_b, "eval_losses": evals,
            "weights": weights, "retained_norms": norms.tolist()}
