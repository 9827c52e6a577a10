"""Patch-based image denoising written with ``F.unfold`` and ``F.fold``, as patch-wise
networks and "convolution by hand" tutorials write it: overlapping 4x4 patches (stride 2,
padding 1) taken with ``nn.Unfold``, each patch denoised by an MLP applied to the
``(B, L, C*k*k)`` transpose, the patches put back with ``F.fold`` and the overlaps
averaged by dividing by ``F.fold(F.unfold(ones))`` (the count of patches over each
pixel); a local self-attention branch over each patch's pixels built from the unfolded
columns (``view(B, C, k*k, L)``, ``softmax`` over the window); a 3x3 convolution done as
unfold + matmul + view, checked against ``F.conv2d``. Trained with RAdam under a
``PolynomialLR`` schedule on a Charbonnier loss (``sqrt(d**2 + eps**2)``)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class PatchDenoiser(nn.Module):
    def __init__(self, channels=2, k=4, hidden=24):
        super().__init__()
        self.k, self.stride, self.padding = k, 2, 1
        self.unfold = nn.Unfold(kernel_size=k, stride=2, padding=1)
        self.mlp = nn.Sequential(nn.Linear(channels * k * k, hidden), nn.SiLU(),
                                 nn.Linear(hidden, channels * k * k))
        self.query = nn.Parameter(torch.zeros(channels))
        self.conv_w = nn.Parameter(torch.zeros(channels, channels, 3, 3))

    def local_attention(self, cols, b, c):
        windows = cols.view(b, c, self.k * self.k, -1)
        scores = torch.einsum("c,bcpl->bpl", self.query, windows)
        weights = F.softmax(scores, dim=1)
        return (windows * weights[:, None]).sum(2)   # (B, C, L)

    def conv_by_unfold(self, x):
        b, c, h, w = x.shape
        cols = F.unfold(x, kernel_size=3, padding=1)
        out = self.conv_w.view(c, -1) @ cols
        return out.view(b, c, h, w)

    def forward(self, x):
        b, c, h, w = x.shape
        cols = self.unfold(x)
        patches = self.mlp(cols.transpose(1, 2)).transpose(1, 2)
        size = dict(kernel_size=self.k, stride=self.stride, padding=self.padding)
        summed = F.fold(cols + patches, (h, w), **size)
        counts = F.fold(F.unfold(torch.ones_like(x), **size), (h, w), **size)
        attended = self.local_attention(cols, b, c).mean(-1)
        return summed / counts + attended[:, :, None, None] * 0.1 + self.conv_by_unfold(x)


def charbonnier(pred, target, eps=1e-3):
    return torch.sqrt((pred - target) ** 2 + eps ** 2).mean()


def images(rng, n=4):
    yy, xx = np.mgrid[0:8, 0:8] / 8.0
    phase = rng.uniform(0, np.pi, (n, 2, 1, 1))
    clean = np.sin(3 * xx + phase) * np.cos(2 * yy + phase)
    noisy = clean + rng.normal(0, 0.2, clean.shape)
    return torch.from_numpy(noisy.astype(np.float32)), torch.from_numpy(clean.astype(np.float32))


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = PatchDenoiser()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.2, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.RAdam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.PolynomialLR(optimizer, total_iters=steps, power=2.0)
    net = torch.compile(model) if compile == "model" else model

    def step(noisy, clean):
        optimizer.zero_grad()
        loss = charbonnier(net(noisy), clean)
        loss.backward()
        optimizer.step()
        return loss

    if compile is True:
        step = torch.compile(step)
    losses, lrs = [], []
    for _ in range(steps):
        noisy, clean = images(rng)
        losses.append(step(noisy, clean).item())
        scheduler.step()
        lrs.append(scheduler.get_last_lr()[0])
    x, _ = images(rng, 2)
    with torch.no_grad():
        conv_gap = (model.conv_by_unfold(x) - F.conv2d(x, model.conv_w, padding=1)).abs().max()
        out = net(x)
    return {"losses": losses, "lrs": lrs, "conv_gap_small": [bool(conv_gap < 1e-5)],
            "out": out.flatten()[:40].tolist()}
