"""A small segmentation net trained with the Lovász-softmax loss, written as Berman et al.'s
reference code is: per image and per class, the errors ``(fg - probas[:, c]).abs()`` sorted
descending by ``torch.sort``, the labels permuted by the sort's indices, the Lovász
extension's gradient built by ``cumsum`` and an in-place ``jaccard[1:p] = jaccard[1:p] -
jaccard[0:-1]`` of a tensor onto its own shifted slice, then ``torch.dot`` of the sorted
errors and that gradient; classes absent from an image skipped by ``fg.sum() == 0`` (a
Python branch on a tensor's value, as the reference's ``classes="present"``), pixels of an
ignore label dropped by a boolean mask; the net: ``nn.ReplicationPad2d`` before unpadded
convolutions, ``nn.SELU``, a ShuffleNet-style ``nn.ChannelShuffle`` between grouped
convolutions, ``F.interpolate(scale_factor=2, mode="nearest")``; its results by
``torch.median`` and ``torch.aminmax`` of the per-image IoUs; SGD with ``nesterov=True``
and ``LinearLR`` warm-up followed by ``ConstantLR`` in a ``SequentialLR``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def lovasz_grad(gt_sorted):
    p = len(gt_sorted)
    gts = gt_sorted.sum()
    intersection = gts - gt_sorted.float().cumsum(0)
    union = gts + (1 - gt_sorted).float().cumsum(0)
    jaccard = 1.0 - intersection / union
    if p > 1:
        jaccard[1:p] = jaccard[1:p] - jaccard[0:-1]
    return jaccard


def lovasz_softmax_flat(probas, labels, classes="present"):
    if probas.numel() == 0:
        return probas * 0.0
    C = probas.size(1)
    losses = []
    for c in range(C):
        fg = (labels == c).float()
        if classes == "present" and fg.sum() == 0:
            continue
        errors = (fg - probas[:, c]).abs()
        errors_sorted, perm = torch.sort(errors, 0, descending=True)
        fg_sorted = fg[perm]
        losses.append(torch.dot(errors_sorted, lovasz_grad(fg_sorted)))
    return sum(losses) / len(losses)


def flatten_probas(probas, labels, ignore=None):
    B, C, H, W = probas.size()
    probas = probas.permute(0, 2, 3, 1).contiguous().view(-1, C)
    labels = labels.view(-1)
    if ignore is None:
        return probas, labels
    valid = labels != ignore
    return probas[valid.nonzero().squeeze()], labels[valid]


def lovasz_softmax(probas, labels, ignore=None):
    return sum(lovasz_softmax_flat(*flatten_probas(prob.unsqueeze(0), lab.unsqueeze(0), ignore))
               for prob, lab in zip(probas, labels)) / probas.size(0)


class SegNet(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.stem = nn.Sequential(nn.ReplicationPad2d(1), nn.Conv2d(3, 8, 3, stride=2), nn.SELU())
        self.mix = nn.Sequential(nn.Conv2d(8, 8, 1, groups=2), nn.ChannelShuffle(2),
                                 nn.ReplicationPad2d((1, 1, 1, 1)), nn.Conv2d(8, 8, 3, groups=2),
                                 nn.SELU())
        self.head = nn.Conv2d(8, classes, 1)

    def forward(self, x):
        h = self.stem(x)
        h = h + self.mix(h)
        return F.interpolate(self.head(h), scale_factor=2, mode="nearest")


def make_batch(rng, n=2, size=10):
    yy, xx = np.mgrid[:size, :size]
    images, labels = [], []
    for _ in range(n):
        cy, cx, r = rng.integers(3, 7), rng.integers(3, 7), rng.integers(2, 4)
        lab = np.zeros((size, size), np.int64)
        lab[(yy - cy) ** 2 + (xx - cx) ** 2 <= r * r] = 1
        lab[: rng.integers(0, 3)] = 2 if rng.random() < 0.7 else 0
        lab[rng.integers(0, size), :] = 255
        img = rng.normal(0, 0.3, (3, size, size)) + np.stack([lab == 0, lab == 1, lab == 2])
        images.append(img)
        labels.append(lab)
    return (torch.from_numpy(np.stack(images).astype(np.float32)),
            torch.from_numpy(np.stack(labels)))


def iou(pred, label, c):
    valid = label != 255
    inter = ((pred == c) & (label == c) & valid).sum().float()
    union = (((pred == c) | (label == c)) & valid).sum().float()
    return inter / union.clamp_min(1)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = SegNet()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.normal(0, 0.3, p.shape).astype(np.float32)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    scheduler = torch.optim.lr_scheduler.SequentialLR(optimizer, [
        torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.5, total_iters=2),
        torch.optim.lr_scheduler.ConstantLR(optimizer, factor=0.8, total_iters=10)],
        milestones=[2])
    net = torch.compile(model) if compile == "model" else model

    def train_step(images, labels):
        optimizer.zero_grad()
        probas = F.softmax(net(images), dim=1)
        loss = lovasz_softmax(probas, labels, ignore=255)
        loss.backward()
        optimizer.step()
        return loss.detach(), probas.detach().argmax(1)

    if compile is True:
        train_step = torch.compile(train_step)
    log = []
    for _ in range(steps):
        images, labels = make_batch(rng)
        loss, pred = train_step(images, labels)
        scheduler.step()
        log.append([loss.item(), optimizer.param_groups[0]["lr"]])
    images, labels = make_batch(rng, n=3)
    with torch.no_grad():
        pred = net(images).argmax(1)
    ious = torch.stack([iou(p, lab, 1) for p, lab in zip(pred, labels)])
    lo, hi = torch.aminmax(ious)
    return {"log": log, "ious": ious.tolist(), "median": torch.median(ious).item(),
            "range": [lo.item(), hi.item()], "pred": pred.flatten().tolist()}
