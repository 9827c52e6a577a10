"""Semi-supervised training with FixMatch, as its public implementations write the step: the
labelled batch and the weakly and strongly augmented unlabelled batches concatenated and
passed through ``interleave`` (``x.reshape([-1, size] + s[1:]).transpose(0, 1).reshape([-1]
+ s[1:])``) and back through ``de_interleave``, the logits split by ``logits[:batch]`` and
``logits[batch:].chunk(2)``; pseudo-labels from ``torch.softmax(logits_u_w.detach() / T,
dim=-1)`` and ``torch.max(pseudo_label, dim=-1)``, the confidence mask
``max_probs.ge(threshold).float()``, the unlabelled loss ``(F.cross_entropy(logits_u_s,
targets_u, reduction='none') * mask).mean()``; the augmentations in the loop
(``torch.flip(x, dims=[3])``, ``torch.roll`` shifts and NumPy noise); a cosine schedule
``LambdaLR`` with ``math.cos(math.pi * 7 * step / (16 * total))``; an EMA model whose
parameters follow by ``ema_v.copy_(ema_v * decay + (1. - decay) * model_v.detach())`` and
whose buffers are copied; the mask rate and pseudo-label accuracy (``torch.where`` over the
argmax against the true labels) logged."""
import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def interleave(x, size):
    s = list(x.shape)
    return x.reshape([-1, size] + s[1:]).transpose(0, 1).reshape([-1] + s[1:])


def de_interleave(x, size):
    s = list(x.shape)
    return x.reshape([size, -1] + s[1:]).transpose(0, 1).reshape([-1] + s[1:])


class Net(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8, momentum=0.001)
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        x = F.leaky_relu(self.bn(self.conv(x)), negative_slope=0.1)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class ModelEMA:
    def __init__(self, model, decay):
        self.ema = copy.deepcopy(model)
        self.ema.eval()
        self.decay = decay
        self.param_keys = [k for k, _ in self.ema.named_parameters()]
        self.buffer_keys = [k for k, _ in self.ema.named_buffers()]
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        with torch.no_grad():
            msd, esd = model.state_dict(), self.ema.state_dict()
            for k in self.param_keys:
                model_v, ema_v = msd[k].detach(), esd[k]
                ema_v.copy_(ema_v * self.decay + (1. - self.decay) * model_v)
            for k in self.buffer_keys:
                esd[k].copy_(msd[k])


def images(rng, n):
    y = rng.integers(0, 3, n)
    x = rng.normal(0, 0.4, (n, 1, 6, 6)).astype(np.float32)
    for k, c in enumerate(y):
        x[k, 0, 2 * c:2 * c + 2, 1:4] += 1.5
    return torch.from_numpy(x), torch.from_numpy(y)


def main(steps=10, compile=False, seed=0, batch=4, mu=2, threshold=0.6, T=1.0, lambda_u=1.0):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = Net()
    for name, p in model.named_parameters():
        if "bn" not in name:
            p.data.copy_(torch.from_numpy(rng.normal(0, 0.5, tuple(p.shape)).astype(np.float32)))
    no_decay = ["bias", "bn"]
    grouped = [{"params": [p for n, p in model.named_parameters()
                           if not any(nd in n for nd in no_decay)], "weight_decay": 5e-4},
               {"params": [p for n, p in model.named_parameters()
                           if any(nd in n for nd in no_decay)], "weight_decay": 0.0}]
    optimizer = torch.optim.SGD(grouped, lr=0.05, momentum=0.9, nesterov=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: max(0.0, math.cos(math.pi * 7 * s / (16 * steps))))
    ema = ModelEMA(model, 0.9)
    data = []
    for _ in range(steps):
        (xl, yl), (xu, yu) = images(rng, batch), images(rng, batch * mu)
        weak = torch.flip(xu, dims=[3]) + torch.from_numpy(
            rng.normal(0, 0.05, xu.shape).astype(np.float32))
        strong = torch.roll(xu, shifts=1, dims=2) * 0.8 + torch.from_numpy(
            rng.normal(0, 0.3, xu.shape).astype(np.float32))
        data.append((xl, yl, weak, strong, yu))
    net = model

    def step(inputs_x, targets_x, inputs_u_w, inputs_u_s):
        inputs = interleave(torch.cat((inputs_x, inputs_u_w, inputs_u_s)), 2 * mu + 1)
        logits = de_interleave(net(inputs), 2 * mu + 1)
        logits_x = logits[:batch]
        logits_u_w, logits_u_s = logits[batch:].chunk(2)
        Lx = F.cross_entropy(logits_x, targets_x, reduction="mean")
        pseudo_label = torch.softmax(logits_u_w.detach() / T, dim=-1)
        max_probs, targets_u = torch.max(pseudo_label, dim=-1)
        mask = max_probs.ge(threshold).float()
        Lu = (F.cross_entropy(logits_u_s, targets_u, reduction="none") * mask).mean()
        loss = Lx + lambda_u * Lu
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss, Lx, Lu, mask.mean(), targets_u

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    logs = {k: [] for k in ("loss", "lx", "lu", "mask", "pseudo_correct")}
    for xl, yl, weak, strong, yu in data:
        loss, lx, lu, mask_rate, targets_u = step(xl, yl, weak, strong)
        scheduler.step()
        ema.update(model)
        correct = torch.where(targets_u == yu, torch.ones_like(yu), torch.zeros_like(yu))
        for key, value in zip(logs, (loss, lx, lu, mask_rate)):
            logs[key].append(value.item())
        logs["pseudo_correct"].append(int(correct.sum()))
    x, y = images(rng, 30)
    with torch.no_grad():
        logits = ema.ema(x)
    logs["ema_logits"] = logits[:5].flatten().tolist()
    logs["ema_correct"] = [int((logits.argmax(1) == y).sum())]
    logs["running_mean"] = ema.ema.bn.running_mean.tolist()
    return logs
