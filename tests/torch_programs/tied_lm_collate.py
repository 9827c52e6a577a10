"""A GRU language model over variable-length sentences, fed by a ``torch.utils.data``
pipeline as such training scripts build it: a map-style ``Dataset`` of token lists, a
``DataLoader`` with a NumPy-drawn index list as its ``sampler`` and a ``collate_fn`` that
pads with ``nn.utils.rnn.pad_sequence(batch_first=True, padding_value=PAD)`` and returns the
lengths; an embedding initialised by ``nn.Embedding.from_pretrained(vectors, freeze=False,
padding_idx=PAD)`` and tied to the output projection (``self.decoder.weight =
self.encoder.weight``: one parameter, asserted by ``data_ptr()``), the loss
``F.cross_entropy(..., ignore_index=PAD)`` over ``logits.view(-1, V)``; an inverse square
root warm-up ``LambdaLR`` stepped per batch; ``clip_grad_norm_``; the padding row of the
shared weight zeroed in place under ``torch.no_grad()`` after each step
(``model.encoder.weight[PAD].zero_()``, a view of a parameter); and the perplexity
``math.exp`` of the token-weighted mean loss of a ``torch.no_grad()`` validation pass."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

PAD, BOS, V = 0, 1, 12


class Sentences(Dataset):
    def __init__(self, rng, n):
        self.items = []
        for _ in range(n):
            length = int(rng.integers(3, 8))
            start = int(rng.integers(2, V))
            tokens = [BOS] + [2 + (start + 3 * k - 2) % (V - 2) for k in range(length)]
            self.items.append(torch.tensor(tokens, dtype=torch.long))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, idx):
        return self.items[idx]


def collate(batch):
    lengths = torch.tensor([len(s) - 1 for s in batch])
    inputs = pad_sequence([s[:-1] for s in batch], batch_first=True, padding_value=PAD)
    targets = pad_sequence([s[1:] for s in batch], batch_first=True, padding_value=PAD)
    return inputs, targets, lengths


class TiedLM(nn.Module):
    def __init__(self, vectors, hidden=10):
        super().__init__()
        self.encoder = nn.Embedding.from_pretrained(vectors, freeze=False, padding_idx=PAD)
        self.rnn = nn.GRU(vectors.shape[1], hidden, batch_first=True)
        self.proj = nn.Linear(hidden, vectors.shape[1])
        self.decoder = nn.Linear(vectors.shape[1], V)
        self.decoder.weight = self.encoder.weight

    def forward(self, inputs):
        out, _ = self.rnn(self.encoder(inputs))
        return self.decoder(torch.tanh(self.proj(out)))


def main(steps=10, compile=False, seed=0, batch=4, warmup=3):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    vectors = torch.from_numpy(rng.normal(0, 0.5, (V, 8)).astype(np.float32))
    model = TiedLM(vectors)
    for name, p in model.named_parameters():
        if not name.startswith("encoder"):
            p.data.copy_(torch.from_numpy(rng.normal(0, 0.3, tuple(p.shape)).astype(np.float32)))
    assert model.decoder.weight.data_ptr() == model.encoder.weight.data_ptr()
    assert len(list(model.parameters())) == len(dict(model.named_parameters())) == 8
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) ** -0.5, (s + 1) * warmup ** -1.5))
    train = Sentences(rng, batch * steps)
    loader = DataLoader(train, batch_size=batch, sampler=rng.permutation(len(train)).tolist(),
                        collate_fn=collate)
    net = model

    def step(inputs, targets):
        optimizer.zero_grad()
        logits = net(inputs)
        loss = F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=PAD)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        with torch.no_grad():
            model.encoder.weight[PAD].zero_()
        return loss, norm

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, norms, lrs, tokens = [], [], [], []
    for inputs, targets, lengths in loader:
        loss, norm = step(inputs, targets)
        scheduler.step()
        losses.append(loss.item())
        norms.append(norm.item())
        lrs.append(scheduler.get_last_lr()[0])
        tokens.append(int(lengths.sum()))
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for inputs, targets, lengths in DataLoader(Sentences(rng, 6), batch_size=3,
                                                   collate_fn=collate):
            logits = net(inputs)
            total += F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=PAD,
                                     reduction="sum").item()
            count += int((targets != PAD).sum())
    return {"losses": losses, "norms": norms, "lrs": lrs, "tokens": tokens,
            "perplexity": [math.exp(total / count)],
            "pad_row": model.decoder.weight[PAD].tolist(),
            "embedding": model.encoder.weight[2:4].flatten().tolist()}
