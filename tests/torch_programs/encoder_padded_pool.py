"""A Transformer text classifier and a copy-task ``nn.Transformer`` as tutorials write
them, evaluated the way they are: variable-length token lists through
``pad_sequence(batch_first=True, padding_value=0)``, ``nn.Embedding(padding_idx=0)``, a
learned positional ``nn.Parameter``, ``src_key_padding_mask = tokens == 0`` into
``nn.TransformerEncoder(nn.TransformerEncoderLayer(..., batch_first=True), num_layers,
norm=nn.LayerNorm(d))``, mean pooling by ``out.mean(dim=1)`` over every position, and an
evaluation under ``model.eval()`` and ``torch.no_grad()`` (where torch's nested-tensor fast
path gives zeros at the padded positions, before the final norm); a seq2seq
``nn.Transformer(batch_first=True)`` with ``generate_square_subsequent_mask`` trained by
teacher forcing and decoded greedily under ``torch.inference_mode()`` from a memory
encoded with its padding mask and attended without one; AdamW with ``LambdaLR`` warm-up."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence


class Classifier(nn.Module):
    def __init__(self, vocab=12, d=8, classes=3, max_len=10):
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=0)
        self.pos = nn.Parameter(torch.zeros(1, max_len, d))
        layer = nn.TransformerEncoderLayer(d, 2, 16, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(d))
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        pad = tokens == 0
        x = self.embed(tokens) * math.sqrt(self.embed.embedding_dim) + self.pos[:, :tokens.size(1)]
        out = self.encoder(x, src_key_padding_mask=pad)
        return self.head(out.mean(dim=1))


class Copier(nn.Module):
    def __init__(self, vocab=8, d=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=0)
        self.transformer = nn.Transformer(d, 2, 1, 1, 16, dropout=0.0, batch_first=True)
        self.out = nn.Linear(d, vocab)

    def encode(self, src):
        return self.transformer.encoder(self.embed(src), src_key_padding_mask=src == 0)

    def decode(self, tgt, memory):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
        return self.out(self.transformer.decoder(self.embed(tgt), memory, tgt_mask=mask))

    def forward(self, src, tgt):
        return self.decode(tgt, self.encode(src))


def batch(rng, n=4):
    seqs = [torch.from_numpy(rng.integers(1, 12, rng.integers(3, 9))) for _ in range(n)]
    seqs[0] = torch.from_numpy(rng.integers(1, 12, 8))
    labels = torch.tensor([int(s.sum()) % 3 for s in seqs])
    return pad_sequence(seqs, batch_first=True, padding_value=0), labels


def copy_batch(rng, n=3):
    seqs = [torch.from_numpy(rng.integers(2, 8, rng.integers(3, 6))) for _ in range(n)]
    seqs[0] = torch.from_numpy(rng.integers(2, 8, 5))
    src = pad_sequence(seqs, batch_first=True)
    tgt = pad_sequence([torch.cat([torch.tensor([1]), s]) for s in seqs], batch_first=True)
    return src, tgt


def init(model, rng):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                continue
            p.copy_(torch.from_numpy(rng.normal(0, 0.3, p.shape).astype(np.float32)))


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    clf, copier = Classifier(), Copier()
    init(clf, rng)
    init(copier, rng)
    params = list(clf.parameters()) + list(copier.parameters())
    optimizer = torch.optim.AdamW(params, lr=5e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 3))
    net = torch.compile(clf) if compile == "model" else clf
    seq2seq = torch.compile(copier) if compile == "model" else copier

    def train_step(tokens, labels, src, tgt):
        loss = F.cross_entropy(net(tokens), labels)
        logits = seq2seq(src, tgt[:, :-1])
        loss = loss + F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                      tgt[:, 1:].reshape(-1), ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    if compile is True:
        train_step = torch.compile(train_step)
    log = []
    for _ in range(steps):
        tokens, labels = batch(rng)
        log.append(train_step(tokens, labels, *copy_batch(rng)).item())
        scheduler.step()
    clf.eval()
    copier.eval()
    tokens, labels = batch(rng, n=5)
    with torch.no_grad():
        logits = net(tokens)
    src, _ = copy_batch(rng)
    with torch.inference_mode():
        memory = copier.encode(src)
        ys = torch.ones(src.size(0), 1, dtype=torch.long)
        for _ in range(4):
            nxt = copier.decode(ys, memory)[:, -1].argmax(-1, keepdim=True)
            ys = torch.cat([ys, nxt], dim=1)
    return {"log": log, "eval_logits": logits.flatten().tolist(),
            "memory_pad": memory[2, -1].tolist(), "decoded": ys.flatten().tolist()}
