"""A small speech recognizer trained with CTC as ASR tutorials write it: log-mel-like
features through a 2-D conv front end with stride 2 (``nn.Conv2d(1, c, 3, stride=2,
padding=1)``), the output lengths computed from the input lengths tensor by the conv
arithmetic (``torch.div(lengths + 2 * pad - k, stride, rounding_mode='floor') + 1``),
frames flattened by ``x.permute(0, 3, 1, 2).flatten(2)``, a bidirectional GRU, a
classifier, ``F.log_softmax(dim=2)`` transposed to (T, N, C) for ``F.ctc_loss`` with
``blank=0``, ``reduction='mean'`` and ``zero_infinity=True`` (one utterance in each batch
has more labels than frames: an infinite loss zeroed), padded targets with a lengths
tensor, Adam with ``clip_grad_norm_``, and greedy decoding (argmax, then collapsing repeats
and blanks in Python on ``tolist()``)."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class SpeechModel(nn.Module):
    def __init__(self, n_feats=6, channels=4, hidden=10, n_class=6):
        super().__init__()
        self.conv = nn.Conv2d(1, channels, 3, stride=2, padding=1)
        self.norm = nn.LayerNorm(channels * ((n_feats + 1) // 2))
        self.rnn = nn.GRU(channels * ((n_feats + 1) // 2), hidden, batch_first=True,
                          bidirectional=True)
        self.classifier = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.GELU(),
                                        nn.Dropout(0.0), nn.Linear(hidden, n_class))

    @staticmethod
    def output_lengths(lengths):
        return torch.div(lengths + 2 * 1 - 3, 2, rounding_mode="floor") + 1

    def forward(self, x, lengths):
        # x: (batch, 1, n_feats, time)
        x = F.gelu(self.conv(x))
        x = x.permute(0, 3, 1, 2).flatten(2)       # (batch, time, channels * feats)
        x = self.norm(x)
        x, _ = self.rnn(x)
        return self.classifier(x), self.output_lengths(lengths)


def make_batch(rng, n=3, n_feats=6, max_t=15):
    lengths = rng.integers(9, max_t + 1, n)
    lengths[0] = max_t
    x = np.zeros((n, 1, n_feats, max_t), np.float32)
    targets, target_lengths = np.zeros((n, 6), np.int64), []
    for b in range(n):
        x[b, 0, :, :lengths[b]] = rng.normal(0, 1, (n_feats, lengths[b]))
        k = rng.integers(2, 5)
        if b == n - 1:
            k = 6   # more labels than output frames at this length: an infinite loss
        targets[b, :k] = rng.integers(1, 6, k)
        target_lengths.append(k)
    lengths[-1] = 9
    return (torch.from_numpy(x), torch.from_numpy(lengths), torch.from_numpy(targets),
            torch.tensor(target_lengths))


def greedy_decode(log_probs, lengths):
    best = log_probs.argmax(dim=2)
    out = []
    for b, n in enumerate(lengths.tolist()):
        seq, prev = [], 0
        for t in best[b, :n].tolist():
            if t != prev and t != 0:
                seq.append(t)
            prev = t
        out.append(seq)
    return out


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = SpeechModel()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.normal(0, 0.3, p.shape).astype(np.float32)))
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    net = torch.compile(model) if compile == "model" else model

    def train_step(x, lengths, targets, target_lengths):
        logits, out_lengths = net(x, lengths)
        log_probs = F.log_softmax(logits, dim=2).transpose(0, 1)    # (T, N, C)
        loss = F.ctc_loss(log_probs, targets, out_lengths, target_lengths, blank=0,
                          reduction="mean", zero_infinity=True)
        optimizer.zero_grad()
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        return loss.detach(), norm

    if compile is True:
        train_step = torch.compile(train_step)
    log = []
    for _ in range(steps):
        loss, norm = train_step(*make_batch(rng))
        log.append([loss.item(), norm.item()])
    x, lengths, targets, target_lengths = make_batch(rng)
    with torch.no_grad():
        logits, out_lengths = net(x, lengths)
        log_probs = F.log_softmax(logits, dim=2)
        per_utt = F.ctc_loss(log_probs.transpose(0, 1), targets, out_lengths, target_lengths,
                             reduction="none", zero_infinity=True)
    decoded = greedy_decode(log_probs, out_lengths)
    return {"log": log, "per_utt": per_utt.tolist(), "out_lengths": out_lengths.tolist(),
            "decoded": [t for seq in decoded for t in seq] + [len(s) for s in decoded]}
