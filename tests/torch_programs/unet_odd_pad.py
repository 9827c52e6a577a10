"""Ronneberger's original U-Net with Oktay's attention gates, at toy size: unpadded 3x3
convolutions (each block shrinks the map by 4) with ``InstanceNorm2d(affine=True)`` and
``LeakyReLU(inplace=True)``, ``MaxPool2d(2, ceil_mode=True)`` on odd sizes, ups by
``ConvTranspose2d(kernel_size=2, stride=2)`` and by ``nn.Upsample(mode="bilinear",
align_corners=True)`` then a 1x1 conv, the skip gated by an additive attention gate
(a strided 1x1 conv, ``F.interpolate(size=...)`` bilinear, a sigmoid map ``expand_as`` the
skip) and center-cropped to the upsampled map by a negative ``F.pad`` (odd differences,
so the two sides differ); the valid convolutions' output compared with the masks cropped
as the network crops; the multi-class loss of milesial's train.py: ``CrossEntropyLoss`` plus a Dice loss over
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


class ConvBlock(nn.Module):
    """Ronneberger's block: two unpadded 3x3 convolutions, each shrinking the map by 2."""

    def __init__(self, in_ch, out_ch):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(in_ch, out_ch, 3), nn.InstanceNorm2d(out_ch, affine=True),
            nn.LeakyReLU(0.1, inplace=True),
            nn.Conv2d(out_ch, out_ch, 3), nn.InstanceNorm2d(out_ch, affine=True),
            nn.LeakyReLU(0.1, inplace=True))

    def forward(self, x):
        return self.conv(x)


class AttentionGate(nn.Module):
    """Oktay et al.'s additive attention gate on a skip connection."""

    def __init__(self, F_g, F_l, F_int):
        super().__init__()
        self.W_g = nn.Conv2d(F_g, F_int, kernel_size=1)
        self.W_x = nn.Conv2d(F_l, F_int, kernel_size=1, stride=2)
        self.psi = nn.Sequential(nn.Conv2d(F_int, 1, kernel_size=1), nn.Sigmoid())
        self.relu = nn.ReLU(inplace=True)

    def forward(self, g, x):
        theta_x = self.W_x(x)
        phi_g = F.interpolate(self.W_g(g), size=theta_x.shape[2:], mode="bilinear",
                              align_corners=False)
        psi = self.psi(self.relu(theta_x + phi_g))
        psi = F.interpolate(psi, size=x.shape[2:], mode="bilinear", align_corners=False)
        return x * psi.expand_as(x)


def center_crop(skip, target):
    """The skip cropped to the upsampled map's size by a negative ``F.pad`` (odd
    differences: one more row or column off the far side)."""
    dh = skip.size(2) - target.size(2)
    dw = skip.size(3) - target.size(3)
    return F.pad(skip, [-(dw // 2), -(dw - dw // 2), -(dh // 2), -(dh - dh // 2)])


class UpBlock(nn.Module):
    def __init__(self, in_ch, skip_ch, out_ch, transpose):
        super().__init__()
        self.gate = AttentionGate(in_ch, skip_ch, skip_ch // 2)
        if transpose:
            self.up = nn.ConvTranspose2d(in_ch, in_ch // 2, kernel_size=2, stride=2)
        else:
            self.up = nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear",
                                                align_corners=True),
                                    nn.Conv2d(in_ch, in_ch // 2, kernel_size=1))
        self.conv = ConvBlock(in_ch // 2 + skip_ch, out_ch)

    def forward(self, x, skip):
        skip = self.gate(x, skip)
        x = self.up(x)
        return self.conv(torch.cat([center_crop(skip, x), x], dim=1))


class UNet(nn.Module):
    def __init__(self, n_channels=3, n_classes=3):
        super().__init__()
        self.n_channels, self.n_classes = n_channels, n_classes
        self.enc1 = ConvBlock(n_channels, 4)
        self.enc2 = ConvBlock(4, 8)
        self.bottom = ConvBlock(8, 16)
        self.pool = nn.MaxPool2d(2, ceil_mode=True)
        self.up2 = UpBlock(16, 8, 8, transpose=True)
        self.up1 = UpBlock(8, 4, 4, transpose=False)
        self.outc = nn.Conv2d(4, n_classes, kernel_size=1)

    def forward(self, x):
        x1 = self.enc1(x)
        x2 = self.enc2(self.pool(x1))
        x3 = self.bottom(self.pool(x2))
        x = self.up2(x3, x2)
        x = self.up1(x, x1)
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
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.InstanceNorm2d)):
                fan_in = m.weight[0].numel() if m.weight.ndim > 1 else 2.0
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
        true_masks = center_crop(true_masks[:, None], masks_pred)[:, 0]
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
        mask_true = center_crop(mask_true[:, None], mask_pred)[:, 0]
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
        images = torch.from_numpy(rng.normal(0, 1, (2, 3, 41, 45)).astype(np.float32))
        true_masks = torch.from_numpy((images[:, 0].numpy() > 0.3).astype(np.int64)
                                      + (images[:, 1].numpy() > 0.8).astype(np.int64))
        losses.append(train_step(images, true_masks).item())
        model.eval()
        val = torch.from_numpy(rng.normal(0, 1, (1, 3, 43, 41)).astype(np.float32))
        val_mask = torch.from_numpy((val[:, 0].numpy() > 0.0).astype(np.int64))
        score = evaluate(val, val_mask)
        scheduler.step(score)
        scores.append(score.item())
    norm = model.enc1.conv[1]
    return {"losses": losses, "dice": scores, "norm_weight": norm.weight.tolist(),
            "lr": [optimizer.param_groups[0]["lr"]]}
