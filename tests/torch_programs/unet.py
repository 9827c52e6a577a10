"""A small U-Net for binary segmentation and its training loop, written the way the popular
PyTorch U-Net implementations are: ``DoubleConv`` blocks (conv, BatchNorm, ReLU twice), a
MaxPool2d down path, an up path by ``ConvTranspose2d`` or by ``nn.Upsample(mode='bilinear',
align_corners=True)``, ``F.pad`` of the upsampled map to the skip's size (computed from
``size()``), ``torch.cat`` skips, BCE-with-logits plus a soft Dice loss, Adam, gradient
accumulation over two micro-batches, ``ReduceLROnPlateau`` stepped on the validation loss
and a ``no_grad`` validation pass measuring the Dice score of ``sigmoid > 0.5`` masks.
Random images and masks stand in for a dataset; odd input sizes make the pad do work."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class DoubleConv(nn.Module):
    def __init__(self, in_channels, out_channels, mid_channels=None):
        super().__init__()
        mid_channels = mid_channels or out_channels
        self.double_conv = nn.Sequential(
            nn.Conv2d(in_channels, mid_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(mid_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid_channels, out_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True))

    def forward(self, x):
        return self.double_conv(x)


class Down(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(in_channels, out_channels))

    def forward(self, x):
        return self.maxpool_conv(x)


class Up(nn.Module):
    def __init__(self, in_channels, out_channels, bilinear=True):
        super().__init__()
        if bilinear:
            self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
            self.conv = DoubleConv(in_channels, out_channels, in_channels // 2)
        else:
            self.up = nn.ConvTranspose2d(in_channels, in_channels // 2, kernel_size=2, stride=2)
            self.conv = DoubleConv(in_channels, out_channels)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        diffY = x2.size()[2] - x1.size()[2]
        diffX = x2.size()[3] - x1.size()[3]
        x1 = F.pad(x1, [diffX // 2, diffX - diffX // 2, diffY // 2, diffY - diffY // 2])
        x = torch.cat([x2, x1], dim=1)
        return self.conv(x)


class UNet(nn.Module):
    def __init__(self, n_channels=2, n_classes=1, width=4):
        super().__init__()
        self.inc = DoubleConv(n_channels, width)
        self.down1 = Down(width, width * 2)
        self.down2 = Down(width * 2, width * 2)   # (halved: the bilinear path's factor)
        self.up1 = Up(width * 4, width * 2, bilinear=True)
        self.up2 = Up(width * 2, width, bilinear=False)
        self.outc = nn.Conv2d(width, n_classes, kernel_size=1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x = self.up1(x3, x2)
        x = self.up2(x, x1)
        return self.outc(x)


def dice_coeff(input, target, epsilon=1e-6):
    sum_dim = (-1, -2)
    inter = 2 * (input * target).sum(dim=sum_dim)
    sets_sum = input.sum(dim=sum_dim) + target.sum(dim=sum_dim)
    sets_sum = torch.where(sets_sum == 0, inter, sets_sum)
    return ((inter + epsilon) / (sets_sum + epsilon)).mean()


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, value in model.state_dict().items():
        if name.endswith("num_batches_tracked"):
            state[name] = value
            continue
        fan_in = int(np.prod(value.shape[1:])) if value.dim() > 1 else 4
        draw = rng.uniform(-1.0, 1.0, tuple(value.shape)) / np.sqrt(fan_in)
        if name.endswith("running_var") or (name.endswith("weight") and value.dim() == 1):
            draw = 1.0 + 0.1 * draw
        state[name] = torch.tensor(draw.astype(np.float32))
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch_size=4, accumulate=2):
    torch.manual_seed(seed)
    model = UNet()
    init_weights(model, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-8)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, "min", patience=0,
                                                           factor=0.5)
    criterion = nn.BCEWithLogitsLoss()
    rng = np.random.default_rng(seed + 1)
    images = torch.tensor(rng.normal(0, 1, (steps, accumulate, batch_size, 2, 11, 9)),
                          dtype=torch.float32)
    masks = torch.tensor(rng.uniform(0, 1, (steps, accumulate, batch_size, 1, 11, 9)) > 0.6,
                         dtype=torch.float32)

    def train_step(micro_images, micro_masks):
        optimizer.zero_grad()
        total = 0.0
        for x, y in zip(micro_images, micro_masks):
            masks_pred = model(x)
            loss = criterion(masks_pred, y)
            loss = loss + (1 - dice_coeff(torch.sigmoid(masks_pred), y))
            (loss / accumulate).backward()
            total += loss.item()
        optimizer.step()
        return total / accumulate

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, scores, lrs = [], [], []
    for epoch in range(2):
        model.train()
        for i in range(steps // 2):
            k = epoch * (steps // 2) + i
            losses.append(train_step(images[k].unbind(0), masks[k].unbind(0)))
        model.eval()
        val_loss, dice = 0.0, 0.0
        with torch.no_grad():
            for k in range(steps):
                pred = model(images[k, 0])
                val_loss += criterion(pred, masks[k, 0]).item()
                mask_pred = (F.sigmoid(pred) > 0.5).float()
                dice += dice_coeff(mask_pred, masks[k, 0]).item()
        scheduler.step(val_loss)
        lrs.append(optimizer.param_groups[0]["lr"])
        scores += [val_loss / steps, dice / steps]
    return {"losses": losses, "val": scores, "lrs": lrs}
