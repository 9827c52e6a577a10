"""An Informer-style forecaster with ProbSparse self-attention, written the way the
reference implementation is: keys sampled per query (``K.unsqueeze(-3).expand(B, H, L_Q,
L_K, E)`` indexed by ``torch.arange(L_Q).unsqueeze(1)`` and a sample index), the sparsity
measure ``M = Q_K_sample.max(-1)[0] - torch.div(Q_K_sample.sum(-1), L_K)``, the top
queries by ``M.topk(n_top, sorted=False)[1]``, the reduced queries gathered by advanced
indexing with ``torch.arange(B)[:, None, None]``; a lazy context (``V.mean(dim=-2)``
expanded and ``.clone()``-d, or ``V.cumsum(dim=-2)`` under a causal mask) into which the
active queries' attention is written by index assignment (``context_in[arange, arange,
index, :] = ...``), the causal ProbMask from ``torch.ones(L, L).triu(1)`` expanded and
indexed, ``masked_fill_(mask, -np.inf)``; distilling layers (circular ``Conv1d``,
``BatchNorm1d``, ``nn.ELU``, ``MaxPool1d(3, 2, 1)``), token embeddings by a circular
``Conv1d`` plus sinusoidal positions kept in a buffer; a decoder that cross-attends in full,
the chosen-query fraction by ``torch.zeros_like(M).scatter(-1, M_top, 1.0)``; MSE with
SGD with momentum (not Adam: the key projections' biases and the bias before the batch
norm have gradients that are zero but for rounding, which Adam would scale up to full
steps) and an lr halved by hand in ``param_groups``."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ProbAttention(nn.Module):
    def __init__(self, mask_flag=True, factor=2):
        super().__init__()
        self.factor, self.mask_flag = factor, mask_flag
        self.sample_index = None     # drawn by the caller, as the reference's torch.randint
        self.chosen = None

    def _prob_QK(self, Q, K, sample_k, n_top):
        B, H, L_K, E = K.shape
        _, _, L_Q, _ = Q.shape
        K_expand = K.unsqueeze(-3).expand(B, H, L_Q, L_K, E)
        index_sample = self.sample_index[:L_Q, :sample_k] % L_K
        K_sample = K_expand[:, :, torch.arange(L_Q).unsqueeze(1), index_sample, :]
        Q_K_sample = torch.matmul(Q.unsqueeze(-2), K_sample.transpose(-2, -1)).squeeze(-2)
        M = Q_K_sample.max(-1)[0] - torch.div(Q_K_sample.sum(-1), L_K)
        M_top = M.topk(n_top, sorted=False)[1]
        self.chosen = torch.zeros_like(M).scatter(-1, M_top, 1.0).mean()
        Q_reduce = Q[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], M_top, :]
        Q_K = torch.matmul(Q_reduce, K.transpose(-2, -1))
        return Q_K, M_top

    def _get_initial_context(self, V, L_Q):
        B, H, L_V, D = V.shape
        if not self.mask_flag:
            V_sum = V.mean(dim=-2)
            return V_sum.unsqueeze(-2).expand(B, H, L_Q, V_sum.shape[-1]).clone()
        return V.cumsum(dim=-2)

    def _update_context(self, context_in, V, scores, index, L_Q):
        B, H, L_V, D = V.shape
        if self.mask_flag:
            _mask = torch.ones(L_Q, scores.shape[-1], dtype=torch.bool).triu(1)
            _mask_ex = _mask[None, None, :].expand(B, H, L_Q, scores.shape[-1])
            indicator = _mask_ex[torch.arange(B)[:, None, None],
                                 torch.arange(H)[None, :, None], index, :]
            scores.masked_fill_(indicator, -np.inf)
        attn = torch.softmax(scores, dim=-1)
        context_in[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], index, :] = \
            torch.matmul(attn, V).type_as(context_in)
        return context_in

    def forward(self, queries, keys, values):
        B, L_Q, H, D = queries.shape
        _, L_K, _, _ = keys.shape
        queries, keys, values = (x.transpose(2, 1) for x in (queries, keys, values))
        U_part = min(self.factor * int(np.ceil(np.log(L_K))), L_K)
        u = min(self.factor * int(np.ceil(np.log(L_Q))), L_Q)
        scores_top, index = self._prob_QK(queries, keys, sample_k=U_part, n_top=u)
        scores_top = scores_top * (1.0 / math.sqrt(D))
        context = self._get_initial_context(values, L_Q)
        context = self._update_context(context, values, scores_top, index, L_Q)
        return context.transpose(2, 1).contiguous()


class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads):
        super().__init__()
        self.inner_attention, self.n_heads = attention, n_heads
        self.query_projection = nn.Linear(d_model, d_model)
        self.key_projection = nn.Linear(d_model, d_model)
        self.value_projection = nn.Linear(d_model, d_model)
        self.out_projection = nn.Linear(d_model, d_model)

    def forward(self, queries, keys, values):
        B, L, _ = queries.shape
        _, S, _ = keys.shape
        H = self.n_heads
        out = self.inner_attention(self.query_projection(queries).view(B, L, H, -1),
                                   self.key_projection(keys).view(B, S, H, -1),
                                   self.value_projection(values).view(B, S, H, -1))
        return self.out_projection(out.view(B, L, -1))


class FullAttention(nn.Module):
    def forward(self, queries, keys, values):
        scale = 1.0 / math.sqrt(queries.shape[-1])
        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        V = torch.einsum("bhls,bshd->blhd", torch.softmax(scale * scores, dim=-1), values)
        return V.contiguous()


class ConvLayer(nn.Module):
    def __init__(self, c_in):
        super().__init__()
        self.downConv = nn.Conv1d(c_in, c_in, kernel_size=3, padding=1, padding_mode="circular")
        self.norm = nn.BatchNorm1d(c_in)
        self.activation = nn.ELU()
        self.maxPool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        x = self.downConv(x.permute(0, 2, 1))
        x = self.maxPool(self.activation(self.norm(x)))
        return x.transpose(1, 2)


class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, max_len=64):
        super().__init__()
        self.tokenConv = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1,
                                   padding_mode="circular", bias=False)
        pe = torch.zeros(max_len, d_model).float()
        position = torch.arange(0, max_len).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        return self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2) + self.pe[:, :x.size(1)]


class Informer(nn.Module):
    def __init__(self, c_in=2, d_model=8, n_heads=2, out_len=4):
        super().__init__()
        self.out_len = out_len
        self.enc_embedding = DataEmbedding(c_in, d_model)
        self.dec_embedding = DataEmbedding(c_in, d_model)
        self.enc_attn = nn.ModuleList(AttentionLayer(ProbAttention(False), d_model, n_heads)
                                      for _ in range(2))
        self.distil = ConvLayer(d_model)
        self.dec_self = AttentionLayer(ProbAttention(True), d_model, n_heads)
        self.dec_cross = AttentionLayer(FullAttention(), d_model, n_heads)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(4))
        self.projection = nn.Linear(d_model, c_in)

    def forward(self, x_enc, x_dec):
        x = self.enc_embedding(x_enc)
        x = self.norms[0](x + self.enc_attn[0](x, x, x))
        x = self.distil(x)
        enc_out = self.norms[1](x + self.enc_attn[1](x, x, x))
        y = self.dec_embedding(x_dec)
        y = self.norms[2](y + self.dec_self(y, y, y))
        y = self.norms[3](y + self.dec_cross(y, enc_out, enc_out))
        return self.projection(y)[:, -self.out_len:, :]


def series(rng, n=4, seq_len=12, label_len=4, pred_len=4):
    t = np.arange(seq_len + pred_len)[None, :, None] + rng.uniform(0, 6, (n, 1, 1))
    data = np.concatenate([np.sin(t / 2), np.cos(t / 3)], -1).astype(np.float32)
    data += rng.normal(0, 0.05, data.shape).astype(np.float32)
    x_enc = data[:, :seq_len]
    x_dec = np.concatenate([data[:, seq_len - label_len:seq_len],
                            np.zeros((n, pred_len, 2), np.float32)], 1)
    return (torch.from_numpy(x_enc), torch.from_numpy(x_dec),
            torch.from_numpy(data[:, -pred_len:]))


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Informer()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape))
                                               .astype(np.float32))
                           if "pe" not in k and "running_var" not in k and "num_batches" not in k
                           else v for k, v in model.state_dict().items()})
    sample_index = torch.from_numpy(rng.integers(0, 12, (12, 12)))
    for m in model.modules():
        if isinstance(m, ProbAttention):
            m.sample_index = sample_index
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    criterion = nn.MSELoss()
    net = torch.compile(model) if compile == "model" else model

    def step(x_enc, x_dec, y):
        optimizer.zero_grad()
        pred = net(x_enc, x_dec)
        loss = criterion(pred, y)
        loss.backward()
        optimizer.step()
        return loss

    if compile is True:
        step = torch.compile(step)
    losses, chosen = [], []
    for epoch in range(steps):
        losses.append(step(*series(rng)).item())
        chosen.append(model.dec_self.inner_attention.chosen.item())
        if epoch == steps // 2:
            for param_group in optimizer.param_groups:
                param_group["lr"] = param_group["lr"] * 0.5
    model.eval()
    x_enc, x_dec, _ = series(rng)
    with torch.no_grad():
        pred = net(x_enc, x_dec)
    return {"losses": losses, "chosen": chosen, "pred": pred.flatten().tolist()}
