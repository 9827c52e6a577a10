"""Learning to rank with list-wise and pair-wise losses, as allRank- and PT-Ranking-style
code writes them: ListMLE by ``torch.logcumsumexp`` over the scores sorted by the labels
(``argsort`` with ``descending=True`` and ``torch.take_along_dim``), padded list slots
masked by ``index_fill_`` and ``masked_fill`` with ``float("-inf")``, RankNet pairs from
``torch.cartesian_prod`` with ``nn.MarginRankingLoss``, NDCG@k by ``topk`` with
``torch.log2`` discounts, ``RAdam`` and ``PolynomialLR``."""
import numpy as np
import torch
import torch.nn as nn


class Scorer(nn.Module):
    def __init__(self, features=6, hidden=16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.SiLU(),
                                 nn.LayerNorm(hidden), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


def list_mle(scores, labels, mask):
    """ListMLE: the scores in label order, minus the log-sum-exp of each suffix."""
    order = labels.masked_fill(~mask, -1.0).argsort(dim=1, descending=True, stable=True)
    ordered = torch.take_along_dim(scores.masked_fill(~mask, float("-inf")), order, dim=1)
    valid = torch.take_along_dim(mask, order, dim=1)
    suffix = torch.logcumsumexp(ordered.flip(1), dim=1).flip(1)
    return ((suffix - ordered) * valid).sum(1).div(valid.sum(1)).mean()


def ndcg_at(scores, labels, k):
    _, top = scores.topk(k, dim=1)
    gains = (2 ** labels.gather(1, top) - 1) / torch.log2(torch.arange(k) + 2.0)
    ideal = (2 ** labels.sort(dim=1, descending=True).values[:, :k] - 1) \
        / torch.log2(torch.arange(k) + 2.0)
    return (gains.sum(1) / ideal.sum(1).clamp(min=1e-6)).mean()


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Scorer()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.4, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.RAdam(model.parameters(), lr=0.02)
    scheduler = torch.optim.lr_scheduler.PolynomialLR(optimizer, total_iters=steps, power=2.0)
    margin = nn.MarginRankingLoss(margin=0.5)
    net = torch.compile(model) if compile == "model" else model
    pairs = torch.cartesian_prod(torch.arange(5), torch.arange(5))
    pairs = pairs[pairs[:, 0] < pairs[:, 1]]

    def step(x, labels, padded):
        mask = torch.ones_like(labels, dtype=torch.bool)
        mask[padded] = mask[padded].index_fill_(1, torch.tensor([4]), False)
        scores = net(x)
        s_i, s_j = scores[:, pairs[:, 0]], scores[:, pairs[:, 1]]
        l_i, l_j = labels[:, pairs[:, 0]], labels[:, pairs[:, 1]]
        target = torch.sign(l_i - l_j)
        keep = (target != 0) & mask[:, pairs[:, 1]]
        pair_loss = margin(s_i * keep, s_j * keep, torch.where(keep, target, 1.0))
        loss = list_mle(scores, labels, mask) + pair_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss, ndcg_at(scores.detach(), labels, 3)

    if compile is True:
        step = torch.compile(step)
    losses = []
    for _ in range(steps):
        x = torch.from_numpy(rng.normal(0, 1, (6, 5, 6)).astype(np.float32))
        labels = torch.from_numpy(rng.integers(0, 4, (6, 5)).astype(np.float32))
        losses.append([v.item() for v in step(x, labels, torch.tensor([1, 4]))])
        scheduler.step()
    return {"losses": losses, "lr": [g["lr"] for g in optimizer.param_groups]}
