"""A Transformer-XL language model written the way the original ``mem_transformer.py``
is: sequence-first tensors (``qlen x bsz x d``), sinusoidal relative position embeddings
from ``torch.outer(pos_seq, inv_freq)`` over ``torch.arange(klen - 1, -1, -1.0)``,
relative multi-head attention with the learnable biases ``r_w_bias``/``r_r_bias``, scores
from ``torch.einsum('ibnd,jbnd->ijbn', (q, k))`` (operands given as one tuple), the
``_rel_shift`` trick (a zero column ``cat``-ed on, ``view`` to the transposed shape,
``[1:]`` and ``view_as``), a causal mask ``torch.triu(ones(qlen, klen),
diagonal=1 + mlen).bool()[:, :, None]`` applied in float with ``masked_fill(..., -inf)``
and ``type_as``, and segment-level recurrence: the hidden states of each layer kept as
memory (``torch.cat([mems[i], hids[i]], 0)[beg:end].detach()`` under ``no_grad``), passed
into the next step and returned with the loss, starting from ``torch.empty(0)``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class PositionalEmbedding(nn.Module):
    def __init__(self, demb):
        super().__init__()
        inv_freq = 1 / (10000 ** (torch.arange(0.0, demb, 2.0) / demb))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, pos_seq, bsz=None):
        sinusoid_inp = torch.outer(pos_seq, self.inv_freq)
        pos_emb = torch.cat([sinusoid_inp.sin(), sinusoid_inp.cos()], dim=-1)
        return pos_emb[:, None, :].expand(-1, bsz, -1) if bsz is not None else pos_emb[:, None, :]


class RelPartialLearnableMultiHeadAttn(nn.Module):
    def __init__(self, n_head, d_model, d_head):
        super().__init__()
        self.n_head, self.d_head = n_head, d_head
        self.qkv_net = nn.Linear(d_model, 3 * n_head * d_head, bias=False)
        self.r_net = nn.Linear(d_model, n_head * d_head, bias=False)
        self.o_net = nn.Linear(n_head * d_head, d_model, bias=False)
        self.layer_norm = nn.LayerNorm(d_model)
        self.scale = 1 / (d_head ** 0.5)

    def _rel_shift(self, x):
        zero_pad_shape = (x.size(0), 1) + x.size()[2:]
        zero_pad = torch.zeros(zero_pad_shape, device=x.device, dtype=x.dtype)
        x_padded = torch.cat([zero_pad, x], dim=1)
        x_padded_shape = (x.size(1) + 1, x.size(0)) + x.size()[2:]
        x_padded = x_padded.view(*x_padded_shape)
        return x_padded[1:].view_as(x)

    def forward(self, w, r, r_w_bias, r_r_bias, attn_mask=None, mems=None):
        qlen, rlen, bsz = w.size(0), r.size(0), w.size(1)
        cat = torch.cat([mems, w], 0) if mems is not None and mems.numel() else w
        w_heads = self.qkv_net(cat)
        r_head_k = self.r_net(r)
        w_head_q, w_head_k, w_head_v = torch.chunk(w_heads, 3, dim=-1)
        w_head_q = w_head_q[-qlen:]
        klen = w_head_k.size(0)
        w_head_q = w_head_q.view(qlen, bsz, self.n_head, self.d_head)
        w_head_k = w_head_k.view(klen, bsz, self.n_head, self.d_head)
        w_head_v = w_head_v.view(klen, bsz, self.n_head, self.d_head)
        r_head_k = r_head_k.view(rlen, self.n_head, self.d_head)
        AC = torch.einsum("ibnd,jbnd->ijbn", (w_head_q + r_w_bias, w_head_k))
        BD = self._rel_shift(torch.einsum("ibnd,jnd->ijbn", (w_head_q + r_r_bias, r_head_k)))
        attn_score = (AC + BD) * self.scale
        if attn_mask is not None:
            attn_score = attn_score.float().masked_fill(
                attn_mask[:, :, :, None], -float("inf")).type_as(attn_score)
        attn_prob = F.softmax(attn_score, dim=1)
        attn_vec = torch.einsum("ijbn,jbnd->ibnd", (attn_prob, w_head_v))
        attn_vec = attn_vec.contiguous().view(qlen, bsz, self.n_head * self.d_head)
        return self.layer_norm(w + self.o_net(attn_vec))


class DecoderLayer(nn.Module):
    def __init__(self, n_head, d_model, d_head, d_inner):
        super().__init__()
        self.dec_attn = RelPartialLearnableMultiHeadAttn(n_head, d_model, d_head)
        self.pos_ff = nn.Sequential(nn.Linear(d_model, d_inner), nn.ReLU(inplace=True),
                                    nn.Linear(d_inner, d_model))
        self.ff_norm = nn.LayerNorm(d_model)

    def forward(self, dec_inp, r, r_w_bias, r_r_bias, dec_attn_mask=None, mems=None):
        out = self.dec_attn(dec_inp, r, r_w_bias, r_r_bias, attn_mask=dec_attn_mask, mems=mems)
        return self.ff_norm(out + self.pos_ff(out))


class MemTransformerLM(nn.Module):
    def __init__(self, n_token=17, n_layer=2, n_head=2, d_model=16, d_head=8, d_inner=32,
                 mem_len=6):
        super().__init__()
        self.word_emb = nn.Embedding(n_token, d_model)
        self.pos_emb = PositionalEmbedding(d_model)
        self.r_w_bias = nn.Parameter(torch.zeros(n_head, d_head))
        self.r_r_bias = nn.Parameter(torch.zeros(n_head, d_head))
        self.layers = nn.ModuleList(DecoderLayer(n_head, d_model, d_head, d_inner)
                                    for _ in range(n_layer))
        self.out = nn.Linear(d_model, n_token)
        self.mem_len, self.d_model = mem_len, d_model

    def init_mems(self):
        return [torch.empty(0) for _ in range(len(self.layers) + 1)]

    def _update_mems(self, hids, mems, mlen, qlen):
        with torch.no_grad():
            end_idx = mlen + max(0, qlen)
            beg_idx = max(0, end_idx - self.mem_len)
            return [torch.cat([mems[i], hids[i]], dim=0)[beg_idx:end_idx].detach()
                    if mems[i].numel() else hids[i][beg_idx:end_idx].detach()
                    for i in range(len(hids))]

    def forward(self, data, target, *mems):
        if not mems:
            mems = self.init_mems()
        qlen, bsz = data.size()
        word_emb = self.word_emb(data) * self.d_model ** 0.5
        mlen = mems[0].size(0) if mems[0].numel() else 0
        klen = mlen + qlen
        dec_attn_mask = torch.triu(word_emb.new_ones(qlen, klen),
                                   diagonal=1 + mlen).bool()[:, :, None]
        pos_seq = torch.arange(klen - 1, -1, -1.0, dtype=word_emb.dtype)
        pos_emb = self.pos_emb(pos_seq)
        core_out, hids = word_emb, [word_emb]
        for i, layer in enumerate(self.layers):
            core_out = layer(core_out, pos_emb, self.r_w_bias, self.r_r_bias,
                             dec_attn_mask=dec_attn_mask, mems=mems[i])
            hids.append(core_out)
        new_mems = self._update_mems(hids, mems, mlen, qlen)
        logits = self.out(core_out)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), target.reshape(-1))
        return (loss, *new_mems)


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor((1.0 + rng.normal(0, 0.05, tuple(v.shape)) if "norm" in k and
                         k.endswith("weight") else rng.normal(0, 0.2, tuple(v.shape)))
                        .astype(np.float32)) if k != "pos_emb.inv_freq" else v
        for k, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, tgt_len=5, bsz=2):
    model = MemTransformerLM()
    init_weights(model, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(seed + 1)
    period = rng.integers(1, 17, 7)   # a repeating pattern the memory helps to continue
    stream = np.stack([np.tile(period, 20)[i:i + tgt_len * (steps + 1) + 1] for i in (0, 3)],
                      1)
    data = torch.tensor(stream)

    def train_step(inp, tgt, *mems):
        ret = model(inp, tgt, *mems)
        loss, new_mems = ret[0], ret[1:]
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        return (loss, *new_mems)

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, mems = [], tuple()
    for i in range(steps):
        inp = data[i * tgt_len:(i + 1) * tgt_len]
        tgt = data[i * tgt_len + 1:(i + 1) * tgt_len + 1]
        loss, *mems = train_step(inp, tgt, *mems)
        losses.append(loss.item())
    return {"losses": losses, "mems": [m.sum().item() for m in mems]}
