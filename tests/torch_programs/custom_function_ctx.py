"""Custom ``torch.autograd.Function``s as the "Extending PyTorch" notes and memory-saving
repositories write them: the docs' ``LinearFunction`` computing only the gradients
``ctx.needs_input_grad`` asks for (the first layer's input needs none, a frozen bias none);
a memory-efficient Swish that saves the intermediate ``sigmoid(x)`` (not the output) with
``ctx.save_for_backward`` and is ``@once_differentiable``; a straight-through top-k mask
returning the mask and the indices, the indices marked ``ctx.mark_non_differentiable``; a
gradient-scaling Function with a non-tensor argument (its gradient ``None``) and
``ctx.set_materialize_grads(False)``, whose backward handles a ``None`` gradient for an
unused second output. Trained with SGD (momentum, dampening) and ``LambdaLR``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.function import once_differentiable


class LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias=None):
        ctx.save_for_backward(input, weight, bias)
        output = input.mm(weight.t())
        if bias is not None:
            output += bias.unsqueeze(0).expand_as(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = grad_output.mm(weight)
        if ctx.needs_input_grad[1]:
            grad_weight = grad_output.t().mm(input)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)
        return grad_input, grad_weight, grad_bias


class SwishFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        s = torch.sigmoid(x)
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        x, s = ctx.saved_tensors
        return grad_output * (s * (1 + x * (1 - s)))


class TopKMask(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, k):
        idx = scores.topk(k, dim=1).indices
        mask = torch.zeros_like(scores).scatter_(1, idx, 1.0)
        ctx.mark_non_differentiable(idx)
        return mask, idx

    @staticmethod
    def backward(ctx, grad_mask, grad_idx):
        return grad_mask, None


class ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.set_materialize_grads(False)
        ctx.scale = scale
        return x.clone(), x.detach().abs().mean(1)

    @staticmethod
    def backward(ctx, grad, grad_stat):
        if grad is None:
            return None, None
        out = grad * ctx.scale
        if grad_stat is not None:
            out = out + grad_stat.unsqueeze(1)
        return out, None


class Linear(nn.Module):
    def __init__(self, cin, cout, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cout, cin))
        self.bias = nn.Parameter(torch.empty(cout)) if bias else None

    def forward(self, x):
        return LinearFunction.apply(x, self.weight, self.bias)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = Linear(6, 16)
        self.fc2 = Linear(16, 16)
        self.gate = Linear(16, 16, bias=False)
        self.fc3 = Linear(16, 3)

    def forward(self, x):
        h = SwishFunction.apply(self.fc1(x))
        h, stat = ScaleGrad.apply(h, 0.5)
        mask, idx = TopKMask.apply(self.gate(h), 6)
        h = SwishFunction.apply(self.fc2(h)) * mask
        return self.fc3(h), idx, stat


def batch(rng, n=12):
    x = rng.normal(size=(n, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] * x[:, 2] > 0.3)
    return torch.from_numpy(x), torch.from_numpy(y)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Net()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.normal(0, 0.5, tuple(p.shape)).astype(np.float32)))
    model.fc2.bias.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=0.1, momentum=0.9, dampening=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda e: 0.8 ** e)
    net = torch.compile(model) if compile == "model" else model

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        logits, idx, stat = net(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        return loss, idx, stat

    if compile is True:
        step = torch.compile(step)
    losses, picked, stats = [], [], []
    for _ in range(steps):
        loss, idx, stat = step(*batch(rng))
        losses.append(loss.item())
        picked.append(idx[0].sort().values.tolist())
        stats.append(stat.sum().item())
        scheduler.step()
    x, _ = batch(rng)
    x.requires_grad_(True)
    logits, idx, stat = net(x)
    (logits.sum() + stat.sum()).backward()
    return {"losses": losses, "picked": picked, "stats": stats,
            "input_grad": x.grad.flatten().tolist(),
            "fc1": model.fc1.weight.flatten()[:20].tolist(),
            "frozen_grad": [model.fc2.bias.grad is None, idx.requires_grad]}
