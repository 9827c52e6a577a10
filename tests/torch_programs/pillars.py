"""A PointPillars-style detector head trained on toy point clouds, with the in-place scatter
idioms its implementations use: points grouped into pillars with a padding mask, the pillar
features decorated in place (``features[..., :2] -= cell_xy``, ``features *= mask``), a
simplified PointNet (``Linear``, ``BatchNorm1d`` over ``permute``-d features, ``torch.max(x,
dim=1)[0]``), the pillars scattered onto a BEV canvas by index assignment (``canvas[:,
indices] = pillars.t()``, the autograd of an in-place write into a fresh tensor), point
counts per cell accumulated with ``index_put_(..., accumulate=True)`` and empty cells zeroed
through a boolean mask (``density[density == 0] = 1``), a 2D conv backbone, CenterNet's
heatmap focal loss (``torch.clamp(x.sigmoid_(), ...)``: the logits turned into probabilities
in place, ``torch.where`` of the positive and negative terms), and box offsets regressed
with ``F.l1_loss`` only at positive cells (``pred[positive]``)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

GRID, MAX_PTS, N_PILLARS = 8, 5, 20


class PillarNet(nn.Module):
    def __init__(self, channels=8):
        super().__init__()
        self.pfn = nn.Linear(6, channels, bias=False)
        self.norm = nn.BatchNorm1d(channels)
        self.backbone = nn.Sequential(nn.Conv2d(channels + 1, 16, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.heat = nn.Conv2d(16, 1, 1)
        self.offset = nn.Conv2d(16, 2, 1)
        self.channels = channels

    def forward(self, points, mask, coords):
        """points (B, P, M, 3), mask (B, P, M), coords (B, P) cell indices of each pillar."""
        B, P, M, _ = points.shape
        m = mask.unsqueeze(-1).float()
        centers = (points * m).sum(2, keepdim=True) / m.sum(2, keepdim=True).clamp(min=1)
        features = torch.cat([points, points - centers], dim=-1)
        features[..., :2] -= coords_xy(coords).unsqueeze(2)
        features *= m
        x = self.pfn(features.view(B * P, M, 6))
        x = F.relu(self.norm(x.permute(0, 2, 1)).permute(0, 2, 1))
        pillars = torch.max(x, dim=1)[0].view(B, P, self.channels)
        canvases = []
        for b in range(B):
            canvas = torch.zeros(self.channels, GRID * GRID)
            canvas[:, coords[b]] = pillars[b].t()
            density = torch.zeros(GRID * GRID)
            density.index_put_((coords[b],), mask[b].sum(1).float(), accumulate=True)
            density[density == 0] = 1
            canvases.append(torch.cat([canvas, density.log().unsqueeze(0)], dim=0))
        bev = torch.stack(canvases).view(B, self.channels + 1, GRID, GRID)
        h = self.backbone(bev)
        return self.heat(h).squeeze(1), self.offset(h)


def coords_xy(coords):
    return torch.stack([coords % GRID, torch.div(coords, GRID, rounding_mode="floor")],
                       dim=-1).float() + 0.5


def focal_loss(logits, target, alpha=2.0, beta=4.0):
    p = torch.clamp(logits.sigmoid_(), min=1e-4, max=1 - 1e-4)   # (CenterNet's _sigmoid)
    pos = target == 1
    pos_loss = torch.log(p) * (1 - p) ** alpha
    neg_loss = torch.log(1 - p) * p ** alpha * (1 - target) ** beta
    loss = torch.where(pos, pos_loss, neg_loss)
    return -loss.sum() / pos.sum().clamp(min=1)


def scenes(rng, n):
    """One object per scene: a blob of points around a centre; clutter elsewhere."""
    points = np.zeros((n, N_PILLARS, MAX_PTS, 3), dtype=np.float32)
    mask = np.zeros((n, N_PILLARS, MAX_PTS), dtype=bool)
    coords = np.zeros((n, N_PILLARS), dtype=np.int64)
    heat = np.zeros((n, GRID, GRID), dtype=np.float32)
    offset = np.zeros((n, 2, GRID, GRID), dtype=np.float32)
    yy, xx = np.mgrid[:GRID, :GRID]
    for i in range(n):
        center = rng.uniform(1, GRID - 1, 2)
        cells = rng.choice(GRID * GRID, N_PILLARS, replace=False)
        cx, cy = int(center[0]), int(center[1])
        cells[0] = cy * GRID + cx
        coords[i] = cells
        for j, c in enumerate(cells):
            x0, y0 = c % GRID, c // GRID
            near = np.hypot(x0 + 0.5 - center[0], y0 + 0.5 - center[1]) < 1.5
            k = rng.integers(3 if near else 1, MAX_PTS + 1)
            mask[i, j, :k] = True
            points[i, j, :k, 0] = x0 + rng.random(k)
            points[i, j, :k, 1] = y0 + rng.random(k)
            points[i, j, :k, 2] = rng.normal(1.0 if near else 0.2, 0.1, k)
        heat[i] = np.exp(-((xx + 0.5 - center[0]) ** 2 + (yy + 0.5 - center[1]) ** 2) / 2)
        heat[i, cy, cx] = 1
        offset[i, :, cy, cx] = center - [cx, cy]
    t = torch.from_numpy
    return t(points), t(mask), t(coords), t(heat), t(offset)


def init_weights(model, rng):
    for name, p in model.named_parameters():
        if p.dim() > 1:
            fan_in = int(np.prod(p.shape[1:]))
            p.data.copy_(torch.from_numpy(rng.normal(0, np.sqrt(2 / fan_in), tuple(p.shape))
                                          .astype(np.float32)))
        elif "norm" not in name:
            p.data.fill_(-2.0 if name == "heat.bias" else 0.0)


def main(steps=10, compile=False, seed=0, batch=3):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = PillarNet()
    init_weights(model, rng)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    data = [scenes(rng, batch) for _ in range(steps)]
    net = model

    def step(points, mask, coords, heat, offset):
        optimizer.zero_grad()
        heat_logits, off = net(points, mask, coords)
        positive = heat == 1
        loss_heat = focal_loss(heat_logits, heat)
        pred = off.permute(0, 2, 3, 1)[positive]
        loss_off = F.l1_loss(pred, offset.permute(0, 2, 3, 1)[positive])
        loss = loss_heat + loss_off
        loss.backward()
        optimizer.step()
        return loss_heat, loss_off

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    heat_losses, off_losses = [], []
    for d in data:
        lh, lo = step(*d)
        heat_losses.append(lh.item())
        off_losses.append(lo.item())
    model.eval()
    points, mask, coords, heat, offset = scenes(rng, 4)
    with torch.no_grad():
        p, off = model(points, mask, coords)
        eval_loss = focal_loss(p, heat)
    peak = p.flatten(1).argmax(1)
    return {"losses": heat_losses, "offset_losses": off_losses, "eval_loss": [eval_loss.item()],
            "peaks": peak.tolist(), "truth": (heat.flatten(1) == 1).float().argmax(1).tolist(),
            "heat": p[0, 3].tolist()}
