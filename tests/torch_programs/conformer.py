"""A tiny Conformer acoustic model with frame classification, written the way ESPnet-,
WeNet- and torchaudio-style Conformer code is: ``Conv2dSubsampling`` (two stride-2
``nn.Conv2d`` + ReLU on ``x.unsqueeze(1)``, then ``x.transpose(1, 2).contiguous().view(b,
t, c * f)``) with the lengths ``((lengths - 1) // 2 - 1) // 2`` and the padding mask
``torch.arange(t)[None, :] < lengths[:, None]``, sinusoidal relative positional encodings
(``RelPositionalEncoding`` over positions ``t - 1 .. -(t - 1)``), relative-position
multi-head attention with the learned biases ``pos_bias_u`` / ``pos_bias_v`` and
Transformer-XL's ``rel_shift`` (``torch.cat([zero_pad, x], dim=-1).view(b, h, t2 + 1,
t1)[:, :, 1:].view_as(x)``), scores ``masked_fill``-ed with ``-10000.0`` and the
probabilities zeroed at padding, macaron feed-forward modules with half-step residuals,
the convolution module (pointwise ``nn.Conv1d`` x2, ``F.glu(dim=1)``, depthwise
``nn.Conv1d(groups=channels)``, ``nn.BatchNorm1d``, ``nn.SiLU``, pointwise), padding
frames zeroed with ``masked_fill(~mask.unsqueeze(-1), 0.0)``, SpecAugment time and
frequency masks written in place into the features, frame labels padded with ``-100``
for ``F.cross_entropy``, and the Noam schedule as a ``LambdaLR``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Conv2dSubsampling(nn.Module):
    def __init__(self, idim, odim):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, odim, 3, 2), nn.ReLU(),
                                  nn.Conv2d(odim, odim, 3, 2), nn.ReLU())
        self.out = nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim)

    def forward(self, x, lengths):
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        return x, ((lengths - 1) // 2 - 1) // 2


class RelPositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=64):
        super().__init__()
        self.d_model, self.xscale = d_model, math.sqrt(d_model)
        pos = torch.arange(max_len - 1, -max_len, -1.0).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32)
                             * -(math.log(10000.0) / d_model))
        pe = torch.zeros(2 * max_len - 1, d_model)
        pe[:, 0::2] = torch.sin(pos * div_term)
        pe[:, 1::2] = torch.cos(pos * div_term)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)
        self.max_len = max_len

    def forward(self, x):
        t = x.size(1)
        center = self.max_len - 1
        pos_emb = self.pe[:, center - t + 1:center + t]
        return x * self.xscale, pos_emb


class RelPositionMultiHeadedAttention(nn.Module):
    def __init__(self, n_head, n_feat):
        super().__init__()
        self.d_k, self.h = n_feat // n_head, n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)
        self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = nn.Parameter(torch.Tensor(self.h, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.Tensor(self.h, self.d_k))
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    @staticmethod
    def rel_shift(x):
        b, h, t1, t2 = x.size()
        zero_pad = torch.zeros((b, h, t1, 1), device=x.device, dtype=x.dtype)
        x_padded = torch.cat([zero_pad, x], dim=-1)
        x_padded = x_padded.view(b, h, t2 + 1, t1)
        return x_padded[:, :, 1:].view_as(x)[:, :, :, : t2 // 2 + 1]

    def forward(self, x, pos_emb, mask):
        n_batch = x.size(0)
        q = self.linear_q(x).view(n_batch, -1, self.h, self.d_k)
        k = self.linear_k(x).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(x).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        p = self.linear_pos(pos_emb).view(1, -1, self.h, self.d_k).transpose(1, 2)
        q_with_bias_u = (q + self.pos_bias_u).transpose(1, 2)
        q_with_bias_v = (q + self.pos_bias_v).transpose(1, 2)
        matrix_ac = torch.matmul(q_with_bias_u, k.transpose(-2, -1))
        matrix_bd = self.rel_shift(torch.matmul(q_with_bias_v, p.transpose(-2, -1)))
        scores = (matrix_ac + matrix_bd) / math.sqrt(self.d_k)
        mask = ~mask.unsqueeze(1).unsqueeze(2)            # (batch, 1, 1, time): True = pad
        scores = scores.masked_fill(mask, -10000.0)
        attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
        x = torch.matmul(attn, v).transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k)
        return self.linear_out(x)


class ConvolutionModule(nn.Module):
    def __init__(self, channels, kernel_size=5):
        super().__init__()
        self.pointwise_conv1 = nn.Conv1d(channels, 2 * channels, kernel_size=1)
        # (no bias before the batch norm: its gradient is rounding noise, which Adam's
        # normalisation would turn into full steps that differ between frameworks)
        self.depthwise_conv = nn.Conv1d(channels, channels, kernel_size, bias=False,
                                        padding=(kernel_size - 1) // 2, groups=channels)
        self.norm = nn.BatchNorm1d(channels)
        self.pointwise_conv2 = nn.Conv1d(channels, channels, kernel_size=1)
        self.activation = nn.SiLU()

    def forward(self, x, mask):
        x = x.masked_fill(~mask.unsqueeze(-1), 0.0).transpose(1, 2)
        x = F.glu(self.pointwise_conv1(x), dim=1)
        x = self.activation(self.norm(self.depthwise_conv(x)))
        return self.pointwise_conv2(x).transpose(1, 2)


class FeedForward(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.w_1, self.w_2, self.activation = nn.Linear(d, hidden), nn.Linear(hidden, d), nn.SiLU()

    def forward(self, x):
        return self.w_2(self.activation(self.w_1(x)))


class ConformerLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.feed_forward_macaron, self.feed_forward = FeedForward(d, 2 * d), FeedForward(d, 2 * d)
        self.self_attn = RelPositionMultiHeadedAttention(heads, d)
        self.conv_module = ConvolutionModule(d)
        self.norm_ff_macaron, self.norm_mha, self.norm_conv = (nn.LayerNorm(d), nn.LayerNorm(d),
                                                               nn.LayerNorm(d))
        self.norm_ff, self.norm_final = nn.LayerNorm(d), nn.LayerNorm(d)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x, pos_emb, mask):
        x = x + 0.5 * self.dropout(self.feed_forward_macaron(self.norm_ff_macaron(x)))
        x = x + self.dropout(self.self_attn(self.norm_mha(x), pos_emb, mask))
        x = x + self.dropout(self.conv_module(self.norm_conv(x), mask))
        x = x + 0.5 * self.dropout(self.feed_forward(self.norm_ff(x)))
        return self.norm_final(x)


class ConformerClassifier(nn.Module):
    def __init__(self, idim=12, d=16, heads=2, layers=2, n_classes=5):
        super().__init__()
        self.embed = Conv2dSubsampling(idim, d)
        self.pos_enc = RelPositionalEncoding(d)
        self.encoders = nn.ModuleList([ConformerLayer(d, heads) for _ in range(layers)])
        self.classifier = nn.Linear(d, n_classes)

    def forward(self, feats, feat_lengths):
        x, lengths = self.embed(feats, feat_lengths)
        mask = torch.arange(x.size(1), device=x.device)[None, :] < lengths[:, None]
        x, pos_emb = self.pos_enc(x)
        for layer in self.encoders:
            x = layer(x, pos_emb, mask)
        return self.classifier(x), lengths


def spec_augment(rng, feats, lengths, F_width=3, T_width=4):
    """In place, as data pipelines do: one frequency band and one time span zeroed."""
    for b in range(feats.size(0)):
        f0 = int(rng.integers(0, feats.size(2) - F_width))
        feats[b, :, f0:f0 + int(rng.integers(1, F_width + 1))] = 0.0
        t0 = int(rng.integers(0, int(lengths[b]) - T_width))
        feats[b, t0:t0 + int(rng.integers(1, T_width + 1)), :] = 0.0
    return feats


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: v if "running" in k or "num_batches" in k else
        torch.tensor((1.0 + rng.normal(0, 0.05, tuple(v.shape)) if "norm" in k and
                      k.endswith("weight") else rng.normal(0, 0.25, tuple(v.shape)))
                     .astype(np.float32))
        for k, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch=4, frames=23, idim=12, d=16):
    model = ConformerClassifier(idim=idim, d=d)
    init_weights(model, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    warmup = 3
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.05 * d ** -0.5 * min((step + 1) ** -0.5,
                                                         (step + 1) * warmup ** -1.5))
    rng = np.random.default_rng(seed + 1)

    def train_step(feats, feat_lengths, labels):
        logits, lengths = model(feats, feat_lengths)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                               ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        return loss, logits.argmax(-1).masked_fill(labels == -100, -1)

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, preds = [], []
    for _ in range(steps):
        model.train()
        feat_lengths = torch.tensor(rng.integers(frames - 8, frames + 1, batch))
        feat_lengths[0] = frames
        feats = torch.tensor(rng.normal(size=(batch, frames, idim)).astype(np.float32))
        feats = spec_augment(rng, feats, feat_lengths)
        out_lengths = ((feat_lengths - 1) // 2 - 1) // 2
        t_out = int(out_lengths.max())
        labels = torch.tensor(rng.integers(0, 5, (batch, t_out)))
        labels[torch.arange(t_out)[None, :] >= out_lengths[:, None]] = -100
        loss, pred = train_step(feats, feat_lengths, labels)
        losses.append(loss.item())
        preds.append(pred[0].tolist())
        scheduler.step()
    model.eval()
    with torch.no_grad():
        logits, _ = model(feats, feat_lengths)
    return {"losses": losses, "preds": preds, "eval": logits[1].flatten()[:12].tolist()}
