"""A part-of-speech-style tagger and sentence classifier on variable-length sentences, as
NLP course notebooks write it: ``nn.utils.rnn.pad_sequence(batch_first=True,
padding_value=PAD)`` in a ``collate_fn`` returning lengths, ``nn.Embedding(padding_idx=)``,
a two-layer bidirectional ``nn.RNN(nonlinearity="relu")`` with an explicit zero ``h0``,
run on ``pack_padded_sequence(..., enforce_sorted=False)`` and unpacked by
``pad_packed_sequence(total_length=)``; per-token tags by ``F.cross_entropy`` with
``ignore_index=-100`` and ``label_smoothing=0.1`` on ``logits.transpose(1, 2)``; a sentence
label from the masked mean pooling ``(h * mask).sum(1) / mask.sum(1)`` and the final hidden
states of both directions (``h_n.view(layers, 2, B, H)[-1]``); ``clip_grad_norm_`` whose
returned norm is logged, and Adam with ``ReduceLROnPlateau(mode="max")`` on the accuracy."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

PAD, VOCAB, TAGS = 0, 15, 4


class Tagger(nn.Module):
    def __init__(self, dim=8, hidden=10, layers=2):
        super().__init__()
        self.layers, self.hidden = layers, hidden
        self.embed = nn.Embedding(VOCAB, dim, padding_idx=PAD)
        self.rnn = nn.RNN(dim, hidden, num_layers=layers, nonlinearity="relu",
                          bidirectional=True, batch_first=True)
        self.tag = nn.Linear(2 * hidden, TAGS)
        self.cls = nn.Linear(4 * hidden, 2)

    def forward(self, tokens, lengths):
        batch, total = tokens.shape
        h0 = torch.zeros(2 * self.layers, batch, self.hidden)
        packed = pack_padded_sequence(self.embed(tokens), lengths, batch_first=True,
                                      enforce_sorted=False)
        out, h_n = self.rnn(packed, h0)
        h, _ = pad_packed_sequence(out, batch_first=True, total_length=total)
        mask = (tokens != PAD).unsqueeze(-1).float()
        pooled = (h * mask).sum(1) / mask.sum(1)
        last = h_n.view(self.layers, 2, batch, self.hidden)[-1]
        sentence = torch.cat([pooled, last.transpose(0, 1).reshape(batch, -1)], dim=1)
        return self.tag(h), self.cls(sentence)


def sentences(rng, n=6):
    out = []
    for _ in range(n):
        length = int(rng.integers(2, 8))
        tokens = rng.integers(1, VOCAB, length)
        out.append((torch.from_numpy(tokens), torch.from_numpy(tokens % TAGS),
                    int(tokens.sum() % 2)))
    return out


def collate_fn(batch):
    tokens = pad_sequence([b[0] for b in batch], batch_first=True, padding_value=PAD)
    tags = pad_sequence([b[1] for b in batch], batch_first=True, padding_value=-100)
    lengths = torch.tensor([len(b[0]) for b in batch])
    return tokens, tags, lengths, torch.tensor([b[2] for b in batch])


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Tagger()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=0.5,
                                                           patience=0)
    net = torch.compile(model) if compile == "model" else model

    def step(tokens, tags, lengths, labels):
        optimizer.zero_grad()
        tag_logits, cls_logits = net(tokens, lengths)
        loss = F.cross_entropy(tag_logits.transpose(1, 2), tags, ignore_index=-100,
                               label_smoothing=0.1) + F.cross_entropy(cls_logits, labels)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        return loss, norm, tag_logits.argmax(-1)

    if compile is True:
        step = torch.compile(step)
    losses, norms, correct, lrs = [], [], [], []
    for _ in range(steps):
        tokens, tags, lengths, labels = collate_fn(sentences(rng))
        loss, norm, pred = step(tokens, tags, lengths, labels)
        losses.append(loss.item())
        norms.append(norm.item())
        hits = int(((pred == tags) & (tags != -100)).sum())
        correct.append(hits)
        scheduler.step(hits / int((tags != -100).sum()))
        lrs.append(optimizer.param_groups[0]["lr"])
    return {"losses": losses, "norms": norms, "correct": correct, "lrs": lrs}
