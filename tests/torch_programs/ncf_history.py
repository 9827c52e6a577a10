"""A sequential recommender as recommendation codebases write it: items embedded by
``nn.Embedding(n_items + 1, dim, padding_idx=0)`` (0 pads the histories, its row stays zero
and gets no gradient), a user's history pooled by a padding mask (``(hist != 0).unsqueeze(-1)``
and a clamped count), user features looked up from a ``register_buffer`` table by
``index_select``, candidates scored by ``torch.bmm`` against one positive and
``repeat_interleave``-expanded negatives, the positive's score picked by ``torch.gather``,
BPR's ``-F.logsigmoid(pos - neg)`` plus an L2 term on the looked-up rows only, Adagrad with
``initial_accumulator_value``, ``torch.split`` of a joint tower output, and evaluation by
masking seen items with ``scatter_(1, hist, float('-inf'))`` before ``topk`` (hit rate and
NDCG from ``torch.log2`` of the ranks)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class HistoryRecommender(nn.Module):
    def __init__(self, n_items, user_features, dim=12):
        super().__init__()
        self.items = nn.Embedding(n_items + 1, dim, padding_idx=0, sparse=False)
        self.register_buffer("user_features", user_features)
        self.tower = nn.Linear(dim + user_features.shape[1], 2 * dim)
        self.item_bias = nn.Embedding(n_items + 1, 1, padding_idx=0)

    def user_vector(self, users, hist):
        mask = (hist != 0).unsqueeze(-1).float()
        pooled = (self.items(hist) * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        feats = self.user_features.index_select(0, users)
        out = self.tower(torch.cat([pooled, feats], dim=-1))
        taste, gate = torch.split(out, out.shape[-1] // 2, dim=-1)
        return taste * torch.sigmoid(gate)

    def forward(self, users, hist, candidates):
        u = self.user_vector(users, hist)
        cand = self.items(candidates)
        scores = torch.bmm(cand, u.unsqueeze(-1)).squeeze(-1)
        return scores + self.item_bias(candidates).squeeze(-1), u, cand


def interactions(rng, n_users, n_items, max_len=6):
    """Users like items of their cluster; histories of varying length, padded with 0."""
    clusters = rng.integers(0, 4, n_users)
    hist = np.zeros((n_users, max_len), dtype=np.int64)
    for u in range(n_users):
        length = rng.integers(2, max_len + 1)
        pool = np.arange(1, n_items + 1)[(np.arange(n_items) % 4) == clusters[u]]
        hist[u, :length] = rng.choice(pool, length, replace=False)
    feats = np.eye(4, dtype=np.float32)[clusters] + rng.normal(0, 0.1, (n_users, 4)).astype(
        np.float32)
    return clusters, hist, feats


def init_weights(model, rng):
    for name, p in model.named_parameters():
        p.data.copy_(torch.from_numpy(rng.normal(0, 0.1, tuple(p.shape)).astype(np.float32)))
    with torch.no_grad():
        model.items.weight[0].fill_(0)
        model.item_bias.weight[model.item_bias.padding_idx].zero_()


def main(steps=10, compile=False, seed=0, batch=16, n_users=40, n_items=32, n_neg=3,
         l2=1e-3):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    clusters, hist, feats = interactions(rng, n_users, n_items)
    model = HistoryRecommender(n_items, torch.from_numpy(feats))
    init_weights(model, rng)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.1, initial_accumulator_value=0.1)
    hist_t = torch.from_numpy(hist)
    batches = []
    for _ in range(steps):
        users = rng.integers(0, n_users, batch)
        pos = np.array([1 + 4 * rng.integers(0, n_items // 4) + clusters[u] for u in users])
        neg = rng.integers(1, n_items + 1, (batch, n_neg))
        batches.append((torch.from_numpy(users), torch.from_numpy(pos), torch.from_numpy(neg)))
    net = model

    def step(users, pos, neg):
        optimizer.zero_grad()
        candidates = torch.cat([pos.unsqueeze(1), neg], dim=1)
        scores, u, cand = net(users, hist_t[users], candidates)
        pos_scores = torch.gather(scores, 1, torch.zeros_like(pos).unsqueeze(1))
        pos_scores = pos_scores.repeat_interleave(n_neg, dim=1)
        loss = -F.logsigmoid(pos_scores - scores[:, 1:]).mean()
        reg = l2 * (u.pow(2).sum() + cand.pow(2).sum()) / users.shape[0]
        (loss + reg).backward()
        optimizer.step()
        return loss

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses = []
    for users, pos, neg in batches:
        losses.append(step(users, pos, neg).item())
    with torch.no_grad():
        users = torch.arange(n_users)
        u = model.user_vector(users, hist_t)
        scores = u @ model.items.weight.t() + model.item_bias.weight.t()
        scores[:, 0] = float("-inf")
        scores.scatter_(1, hist_t, float("-inf"))
        top = scores.topk(5, dim=1).indices
        hits = ((top - 1) % 4 == torch.from_numpy(clusters).unsqueeze(1))
        ranks = torch.arange(1, 6, dtype=torch.float32)
        ndcg = (hits.float() / torch.log2(ranks + 1)).sum(1).mean()
    return {"losses": losses, "hits": [int(hits.sum())], "ndcg": [ndcg.item()],
            "pad_row": model.items.weight[0].tolist(),
            "item1": model.items.weight[1].tolist()}
