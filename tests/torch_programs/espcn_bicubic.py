"""Single-image super-resolution as ESPCN/EDSR/SwinIR repositories write it: the network
learns the residual over ``F.interpolate(lr, scale_factor=2, mode="bicubic",
align_corners=False)``; features at low resolution, upsampled by ``F.pixel_shuffle`` after a
conv to ``4 * C`` channels, a space-to-depth stem by ``F.pixel_unshuffle`` of the bicubic
image, a mean-shift by a fixed ``register_buffer`` (``rgb_mean``), ``nn.Hardtanh`` and
``F.hardtanh``; low-resolution training inputs made from the targets as torchvision's
``Resize`` does, by ``F.interpolate(..., mode="bicubic", antialias=True)``, and evaluation
inputs by ``F.interpolate(..., mode="area")`` of an ``F.avg_pool2d`` blur; the loss
``nn.L1Loss`` plus a Charbonnier term ``sqrt(d ** 2 + eps ** 2)``; PSNR by ``10 *
torch.log10(1 / mse)`` on outputs clamped in place (``clamp_(0, 1)``) and rounded as 8-bit
images (``mul(255).round()``); Adam with betas ``(0.9, 0.99)`` and ``MultiStepLR``;
evaluated with ``nn.Upsample(mode="nearest")`` as the baseline."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ESPCN(nn.Module):
    def __init__(self, feats=8, scale=2):
        super().__init__()
        self.scale = scale
        self.register_buffer("rgb_mean", torch.tensor([0.4488, 0.4371, 0.4040]).view(1, 3, 1, 1))
        self.head = nn.Conv2d(3, feats, 5, padding=2)
        self.skip = nn.Conv2d(3 * scale * scale, feats, 1)
        self.body = nn.Sequential(nn.Conv2d(feats, feats, 3, padding=1), nn.Hardtanh(-2, 2),
                                  nn.Conv2d(feats, feats, 3, padding=1))
        self.tail = nn.Conv2d(feats, 3 * scale * scale, 3, padding=1)

    def forward(self, lr):
        bicubic = F.interpolate(lr, scale_factor=self.scale, mode="bicubic",
                                align_corners=False)
        x = lr - self.rgb_mean
        f = self.head(x) + self.skip(F.pixel_unshuffle(bicubic - self.rgb_mean, self.scale))
        f = f + F.hardtanh(self.body(f), min_val=-1.5, max_val=1.5)
        return bicubic + F.pixel_shuffle(self.tail(f), self.scale)


def images(rng, n=3, size=12, antialias=True):
    yy, xx = np.meshgrid(np.linspace(0, 1, size), np.linspace(0, 1, size), indexing="ij")
    phase = rng.uniform(0, 2 * np.pi, (n, 3, 1, 1))
    freq = rng.uniform(2, 6, (n, 1, 1, 1))
    hr = 0.5 + 0.4 * np.sin(freq * (xx + 0.5 * yy) * np.pi + phase)
    hr = torch.tensor(hr, dtype=torch.float32)
    if antialias:
        return F.interpolate(hr, scale_factor=0.5, mode="bicubic", antialias=True), hr
    blur = F.avg_pool2d(F.pad(hr, (1, 1, 1, 1), mode="replicate"), 3, stride=1)
    return F.interpolate(blur, scale_factor=0.5, mode="area"), hr


def psnr(sr, hr):
    sr = sr.detach().clone().clamp_(0, 1).mul(255).round() / 255
    mse = F.mse_loss(sr, hr, reduction="none").mean(dim=(1, 2, 3))
    return (10 * torch.log10(1 / mse)).tolist()


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = ESPCN()
    with torch.no_grad():
        for p in model.parameters():
            fan_in = p[0].numel() if p.dim() > 1 else 100
            p.copy_(torch.from_numpy(rng.normal(0, 0.5 / np.sqrt(fan_in), tuple(p.shape))
                                     .astype(np.float32)))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.99))
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2], gamma=0.5)
    l1 = nn.L1Loss()
    net = torch.compile(model) if compile == "model" else model

    def step(lr, hr):
        optimizer.zero_grad()
        sr = net(lr)
        charbonnier = torch.sqrt((sr - hr) ** 2 + 1e-6).mean()
        loss = l1(sr, hr) + charbonnier
        loss.backward()
        optimizer.step()
        return loss, sr

    if compile is True:
        step = torch.compile(step)
    losses, scores = [], []
    for _ in range(steps):
        lr, hr = images(rng)
        loss, sr = step(lr, hr)
        losses.append(loss.item())
        scores.append(psnr(sr, hr))
        scheduler.step()
    lr, hr = images(rng, n=2, size=10, antialias=False)
    with torch.no_grad():
        sr = net(lr)
    nearest = nn.Upsample(scale_factor=2, mode="nearest")(lr)
    return {"losses": losses, "psnr": scores, "eval_psnr": psnr(sr, hr),
            "nearest_psnr": psnr(nearest, hr), "sr": sr.flatten()[::11].tolist()}
