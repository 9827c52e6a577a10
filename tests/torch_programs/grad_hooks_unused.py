"""Gradient plumbing as research code writes it around a small conditional model: an
input-gradient penalty by ``torch.autograd.grad(out, [x, context], create_graph=True,
allow_unused=True)`` where the context is unused on some calls (``None`` comes back and is
tested), the same call with ``materialize_grads=True`` (zeros instead); tensor hooks that
change gradients: ``p.register_hook(lambda g: g.clamp_(-c, c))`` in place on a parameter's
incoming gradient, a hook on an activation returning ``g * scale`` and one that zeroes
rows of a gradient in place with a mask (``g.masked_fill_``), the handles removed halfway;
``@torch.no_grad()`` decorating a method that renormalises a table, and
``@torch.inference_mode()`` decorating the evaluation."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Conditional(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(5, 12)
        self.ctx = nn.Linear(3, 12)
        self.codes = nn.Embedding(4, 12)
        self.out = nn.Linear(12, 2)
        self.scale = 0.5

    def forward(self, x, context, code, use_context):
        h = self.inp(x) + self.codes(code)
        if use_context:
            h = h + self.ctx(context)
        h = torch.tanh(h)
        if h.requires_grad:
            h.register_hook(lambda g: g * self.scale)
        return self.out(h), h

    @torch.no_grad()
    def renormalise(self, max_norm=1.0):
        norms = self.codes.weight.norm(dim=1, keepdim=True)
        self.codes.weight.mul_(torch.clamp(max_norm / norms, max=1.0))
        return norms.max()


@torch.inference_mode()
def evaluate(model, x, context, code):
    out, _ = model(x, context, code, use_context=True)
    return F.softmax(out, dim=-1)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Conditional()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.5, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    handles = [model.out.weight.register_hook(lambda g: g.clamp_(-0.05, 0.05))]
    mask = torch.tensor([[True], [False], [False], [True]])
    handles.append(model.codes.weight.register_hook(lambda g: g.masked_fill_(mask, 0.0)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.5)
    net = torch.compile(model) if compile == "model" else model

    def step(x, context, code, y, use_context):
        optimizer.zero_grad()
        x.requires_grad_(True)
        context.requires_grad_(True)
        out, h = net(x, context, code, use_context)
        gx, gc = torch.autograd.grad(out.sum(), [x, context], create_graph=True,
                                     allow_unused=True)
        penalty = gx.pow(2).sum(1).mean()
        if gc is not None:
            penalty = penalty + gc.pow(2).sum(1).mean()
        _, zeros = torch.autograd.grad(out.sum(), [x, context], retain_graph=True,
                                       allow_unused=True, materialize_grads=True)
        loss = F.cross_entropy(out, y) + 0.1 * penalty
        loss.backward()
        optimizer.step()
        return loss, penalty, zeros.abs().sum(), h.detach().abs().sum()

    if compile is True:
        step = torch.compile(step)
    losses = []
    for i in range(steps):
        x = torch.from_numpy(rng.normal(0, 1, (6, 5)).astype(np.float32))
        context = torch.from_numpy(rng.normal(0, 1, (6, 3)).astype(np.float32))
        code = torch.from_numpy(rng.integers(0, 4, 6))
        y = torch.from_numpy(rng.integers(0, 2, 6))
        losses.append([v.item() for v in step(x, context, code, y, i % 2 == 0)])
        losses[-1].append(model.renormalise().item())
        if i == steps // 2:
            for handle in handles:
                handle.remove()
    x = torch.from_numpy(rng.normal(0, 1, (3, 5)).astype(np.float32))
    context = torch.from_numpy(rng.normal(0, 1, (3, 3)).astype(np.float32))
    probs = evaluate(net, x, context, torch.tensor([0, 1, 2]))
    return {"losses": losses, "probs": probs.flatten().tolist(),
            "inference": [probs.requires_grad, torch.is_grad_enabled()]}
