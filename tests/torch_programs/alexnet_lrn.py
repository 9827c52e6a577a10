"""A classic-era convolutional classifier as the AlexNet/ZFNet/NIN reproductions write
it: ``nn.ConstantPad2d`` before the first convolution, ``nn.LocalResponseNorm`` after it,
``nn.LPPool2d`` and ``nn.AdaptiveMaxPool2d`` pooling, ``nn.CELU`` activations and a
``nn.Softmax2d`` spatial attention map; inputs augmented in tensors with ``torch.roll``
shifts and ``F.interpolate`` resizes of several modes (``nearest-exact``, ``area``,
``bicubic`` with ``align_corners=True``, ``bilinear`` with ``antialias=True``); trained
full-batch with ``nn.MultiMarginLoss`` (a weighted multi-class hinge) by ``Rprop``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ClassicNet(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.features = nn.Sequential(
            nn.ConstantPad2d((1, 2, 1, 2), 0.5),
            nn.Conv2d(3, 8, 3, stride=1),
            nn.CELU(alpha=0.8),
            nn.LocalResponseNorm(size=3, alpha=1e-2, beta=0.75, k=2.0),
            nn.LPPool2d(2, kernel_size=2, stride=2),
            nn.Conv2d(8, 12, 3, padding=1),
            nn.CELU(),
        )
        self.attend = nn.Sequential(nn.Conv2d(12, 2, 1), nn.Softmax2d())
        self.pool = nn.AdaptiveMaxPool2d((2, 3))
        self.classifier = nn.Linear(2 * 12 * 6, classes)

    def forward(self, x):
        h = self.features(x)
        a = self.attend(h)
        h = torch.cat([h * a[:, :1], h * a[:, 1:]], dim=1)
        return self.classifier(torch.flatten(self.pool(h), 1))


def augment(x, shift):
    """Shifted, then resized down and back up by two modes: a batch of the same size."""
    x = torch.roll(x, shifts=(shift, -shift), dims=(2, 3))
    small = torch.cat([F.interpolate(x[:2], size=(7, 9), mode="nearest-exact"),
                       F.interpolate(x[2:4], size=(7, 9), mode="area"),
                       F.interpolate(x[4:], size=(7, 9), mode="bilinear", antialias=True)])
    return F.interpolate(small, size=x.shape[-2:], mode="bicubic", align_corners=True)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = ClassicNet()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    criterion = nn.MultiMarginLoss(p=1, margin=0.5,
                                   weight=torch.tensor([1.0, 2.0, 1.0, 0.5]))
    optimizer = torch.optim.Rprop(model.parameters(), lr=0.005, etas=(0.4, 1.3),
                                  step_sizes=(1e-5, 0.1))
    net = torch.compile(model) if compile == "model" else model
    x = torch.from_numpy(rng.uniform(0, 1, (6, 3, 11, 13)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 4, 6))

    def step(x, y, shift):
        optimizer.zero_grad()
        out = net(augment(x, shift))
        loss = criterion(out, y)
        loss.backward()
        optimizer.step()
        return loss, out.detach()

    if compile is True:
        step = torch.compile(step)
    losses, outs = [], []
    for i in range(steps):
        loss, out = step(x, y, 1 + i % 2)
        losses.append(loss.item())
        outs = out[0].tolist()
    return {"losses": losses, "out": outs}
