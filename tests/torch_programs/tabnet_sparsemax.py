"""A TabNet-style tabular model, as its reference implementation writes it: sparsemax as a
``torch.autograd.Function`` (``forward(ctx, input, dim)`` sorts descending, ``cumsum``s,
finds the support by ``k * input_srt > input_cumsum - 1`` and the threshold by ``gather``,
``ctx.save_for_backward(supp_size, output)``; ``backward`` masks the gradient by
``output == 0`` and subtracts its mean over the support, ``return grad_input, None``);
ghost batch normalisation (``x.chunk(n_chunks, 0)``, a shared ``BatchNorm1d(momentum=0.02)``
over each virtual batch, ``torch.cat``); GLU feature blocks (``F.glu``, ``x * math.sqrt(0.5)``
residuals); attentive transformers whose masks update the prior in place of a Python
variable (``prior = torch.mul(self.gamma - M, prior)``); the sparsity regulariser
``torch.mean(torch.sum(torch.mul(M, torch.log(M + eps)), dim=1))``; per-step masks summed
into feature importances with ``.detach().cpu().numpy()`` and normalised in NumPy; and the
explain pass in ``model.eval()`` under ``torch.no_grad()``."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Function


class SparsemaxFunction(Function):
    @staticmethod
    def forward(ctx, input, dim=-1):
        ctx.dim = dim
        max_val, _ = input.max(dim=dim, keepdim=True)
        input = input - max_val
        tau, supp_size = SparsemaxFunction._threshold_and_support(input, dim=dim)
        output = torch.clamp(input - tau, min=0)
        ctx.save_for_backward(supp_size, output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        supp_size, output = ctx.saved_tensors
        dim = ctx.dim
        grad_input = grad_output.clone()
        grad_input[output == 0] = 0
        v_hat = grad_input.sum(dim=dim) / supp_size.to(output.dtype).squeeze()
        v_hat = v_hat.unsqueeze(dim)
        grad_input = torch.where(output != 0, grad_input - v_hat, grad_input)
        return grad_input, None

    @staticmethod
    def _threshold_and_support(input, dim=-1):
        input_srt, _ = torch.sort(input, descending=True, dim=dim)
        input_cumsum = input_srt.cumsum(dim) - 1
        rhos = torch.arange(1, input.shape[dim] + 1, dtype=input.dtype)
        support = rhos * input_srt > input_cumsum
        support_size = support.sum(dim=dim).unsqueeze(dim)
        tau = input_cumsum.gather(dim, support_size - 1)
        tau /= support_size.to(input.dtype)
        return tau, support_size


def sparsemax(input, dim=-1):
    return SparsemaxFunction.apply(input, dim)


class GBN(nn.Module):
    def __init__(self, dim, virtual_batch_size=16, momentum=0.02):
        super().__init__()
        self.virtual_batch_size = virtual_batch_size
        self.bn = nn.BatchNorm1d(dim, momentum=momentum)

    def forward(self, x):
        chunks = x.chunk(int(np.ceil(x.shape[0] / self.virtual_batch_size)), 0)
        return torch.cat([self.bn(x_) for x_ in chunks], dim=0)


class GLUBlock(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.fc = nn.Linear(d_in, 2 * d_out, bias=False)
        self.bn = GBN(2 * d_out)
        self.residual = d_in == d_out

    def forward(self, x):
        out = F.glu(self.bn(self.fc(x)), dim=-1)
        return (x + out) * math.sqrt(0.5) if self.residual else out


class TabNet(nn.Module):
    def __init__(self, d_in=6, n_d=4, n_a=4, n_steps=3, gamma=1.3, classes=2):
        super().__init__()
        self.n_d, self.n_steps, self.gamma = n_d, n_steps, gamma
        self.initial_bn = nn.BatchNorm1d(d_in, momentum=0.01)
        self.shared = GLUBlock(d_in, n_d + n_a)
        self.steps = nn.ModuleList(GLUBlock(n_d + n_a, n_d + n_a) for _ in range(n_steps + 1))
        self.att = nn.ModuleList(nn.Sequential(nn.Linear(n_a, d_in, bias=False), GBN(d_in))
                                 for _ in range(n_steps))
        self.final = nn.Linear(n_d, classes, bias=False)

    def forward(self, x):
        x = self.initial_bn(x)
        prior = torch.ones(x.shape)
        M_loss, masks = 0, []
        att = self.steps[0](self.shared(x))[:, self.n_d:]
        steps_output = []
        for step in range(self.n_steps):
            M = sparsemax(torch.mul(self.att[step](att), prior))
            M_loss += torch.mean(torch.sum(torch.mul(M, torch.log(M + 1e-10)), dim=1))
            prior = torch.mul(self.gamma - M, prior)
            out = self.steps[step + 1](self.shared(torch.mul(M, x)))
            steps_output.append(F.relu(out[:, :self.n_d]))
            att = out[:, self.n_d:]
            masks.append(M)
        res = torch.sum(torch.stack(steps_output, dim=0), dim=0)
        return self.final(res), M_loss / self.n_steps, masks


def table(rng, n, d_in=6):
    x = rng.normal(0, 1, (n, d_in)).astype(np.float32)
    y = ((x[:, 0] + 0.5 * x[:, 3]) > 0).astype(np.int64)
    return torch.from_numpy((x * [1, 5, 1, 2, 1, 0.5]).astype(np.float32)), torch.from_numpy(y)


def main(steps=10, compile=False, seed=0, batch=32, lambda_sparse=1e-3):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = TabNet()
    for name, p in model.named_parameters():
        if ".bn." not in name and "initial_bn" not in name and not name.endswith("1.bn.weight"):
            p.data.copy_(torch.from_numpy(rng.normal(0, 0.3, tuple(p.shape)).astype(np.float32)))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    data = [table(rng, batch) for _ in range(steps)]
    net = model

    def step(x, y):
        optimizer.zero_grad()
        out, M_loss, _ = net(x)
        loss = F.cross_entropy(out, y) - lambda_sparse * M_loss
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss, M_loss

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, sparsity = [], []
    for x, y in data:
        loss, M_loss = step(x, y)
        losses.append(loss.item())
        sparsity.append(M_loss.item())
    model.eval()
    x, y = table(rng, 20)
    with torch.no_grad():
        out, _, masks = net(x)
    importance = sum(m.detach().cpu().numpy().sum(0) for m in masks)
    importance = importance / importance.sum()
    return {"losses": losses, "sparsity": sparsity, "importance": importance.tolist(),
            "correct": [int((out.argmax(1) == y).sum())],
            "mask0": masks[0][:3].flatten().tolist(),
            "running_var": model.initial_bn.running_var.tolist()}
