"""A Switch/GShard-style Mixture-of-Experts layer with a fixed capacity, written as the
Mesh-TensorFlow ports and fairseq's ``top2gating`` write it in PyTorch (dense dispatch, no
data-dependent shapes): router logits, ``softmax``, the top-2 experts by ``torch.topk``,
each token's position in its expert's buffer by ``torch.cumsum`` of the ``F.one_hot``
mask, tokens past the capacity dropped (``mask * (locations < capacity)``), dispatch and
combine tensors built with ``einsum`` over one-hot locations, experts as batched weights
(``einsum("ecm,emh->ech")``), the load-balancing loss ``E * sum(mean(gates) * mean(mask))``
and the router z-loss ``logsumexp(logits) ** 2``. Tokens per expert are counted with
``index_add_`` and ``scatter_add_`` for the report. Trained with AdamW (weight decay on the
experts only, two parameter groups) on a token-classification task."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Top2Router(nn.Module):
    def __init__(self, dim, experts, capacity_factor=1.25):
        super().__init__()
        self.wg = nn.Linear(dim, experts, bias=False)
        self.experts = experts
        self.capacity_factor = capacity_factor

    def forward(self, x):
        tokens = x.shape[0]
        capacity = int(self.capacity_factor * 2 * tokens / self.experts)
        logits = self.wg(x)
        gates = F.softmax(logits, dim=1)
        top_vals, top_idx = torch.topk(gates, 2, dim=1)
        mask1 = F.one_hot(top_idx[:, 0], self.experts)
        mask2 = F.one_hot(top_idx[:, 1], self.experts)
        loc1 = torch.cumsum(mask1, dim=0) - 1
        loc2 = torch.cumsum(mask2, dim=0) - 1 + mask1.sum(0, keepdim=True)
        l_aux = self.experts * torch.mean(gates.mean(0) * mask1.float().mean(0))
        z_loss = torch.logsumexp(logits, dim=1).pow(2).mean()
        mask1 = mask1 * (loc1 < capacity)
        mask2 = mask2 * (loc2 < capacity)
        pos1 = (loc1 * mask1).sum(1)
        pos2 = (loc2 * mask2).sum(1)
        g1 = top_vals[:, 0] * mask1.sum(1)
        g2 = top_vals[:, 1] * mask2.sum(1)
        denom = (g1 + g2).clamp(min=torch.finfo(g1.dtype).eps)
        g1, g2 = g1 / denom, g2 / denom
        combine = (g1[:, None, None] * mask1[:, :, None] * F.one_hot(pos1, capacity)[:, None, :]
                   + g2[:, None, None] * mask2[:, :, None]
                   * F.one_hot(pos2, capacity)[:, None, :])
        return l_aux, z_loss, combine, combine.bool(), top_idx[:, 0]


class MoE(nn.Module):
    def __init__(self, dim=12, hidden=16, experts=4):
        super().__init__()
        self.router = Top2Router(dim, experts)
        self.w1 = nn.Parameter(torch.empty(experts, dim, hidden))
        self.w2 = nn.Parameter(torch.empty(experts, hidden, dim))

    def forward(self, x):
        l_aux, z_loss, combine, dispatch, first = self.router(x)
        expert_in = torch.einsum("sec,sm->ecm", dispatch.type_as(x), x)
        h = F.gelu(torch.einsum("ecm,emh->ech", expert_in, self.w1))
        expert_out = torch.einsum("ech,ehm->ecm", h, self.w2)
        return x + torch.einsum("sec,ecm->sm", combine, expert_out), l_aux, z_loss, first


class Model(nn.Module):
    def __init__(self, vocab=20, dim=12, classes=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.moe = MoE(dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens):
        h, l_aux, z_loss, first = self.moe(self.embed(tokens))
        return self.head(self.norm(h)), l_aux, z_loss, first


def batch(rng, n=24):
    tokens = rng.integers(0, 20, n)
    return torch.from_numpy(tokens), torch.from_numpy(tokens % 3)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Model()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.4, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    experts = [model.moe.w1, model.moe.w2]
    others = [p for n, p in model.named_parameters() if n not in ("moe.w1", "moe.w2")]
    optimizer = torch.optim.AdamW([{"params": experts, "weight_decay": 0.1},
                                   {"params": others, "weight_decay": 0.0}], lr=1e-2)
    net = torch.compile(model) if compile == "model" else model

    def step(tokens, labels):
        optimizer.zero_grad()
        logits, l_aux, z_loss, first = net(tokens)
        loss = F.cross_entropy(logits, labels) + 0.01 * l_aux + 0.001 * z_loss
        loss.backward()
        optimizer.step()
        return loss, l_aux, first

    if compile is True:
        step = torch.compile(step)
    losses, aux, counts = [], [], []
    for _ in range(steps):
        tokens, labels = batch(rng)
        loss, l_aux, first = step(tokens, labels)
        losses.append(loss.item())
        aux.append(l_aux.item())
        per_expert = torch.zeros(4).index_add_(0, first, torch.ones(first.shape[0]))
        again = torch.zeros(4, dtype=torch.long).scatter_add_(0, first, torch.ones_like(first))
        counts.append(per_expert.long().tolist() + again.tolist())
    return {"losses": losses, "aux": aux, "counts": counts,
            "w1": model.moe.w1.flatten()[:30].tolist()}
