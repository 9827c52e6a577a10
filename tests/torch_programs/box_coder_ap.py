"""A one-stage detector's box machinery as torchvision's detection models and
``torchvision.ops`` write it, by hand: ``box_area``/``box_iou`` by broadcasting ``max``/
``min`` and ``clamp(min=0)``, a ``Matcher`` taking the best ground truth per anchor
(``iou.max(dim=0)``) with low-quality matches allowed (``torch.where(iou ==
highest[:, None])`` and ``nonzero``), a ``BoxCoder`` with weights encoding ``(dx, dy,
log(dw), log(dh))`` and decoding with ``torch.clamp(max=math.log(1000 / 16))`` before
``exp``, a generalised-IoU loss, the sampled positives gathered with
``nonzero(as_tuple=True)`` and ``torch.where(matched >= 0, ...)``; at inference the top
candidates by ``topk``, a batched NMS by the coordinate-offset trick (``boxes +
labels[:, None] * (max_coordinate + 1)``) run in Python with ``argsort``; and the average
precision with the precision envelope by ``torch.flip(torch.cummax(torch.flip(...)))``."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def box_area(b):
    return (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])


def box_iou(a, b):
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (box_area(a)[:, None] + box_area(b)[None, :] - inter)


class BoxCoder:
    def __init__(self, weights=(10.0, 10.0, 5.0, 5.0), clip=math.log(1000.0 / 16)):
        self.weights, self.clip = weights, clip

    def encode(self, gt, anchors):
        wx, wy, ww, wh = self.weights
        aw, ah = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
        ax, ay = anchors[:, 0] + 0.5 * aw, anchors[:, 1] + 0.5 * ah
        gw, gh = gt[:, 2] - gt[:, 0], gt[:, 3] - gt[:, 1]
        gx, gy = gt[:, 0] + 0.5 * gw, gt[:, 1] + 0.5 * gh
        return torch.stack([wx * (gx - ax) / aw, wy * (gy - ay) / ah,
                            ww * torch.log(gw / aw), wh * torch.log(gh / ah)], dim=1)

    def decode(self, codes, anchors):
        wx, wy, ww, wh = self.weights
        aw, ah = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
        ax, ay = anchors[:, 0] + 0.5 * aw, anchors[:, 1] + 0.5 * ah
        dx, dy = codes[:, 0] / wx, codes[:, 1] / wy
        dw = torch.clamp(codes[:, 2] / ww, max=self.clip)
        dh = torch.clamp(codes[:, 3] / wh, max=self.clip)
        cx, cy = dx * aw + ax, dy * ah + ay
        w, h = torch.exp(dw) * aw, torch.exp(dh) * ah
        return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=1)


def match(iou, high=0.5, low=0.3):
    values, matches = iou.max(dim=0)
    matches = torch.where(values < low, torch.full_like(matches, -1), matches)
    matches = torch.where((values >= low) & (values < high), torch.full_like(matches, -2),
                          matches)
    highest, _ = iou.max(dim=1)
    gt_idx, anchor_idx = torch.nonzero(iou == highest[:, None], as_tuple=True)
    matches[anchor_idx] = gt_idx
    return matches


def giou_loss(pred, target):
    iou_inter = torch.min(pred[:, 2:], target[:, 2:]) - torch.max(pred[:, :2], target[:, :2])
    inter = iou_inter.clamp(min=0).prod(1)
    union = box_area(pred) + box_area(target) - inter
    hull = (torch.max(pred[:, 2:], target[:, 2:]) - torch.min(pred[:, :2], target[:, :2]))
    hull_area = hull.prod(1)
    return (1 - inter / union + (hull_area - union) / hull_area).mean()


class Head(nn.Module):
    def __init__(self, classes=2, anchors=9):
        super().__init__()
        self.trunk = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                   nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU())
        self.cls = nn.Conv2d(8, anchors * classes, 1)
        self.reg = nn.Conv2d(8, anchors * 4, 1)
        self.classes = classes

    def forward(self, x):
        f = self.trunk(x)
        n = x.shape[0]
        cls = self.cls(f).permute(0, 2, 3, 1).reshape(n, -1, self.classes)
        reg = self.reg(f).permute(0, 2, 3, 1).reshape(n, -1, 4)
        return cls, reg


def make_anchors(size=16, stride=2, scales=(3.0, 5.0, 8.0), ratios=(0.5, 1.0, 2.0)):
    centers = (torch.arange(size // stride, dtype=torch.float32) + 0.5) * stride
    cy, cx = torch.meshgrid(centers, centers, indexing="ij")
    shapes = torch.tensor([[s * math.sqrt(r), s / math.sqrt(r)] for s in scales
                           for r in ratios])
    c = torch.stack([cx, cy], -1).reshape(-1, 1, 2)
    return torch.cat([c - shapes / 2, c + shapes / 2], -1).reshape(-1, 4)


def scene(rng, size=16):
    img = rng.normal(0, 0.2, (3, size, size)).astype(np.float32)
    boxes, labels = [], []
    for k in range(2):
        w, h = rng.uniform(3, 8, 2)
        x0, y0 = rng.uniform(0, size - w), rng.uniform(0, size - h)
        label = int(rng.integers(0, 2))
        img[label, int(y0):int(y0 + h), int(x0):int(x0 + w)] += 1.0
        boxes.append([x0, y0, x0 + w, y0 + h])
        labels.append(label)
    return (torch.from_numpy(img), torch.tensor(boxes, dtype=torch.float32),
            torch.tensor(labels))


def batched_nms(boxes, scores, labels, threshold=0.4):
    offset = labels.to(boxes.dtype)[:, None] * (boxes.max() + 1)
    shifted = boxes + offset
    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(int(i))
        iou = box_iou(shifted[i:i + 1], shifted[order[1:]])[0]
        order = order[1:][iou <= threshold]
    return torch.tensor(keep, dtype=torch.long)


def average_precision(scores, is_tp, n_gt):
    order = scores.argsort(descending=True)
    tp = is_tp[order].float().cumsum(0)
    fp = (~is_tp[order]).float().cumsum(0)
    recall = tp / max(n_gt, 1)
    precision = tp / (tp + fp)
    envelope = torch.flip(torch.cummax(torch.flip(precision, [0]), dim=0).values, [0])
    recall = torch.cat([torch.zeros(1), recall])
    return float(((recall[1:] - recall[:-1]) * envelope).sum())


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Head()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.normal(0, 0.2, tuple(p.shape)).astype(np.float32)))
    anchors = make_anchors()
    coder = BoxCoder()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    net = torch.compile(model) if compile == "model" else model

    def step(images, targets, matched):
        optimizer.zero_grad()
        cls, reg = net(images)
        losses = []
        for b, (boxes, labels) in enumerate(targets):
            m = matched[b]
            pos = torch.nonzero(m >= 0, as_tuple=True)[0]
            gt = boxes[m[pos]]
            target_cls = torch.zeros_like(cls[b])
            target_cls[pos, labels[m[pos]]] = 1.0
            valid = m != -2
            cls_loss = F.binary_cross_entropy_with_logits(cls[b][valid], target_cls[valid],
                                                          reduction="sum") / max(len(pos), 1)
            reg_loss = F.smooth_l1_loss(reg[b][pos], coder.encode(gt, anchors[pos]),
                                        beta=1 / 9)
            box_loss = giou_loss(coder.decode(reg[b][pos], anchors[pos]), gt)
            losses.append(cls_loss + reg_loss + box_loss)
        loss = torch.stack(losses).mean()
        loss.backward()
        optimizer.step()
        return loss

    if compile is True:
        step = torch.compile(step)
    losses, positives = [], []
    for _ in range(steps):
        items = [scene(rng) for _ in range(2)]
        images = torch.stack([i[0] for i in items])
        targets = [(i[1], i[2]) for i in items]
        matched = [match(box_iou(boxes, anchors)) for boxes, _ in targets]
        positives.append([int((m >= 0).sum()) for m in matched])
        losses.append(step(images, targets, matched).item())
    img, boxes, labels = scene(rng)
    with torch.no_grad():
        cls, reg = net(img[None])
    scores, flat = cls[0].sigmoid().flatten().topk(20)
    idx, cls_idx = flat // 2, flat % 2
    decoded = coder.decode(reg[0][idx], anchors[idx])
    keep = batched_nms(decoded, scores, cls_idx)
    hit = box_iou(decoded[keep], boxes).max(1).values > 0.1
    return {"losses": losses, "positives": positives, "kept": keep.tolist(),
            "scores": scores.tolist(), "ap": [average_precision(scores[keep], hit, 2)]}
