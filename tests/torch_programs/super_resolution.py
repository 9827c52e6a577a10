"""Super-resolution by sub-pixel convolution (ESPCN) and its training loop, written the way
the PyTorch super-resolution example is: convolutions with ``init.orthogonal_`` weights
scaled by ``init.calculate_gain('relu')``, ``nn.PixelShuffle`` to upscale, ``nn.MSELoss``,
Adam, and a test pass reporting PSNR as ``10 * log10(1 / mse.item())``; the low-resolution
inputs are made from the targets with ``F.interpolate`` (area) and the bilinear and
nearest upsamplings are the baselines it is compared with. Channels-last images are
brought to (N, C, H, W) with ``permute(...).contiguous()``; a ``MultiStepLR`` schedule."""
from math import log10

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init
import torch.optim as optim


class Net(nn.Module):
    def __init__(self, upscale_factor=2, width=8):
        super().__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, width, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(width, width, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(width, width // 2, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(width // 2, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        return self.pixel_shuffle(self.conv4(x))

    def _initialize_weights(self):
        init.orthogonal_(self.conv1.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv2.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv3.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv4.weight)


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, value in model.state_dict().items():
        fan_in = int(np.prod(value.shape[1:])) if value.dim() > 1 else 8
        draw = rng.uniform(-1.0, 1.0, tuple(value.shape)) * np.sqrt(3.0 / fan_in)
        state[name] = torch.tensor(draw.astype(np.float32))
    model.load_state_dict(state)


def smooth_images(rng, n, size=12):
    """Smooth random images (sums of a few waves) in [0, 1], channels last."""
    y, x = np.mgrid[0:size, 0:size] / size
    out = np.zeros((n, size, size, 1))
    for k in range(n):
        fx, fy, phase = rng.uniform(0.5, 2.5, 3)
        out[k, :, :, 0] = 0.5 + 0.4 * np.sin(2 * np.pi * (fx * x + fy * y) + phase)
    return out.astype(np.float32)


def main(steps=10, compile=False, seed=0, batch_size=4, upscale_factor=2):
    torch.manual_seed(seed)
    model = Net(upscale_factor)
    init_weights(model, seed)
    criterion = nn.MSELoss()
    optimizer = optim.Adam(model.parameters(), lr=3e-3)
    scheduler = optim.lr_scheduler.MultiStepLR(optimizer, milestones=[steps // 2], gamma=0.5)
    rng = np.random.default_rng(seed + 1)
    hr = torch.from_numpy(smooth_images(rng, steps * batch_size)).permute(0, 3, 1, 2)
    hr = hr.contiguous()
    lr_images = F.interpolate(hr, scale_factor=1 / upscale_factor, mode="area")

    def train_step(input, target):
        optimizer.zero_grad()
        loss = criterion(model(input), target)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses = []
    for i in range(steps):
        batch = slice(i * batch_size, (i + 1) * batch_size)
        losses.append(train_step(lr_images[batch], hr[batch]).item())
        scheduler.step()
    psnr = {"model": 0.0, "bilinear": 0.0, "nearest": 0.0}
    with torch.no_grad():
        for i in range(steps):
            batch = slice(i * batch_size, (i + 1) * batch_size)
            outs = {"model": model(lr_images[batch]),
                    "bilinear": F.interpolate(lr_images[batch], scale_factor=upscale_factor,
                                              mode="bilinear", align_corners=False),
                    "nearest": nn.Upsample(scale_factor=upscale_factor)(lr_images[batch])}
            for key, prediction in outs.items():
                mse = criterion(prediction, hr[batch])
                psnr[key] += 10 * log10(1 / mse.item()) / steps
    return {"losses": losses, "psnr": [psnr["model"], psnr["bilinear"], psnr["nearest"]]}
