"""Deep Graph Infomax as PyG's ``DeepGraphInfomax`` example and the authors' code write it:
a one-layer GCN encoder on a dense symmetric-normalised adjacency (``D^-1/2 (A + I)
D^-1/2`` from ``torch.diag_embed`` of ``deg.pow(-0.5)`` with ``masked_fill_`` of infinities),
``nn.PReLU`` per channel; the corruption a row permutation of the features (``x[perm]``,
the permutation drawn outside the step); the readout ``torch.sigmoid(h.mean(0))``; an
``nn.Bilinear(dim, dim, 1)`` discriminator scoring positive and corrupted nodes against
the summary (``summary.expand_as(h)``), trained with ``BCEWithLogitsLoss`` on
``torch.cat`` of ones and zeros; Adam; then a linear probe trained on the frozen embeddings
(``detach``) with SGD, and its accuracy."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self, cin, dim):
        super().__init__()
        self.lin = nn.Linear(cin, dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(dim))
        self.act = nn.PReLU(dim)

    def forward(self, x, adj_norm):
        return self.act(adj_norm @ self.lin(x) + self.bias)


class DGI(nn.Module):
    def __init__(self, cin, dim=8):
        super().__init__()
        self.encoder = Encoder(cin, dim)
        self.disc = nn.Bilinear(dim, dim, 1)

    def forward(self, x, adj_norm, perm):
        pos = self.encoder(x, adj_norm)
        neg = self.encoder(x[perm], adj_norm)
        summary = torch.sigmoid(pos.mean(dim=0, keepdim=True))
        pos_logits = self.disc(pos, summary.expand_as(pos)).squeeze(-1)
        neg_logits = self.disc(neg, summary.expand_as(neg)).squeeze(-1)
        return pos_logits, neg_logits, pos


def normalise(adj):
    adj = adj + torch.eye(adj.shape[0])
    deg = adj.sum(1)
    inv_sqrt = deg.pow(-0.5)
    inv_sqrt.masked_fill_(inv_sqrt == float("inf"), 0.0)
    d = torch.diag_embed(inv_sqrt)
    return d @ adj @ d


def graph(rng, n=20, cin=6):
    labels = rng.integers(0, 2, n)
    same = labels[:, None] == labels[None, :]
    prob = np.where(same, 0.35, 0.05)
    upper = np.triu(rng.uniform(size=(n, n)) < prob, 1)
    adj = (upper | upper.T).astype(np.float32)
    adj[3, :] = adj[:, 3] = 0   # an isolated node
    x = rng.normal(labels[:, None] * 0.8, 1.0, (n, cin)).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(adj), torch.from_numpy(labels)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    x, adj, labels = graph(rng)
    adj_norm = normalise(adj)
    model = DGI(x.shape[1])
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.4, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    criterion = nn.BCEWithLogitsLoss()
    net = torch.compile(model) if compile == "model" else model

    def step(perm):
        optimizer.zero_grad()
        pos_logits, neg_logits, _ = net(x, adj_norm, perm)
        logits = torch.cat([pos_logits, neg_logits])
        targets = torch.cat([torch.ones_like(pos_logits), torch.zeros_like(neg_logits)])
        loss = criterion(logits, targets)
        loss.backward()
        optimizer.step()
        return loss

    if compile is True:
        step = torch.compile(step)
    losses = []
    for _ in range(steps):
        perm = torch.from_numpy(rng.permutation(x.shape[0]))
        losses.append(step(perm).item())
    with torch.no_grad():
        _, _, emb = net(x, adj_norm, torch.arange(x.shape[0]))
    emb = emb.detach()
    probe = nn.Linear(emb.shape[1], 2)
    with torch.no_grad():
        probe.weight.copy_(torch.from_numpy(rng.normal(0, 0.3, (2, emb.shape[1]))
                                            .astype(np.float32)))
        probe.bias.zero_()
    probe_opt = torch.optim.SGD(probe.parameters(), lr=0.5)
    for _ in range(10):
        probe_opt.zero_grad()
        F.cross_entropy(probe(emb), labels).backward()
        probe_opt.step()
    correct = int((probe(emb).argmax(1) == labels).sum())
    return {"losses": losses, "correct": [correct], "emb": emb.flatten()[::5].tolist(),
            "prelu": model.encoder.act.weight.tolist()}
