"""Action recognition on short clips as C3D/R(2+1)D/SlowFast repositories write it: clips
loaded as ``(B, T, C, H, W)`` and ``permute(0, 2, 1, 3, 4)``d to ``(B, C, T, H, W)``; a stem
``nn.Conv3d`` with kernel ``(3, 5, 5)``, ``stride=(1, 2, 2)`` and asymmetric padding,
``nn.BatchNorm3d``, ``nn.MaxPool3d(kernel_size=(1, 2, 2))``, an R(2+1)D block factorising a
3-D conv into a spatial ``(1, 3, 3)`` and a temporal ``(3, 1, 1)`` conv with a residual,
``nn.Dropout3d``, ``nn.AdaptiveAvgPool3d(1)``; a two-pathway variant samples every other
frame by ``index_select`` along time (SlowFast's slow path) and fuses it by
``F.interpolate(mode="trilinear")`` back to the fast path's length; SGD with Nesterov momentum
and weight decay, ``CrossEntropyLoss``; top-1/top-2 accuracy by ``topk`` and ``eq``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class R2Plus1D(nn.Module):
    def __init__(self, channels, mid):
        super().__init__()
        self.spatial = nn.Conv3d(channels, mid, (1, 3, 3), padding=(0, 1, 1), bias=False)
        self.bn1 = nn.BatchNorm3d(mid)
        self.temporal = nn.Conv3d(mid, channels, (3, 1, 1), padding=(1, 0, 0), bias=False)
        self.bn2 = nn.BatchNorm3d(channels)

    def forward(self, x):
        h = F.relu(self.bn1(self.spatial(x)))
        return F.relu(x + self.bn2(self.temporal(h)))


class VideoNet(nn.Module):
    def __init__(self, classes=3, width=6):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv3d(3, width, (3, 5, 5), stride=(1, 2, 2), padding=(1, 2, 2), bias=False),
            nn.BatchNorm3d(width), nn.ReLU(inplace=True), nn.MaxPool3d(kernel_size=(1, 2, 2)))
        self.block = R2Plus1D(width, 8)
        self.slow = nn.Conv3d(width, width, (1, 3, 3), padding=(0, 1, 1))
        self.drop = nn.Dropout3d(0.0)
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.fc = nn.Linear(width, classes)

    def forward(self, clips):
        x = clips.permute(0, 2, 1, 3, 4)
        x = self.block(self.stem(x))
        frames = torch.arange(0, x.shape[2], 2)
        slow = self.slow(x.index_select(2, frames))
        x = x + F.interpolate(slow, size=x.shape[2:], mode="trilinear", align_corners=False)
        return self.fc(self.pool(self.drop(x)).flatten(1))


def clips(rng, n=4, t=6, size=12):
    labels = rng.integers(0, 3, n)
    grid = np.arange(size)[None, :] + np.arange(size)[:, None]
    motion = np.stack([np.sin(0.6 * grid + (label + 1) * 0.8 * f)
                       for label in labels for f in range(t)])
    video = motion.reshape(n, t, 1, size, size) + rng.normal(0, 0.3, (n, t, 3, size, size))
    return torch.tensor(video, dtype=torch.float32), torch.from_numpy(labels)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = VideoNet()
    with torch.no_grad():
        for p in model.parameters():
            fan_in = p[0].numel() if p.dim() > 1 else 1
            scale = np.sqrt(2 / fan_in) if p.dim() > 1 else 0.1
            p.copy_(torch.from_numpy(rng.normal(0, scale, tuple(p.shape)).astype(np.float32)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, nesterov=True,
                                weight_decay=1e-4)
    criterion = nn.CrossEntropyLoss()
    net = torch.compile(model) if compile == "model" else model

    def step(video, labels):
        optimizer.zero_grad()
        logits = net(video)
        loss = criterion(logits, labels)
        loss.backward()
        optimizer.step()
        return loss, logits

    if compile is True:
        step = torch.compile(step)
    losses, top1, top2 = [], [], []
    for _ in range(steps):
        video, labels = clips(rng)
        model.train()
        loss, logits = step(video, labels)
        losses.append(loss.item())
        _, pred = logits.topk(2, dim=1)
        hits = pred.t().eq(labels.view(1, -1).expand_as(pred.t()))
        top1.append(int(hits[:1].sum()))
        top2.append(int(hits[:2].sum()))
    model.eval()
    video, labels = clips(rng, n=2)
    with torch.no_grad():
        probs = F.softmax(net(video), dim=1)
    return {"losses": losses, "top1": top1, "top2": top2, "probs": probs.flatten().tolist(),
            "running_mean": model.block.bn2.running_mean.tolist()}
