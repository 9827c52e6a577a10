"""A tiny Mamba language model with the selective scan in a Python loop, written the way
minimal single-file Mamba implementations are: ``in_proj`` split into the branch and the
residual with ``.split([d_inner, d_inner], dim=-1)``, a causal depthwise ``nn.Conv1d``
(``groups=d_inner``, ``padding=d_conv - 1``, then ``[:, :, :l]``), ``x_proj`` split into
the step size and the input-dependent B and C, ``F.softplus(self.dt_proj(delta))``,
``A = -torch.exp(self.A_log.float())`` from ``torch.arange(1, n + 1).repeat(d_inner, 1)``
with ``A_log._no_weight_decay = True`` set on the parameter, the discretisation by
three-operand ``torch.einsum``, the recurrence ``x = deltaA[:, i] * x + deltaB_u[:, i]``
over ``range(l)`` with ``torch.stack(ys, dim=1)``, the skip ``u * D``, an RMSNorm by hand
(``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * self.weight``), a language
model head tied to the embedding, AdamW with the no-weight-decay parameters in their own
group, and greedy generation under ``torch.inference_mode()``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class MambaBlock(nn.Module):
    def __init__(self, d_model, d_state=4, expand=2, d_conv=3):
        super().__init__()
        self.d_inner = expand * d_model
        self.dt_rank = math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, self.d_inner * 2, bias=False)
        self.conv1d = nn.Conv1d(self.d_inner, self.d_inner, kernel_size=d_conv,
                                groups=self.d_inner, padding=d_conv - 1, bias=True)
        self.x_proj = nn.Linear(self.d_inner, self.dt_rank + d_state * 2, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, self.d_inner, bias=True)
        A = torch.arange(1, d_state + 1).repeat(self.d_inner, 1)
        self.A_log = nn.Parameter(torch.log(A.float()))
        self.A_log._no_weight_decay = True
        self.D = nn.Parameter(torch.ones(self.d_inner))
        self.D._no_weight_decay = True
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def forward(self, x):
        b, l, d = x.shape
        x_and_res = self.in_proj(x)
        x, res = x_and_res.split(split_size=[self.d_inner, self.d_inner], dim=-1)
        x = x.transpose(1, 2)
        x = self.conv1d(x)[:, :, :l]
        x = F.silu(x.transpose(1, 2))
        y = self.ssm(x)
        return self.out_proj(y * F.silu(res))

    def ssm(self, x):
        d_in, n = self.A_log.shape
        A = -torch.exp(self.A_log.float())
        D = self.D.float()
        x_dbl = self.x_proj(x)
        delta, B, C = x_dbl.split(split_size=[self.dt_rank, n, n], dim=-1)
        delta = F.softplus(self.dt_proj(delta))
        return self.selective_scan(x, delta, A, B, C, D)

    def selective_scan(self, u, delta, A, B, C, D):
        b, l, d_in = u.shape
        n = A.shape[1]
        deltaA = torch.exp(torch.einsum("bld,dn->bldn", delta, A))
        deltaB_u = torch.einsum("bld,bln,bld->bldn", delta, B, u)
        x = torch.zeros((b, d_in, n), device=deltaA.device)
        ys = []
        for i in range(l):
            x = deltaA[:, i] * x + deltaB_u[:, i]
            y = torch.einsum("bdn,bn->bd", x, C[:, i, :])
            ys.append(y)
        y = torch.stack(ys, dim=1)
        return y + u * D


class ResidualBlock(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.mixer = MambaBlock(d_model)
        self.norm = RMSNorm(d_model)

    def forward(self, x):
        return self.mixer(self.norm(x)) + x


class Mamba(nn.Module):
    def __init__(self, vocab=24, d_model=16, n_layer=2):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList([ResidualBlock(d_model) for _ in range(n_layer)])
        self.norm_f = RMSNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.lm_head.weight = self.embedding.weight

    def forward(self, input_ids):
        x = self.embedding(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm_f(x))


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: v if "A_log" in k or k.endswith(".D") or "norm" in k else
        torch.tensor(rng.normal(0, 0.3, tuple(v.shape)).astype(np.float32))
        for k, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch=4, length=8):
    model = Mamba()
    init_weights(model, seed)
    no_decay = [p for p in model.parameters() if getattr(p, "_no_weight_decay", False)]
    decay = [p for p in model.parameters() if not getattr(p, "_no_weight_decay", False)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=3e-3)
    rng = np.random.default_rng(seed + 1)
    # sequences that count up modulo the vocabulary from a random start
    starts = rng.integers(0, 24, (steps, batch, 1))
    data = (starts + np.arange(length + 1)) % 24

    def train_step(input_ids, targets):
        logits = model(input_ids)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses = [train_step(torch.tensor(data[s, :, :-1]), torch.tensor(data[s, :, 1:])).item()
              for s in range(steps)]
    model.eval()
    ids = torch.tensor([[3, 4, 5]])
    with torch.inference_mode():
        for _ in range(2):
            next_id = model(ids)[:, -1].argmax(dim=-1, keepdim=True)
            ids = torch.cat([ids, next_id], dim=1)
    return {"losses": losses, "generated": ids[0].tolist(),
            "A": [-torch.exp(layer.mixer.A_log).mean().item() for layer in model.layers]}
