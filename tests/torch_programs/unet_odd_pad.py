"""Milesial's Pytorch-UNet at toy size, written as it is: ``DoubleConv`` blocks
(``nn.Conv2d(bias=False)``, ``BatchNorm2d``, ``ReLU(inplace=True)``), ``Down`` by
``MaxPool2d(2)`` on odd sizes (floors), ``Up`` by ``ConvTranspose2d(kernel_size=2,
stride=2)`` in two blocks and ``nn.Upsample(scale_factor=2, mode="bilinear",
align_corners=True)`` in the other, the upsampled map padded to the skip's size by
``F.pad(x1, [diffX // 2, diffX - diffX // 2, diffY // 2, diffY - diffY // 2])`` (odd
differences, so the two sides differ) and joined by ``torch.cat([x2, x1], dim=1)``; the
multi-class loss of its train.py: ``CrossEntropyLoss`` plus a Dice loss over
``F.softmax(masks_pred, dim=1).float()`` and ``F.one_hot(true_masks,
n_classes).permute(0, 3, 1, 2).float()`` (``dice_coeff`` with ``sum_dim`` and
``torch.where(sets_sum == 0, inter, sets_sum)``), ``RMSprop(foreach=True)``,
``ReduceLROnPlateau("max")`` on the validation Dice, ``clip_grad_norm_``, and
evaluation by ``argmax`` masks under ``torch.inference_mode``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class DoubleConv(nn.Module):
    def __init__(self, in_channels, out_channels, mid_channels=None):
        super().__init__()
        if not mid_channels:
            mid_channels = out_channels
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


class OutConv(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1)

    def forward(self, x):
        return self.conv(x)


class UNet(nn.Module):
    def __init__(self, n_channels=3, n_classes=3):
        super().__init__()
        self.n_channels, self.n_classes = n_channels, n_classes
        self.inc = DoubleConv(n_channels, 4)
        self.down1 = Down(4, 8)
        self.down2 = Down(8, 16)
        self.down3 = Down(16, 16)
        self.up1 = Up(32, 16, bilinear=True)
        self.up2 = Up(16, 8, bilinear=False)
        self.up3 = Up(8, 4, bilinear=False)
        self.outc = OutConv(4, n_classes)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x4 = self.down3(x3)
        x = self.up1(x4, x3)
        x = self.up2(x, x2)
        x = self.up3(x, x1)
        return self.outc(x)


def dice_coeff(input, target, reduce_batch_first=False, epsilon=1e-6):
    assert input.size() == target.size()
    assert input.dim() == 3 or not reduce_batch_first
    sum_dim = (-1, -2) if input.dim() == 2 or not reduce_batch_first else (-1, -2, -3)
    inter = 2 * (input * target).sum(dim=sum_dim)
    sets_sum = input.sum(dim=sum_dim) + target.sum(dim=sum_dim)
    sets_sum = torch.where(sets_sum == 0, inter, sets_sum)
    dice = (inter + epsilon) / (sets_sum + epsilon)
    return dice.mean()


def multiclass_dice_coeff(input, target, reduce_batch_first=False, epsilon=1e-6):
    return dice_coeff(input.flatten(0, 1), target.flatten(0, 1), reduce_batch_first, epsilon)


def dice_loss(input, target, multiclass=False):
    fn = multiclass_dice_coeff if multiclass else dice_coeff
    return 1 - fn(input, target, reduce_batch_first=True)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = UNet()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.from_numpy(
                    rng.normal(0, 1.4 / np.sqrt(fan_in), m.weight.shape).astype(np.float32)))
                if m.bias is not None:
                    m.bias.copy_(torch.from_numpy(rng.normal(0, 0.1, m.bias.shape)
                                                  .astype(np.float32)))
    optimizer = torch.optim.RMSprop(model.parameters(), lr=2e-4, weight_decay=1e-8,
                                    momentum=0.9, foreach=True)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, "max", patience=0)
    criterion = nn.CrossEntropyLoss()
    net = torch.compile(model) if compile == "model" else model

    def train_step(images, true_masks):
        masks_pred = net(images)
        loss = criterion(masks_pred, true_masks)
        loss += dice_loss(F.softmax(masks_pred, dim=1).float(),
                          F.one_hot(true_masks, model.n_classes).permute(0, 3, 1, 2).float(),
                          multiclass=True)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    @torch.inference_mode()
    def evaluate(image, mask_true):
        mask_pred = net(image)
        mask_true = F.one_hot(mask_true, model.n_classes).permute(0, 3, 1, 2).float()
        mask_pred = F.one_hot(mask_pred.argmax(dim=1), model.n_classes).permute(0, 3, 1,
                                                                                2).float()
        return multiclass_dice_coeff(mask_pred[:, 1:], mask_true[:, 1:],
                                     reduce_batch_first=False)

    if compile is True:
        train_step = torch.compile(train_step)
    losses, scores = [], []
    for _ in range(steps):
        model.train()
        images = torch.from_numpy(rng.normal(0, 1, (2, 3, 27, 29)).astype(np.float32))
        true_masks = torch.from_numpy((images[:, 0].numpy() > 0.3).astype(np.int64)
                                      + (images[:, 1].numpy() > 0.8).astype(np.int64))
        losses.append(train_step(images, true_masks).item())
        model.eval()
        val = torch.from_numpy(rng.normal(0, 1, (1, 3, 21, 17)).astype(np.float32))
        val_mask = torch.from_numpy((val[:, 0].numpy() > 0.0).astype(np.int64))
        score = evaluate(val, val_mask)
        scheduler.step(score)
        scores.append(score.item())
    bn = model.inc.double_conv[1]
    return {"losses": losses, "dice": scores, "running": bn.running_var.tolist(),
            "lr": [optimizer.param_groups[0]["lr"]]}
