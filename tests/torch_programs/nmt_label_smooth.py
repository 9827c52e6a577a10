"""A small translation model on ``nn.Transformer`` as the annotated-transformer-style
scripts write it: ``batch_first=True, norm_first=True``, causal masks from
``nn.Transformer.generate_square_subsequent_mask`` (float ``-inf`` masks), padding masks
from ``tgt == PAD``, shared embeddings scaled by ``math.sqrt(d_model)``, sinusoidal
positions in a registered buffer; ``nn.CrossEntropyLoss(label_smoothing=0.1,
ignore_index=PAD)``; gradient accumulation (``(loss / accum).backward()`` over two
micro-batches) with ``clip_grad_norm_``; AdamW with two parameter groups (no decay for
biases and norms) under ``OneCycleLR`` with per-group ``max_lr``; an output projection by
``torch.einsum("...d,vd->...v")``; greedy decoding in a ``@torch.no_grad()`` method."""
import math

import numpy as np
import torch
import torch.nn as nn

PAD, BOS, EOS, VOCAB = 0, 1, 2, 11


class Seq2Seq(nn.Module):
    def __init__(self, d_model=16, nhead=2, layers=1, max_len=16):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(VOCAB, d_model, padding_idx=PAD)
        self.transformer = nn.Transformer(d_model, nhead, layers, layers, 32, dropout=0.0,
                                          batch_first=True, norm_first=True)
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)

    def embed_tokens(self, tokens):
        return self.embed(tokens) * math.sqrt(self.d_model) + self.pe[:tokens.shape[1]]

    def forward(self, src, tgt):
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        out = self.transformer(self.embed_tokens(src), self.embed_tokens(tgt),
                               tgt_mask=tgt_mask, src_key_padding_mask=src == PAD,
                               tgt_key_padding_mask=tgt == PAD,
                               memory_key_padding_mask=src == PAD)
        return torch.einsum("...d,vd->...v", out, self.embed.weight)

    @torch.no_grad()
    def greedy(self, src, steps):
        ys = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
        for _ in range(steps):
            logits = self(src, ys)[:, -1]
            ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], dim=1)
        return ys


def batch(rng, n, length):
    """Reverse-the-sequence pairs with random lengths, padded with PAD."""
    src = np.full((n, length), PAD)
    tgt = np.full((n, length + 2), PAD)
    for i in range(n):
        k = rng.integers(2, length + 1)
        seq = rng.integers(3, VOCAB, k)
        src[i, :k] = seq
        tgt[i, :k + 2] = [BOS, *seq[::-1], EOS]
    return torch.from_numpy(src), torch.from_numpy(tgt)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Seq2Seq()
    model.load_state_dict({k: (torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape))
                                                .astype(np.float32)) if k != "pe" else v)
                           for k, v in model.state_dict().items()})
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=[0.02, 0.01],
                                                    total_steps=steps, pct_start=0.5)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1, ignore_index=PAD)
    net = torch.compile(model) if compile == "model" else model

    def micro_step(src, tgt, accum):
        logits = net(src, tgt[:, :-1])
        loss = criterion(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1))
        (loss / accum).backward()
        return loss.detach()

    if compile is True:
        micro_step = torch.compile(micro_step)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        total = 0.0
        for _ in range(2):
            src, tgt = batch(rng, 4, 5)
            total += micro_step(src, tgt, 2).item() / 2
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append([total, norm.item()])
    src, _ = batch(rng, 3, 5)
    return {"losses": losses, "decoded": net.greedy(src, 4).tolist()}
