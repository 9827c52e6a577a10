"""Quantisation-aware training written by hand, as tutorials and edge-deployment repositories
do before reaching for ``torch.ao``: a ``FakeQuant`` module with a min/max observer kept in
buffers (``self.min_val.copy_(torch.minimum(self.min_val, x.detach().min()))`` in place and
``self.max_val = torch.maximum(...)`` rebinding a buffer by attribute assignment), Python
flags ``observer_enabled`` / ``fake_quant_enabled`` read in ``forward``, the affine scale
and zero point (``torch.round``, ``clamp``), a straight-through estimator ``x + (x_dq -
x).detach()``; weights fake-quantised per output channel, symmetric, from ``w.abs().amax(dim=
1, keepdim=True)``. Training toggles the flags from outside between steps as QAT recipes
do: fake quantisation starts after a float warm-up (``model.apply(enable_fake_quant)``),
observers are frozen later (``model.apply(disable_observer)``) and the batch norms are
frozen by putting only them in eval mode (``model.apply(freeze_bn)`` while the model stays
in training mode). Adam (the layers before the batch norms have no bias, whose gradient
would be rounding noise that Adam's first steps turn into a full step); an evaluation in
``model.eval()``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class FakeQuant(nn.Module):
    def __init__(self, bits=8):
        super().__init__()
        self.qmin, self.qmax = 0, 2 ** bits - 1
        self.observer_enabled = True
        self.fake_quant_enabled = False
        self.register_buffer("min_val", torch.tensor(float("inf")))
        self.register_buffer("max_val", torch.tensor(float("-inf")))

    def forward(self, x):
        if self.observer_enabled:
            self.min_val.copy_(torch.minimum(self.min_val, x.detach().min()))
            self.max_val = torch.maximum(self.max_val, x.detach().max())
        if not self.fake_quant_enabled:
            return x
        lo, hi = torch.clamp(self.min_val, max=0.0), torch.clamp(self.max_val, min=0.0)
        scale = torch.clamp((hi - lo) / float(self.qmax - self.qmin), min=1e-8)
        zero_point = torch.clamp(self.qmin - torch.round(lo / scale), self.qmin, self.qmax)
        x_q = torch.clamp(torch.round(x / scale) + zero_point, self.qmin, self.qmax)
        x_dq = (x_q - zero_point) * scale
        return x + (x_dq - x).detach()


def quantize_weight(w, bits=8):
    qmax = 2 ** (bits - 1) - 1
    scale = w.detach().abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / qmax
    w_dq = torch.clamp(torch.round(w / scale), -qmax - 1, qmax) * scale
    return w + (w_dq - w).detach()


class QLinear(nn.Linear):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fake_quant_enabled = False
        self.act = FakeQuant()

    def forward(self, x):
        w = quantize_weight(self.weight) if self.fake_quant_enabled else self.weight
        return F.linear(self.act(x), w, self.bias)


class Net(nn.Module):
    def __init__(self, d=8, width=16, classes=4):
        super().__init__()
        self.fc1, self.bn1 = QLinear(d, width, bias=False), nn.BatchNorm1d(width)
        self.fc2, self.bn2 = QLinear(width, width, bias=False), nn.BatchNorm1d(width)
        self.fc3 = QLinear(width, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.fc1(x)))
        x = F.relu(self.bn2(self.fc2(x)))
        return self.fc3(x)


def enable_fake_quant(m):
    if hasattr(m, "fake_quant_enabled"):
        m.fake_quant_enabled = True


def disable_observer(m):
    if isinstance(m, FakeQuant):
        m.observer_enabled = False


def freeze_bn(m):
    if isinstance(m, nn.BatchNorm1d):
        m.eval()


def main(steps=8, compile=False, seed=0, batch=16):
    rng = np.random.default_rng(seed)
    model = Net()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("fc"):
                p.copy_(torch.from_numpy(rng.normal(0, 0.5, tuple(p.shape)).astype(np.float32)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    ys = [rng.integers(0, 4, batch) for _ in range(steps)]
    data = [(torch.from_numpy((rng.normal(0, 1, (batch, 8)) + 2 * np.eye(4, 8)[y])
                              .astype(np.float32)), torch.from_numpy(y)) for y in ys]
    net = model

    def step(x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses = []
    for i, (x, y) in enumerate(data):
        if i == steps // 4:
            model.apply(enable_fake_quant)
        if i == steps // 2:
            model.apply(disable_observer)
        if i == 3 * steps // 4:
            model.apply(freeze_bn)
        losses.append(step(x, y).item())
    model.eval()
    with torch.no_grad():
        logits = net(data[0][0])
    return {"losses": losses, "logits": logits[:4].flatten().tolist(),
            "ranges": [float(m.min_val) for m in (model.fc1.act, model.fc2.act, model.fc3.act)]
            + [float(m.max_val) for m in (model.fc1.act, model.fc2.act, model.fc3.act)],
            "running_mean": model.bn2.running_mean.tolist(),
            "training_flags": [int(m.training) for m in model.modules()]}
