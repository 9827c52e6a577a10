"""A token-choice mixture-of-experts feed-forward as Megablocks/OLMoE-style reference code
writes it without dropping tokens: ``torch.topk`` of the router's softmax with the
weights renormalised, the tokens sorted by expert (``torch.argsort(..., stable=True)``
of the flattened choices), expert loads counted with ``scatter_add_`` into
``torch.zeros(num_experts)`` and split points by ``torch.cumsum``, each expert's rows
reached by ``index_select`` between boundaries read with ``.tolist()`` (outside the
compiled region, as dispatch code does on the host) or by a dense mask, the outputs
combined by ``index_add_`` weighted by the gate, a Switch-style load-balancing loss
(fraction of tokens times mean probability), a router z-loss by ``torch.logsumexp``,
expert weights as 3-D Parameters applied by ``torch.bmm`` over experts, and AdamW."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class DenseMoE(nn.Module):
    """Every expert runs on every token (a dense dispatch), then a one-hot mask of the
    top-k choices keeps each token's k outputs: static shapes, no data-dependent sizes."""

    def __init__(self, dim=8, hidden=12, num_experts=4, top_k=2):
        super().__init__()
        self.num_experts, self.top_k = num_experts, top_k
        self.router = nn.Linear(dim, num_experts, bias=False)
        self.w1 = nn.Parameter(torch.empty(num_experts, dim, hidden))
        self.w2 = nn.Parameter(torch.empty(num_experts, hidden, dim))

    def route(self, x):
        logits = self.router(x)
        probs = logits.softmax(dim=-1)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        flat = experts.reshape(-1)
        load = torch.zeros(self.num_experts).scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.float))
        frac = load / flat.numel()
        aux = self.num_experts * (frac * probs.mean(0)).sum()
        z_loss = torch.logsumexp(logits, dim=-1).pow(2).mean()
        return weights, experts, aux, z_loss, load

    def forward(self, x):
        n, dim = x.shape
        weights, experts, aux, z_loss, load = self.route(x)
        order = torch.argsort(experts.reshape(-1), stable=True)
        token_of = order // self.top_k
        expert_of = experts.reshape(-1)[order]
        gate_of = weights.reshape(-1)[order]
        xs = x.index_select(0, token_of)                       # tokens grouped by expert
        h = torch.bmm(xs.unsqueeze(0).expand(self.num_experts, -1, -1), self.w1)
        h = torch.bmm(F.gelu(h), self.w2)                      # (experts, n * k, dim)
        mine = F.one_hot(expert_of, self.num_experts).t().unsqueeze(-1).to(h.dtype)
        y_sorted = (h * mine).sum(0) * gate_of.unsqueeze(-1)
        out = torch.zeros_like(x).index_add_(0, token_of, y_sorted)
        return out, aux, z_loss, load


class Net(nn.Module):
    def __init__(self, dim=8, classes=3):
        super().__init__()
        self.inp = nn.Linear(5, dim)
        self.norm = nn.LayerNorm(dim)
        self.moe = DenseMoE(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        h = self.inp(x)
        y, aux, z_loss, load = self.moe(self.norm(h))
        return self.head(h + y), aux, z_loss, load


def sparse_dispatch(moe, x):
    """The same layer with each expert's rows cut by host-side boundaries (``tolist`` of a
    cumsum of the counts), as grouped-GEMM dispatch does: only each expert's own tokens."""
    weights, experts, _, _, load = moe.route(x)
    order = torch.argsort(experts.reshape(-1), stable=True)
    token_of = order // moe.top_k
    gate_of = weights.reshape(-1)[order]
    bounds = [0] + torch.cumsum(load.long(), 0).tolist()
    out = torch.zeros_like(x)
    for e in range(moe.num_experts):
        idx = token_of[bounds[e]:bounds[e + 1]]
        if idx.numel() == 0:
            continue
        h = F.gelu(x.index_select(0, idx) @ moe.w1[e]) @ moe.w2[e]
        out.index_add_(0, idx, h * gate_of[bounds[e]:bounds[e + 1], None])
    return out


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Net()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.normal(0, 0.4, p.shape).astype(np.float32)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    net = torch.compile(model) if compile == "model" else model

    def train_step(x, y):
        logits, aux, z_loss, load = net(x)
        loss = F.cross_entropy(logits, y) + 0.01 * aux + 1e-3 * z_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach(), load

    if compile is True:
        train_step = torch.compile(train_step)
    log, loads = [], []
    for _ in range(steps):
        x = torch.from_numpy(rng.normal(0, 1, (9, 5)).astype(np.float32))
        y = torch.from_numpy(rng.integers(0, 3, 9))
        loss, load = train_step(x, y)
        log.append(loss.item())
        loads.append(load.long().tolist())
    x = torch.from_numpy(rng.normal(0, 1, (7, 8)).astype(np.float32))
    with torch.no_grad():
        dense, _, _, _ = model.moe(x)
        sparse = sparse_dispatch(model.moe, x)
    return {"log": log, "loads": loads, "dense": dense[2].tolist(),
            "sparse_minus_dense": [float((sparse - dense).abs().max() < 1e-5)]}
