"""A U-Net decoder and a spatial transformer front end at odd sizes, as segmentation and
registration code writes them: the decoder upsamples by ``F.interpolate(x,
scale_factor=2, mode="bilinear", align_corners=False, antialias=False)`` and, where the
skip is odd, by ``size=skip.shape[-2:]``, fixing a one-pixel mismatch by ``F.pad`` with
``diffX // 2, diffX - diffX // 2``; a ``nn.Upsample(scale_factor=1.5, mode="bilinear",
recompute_scale_factor=True)`` branch; ``"nearest-exact"`` and ``"area"`` resizes for
the deep-supervision targets; a localisation net whose affine parameters start at the
identity (``fc.weight.data.zero_()``, ``fc.bias.data.copy_(torch.tensor([1, 0, 0, 0, 1,
0], dtype=torch.float))``) feeding ``F.affine_grid(theta, x.size(), align_corners=False)``
and ``F.grid_sample`` with ``padding_mode="border"`` and ``"reflection"`` and
``mode="nearest"`` for the label map; a soft Dice plus cross-entropy loss; SGD with
Nesterov momentum and a ``PolynomialLR`` decay."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(2, cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())


class Up(nn.Module):
    def __init__(self, cin, cout, to_size):
        super().__init__()
        self.to_size = to_size
        self.conv = double_conv(cin, cout)

    def forward(self, x1, x2):
        if self.to_size:
            x1 = F.interpolate(x1, size=x2.shape[-2:], mode="bilinear", align_corners=False)
        else:
            x1 = F.interpolate(x1, scale_factor=2, mode="bilinear", align_corners=False,
                               antialias=False)
        diffY = x2.size()[2] - x1.size()[2]
        diffX = x2.size()[3] - x1.size()[3]
        x1 = F.pad(x1, [diffX // 2, diffX - diffX // 2, diffY // 2, diffY - diffY // 2])
        return self.conv(torch.cat([x2, x1], dim=1))


class STN(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(c, 4, 3, stride=2), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d((2, 2)), nn.Flatten())
        self.fc = nn.Linear(16, 6)
        self.fc.weight.data.zero_()
        self.fc.bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

    def forward(self, x, label):
        theta = self.fc(self.loc(x)).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        x = F.grid_sample(x, grid, padding_mode="border", align_corners=False)
        edge = F.grid_sample(x, grid, padding_mode="reflection", align_corners=True)
        label = F.grid_sample(label, grid, mode="nearest", align_corners=False)
        return x + 0.1 * edge, label


class UNet(nn.Module):
    def __init__(self, cin=2, classes=3, w=4):
        super().__init__()
        self.stn = STN(cin)
        self.inc = double_conv(cin, w)
        self.down1 = nn.Sequential(nn.MaxPool2d(2), double_conv(w, 2 * w))
        self.down2 = nn.Sequential(nn.MaxPool2d(2), double_conv(2 * w, 2 * w))
        self.up1 = Up(4 * w, w, to_size=False)
        self.up2 = Up(2 * w, w, to_size=True)
        self.side = nn.Sequential(nn.Upsample(scale_factor=1.5, mode="bilinear",
                                              recompute_scale_factor=True),
                                  nn.Conv2d(2 * w, classes, 1))
        self.outc = nn.Conv2d(w, classes, 1)

    def forward(self, x, label):
        x, label = self.stn(x, label)
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        y = self.up1(x3, x2)
        y = self.up2(y, x1)
        return self.outc(y), self.side(x3), label


def dice_loss(logits, target, classes, eps=1.0):
    probs = logits.softmax(1)
    one_hot = F.one_hot(target, classes).permute(0, 3, 1, 2).float()
    inter = (probs * one_hot).sum((0, 2, 3))
    union = probs.sum((0, 2, 3)) + one_hot.sum((0, 2, 3))
    return 1 - ((2 * inter + eps) / (union + eps)).mean()


def make_batch(rng, n=2, h=13, w=11):
    yy, xx = np.mgrid[:h, :w]
    labels = np.zeros((n, h, w), np.int64)
    x = rng.normal(0, 0.2, (n, 2, h, w)).astype(np.float32)
    for b in range(n):
        cy, cx, r = rng.uniform(3, h - 3), rng.uniform(3, w - 3), rng.uniform(2, 4)
        disk = (yy - cy) ** 2 + (xx - cx) ** 2 < r ** 2
        labels[b][disk] = 1
        labels[b][(yy > h - 4) & ~disk] = 2
        x[b, 0] += disk
        x[b, 1] += labels[b] == 2
    return torch.from_numpy(x), torch.from_numpy(labels)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = UNet()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.startswith("stn.fc"):
                p.copy_(torch.from_numpy(rng.normal(0, 0.3, p.shape).astype(np.float32)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    scheduler = torch.optim.lr_scheduler.PolynomialLR(optimizer, total_iters=steps, power=2.0)
    net = torch.compile(model) if compile == "model" else model

    def train_step(x, labels):
        logits, side, warped = net(x, labels.unsqueeze(1).float())
        target = warped.squeeze(1).long()
        side_target = F.interpolate(warped, size=side.shape[-2:], mode="nearest-exact")
        soft = F.interpolate(F.one_hot(target, 3).permute(0, 3, 1, 2).float(),
                             size=side.shape[-2:], mode="area")
        loss = (F.cross_entropy(logits, target) + dice_loss(logits, target, 3)
                + 0.3 * F.cross_entropy(side, side_target.squeeze(1).long())
                + 0.1 * F.mse_loss(side.softmax(1), soft))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    if compile is True:
        train_step = torch.compile(train_step)
    log = []
    for _ in range(steps):
        log.append(train_step(*make_batch(rng)).item())
        scheduler.step()
    x, labels = make_batch(rng, n=1, h=9, w=15)
    with torch.no_grad():
        logits, side, _ = net(x, labels.unsqueeze(1).float())
    return {"log": log, "pred": logits.argmax(1).flatten().tolist(),
            "side_shape": list(side.shape), "logits": logits[0, :, 4, 7].tolist(),
            "theta": model.stn.fc.bias.tolist()}
