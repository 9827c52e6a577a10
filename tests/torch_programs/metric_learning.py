"""Deep metric learning written the way triplet-loss repositories are: an embedding
network with ``F.normalize``; a batch of P classes x K samples from a seeded sampler;
pairwise distances by hand (``x.pow(2).sum(1, keepdim=True)`` + its transpose - ``2 * x @
x.t()``, ``clamp(min=1e-12).sqrt()``); positive and negative masks from ``labels.unsqueeze(0)
== labels.unsqueeze(1)`` and ``~torch.eye(n, dtype=torch.bool)``; batch-hard mining
(``(dist * mask_pos).max(1)``, ``(dist + max_dist * mask_pos).min(1)``) and the two
nearest negatives by ``topk(2, largest=False)``; a soft-margin triplet term as
``torch.logaddexp(torch.zeros_like(x), x)``; ``F.triplet_margin_loss`` on triplets gathered
with the mined indices; a multi-similarity-style term with ``torch.logsumexp`` over
masked similarities; an adaptive margin from ``kthvalue`` of the positive distances;
recall@1 with the diagonal masked by ``masked_fill(torch.eye(...), inf)`` and per-class
recall averaged by ``torch.nanmean`` over classes, some absent from a batch (NaN)."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_CLASSES = 6


class EmbeddingNet(nn.Module):
    def __init__(self, in_dim=10, dim=8):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(in_dim, 32), nn.BatchNorm1d(32), nn.ReLU(),
                                  nn.Linear(32, dim))

    def forward(self, x):
        return F.normalize(self.body(x), p=2, dim=1)


def pairwise_distances(x):
    sq = x.pow(2).sum(1, keepdim=True)
    dist = sq + sq.t() - 2.0 * x @ x.t()
    return dist.clamp(min=1e-12).sqrt()


def triplet_losses(emb, labels, margin=0.2):
    n = emb.size(0)
    dist = pairwise_distances(emb)
    same = labels.unsqueeze(0) == labels.unsqueeze(1)
    not_self = ~torch.eye(n, dtype=torch.bool)
    mask_pos = (same & not_self).float()
    mask_neg = (~same).float()
    hardest_pos, pos_idx = (dist * mask_pos).max(1)
    max_dist = dist.max(1, keepdim=True)[0]
    hardest_neg, neg_idx = (dist + max_dist * (1.0 - mask_neg)).min(1)
    two_nearest = (dist + max_dist * (1.0 - mask_neg)).topk(2, dim=1, largest=False)[0]
    soft = torch.logaddexp(torch.zeros_like(hardest_pos),
                           hardest_pos - two_nearest.mean(1)).mean()
    k = max(1, int(mask_pos.sum(1).min().item()) // 2 + 1)
    adaptive = dist.masked_fill(mask_pos == 0, 1e4).kthvalue(k, dim=1).values.detach()
    hard = F.relu(hardest_pos - hardest_neg + margin + 0.1 * adaptive).mean()
    tml = F.triplet_margin_loss(emb, emb[pos_idx], emb[neg_idx], margin=margin)
    sim = emb @ emb.t()
    pos_term = torch.logsumexp((-2.0 * (sim - 0.5)).masked_fill(mask_pos == 0, -1e4), 1)
    neg_term = torch.logsumexp((10.0 * (sim - 0.5)).masked_fill(mask_neg == 0, -1e4), 1)
    ms = (F.softplus(pos_term) / 2.0 + F.softplus(neg_term) / 10.0).mean()
    return hard + soft + tml + 0.1 * ms


@torch.no_grad()
def recall_at_1(emb, labels):
    dist = pairwise_distances(emb).masked_fill(torch.eye(emb.size(0), dtype=torch.bool),
                                               float("inf"))
    nearest = dist.argmin(1)
    hit = (labels[nearest] == labels).float()
    per_class = torch.zeros(NUM_CLASSES).index_add_(0, labels, hit)
    counts = torch.zeros(NUM_CLASSES).index_add_(0, labels, torch.ones_like(hit))
    per_class = per_class / counts   # NaN for a class not in the batch
    return hit.mean(), torch.nanmean(per_class), torch.isnan(per_class).sum()


def make_data(rng, n_per_class=12, in_dim=10):
    centers = rng.normal(0, 1.5, (NUM_CLASSES, in_dim))
    x = np.concatenate([centers[c] + rng.normal(0, 1.0, (n_per_class, in_dim))
                        for c in range(NUM_CLASSES)]).astype(np.float32)
    y = np.repeat(np.arange(NUM_CLASSES), n_per_class)
    return x, y


def pk_batch(rng, x, y, p=3, k=4):
    classes = rng.choice(NUM_CLASSES, p, replace=False)
    idx = np.concatenate([rng.choice(np.flatnonzero(y == c), k, replace=False)
                          for c in classes])
    return torch.tensor(x[idx]), torch.tensor(y[idx])


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor((rng.normal(0, 0.3, tuple(v.shape)) if v.dtype == torch.float32
                         else np.zeros(tuple(v.shape))).astype(
                             np.float32 if v.dtype == torch.float32 else np.int64))
        if "running_var" not in k else torch.ones(v.shape)
        for k, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0):
    model = EmbeddingNet()
    init_weights(model, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    rng = np.random.default_rng(seed + 1)
    x_all, y_all = make_data(rng)

    def train_step(x, y):
        optimizer.zero_grad()
        loss = triplet_losses(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, recalls = [], []
    for _ in range(steps):
        model.train()
        losses.append(train_step(*pk_batch(rng, x_all, y_all)).item())
        model.eval()
        x, y = pk_batch(rng, x_all, y_all, p=4, k=3)
        r, r_class, absent = recall_at_1(model(x), y)
        recalls += [r.item(), r_class.item(), absent.item()]
    return {"losses": losses, "recalls": recalls}
