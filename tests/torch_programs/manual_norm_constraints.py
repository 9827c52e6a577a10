"""A classifier with hand-written normalisation layers and weight constraints, as papers'
reference code writes them instead of using ``nn.BatchNorm1d``: a ``BatchNorm`` module whose
``running_mean`` / ``running_var`` buffers are updated in place inside ``forward`` (``self.
running_mean.mul_(1 - m).add_(m * mean.detach())``, the unbiased variance by ``n / (n - 1)``,
``self.num_batches_tracked += 1``) only ``if self.training``; a weight-standardised
``nn.Linear`` subclass (``F.linear(x, (w - w.mean(1, keepdim=True)) / (w.std(1,
keepdim=True) + 1e-5), self.bias)``); and, inside the training step after
``optimizer.step()``, constraints applied in place under ``torch.no_grad()`` on views of
parameters: a max-norm renormalisation of each output row (``w.mul_(torch.clamp(max_norm /
(w.norm(dim=1, keepdim=True) + 1e-7), max=1.0))``), the first columns of a weight slice
clamped (``self.fc2.weight[:, :2].clamp_(-0.5, 0.5)``), a bias element filled
(``self.out.bias[0].fill_(0.0)``), and a diagonal of a square weight set through
``torch.diagonal(w).copy_(...)``. An evaluation with ``model.eval()`` uses the running
statistics; SGD with ``StepLR`` stepped per epoch of two batches."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class BatchNorm(nn.Module):
    def __init__(self, num_features, momentum=0.1, eps=1e-5):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def forward(self, x):
        if self.training:
            mean, var = x.mean(0), x.var(0, unbiased=False)
            n = x.shape[0]
            m = self.momentum
            self.running_mean.mul_(1 - m).add_(m * mean.detach())
            self.running_var.mul_(1 - m).add_(m * var.detach() * n / (n - 1))
            self.num_batches_tracked += 1
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class WSLinear(nn.Linear):
    def forward(self, x):
        w = self.weight
        w = (w - w.mean(1, keepdim=True)) / (w.std(1, keepdim=True) + 1e-5)
        return F.linear(x, w, self.bias)


class Net(nn.Module):
    def __init__(self, d=8, hidden=12, classes=3):
        super().__init__()
        self.fc1 = WSLinear(d, hidden)
        self.bn1 = BatchNorm(hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.bn2 = BatchNorm(hidden, momentum=0.2)
        self.out = nn.Linear(hidden, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.fc1(x)))
        x = F.relu(self.bn2(self.fc2(x)))
        return self.out(x)

    @torch.no_grad()
    def apply_constraints(self, max_norm=1.5):
        w = self.out.weight
        w.mul_(torch.clamp(max_norm / (w.norm(dim=1, keepdim=True) + 1e-7), max=1.0))
        self.fc2.weight[:, :2].clamp_(-0.5, 0.5)
        self.out.bias[0].fill_(0.0)
        torch.diagonal(self.fc2.weight).copy_(torch.diagonal(self.fc2.weight).abs())


def data(rng, n, d=8):
    y = rng.integers(0, 3, n)
    x = rng.normal(0, 1, (n, d)) + np.eye(3, d)[y] * 2 + 4
    return torch.tensor(x, dtype=torch.float32), torch.from_numpy(y)


def main(steps=10, compile=False, seed=0, batch=16):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = Net()
    for name, p in model.named_parameters():
        if "bn" not in name:
            p.data.copy_(torch.from_numpy(rng.normal(0, 0.5, tuple(p.shape)).astype(np.float32)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    batches = [data(rng, batch) for _ in range(steps)]
    net = model

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        model.apply_constraints()
        return loss

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses = []
    for i, (x, y) in enumerate(batches):
        losses.append(step(x, y).item())
        if i % 2 == 1:
            scheduler.step()
    model.eval()
    x, y = data(rng, 40)
    with torch.no_grad():
        logits = net(x)
    return {"losses": losses, "correct": [int((logits.argmax(1) == y).sum())],
            "logits": logits[:4].flatten().tolist(),
            "running_mean": model.bn1.running_mean.tolist(),
            "running_var": model.bn2.running_var.tolist(),
            "tracked": [int(model.bn1.num_batches_tracked), int(model.bn2.num_batches_tracked)],
            "out_norms": model.out.weight.norm(dim=1).tolist(),
            "fc2": model.fc2.weight[:4].flatten().tolist(),
            "out_bias": model.out.bias.tolist()}
