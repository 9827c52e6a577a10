"""A BiLSTM-CRF sequence tagger, written the way the PyTorch advanced tutorial and the
NER code descended from it are: an ``nn.Embedding`` and a bidirectional ``nn.LSTM``
(``batch_first=True``) over padded batches, a ``transitions`` parameter whose start/stop
rows are forbidden in place under ``torch.no_grad()`` (``transitions.data[START, :] =
-10000``), the forward algorithm batched over time with ``torch.logsumexp`` and the mask
blending ``torch.where(mask[:, t, None], next, alpha)``, the gold path score from
``gather`` over emissions and transition indexing, Viterbi decoding with
``max(dim=1)`` back-pointers and a Python back-trace that reads ``.item()``, and in-place
heavy bookkeeping (``scores.clamp_``, ``masked_fill_``, ``add_``, slice assignment into
a preallocated ``torch.full`` buffer); trained with Adam and ``ReduceLROnPlateau``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn

N_TAGS, START, STOP, PAD = 5, 5, 6, 0


class BiLSTMCRF(nn.Module):
    def __init__(self, vocab=30, emb=12, hidden=8):
        super().__init__()
        self.n = N_TAGS + 2
        self.embed = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.lstm = nn.LSTM(emb, hidden, batch_first=True, bidirectional=True)
        self.hidden2tag = nn.Linear(2 * hidden, self.n)
        self.transitions = nn.Parameter(torch.zeros(self.n, self.n))   # [to, from]

    def forbid(self):
        with torch.no_grad():
            self.transitions.data[START, :] = -10000.0
            self.transitions.data[:, STOP] = -10000.0

    def emissions(self, words):
        out, _ = self.lstm(self.embed(words))
        return self.hidden2tag(out)

    def log_partition(self, feats, mask):
        B, T, n = feats.shape
        alpha = torch.full((B, n), -10000.0)
        alpha[:, START] = 0.0
        for t in range(T):
            nxt = torch.logsumexp(alpha[:, None, :] + self.transitions[None], dim=2) + feats[:, t]
            alpha = torch.where(mask[:, t, None], nxt, alpha)
        return torch.logsumexp(alpha + self.transitions[STOP][None], dim=1)

    def gold_score(self, feats, tags, mask):
        B, T, _ = feats.shape
        emit = feats.gather(2, tags.unsqueeze(2)).squeeze(2)
        start = torch.full((B, 1), START, dtype=torch.long)
        prev = torch.cat([start, tags[:, :-1]], dim=1)
        trans = self.transitions[tags, prev]
        score = ((emit + trans) * mask.float()).sum(1)
        last = tags.gather(1, (mask.sum(1) - 1).unsqueeze(1)).squeeze(1)
        return score + self.transitions[STOP, last]

    def forward(self, words, tags, mask):
        feats = self.emissions(words)
        return (self.log_partition(feats, mask) - self.gold_score(feats, tags, mask)).mean()

    @torch.no_grad()
    def viterbi(self, words, mask):
        feats = self.emissions(words)
        B, T, n = feats.shape
        score = torch.full((B, n), -10000.0)
        score[:, START] = 0.0
        history = torch.zeros(B, T, n, dtype=torch.long)
        for t in range(T):
            best, idx = (score[:, None, :] + self.transitions[None]).max(dim=2)
            best.add_(feats[:, t]).clamp_(min=-10000.0)
            history[:, t] = idx
            score = torch.where(mask[:, t, None], best, score)
        score.add_(self.transitions[STOP][None])
        score[:, [START, STOP]] = -10000.0
        paths = torch.full((B, T), PAD, dtype=torch.long)
        for b in range(B):
            length = int(mask[b].sum().item())
            tag = score[b].argmax().item()
            for t in range(length - 1, -1, -1):
                paths[b, t] = tag
                tag = history[b, t, tag].item()
        return paths.masked_fill_(~mask, -1)


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor((rng.standard_normal(tuple(v.shape)) * 0.3).astype(np.float32))
        for k, v in model.state_dict().items()})


def batches(rng, steps, batch=4, max_len=7):
    out = []
    for _ in range(steps):
        lengths = rng.integers(3, max_len + 1, batch)
        words = np.zeros((batch, max_len), np.int64)
        tags = np.zeros((batch, max_len), np.int64)
        for b, n in enumerate(lengths):
            words[b, :n] = rng.integers(1, 30, n)
            tags[b, :n] = words[b, :n] % N_TAGS
        mask = np.arange(max_len)[None] < lengths[:, None]
        out.append((torch.tensor(words), torch.tensor(tags), torch.tensor(mask)))
    return out


def main(steps=6, compile=False, seed=0):
    model = BiLSTMCRF()
    init_weights(model, seed)
    model.forbid()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
    data = batches(np.random.default_rng(seed + 1), steps)

    def train_step(words, tags, mask):
        loss = model(words, tags, mask)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, lrs = [], []
    for s, (words, tags, mask) in enumerate(data):
        loss = train_step(words, tags, mask)
        losses.append(loss.item())
        scheduler.step(loss.item())
        lrs.append(optimizer.param_groups[0]["lr"])
    words, _, mask = data[0]
    paths = model.viterbi(words, mask)
    return {"losses": losses, "lrs": lrs, "paths": paths.flatten().tolist(),
            "transitions": model.transitions.detach().flatten().tolist()}
