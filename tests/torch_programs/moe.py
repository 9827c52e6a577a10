"""A small transformer language model whose feed-forward layers are sparse mixtures of
experts, written the way Switch/Mixtral-style PyTorch code is: a router ``nn.Linear``,
``F.softmax`` then ``torch.topk`` of the routing weights renormalised by their sum,
tokens dispatched per expert with ``torch.where(selected == e)`` and combined back with
``index_add_`` into a ``torch.zeros_like`` buffer, experts in an ``nn.ModuleList`` of
SwiGLU MLPs, a load-balancing auxiliary loss (the fraction of tokens per expert from
``F.one_hot(...).float().mean`` times the mean router probability) and a router z-loss
(``torch.logsumexp(...) ** 2``), a causal mask from ``torch.triu(torch.ones(T, T),
diagonal=1).bool()`` and ``nn.MultiheadAttention(batch_first=True)``, expert usage counted
with ``torch.bincount`` for logging, and Adam with ``clip_grad_norm_``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Expert(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoE(nn.Module):
    def __init__(self, dim, hidden, num_experts=4, top_k=2):
        super().__init__()
        self.num_experts, self.top_k = num_experts, top_k
        self.gate = nn.Linear(dim, num_experts, bias=False)
        self.experts = nn.ModuleList([Expert(dim, hidden) for _ in range(num_experts)])

    def forward(self, hidden_states):
        B, T, D = hidden_states.shape
        x = hidden_states.view(-1, D)
        router_logits = self.gate(x)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        final = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token_idx, slot = torch.where(selected == e)
            if token_idx.numel() == 0:
                continue
            out = expert(x[token_idx]) * routing_weights[token_idx, slot, None]
            final.index_add_(0, token_idx, out.to(x.dtype))
        # Switch-style balance: fraction of tokens routed to each expert x mean gate prob
        probs = F.softmax(router_logits, dim=-1)
        tokens_per_expert = F.one_hot(selected[:, 0], self.num_experts).float().mean(0)
        balance = self.num_experts * (tokens_per_expert * probs.mean(0)).sum()
        z_loss = torch.logsumexp(router_logits, dim=-1).pow(2).mean()
        counts = torch.bincount(selected.flatten(), minlength=self.num_experts)
        return final.view(B, T, D), balance + 1e-3 * z_loss, counts


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.moe = SparseMoE(dim, 2 * dim)

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        y, aux, counts = self.moe(self.ln2(x))
        return x + y, aux, counts


class MoELM(nn.Module):
    def __init__(self, vocab=20, dim=16, heads=2, layers=2, block=8):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(1, block, dim))
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx, targets):
        T = idx.size(1)
        mask = torch.triu(torch.ones(T, T), diagonal=1).bool()
        x = self.tok(idx) + self.pos[:, :T]
        aux_total, usage = 0.0, []
        for block in self.blocks:
            x, aux, counts = block(x, mask)
            aux_total = aux_total + aux
            usage.append(counts)
        logits = self.head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return loss, loss + 0.01 * aux_total, torch.stack(usage)


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor((rng.standard_normal(tuple(v.shape)) * 0.3).astype(np.float32))
        for k, v in model.state_dict().items()})


def main(steps=6, compile=False, seed=0, batch=4):
    model = MoELM()
    init_weights(model, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(seed + 1)
    data = rng.integers(0, 20, (steps, batch, 9))
    inputs, targets = torch.tensor(data[..., :-1]), torch.tensor(data[..., 1:])

    def train_step(x, y):
        lm_loss, loss, usage = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return lm_loss, loss, usage

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, totals, usage = [], [], []
    for s in range(steps):
        lm, total, counts = train_step(inputs[s], targets[s])
        losses.append(lm.item())
        totals.append(total.item())
        usage += counts.flatten().tolist()
    return {"losses": losses, "totals": totals, "usage": usage}
