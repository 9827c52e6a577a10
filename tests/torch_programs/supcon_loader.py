"""Supervised contrastive learning (SupCon) as HobbitLong/SupContrast's losses.py writes
it, trained through a ``DataLoader(drop_last=False)`` whose last batch is smaller (so the
compiled step sees a second batch size): two views per sample stacked by ``torch.stack``
then ``torch.cat(torch.unbind(features, dim=1), dim=0)``, the positives' mask by
``torch.eq(labels, labels.T)`` tiled by ``mask.repeat(anchor_count, contrast_count)``, the
self-contrast cases removed by ``torch.scatter(torch.ones_like(mask), 1,
torch.arange(batch_size * anchor_count).view(-1, 1), 0)``, logits stabilised by
subtracting ``torch.max(..., dim=1, keepdim=True)`` detached, the positives' count guarded
by ``torch.where(mask_pos_pairs < 1e-6, 1, mask_pos_pairs)``, and the "one" contrast mode
(the first view as the only anchor); a projection head of ``nn.Linear`` + ``BatchNorm1d``
with ``F.normalize``; a linear probe evaluated by accuracy; SGD with
``CosineAnnealingLR`` stepped per batch."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class SupConLoss(nn.Module):
    def __init__(self, temperature=0.1, contrast_mode="all", base_temperature=0.1):
        super().__init__()
        self.temperature = temperature
        self.contrast_mode = contrast_mode
        self.base_temperature = base_temperature

    def forward(self, features, labels=None, mask=None):
        if len(features.shape) < 3:
            raise ValueError("`features` needs to be [bsz, n_views, ...]")
        if len(features.shape) > 3:
            features = features.view(features.shape[0], features.shape[1], -1)
        batch_size = features.shape[0]
        if labels is not None and mask is not None:
            raise ValueError("Cannot define both `labels` and `mask`")
        elif labels is None and mask is None:
            mask = torch.eye(batch_size, dtype=torch.float32)
        elif labels is not None:
            labels = labels.contiguous().view(-1, 1)
            if labels.shape[0] != batch_size:
                raise ValueError("Num of labels does not match num of features")
            mask = torch.eq(labels, labels.T).float()
        else:
            mask = mask.float()
        contrast_count = features.shape[1]
        contrast_feature = torch.cat(torch.unbind(features, dim=1), dim=0)
        if self.contrast_mode == "one":
            anchor_feature = features[:, 0]
            anchor_count = 1
        else:
            anchor_feature = contrast_feature
            anchor_count = contrast_count
        anchor_dot_contrast = torch.div(torch.matmul(anchor_feature, contrast_feature.T),
                                        self.temperature)
        logits_max, _ = torch.max(anchor_dot_contrast, dim=1, keepdim=True)
        logits = anchor_dot_contrast - logits_max.detach()
        mask = mask.repeat(anchor_count, contrast_count)
        logits_mask = torch.scatter(torch.ones_like(mask), 1,
                                    torch.arange(batch_size * anchor_count).view(-1, 1), 0)
        mask = mask * logits_mask
        exp_logits = torch.exp(logits) * logits_mask
        log_prob = logits - torch.log(exp_logits.sum(1, keepdim=True))
        mask_pos_pairs = mask.sum(1)
        mask_pos_pairs = torch.where(mask_pos_pairs < 1e-6, 1, mask_pos_pairs)
        mean_log_prob_pos = (mask * log_prob).sum(1) / mask_pos_pairs
        loss = -(self.temperature / self.base_temperature) * mean_log_prob_pos
        loss = loss.view(anchor_count, batch_size).mean()
        return loss


class SupConNet(nn.Module):
    def __init__(self, in_dim=10, hidden=16, feat_dim=8):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(inplace=True),
                                     nn.Linear(hidden, hidden), nn.ReLU(inplace=True))
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden),
                                  nn.ReLU(inplace=True), nn.Linear(hidden, feat_dim))

    def forward(self, x):
        return F.normalize(self.head(self.encoder(x)), dim=1)


def make_data(rng, n=22, in_dim=10, classes=3):
    centers = rng.normal(0, 1.5, (classes, in_dim))
    labels = rng.integers(0, classes, n)
    x = centers[labels] + rng.normal(0, 0.8, (n, in_dim))
    jitter = [rng.normal(0, 0.3, (n, in_dim)) for _ in range(2)]
    views = np.stack([x + j for j in jitter], axis=1).astype(np.float32)
    return torch.from_numpy(views), torch.from_numpy(labels)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = SupConNet()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.normal(0, 0.4, p.shape).astype(np.float32)))
    views, labels = make_data(rng)
    loader = DataLoader(TensorDataset(views, labels), batch_size=8, shuffle=False,
                        drop_last=False)
    criterion = SupConLoss(temperature=0.2)
    criterion_one = SupConLoss(temperature=0.2, contrast_mode="one")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps * 3)
    net = torch.compile(model) if compile == "model" else model

    def train_step(images, labels):
        bsz = labels.shape[0]
        images = torch.cat(torch.unbind(images, dim=1), dim=0)
        features = net(images)
        f1, f2 = torch.split(features, [bsz, bsz], dim=0)
        features = torch.stack([f1, f2], dim=1)
        loss = criterion(features, labels)
        loss_one = criterion_one(features, labels)
        loss_simclr = criterion(features)
        optimizer.zero_grad()
        (loss + 0.5 * loss_one + 0.1 * loss_simclr).backward()
        optimizer.step()
        return loss.detach(), loss_one.detach(), loss_simclr.detach()

    if compile is True:
        train_step = torch.compile(train_step)
    log = []
    for epoch in range(max(1, steps // 2)):
        for images, y in loader:
            losses = train_step(images, y)
            scheduler.step()
            log.append([v.item() for v in losses])
    model.eval()
    with torch.no_grad():
        feats = model.encoder(views[:, 0])
    probe = nn.Linear(16, 3)
    with torch.no_grad():
        probe.weight.copy_(torch.from_numpy(rng.normal(0, 0.1, (3, 16)).astype(np.float32)))
        probe.bias.zero_()
    probe_opt = torch.optim.Adam(probe.parameters(), lr=0.05)
    for _ in range(5):
        probe_opt.zero_grad()
        F.cross_entropy(probe(feats), labels).backward()
        probe_opt.step()
    correct = (probe(feats).argmax(1) == labels).sum().item()
    return {"log": log, "correct": [correct], "feats": feats[0].tolist()}
