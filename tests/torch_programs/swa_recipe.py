"""A modern CIFAR-style training recipe, as timm-like scripts and torchvision's reference
``train.py`` write it: a ResNeXt-style net (grouped 3x3 convs, squeeze-and-excitation
with ``nn.AdaptiveAvgPool2d(1)`` and ``torch.flatten(x, 1)``), no weight decay on norms and
biases (``p.ndim <= 1`` param groups), SGD with Nesterov momentum, linear warm-up then
cosine decay by ``LambdaLR``, label smoothing in ``nn.CrossEntropyLoss``, mixup (the mixing
weight drawn by NumPy, ``torch.randperm``-style permutation from NumPy too),
``clip_grad_norm_``; an EMA of the weights every step (``AveragedModel`` with
``get_ema_multi_avg_fn`` and ``use_buffers=True``, as torchvision's ``ExponentialMovingAverage``)
and stochastic weight averaging over the last steps (``AveragedModel``, ``SWALR``, then
``update_bn`` over the training batches); both averaged models evaluated.
Data: 12x12 images of oriented stripes, four classes."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import SWALR, AveragedModel, get_ema_multi_avg_fn, update_bn


class SqueezeExcite(nn.Module):
    def __init__(self, channels, reduction=4):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, channels // reduction, 1)
        self.fc2 = nn.Conv2d(channels // reduction, channels, 1)

    def forward(self, x):
        s = self.pool(x)
        s = self.fc2(F.relu(self.fc1(s), inplace=True))
        return x * torch.sigmoid(s)


class Bottleneck(nn.Module):
    def __init__(self, cin, cout, stride=1, groups=4, width=16):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.se = SqueezeExcite(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.se(self.bn3(self.conv3(out)))
        return F.relu(out + self.shortcut(x))


class ResNeXt(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        self.layer1 = Bottleneck(16, 32)
        self.layer2 = Bottleneck(32, 32, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def stripes(rng, n, size=12):
    labels = rng.integers(0, 4, n)
    yy, xx = np.mgrid[0:size, 0:size]
    images = []
    for c in labels:
        angle = c * math.pi / 4 + rng.normal(0, 0.1)
        phase = rng.uniform(0, 2 * math.pi)
        wave = np.sin((xx * math.cos(angle) + yy * math.sin(angle)) * 1.3 + phase)
        images.append(wave + rng.normal(0, 0.3, wave.shape))
    return (torch.tensor(np.stack(images)[:, None], dtype=torch.float32),
            torch.tensor(labels))


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    state = model.state_dict()
    for name, v in state.items():
        if "running" in name or "num_batches" in name:
            continue
        if name.endswith("weight") and v.dim() == 1:
            state[name] = torch.ones_like(v)
        elif v.dim() == 1:
            state[name] = torch.zeros_like(v)
        else:
            fan_out = v.shape[0] * int(np.prod(v.shape[2:]))
            state[name] = torch.tensor(rng.normal(0, math.sqrt(2 / fan_out), tuple(v.shape))
                                       .astype(np.float32))
    model.load_state_dict(state)


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim <= 1 else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def main(steps=10, compile=False, seed=0, batch=16):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = ResNeXt()
    init_weights(model, seed)
    optimizer = torch.optim.SGD(param_groups(model, 5e-4), lr=0.1, momentum=0.9,
                                nesterov=True)
    warmup, swa_start = 2, steps - 2

    def lr_lambda(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1 + math.cos(math.pi * progress))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    swa_scheduler = SWALR(optimizer, swa_lr=0.02, anneal_epochs=1)
    ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9), use_buffers=True)
    swa_model = AveragedModel(model)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    data = [stripes(rng, batch) for _ in range(steps)]
    mix = [(rng.beta(0.4, 0.4), torch.tensor(rng.permutation(batch))) for _ in range(steps)]
    forward = model

    def train_step(images, target, lam, index):
        mixed = lam * images + (1 - lam) * images[index, :]
        output = forward(mixed)
        loss = lam * criterion(output, target) + (1 - lam) * criterion(output, target[index])
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        optimizer.step()
        return loss

    if compile == "model":
        forward = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, lrs = [], []
    for i, ((images, target), (lam, index)) in enumerate(zip(data, mix)):
        model.train()
        losses.append(train_step(images, target, float(lam), index).item())
        ema_model.update_parameters(model)
        if i >= swa_start:
            swa_model.update_parameters(model)
            swa_scheduler.step()
        else:
            scheduler.step()
        lrs.append(optimizer.param_groups[0]["lr"])
    update_bn([(x, y) for x, y in data], swa_model)
    test_x, test_y = stripes(rng, 64)
    out = {}
    for name, m in (("model", model), ("ema", ema_model), ("swa", swa_model)):
        m.eval()
        with torch.no_grad():
            logits = m(test_x)
        out[f"{name}_accuracy"] = [(logits.argmax(1) == test_y).float().mean().item()]
        out[f"{name}_logits"] = logits[:3].flatten().tolist()
    return {"losses": losses, "lrs": lrs, **out,
            "swa_running_var": swa_model.module.layer2.bn3.running_var[:6].tolist(),
            "n_averaged": [int(ema_model.n_averaged), int(swa_model.n_averaged)]}
