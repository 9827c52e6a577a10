"""A sentiment classifier over reviews of different lengths and its training loop, written
the way PyTorch text programs are: a ``Dataset`` of token lists and a ``collate_fn`` that
pads a batch (``pad_sequence``) and keeps the lengths, an embedding with a padding index,
``pack_padded_sequence`` (unsorted batches, ``enforce_sorted=False``) into a bidirectional
LSTM, ``pad_packed_sequence`` back for attention pooling over the valid steps (the padding
masked with -inf), the last hidden states of both directions, cross-entropy, Adam and
``clip_grad_norm_``; an evaluation pass counts correct predictions.

Random reviews stand in for a corpus (no download); a review is positive when it holds more
of the "good" half of the vocabulary than of the bad half, which the model can learn. The
dataset is sorted by length into batches, as bucketing iterators do (less padding), and
the same batches come every epoch: the compiled step's graphs are one per batch shape of
lengths (the lengths are Python ints that packing reads)."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

PAD = 0
VOCAB, EMBED, HIDDEN = 30, 12, 16


class Reviews(Dataset):
    def __init__(self, rng, count, shortest=3, longest=11):
        self.texts, self.labels = [], []
        for _ in range(count):
            tokens = rng.integers(1, VOCAB, rng.integers(shortest, longest + 1))
            good = int((tokens < VOCAB // 2).sum() > (tokens >= VOCAB // 2).sum())
            self.texts.append(tokens)
            self.labels.append(good)
        order = sorted(range(count), key=lambda i: len(self.texts[i]))   # bucketing
        self.texts = [self.texts[i] for i in order]
        self.labels = [self.labels[i] for i in order]

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        return torch.tensor(self.texts[i], dtype=torch.long), self.labels[i]


def collate(batch):
    texts, labels = zip(*batch)
    lengths = [len(t) for t in texts]
    return pad_sequence(texts, batch_first=True, padding_value=PAD), lengths, \
        torch.tensor(labels)


class SentimentLSTM(nn.Module):
    def __init__(self, vocab, embed, hidden, classes=2):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed, padding_idx=PAD)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True, bidirectional=True)
        self.attention = nn.Linear(2 * hidden, 1)
        self.fc = nn.Linear(4 * hidden, classes)

    def forward(self, tokens, lengths):
        embedded = self.embedding(tokens)
        packed = pack_padded_sequence(embedded, lengths, batch_first=True,
                                      enforce_sorted=False)
        packed_out, (hidden, _) = self.lstm(packed)
        outputs, _ = pad_packed_sequence(packed_out, batch_first=True)
        mask = tokens[:, :outputs.size(1)] != PAD
        scores = self.attention(outputs).squeeze(-1).masked_fill(~mask, float("-inf"))
        weights = F.softmax(scores, dim=1)
        pooled = (weights.unsqueeze(-1) * outputs).sum(dim=1)
        last = torch.cat([hidden[-2], hidden[-1]], dim=1)   # forward and backward final
        return self.fc(torch.cat([pooled, last], dim=1))


def init_weights(model, rng):
    """The same starting weights in every framework: drawn with NumPy, loaded by name (the
    padding row of the embedding zero, as torch initialises it)."""
    state = {}
    for name, v in model.state_dict().items():
        draw = rng.uniform(-0.3, 0.3, tuple(v.shape)).astype(np.float32)
        if name == "embedding.weight":
            draw[PAD] = 0.0
        state[name] = torch.tensor(draw)
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch_size=4, batches=3):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = SentimentLSTM(VOCAB, EMBED, HIDDEN)
    init_weights(model, rng)
    loader = DataLoader(Reviews(rng, batch_size * batches), batch_size=batch_size,
                        collate_fn=collate)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def train_step(tokens, lengths, labels):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(tokens, lengths), labels)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, correct = [], []
    while len(losses) < steps:
        model.train()
        for tokens, lengths, labels in loader:
            if len(losses) == steps:
                break
            losses.append(train_step(tokens, lengths, labels).item())
        model.eval()
        with torch.no_grad():
            hits = sum((model(t, n).argmax(1) == y).sum().item() for t, n, y in loader)
        correct.append(hits)
    return {"losses": losses, "correct": correct}
