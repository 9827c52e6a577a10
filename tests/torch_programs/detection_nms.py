"""A one-level anchor-based detector, written as torchvision-style detection code is without
``torch.ops``: anchors from ``torch.meshgrid(..., indexing="ij")`` and ``torch.stack``, the
head's ``(N, A*K, H, W)`` output flattened by ``.view(N, A, K, H, W).permute(0, 3, 4, 1, 2)
.reshape(N, -1, K)``, ``box_iou`` by broadcasting ``torch.max(b1[:, None, :2], b2[:, :2])``,
anchors matched by ``iou.max(dim=1)`` per anchor and ``iou.argmax(dim=0)`` per box (each box
keeps its best anchor: ``matched[best] = torch.arange(...)``), foreground / background /
ignored labels by ``torch.where``, box deltas encoded with ``torch.log`` of size ratios and
learned with ``F.smooth_l1_loss(beta=1/9, reduction="none")`` over the positives (a mask,
normalised by ``num_pos.clamp(min=1)``), a sigmoid focal loss written out, then evaluation
under ``torch.no_grad()``: decoded boxes clamped to the image, ``topk`` of the scores and a
greedy NMS in Python (``argsort(descending=True)``, ``keep.append(i.item())``, ``order =
order[1:][iou <= thresh]``), recall counted with ``.detach().cpu().numpy()``."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SIZE, STRIDE, SIZES = 16, 4, (3.0, 5.0, 7.0)
BBOX_CLIP = math.log(1000.0 / 16)


def make_anchors():
    shifts = torch.arange(0, SIZE, STRIDE, dtype=torch.float32) + STRIDE / 2
    sy, sx = torch.meshgrid(shifts, shifts, indexing="ij")
    centers = torch.stack((sx.reshape(-1), sy.reshape(-1)), dim=1)
    half = torch.tensor(SIZES)[None, :, None] / 2
    return torch.cat([centers[:, None] - half, centers[:, None] + half], dim=2).reshape(-1, 4)


def box_area(b):
    return (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])


def box_iou(boxes1, boxes2):
    lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    return inter / (box_area(boxes1)[:, None] + box_area(boxes2) - inter)


def encode(gt, anchors):
    aw, ah = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    ax, ay = anchors[:, 0] + 0.5 * aw, anchors[:, 1] + 0.5 * ah
    gw, gh = gt[:, 2] - gt[:, 0], gt[:, 3] - gt[:, 1]
    gx, gy = gt[:, 0] + 0.5 * gw, gt[:, 1] + 0.5 * gh
    return torch.stack(((gx - ax) / aw, (gy - ay) / ah, torch.log(gw / aw),
                        torch.log(gh / ah)), dim=1)


def decode(deltas, anchors):
    aw, ah = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    ax, ay = anchors[:, 0] + 0.5 * aw, anchors[:, 1] + 0.5 * ah
    dx, dy, dw, dh = deltas.unbind(-1)
    dw, dh = dw.clamp(max=BBOX_CLIP), dh.clamp(max=BBOX_CLIP)
    cx, cy, w, h = dx * aw + ax, dy * ah + ay, torch.exp(dw) * aw, torch.exp(dh) * ah
    boxes = torch.stack((cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h), dim=-1)
    return boxes.clamp(min=0, max=SIZE)


def match(anchors, gt, fg=0.5, bg=0.3):
    """Per anchor: the index of its box, -1 for background, -2 for ignored."""
    iou = box_iou(anchors, gt)
    best_iou, matched = iou.max(dim=1)
    best_anchor = iou.argmax(dim=0)
    matched = torch.where(best_iou >= fg, matched, torch.full_like(matched, -2))
    matched = torch.where(best_iou < bg, torch.full_like(matched, -1), matched)
    matched[best_anchor] = torch.arange(gt.shape[0])
    return matched


def nms(boxes, scores, thresh):
    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i.item())
        if order.numel() == 1:
            break
        iou = box_iou(boxes[i].unsqueeze(0), boxes[order[1:]])[0]
        order = order[1:][iou <= thresh]
    return torch.tensor(keep, dtype=torch.long)


class Detector(nn.Module):
    def __init__(self, width=12, num_anchors=len(SIZES)):
        super().__init__()
        self.num_anchors = num_anchors
        self.backbone = nn.Sequential(
            nn.Conv2d(1, width, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride=2, padding=1), nn.ReLU(inplace=True))
        self.cls_head = nn.Conv2d(width, num_anchors, 3, padding=1)
        self.box_head = nn.Conv2d(width, num_anchors * 4, 3, padding=1)

    def flatten(self, x, k):
        n, _, h, w = x.shape
        return x.view(n, self.num_anchors, k, h, w).permute(0, 3, 4, 1, 2).reshape(n, -1, k)

    def forward(self, images):
        features = self.backbone(images)
        return self.flatten(self.cls_head(features), 1)[..., 0], \
            self.flatten(self.box_head(features), 4)


def focal_loss(logits, targets, alpha=0.25, gamma=2.0):
    p = torch.sigmoid(logits)
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * ((1 - p_t) ** gamma)
    return (alpha * targets + (1 - alpha) * (1 - targets)) * loss


def scenes(rng, n):
    images = rng.normal(0, 0.2, (n, 1, SIZE, SIZE)).astype(np.float32)
    boxes = []
    for k in range(n):
        w, h = rng.integers(3, 8, 2)
        x0, y0 = rng.integers(0, SIZE - w), rng.integers(0, SIZE - h)
        images[k, 0, y0:y0 + h, x0:x0 + w] += 1.0
        boxes.append(torch.tensor([[x0, y0, x0 + w, y0 + h]], dtype=torch.float32))
    return torch.from_numpy(images), boxes


def main(steps=10, compile=False, seed=0, batch=6):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = Detector()
    for p in model.parameters():
        p.data.copy_(torch.from_numpy(rng.normal(0, 0.2, tuple(p.shape)).astype(np.float32)))
    with torch.no_grad():
        model.cls_head.bias.fill_(-math.log((1 - 0.01) / 0.01))
    anchors = make_anchors()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4)
    data = [scenes(rng, batch) for _ in range(steps)]
    net = model

    def step(images, cls_targets, box_targets, pos):
        optimizer.zero_grad()
        logits, deltas = net(images)
        valid = (cls_targets >= 0).float()
        num_pos = pos.sum().clamp(min=1)
        cls_loss = (focal_loss(logits, cls_targets.clamp(min=0)) * valid).sum() / num_pos
        box_loss = F.smooth_l1_loss(deltas, box_targets, beta=1 / 9, reduction="none")
        box_loss = (box_loss.sum(-1) * pos).sum() / num_pos
        loss = cls_loss + box_loss
        loss.backward()
        optimizer.step()
        return loss, cls_loss, box_loss

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, cls_losses, box_losses = [], [], []
    for images, boxes in data:
        cls_targets, box_targets = [], []
        for gt in boxes:
            matched = match(anchors, gt)
            cls_targets.append(torch.where(matched >= 0, 1.0, torch.where(matched == -1, 0.0,
                                                                          -1.0)))
            box_targets.append(encode(gt[matched.clamp(min=0)], anchors))
        cls_targets, box_targets = torch.stack(cls_targets), torch.stack(box_targets)
        loss, cls_loss, box_loss = step(images, cls_targets, box_targets,
                                        (cls_targets > 0).float())
        losses.append(loss.item())
        cls_losses.append(cls_loss.item())
        box_losses.append(box_loss.item())
    model.eval()
    images, boxes = scenes(rng, 8)
    kept, hits, top_scores = [], [], []
    with torch.no_grad():
        logits, deltas = net(images)
        for k in range(images.shape[0]):
            scores, idx = logits[k].sigmoid().topk(10)
            pred = decode(deltas[k][idx], anchors[idx])
            keep = nms(pred, scores, 0.5)
            kept.append(len(keep))
            top_scores.append(float(scores[keep[0]]))
            iou = box_iou(pred[keep], boxes[k]).detach().cpu().numpy()
            hits.append(int((iou.max(axis=0) >= 0.3).sum()))
    return {"losses": losses, "cls_losses": cls_losses, "box_losses": box_losses,
            "top_scores": top_scores, "kept": kept, "hits": hits}
