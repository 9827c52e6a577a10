"""A character-level language model written the way char-rnn ports are: a vocabulary from
``sorted(set(text))`` with ``stoi``/``itos`` dicts, an ``nn.Embedding`` and a two-layer
``nn.LSTM(batch_first=True, dropout=0.0)``, truncated backpropagation through time (the
hidden state carried across batches and cut with ``tuple(h.detach() for h in hidden)``),
``loss = criterion(output.view(-1, vocab), targets.view(-1))``, ``clip_grad_norm_``, a
``CosineAnnealingWarmRestarts`` schedule stepped per batch; mid-training a checkpoint
(``model.state_dict()``, ``optimizer.state_dict()``, ``scheduler.state_dict()``) saved
with ``torch.save`` to a ``BytesIO`` and loaded back into fresh objects; generation under
``torch.no_grad()`` one character at a time from the carried hidden state, the logits
divided by a temperature, ``F.softmax``, and the draw made with NumPy's ``rng.choice``
over ``probs.numpy()`` (a seeded generator) and, at temperature 0, ``argmax``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import io

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

TEXT = ("the quick brown fox jumps over the lazy dog. a stitch in time saves nine. "
        "all that glitters is not gold. ") * 4


class CharRNN(nn.Module):
    def __init__(self, vocab_size, embed=12, hidden=24, layers=2):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed)
        self.lstm = nn.LSTM(embed, hidden, layers, batch_first=True, dropout=0.0)
        self.fc = nn.Linear(hidden, vocab_size)
        self.layers, self.hidden = layers, hidden

    def forward(self, x, hidden):
        out, hidden = self.lstm(self.embedding(x), hidden)
        return self.fc(out), hidden

    def init_hidden(self, batch_size):
        weight = next(self.parameters())
        return (weight.new_zeros(self.layers, batch_size, self.hidden),
                weight.new_zeros(self.layers, batch_size, self.hidden))


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({k: torch.tensor(rng.normal(0, 0.3, tuple(v.shape)).astype(np.float32))
                           for k, v in model.state_dict().items()})


@torch.no_grad()
def sample(model, stoi, itos, prime, length, temperature, rng):
    model.eval()
    hidden = model.init_hidden(1)
    x = torch.tensor([[stoi[c] for c in prime]])
    out, hidden = model(x, hidden)
    chars = list(prime)
    for _ in range(length):
        logits = out[0, -1]
        if temperature == 0:
            idx = int(torch.argmax(logits))
        else:
            probs = F.softmax(logits / temperature, dim=-1).double().numpy()
            idx = int(rng.choice(len(probs), p=probs / probs.sum()))
        chars.append(itos[idx])
        out, hidden = model(torch.tensor([[idx]]), hidden)
    model.train()
    return "".join(chars)


def main(steps=10, compile=False, seed=0, batch_size=4, seq_len=8):
    chars = sorted(set(TEXT))
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for ch, i in stoi.items()}
    data = torch.tensor([stoi[c] for c in TEXT], dtype=torch.long)
    n = (len(data) - 1) // batch_size
    inputs = data[:n * batch_size].view(batch_size, n)
    targets = data[1:n * batch_size + 1].view(batch_size, n)

    model = CharRNN(len(chars))
    init_weights(model, seed)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=3)

    def train_step(x, y, hidden):
        hidden = tuple(h.detach() for h in hidden)
        optimizer.zero_grad()
        output, hidden = model(x, hidden)
        loss = criterion(output.reshape(-1, output.size(-1)), y.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        return loss, hidden

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, lrs = [], []
    hidden = model.init_hidden(batch_size)
    for step in range(steps):
        if step == steps // 2:   # checkpoint and resume into fresh objects
            buffer = io.BytesIO()
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict()}, buffer)
            buffer.seek(0)
            ckpt = torch.load(buffer)
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            scheduler.load_state_dict(ckpt["scheduler"])
        start = (step * seq_len) % (n - seq_len)
        loss, hidden = train_step(inputs[:, start:start + seq_len],
                                  targets[:, start:start + seq_len], hidden)
        scheduler.step()
        losses.append(loss.item())
        lrs.append(scheduler.get_last_lr()[0])
    rng = np.random.default_rng(3)
    greedy = sample(model, stoi, itos, "the ", 12, 0, rng)
    sampled = sample(model, stoi, itos, "a st", 12, 0.8, rng)
    return {"losses": losses, "lrs": lrs, "greedy": [stoi[c] for c in greedy],
            "sampled": [stoi[c] for c in sampled]}
