"""Multi-class segmentation with a small encoder-decoder, as segmentation repositories write
it: ``nn.ReflectionPad2d`` before unpadded convs and ``F.pad(..., mode='reflect')`` on the
input, ``GroupNorm`` and ``PReLU``, the decoder upsampling by ``F.interpolate(scale_factor=2,
mode='bilinear', align_corners=False)`` and a deep-supervision head at half resolution
upsampled by ``F.interpolate(size=..., mode='bilinear', align_corners=True)``; the target
mask downsampled with ``mode='nearest'`` for an auxiliary loss; a soft multi-class Dice loss
from ``F.one_hot(target, C).permute(0, 3, 1, 2)`` with the ignored label (255) masked out
(``torch.where(valid, target, 0)``), plus ``CrossEntropyLoss(ignore_index=255, weight=...)``;
SGD with Nesterov momentum and ``PolynomialLR``; the mean IoU from a confusion matrix
built by ``torch.bincount(C * target + pred, minlength=C * C)``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

C, IGNORE = 3, 255


def conv_block(cin, cout):
    return nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(cin, cout, 3, bias=False),
                         nn.GroupNorm(2, cout), nn.PReLU(cout))


class SegNet(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.enc1 = conv_block(1, width)
        self.enc2 = conv_block(width, 2 * width)
        self.dec = conv_block(3 * width, width)
        self.aux = nn.Conv2d(2 * width, C, 1)
        self.out = nn.Conv2d(width, C, 1)

    def forward(self, x):
        size = x.shape[-2:]
        x = F.pad(x, (2, 2, 2, 2), mode="reflect")
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        up = F.interpolate(e2, scale_factor=2, mode="bilinear", align_corners=False)
        d = self.dec(torch.cat([up, e1], dim=1))[..., 2:-2, 2:-2]
        aux = F.interpolate(self.aux(e2), size=(size[0] // 2, size[1] // 2), mode="bilinear",
                            align_corners=True)
        return self.out(d), aux


def dice_loss(logits, target, eps=1.0):
    valid = (target != IGNORE).unsqueeze(1).float()
    target = torch.where(target == IGNORE, torch.zeros_like(target), target)
    probs = logits.softmax(dim=1) * valid
    onehot = F.one_hot(target, C).permute(0, 3, 1, 2).float() * valid
    inter = (probs * onehot).sum(dim=(0, 2, 3))
    union = probs.sum(dim=(0, 2, 3)) + onehot.sum(dim=(0, 2, 3))
    return 1 - ((2 * inter + eps) / (union + eps)).mean()


def scenes(rng, n, size=12):
    """Noisy images of a bright disc (class 1) and a dark square (class 2); a border of
    ignored pixels."""
    yy, xx = np.mgrid[:size, :size]
    images = rng.normal(0, 0.3, (n, 1, size, size)).astype(np.float32)
    masks = np.zeros((n, size, size), dtype=np.int64)
    for i in range(n):
        cy, cx, r = rng.integers(3, size - 3), rng.integers(3, size - 3), rng.integers(2, 4)
        disc = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
        sy, sx = rng.integers(0, size - 4, 2)
        masks[i, sy:sy + 4, sx:sx + 4] = 2
        masks[i][disc] = 1
    images[:, 0] += (masks == 1) - 0.8 * (masks == 2)
    masks[:, 0, :] = IGNORE
    return torch.from_numpy(images), torch.from_numpy(masks)


def init_weights(model, rng):
    for name, p in model.named_parameters():
        if p.dim() == 4:
            fan_in = int(np.prod(p.shape[1:]))
            p.data.copy_(torch.from_numpy(rng.normal(0, np.sqrt(2 / fan_in), tuple(p.shape))
                                          .astype(np.float32)))
        elif name.startswith(("aux.", "out.")):
            p.data.zero_()


def main(steps=10, compile=False, seed=0, batch=4):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = SegNet()
    init_weights(model, rng)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                                weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.PolynomialLR(optimizer, total_iters=steps, power=0.9)
    ce = nn.CrossEntropyLoss(ignore_index=IGNORE, weight=torch.tensor([0.5, 1.0, 1.0]))
    data = [scenes(rng, batch) for _ in range(steps)]
    net = model

    def step(images, masks):
        optimizer.zero_grad()
        logits, aux = net(images)
        small = F.interpolate(masks[:, None].float(), scale_factor=0.5, mode="nearest")
        small = small.squeeze(1).long()
        loss = ce(logits, masks) + dice_loss(logits, masks) + 0.4 * ce(aux, small)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses = []
    for images, masks in data:
        losses.append(step(images, masks).item())
        scheduler.step()
    model.eval()
    images, masks = scenes(rng, 6)
    with torch.no_grad():
        logits, _ = model(images)
    pred = logits.argmax(1)
    keep = masks != IGNORE
    conf = torch.bincount(C * masks[keep] + pred[keep], minlength=C * C).reshape(C, C)
    iou = conf.diag() / (conf.sum(0) + conf.sum(1) - conf.diag()).clamp(min=1)
    return {"losses": losses, "confusion": conf.flatten().tolist(), "iou": iou.tolist(),
            "logits": logits[0, :, 5, :4].flatten().tolist()}
