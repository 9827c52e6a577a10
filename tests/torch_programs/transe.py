"""TransE knowledge-graph embeddings as the popular PyTorch ports (OpenKE-style) write it:
``nn.Embedding`` tables initialised with ``uniform_(-6/sqrt(d), 6/sqrt(d))`` on the NumPy
side, the entity table re-normalised every step by assigning ``.weight.data =
F.normalize(...)`` inside the training step, a relation table built with
``max_norm=1`` (the lookup renormalises the rows it reads, in place), scores
``torch.norm(h + r - t, p=1, dim=1)``, corrupted triples (head or tail replaced, chosen by
NumPy), ``nn.MarginRankingLoss(margin=1.0)`` with a target of ``-1``, plain SGD; and
filtered-free mean rank on held-out triples via ``torch.argsort``.
Data: a synthetic graph whose relations are translations in a hidden 4-D space."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class TransE(nn.Module):
    def __init__(self, num_entities, num_relations, dim=16, rng=None):
        super().__init__()
        self.entities = nn.Embedding(num_entities, dim)
        self.relations = nn.Embedding(num_relations, dim, max_norm=1.0)
        bound = 6 / np.sqrt(dim)
        self.entities.weight.data = torch.tensor(
            rng.uniform(-bound, bound, (num_entities, dim)).astype(np.float32))
        rel = rng.uniform(-bound, bound, (num_relations, dim))
        self.relations.weight.data = torch.tensor(
            (rel / np.linalg.norm(rel, axis=1, keepdims=True)).astype(np.float32))
        self.criterion = nn.MarginRankingLoss(margin=1.0)

    def distance(self, heads, relations, tails):
        return torch.norm(self.entities(heads) + self.relations(relations)
                          - self.entities(tails), p=1, dim=1)

    def forward(self, positive, negative):
        self.entities.weight.data = F.normalize(self.entities.weight.data, p=2, dim=1)
        pos = self.distance(positive[:, 0], positive[:, 1], positive[:, 2])
        neg = self.distance(negative[:, 0], negative[:, 1], negative[:, 2])
        target = torch.tensor([-1], dtype=torch.long)
        return self.criterion(pos, neg, target), pos, neg


def knowledge_graph(rng, entities=40, relations=5, triples=400):
    points = rng.normal(size=(entities, 4))
    shifts = rng.normal(size=(relations, 4))
    out = []
    for _ in range(triples):
        h, r = rng.integers(entities), rng.integers(relations)
        t = int(np.argmin(np.linalg.norm(points - (points[h] + shifts[r]), axis=1)))
        out.append((h, r, t))
    return np.array(out)


def corrupt(rng, batch, entities):
    negative = batch.copy()
    heads = rng.random(len(batch)) < 0.5
    replacement = rng.integers(0, entities, len(batch))
    negative[heads, 0] = replacement[heads]
    negative[~heads, 2] = replacement[~heads]
    return negative


def main(steps=10, compile=False, seed=0, batch=32):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    triples = knowledge_graph(rng)
    train, test = triples[:360], triples[360:]
    model = TransE(40, 5, rng=rng)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    batches = []
    for _ in range(steps):
        chosen = train[rng.integers(0, len(train), batch)]
        batches.append((torch.from_numpy(chosen), torch.from_numpy(corrupt(rng, chosen, 40))))
    forward = model

    def step(positive, negative):
        optimizer.zero_grad()
        loss, pos, neg = forward(positive, negative)
        loss.backward()
        optimizer.step()
        return loss, pos.mean()

    if compile == "model":
        forward = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, distances = [], []
    for positive, negative in batches:
        loss, pos = step(positive, negative)
        losses.append(loss.item())
        distances.append(pos.item())
    with torch.no_grad():
        t = torch.from_numpy(test)
        query = model.entities(t[:, 0]) + model.relations(t[:, 1])
        scores = torch.cdist(query, model.entities.weight, p=1)
        ranks = (torch.argsort(scores, dim=1) == t[:, 2:3]).nonzero()[:, 1] + 1
    return {"losses": losses, "distances": distances,
            "mean_rank": [ranks.float().mean().item()],
            "relation_norms": model.relations.weight.norm(dim=1).tolist(),
            "entity0": model.entities.weight[0].tolist()}
