"""A YOLOv3-style single-scale detector, written the way the ultralytics-descended
PyTorch code is: a conv backbone with ``nn.LeakyReLU(0.1)`` and BatchNorm, a detection
head whose output is ``view(bs, na, no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()``,
a grid from ``torch.meshgrid(..., indexing="ij")`` and ``torch.stack((xv, yv), 2)``,
anchors kept in a buffer, box decoding ``(xy.sigmoid() + grid) * stride`` and
``wh.exp() * anchor_grid`` joined by ``torch.cat``; a loss that builds targets by index
assignment (``tobj[b, a, gj, gi] = 1.0``), takes the matched predictions by advanced
indexing, scores boxes by a hand-written IoU (``torch.min`` / ``torch.max`` /
``clamp(0)``), and sums ``BCEWithLogitsLoss`` over objectness and classes with a
``1 - iou`` box loss; and inference under ``torch.no_grad()`` that thresholds scores with
a boolean mask, converts ``xywh`` to corners and runs a greedy NMS loop whose control
flow reads ``.item()``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn


def conv(cin, cout, k=3, s=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout),
                         nn.LeakyReLU(0.1))


class Detect(nn.Module):
    def __init__(self, nc, anchors, ch, stride):
        super().__init__()
        self.nc, self.no, self.na = nc, nc + 5, len(anchors)
        self.stride = stride
        self.register_buffer("anchors", torch.tensor(anchors).float())
        self.m = nn.Conv2d(ch, self.no * self.na, 1)

    def forward(self, x):
        bs, _, ny, nx = x.shape
        p = self.m(x).view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
        return p

    def decode(self, p):
        bs, na, ny, nx, no = p.shape
        yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
        grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float()
        anchor_grid = self.anchors.view(1, na, 1, 1, 2)
        xy = (p[..., :2].sigmoid() + grid) * self.stride
        wh = p[..., 2:4].exp() * anchor_grid
        return torch.cat((xy, wh, p[..., 4:].sigmoid()), -1).view(bs, -1, no)


class TinyYolo(nn.Module):
    def __init__(self, nc=3):
        super().__init__()
        self.backbone = nn.Sequential(conv(3, 8), conv(8, 16, 3, 2), conv(16, 16),
                                      conv(16, 16, 3, 2))
        self.detect = Detect(nc, [(6.0, 6.0), (12.0, 8.0)], 16, stride=4)

    def forward(self, x):
        return self.detect(self.backbone(x))


def box_iou_xywh(a, b):
    a1, a2 = a[:, :2] - a[:, 2:] / 2, a[:, :2] + a[:, 2:] / 2
    b1, b2 = b[:, :2] - b[:, 2:] / 2, b[:, :2] + b[:, 2:] / 2
    inter = (torch.min(a2, b2) - torch.max(a1, b1)).clamp(0).prod(1)
    union = a[:, 2:].prod(1) + b[:, 2:].prod(1) - inter
    return inter / (union + 1e-7)


def compute_loss(p, targets, model):
    """``targets`` rows: (image, class, x, y, w, h) in pixels, matched to the anchor whose
    shape fits best at the cell holding the box centre."""
    det = model.detect
    bce = nn.BCEWithLogitsLoss()
    tobj = torch.zeros_like(p[..., 4])
    b, c = targets[:, 0].long(), targets[:, 1].long()
    gxy, gwh = targets[:, 2:4], targets[:, 4:6]
    ratio = gwh[:, None] / det.anchors[None]
    a = torch.max(ratio, 1 / ratio).max(2)[0].argmin(1)
    gij = (gxy / det.stride).long()
    gi, gj = gij[:, 0], gij[:, 1]
    ps = p[b, a, gj, gi]
    pxy = ps[:, :2].sigmoid() * det.stride + gij * det.stride
    pwh = ps[:, 2:4].exp() * det.anchors[a]
    iou = box_iou_xywh(torch.cat((pxy, pwh), 1), torch.cat((gxy, gwh), 1))
    lbox = (1.0 - iou).mean()
    tobj[b, a, gj, gi] = iou.detach().clamp(0).type(tobj.dtype)
    tcls = torch.zeros_like(ps[:, 5:])
    tcls[range(len(c)), c] = 1.0
    lcls = bce(ps[:, 5:], tcls)
    lobj = bce(p[..., 4], tobj)
    return 0.05 * lbox + lobj + 0.5 * lcls, torch.cat((lbox[None], lobj[None], lcls[None]))


def xywh2xyxy(x):
    y = x.clone()
    y[:, 0] = x[:, 0] - x[:, 2] / 2
    y[:, 1] = x[:, 1] - x[:, 3] / 2
    y[:, 2] = x[:, 0] + x[:, 2] / 2
    y[:, 3] = x[:, 1] + x[:, 3] / 2
    return y


@torch.no_grad()
def detect(model, images, conf_thres=0.3, iou_thres=0.5):
    model.eval()
    pred = model.detect.decode(model(images))
    out = []
    for x in pred:
        x = x[x[:, 4] > conf_thres]
        if not x.shape[0]:
            out.append(0)
            continue
        scores = x[:, 4] * x[:, 5:].max(1)[0]
        boxes = xywh2xyxy(x[:, :4])
        order = scores.argsort(descending=True)
        keep = []
        while order.numel() > 0:
            i = order[0].item()
            keep.append(i)
            if order.numel() == 1:
                break
            rest = boxes[order[1:]]
            lt = torch.max(boxes[i, :2], rest[:, :2])
            rb = torch.min(boxes[i, 2:], rest[:, 2:])
            inter = (rb - lt).clamp(min=0).prod(1)
            area = (boxes[i, 2:] - boxes[i, :2]).prod() + (rest[:, 2:] - rest[:, :2]).prod(1)
            order = order[1:][inter / (area - inter) <= iou_thres]
        out.append(len(keep))
    model.train()
    return out


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: (torch.tensor((rng.standard_normal(tuple(v.shape)) * 0.2).astype(np.float32))
            if v.is_floating_point() and "running" not in k and "anchors" not in k else v)
        for k, v in model.state_dict().items()})


def main(steps=6, compile=False, seed=0, batch=2):
    model = TinyYolo()
    init_weights(model, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.937, nesterov=True)
    rng = np.random.default_rng(seed + 1)
    images = torch.tensor(rng.standard_normal((steps, batch, 3, 16, 16)).astype(np.float32))
    targets = []
    for _ in range(steps):
        n = 3
        t = np.zeros((n, 6), np.float32)
        t[:, 0] = rng.integers(0, batch, n)
        t[:, 1] = rng.integers(0, 3, n)
        t[:, 2:4] = rng.uniform(1, 15, (n, 2))
        t[:, 4:6] = rng.uniform(3, 12, (n, 2))
        targets.append(torch.from_numpy(t))

    def train_step(x, t):
        loss, items = compute_loss(model(x), t, model)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss, items

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, parts = [], []
    for s in range(steps):
        loss, items = train_step(images[s], targets[s])
        losses.append(loss.item())
        parts += items.tolist()
    kept = detect(model, images[0], conf_thres=0.2)
    return {"losses": losses, "parts": parts, "kept": kept}
