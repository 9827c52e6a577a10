"""A PixelCNN as the classic PyTorch ports write it: ``MaskedConv2d(nn.Conv2d)`` with the
mask a registered buffer filled by slice assignment (``self.mask[:, :, kH // 2, kW // 2 +
(mask_type == 'B'):] = 0``) and applied in ``forward`` by ``self.weight.data *= self.mask``
before ``super().forward(x)``; type-A then type-B layers with BatchNorm2d and ReLU in an
``nn.Sequential``; a 4-level categorical output over each pixel trained with
``F.cross_entropy`` on (N, K, H, W) logits against integer targets quantised by
``(x * (K - 1)).round().long()``; RMSprop; and sampling pixel by pixel in raster order
under ``torch.no_grad()`` (``probs = F.softmax(out[:, :, i, j], dim=1)``, the mode by
``argmax`` so that the draws are comparable, written into the canvas by index)."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MaskedConv2d(nn.Conv2d):
    def __init__(self, mask_type, *args, **kwargs):
        super().__init__(*args, **kwargs)
        assert mask_type in {"A", "B"}
        self.register_buffer("mask", self.weight.data.clone())
        _, _, kH, kW = self.weight.size()
        self.mask.fill_(1)
        self.mask[:, :, kH // 2, kW // 2 + (mask_type == "B"):] = 0
        self.mask[:, :, kH // 2 + 1:] = 0

    def forward(self, x):
        self.weight.data *= self.mask
        return super().forward(x)


def make_net(fm=8, levels=4):
    return nn.Sequential(
        MaskedConv2d("A", 1, fm, 5, 1, 2, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        MaskedConv2d("B", fm, fm, 3, 1, 1, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        MaskedConv2d("B", fm, fm, 3, 1, 1, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
        nn.Conv2d(fm, levels, 1))


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    levels = 4
    model = make_net(levels=levels)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(torch.from_numpy(rng.normal(0, 0.3, p.shape).astype(np.float32)))
        model[-1].bias.fill_(0.1)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=3e-3)
    net = torch.compile(model) if compile == "model" else model

    def train_step(x):
        target = (x[:, 0] * (levels - 1)).round().long()
        out = net(x)
        loss = F.cross_entropy(out, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    if compile is True:
        train_step = torch.compile(train_step)
    log = []
    for _ in range(steps):
        # blobs: bright squares at random places on 7x9 images
        x = np.zeros((3, 1, 7, 9), np.float32)
        for b in range(3):
            r, c = rng.integers(0, 4), rng.integers(0, 6)
            x[b, 0, r:r + 3, c:c + 3] = rng.choice([1 / 3, 2 / 3, 1.0])
        log.append(train_step(torch.from_numpy(x)).item())
    weight_masked = [float((m.weight * (1 - m.mask)).abs().sum()) for m in model
                     if isinstance(m, MaskedConv2d)]
    model.eval()
    sample = torch.zeros(2, 1, 5, 6)
    sample[1, 0, 0, 0] = 1.0
    with torch.no_grad():
        for i in range(5):
            for j in range(6):
                if (i, j) == (0, 0):
                    continue
                out = net(sample)
                probs = F.softmax(out[:, :, i, j], dim=1)
                sample[:, :, i, j] = probs.argmax(1, keepdim=True).float() / (levels - 1)
        final = F.log_softmax(net(sample), dim=1)
    return {"log": log, "masked_weight_sum": weight_masked,
            "sample": (sample * (levels - 1)).round().long().flatten().tolist(),
            "final": final[1, :, 2, 3].tolist()}
