"""A transducer (RNN-T) trained with its loss written out, as tutorials and reference
implementations write it before reaching for a fused kernel: an encoder (``nn.GRU``,
``batch_first``) over acoustic frames, a prediction network over the blank-prefixed labels
(``F.pad(labels, (1, 0), value=blank)`` into an ``nn.Embedding`` and an ``nn.LSTM``), the
joint ``tanh(enc.unsqueeze(2) + pred.unsqueeze(1))`` into ``log_softmax`` over the
vocabulary; the forward variables by a Python double loop over frames and labels with
``torch.logaddexp`` (the first row and column by ``cumsum`` of the blank and label
log-probabilities gathered with ``torch.gather``), stacked to ``(B, T, U + 1)``, and each
utterance's log-likelihood read at its own lengths by advanced indexing
``alpha[torch.arange(B), T_len - 1, U_len]``; the per-utterance losses divided by the
target lengths and averaged; greedy decoding (one symbol per frame) under ``no_grad``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

BLANK = 0


class Transducer(nn.Module):
    def __init__(self, n_feats=5, vocab=5, hidden=12):
        super().__init__()
        self.encoder = nn.GRU(n_feats, hidden, batch_first=True)
        self.embed = nn.Embedding(vocab, hidden)
        self.predictor = nn.LSTM(hidden, hidden, batch_first=True)
        self.joint = nn.Linear(hidden, vocab)

    def forward(self, feats, labels):
        enc, _ = self.encoder(feats)
        pred_in = F.pad(labels, (1, 0), value=BLANK)
        pred, _ = self.predictor(self.embed(pred_in))
        joint = torch.tanh(enc.unsqueeze(2) + pred.unsqueeze(1))
        return self.joint(joint).log_softmax(dim=-1)


def transducer_loss(log_probs, labels, T_len, U_len):
    """-log P(labels | frames) per utterance, by the forward variables alpha[t][u]."""
    B, T, U1, _ = log_probs.shape
    blank = log_probs[..., BLANK]                                       # (B, T, U + 1)
    idx = labels.unsqueeze(1).expand(B, T, U1 - 1).unsqueeze(-1)
    emit = torch.gather(log_probs[:, :, :-1, :], 3, idx).squeeze(-1)    # (B, T, U)
    first_row = torch.cat([torch.zeros(B, 1), torch.cumsum(emit[:, 0], dim=1)], dim=1)
    first_col = torch.cat([torch.zeros(B, 1), torch.cumsum(blank[:, :-1, 0], dim=1)], dim=1)
    alpha = [[first_row[:, u] for u in range(U1)]]
    for t in range(1, T):
        row = [first_col[:, t]]
        for u in range(1, U1):
            row.append(torch.logaddexp(alpha[t - 1][u] + blank[:, t - 1, u],
                                       row[u - 1] + emit[:, t, u - 1]))
        alpha.append(row)
    alpha = torch.stack([torch.stack(row, dim=1) for row in alpha], dim=1)   # (B, T, U + 1)
    b = torch.arange(B)
    return -(alpha[b, T_len - 1, U_len] + blank[b, T_len - 1, U_len])


def utterances(rng, n, T=7, U=3, n_feats=5, vocab=5):
    """Frames whose features announce the label they carry; lengths vary, padded."""
    T_len = rng.integers(U + 2, T + 1, n)
    U_len = rng.integers(1, U + 1, n)
    labels = np.zeros((n, U), dtype=np.int64)
    feats = rng.normal(0, 0.3, (n, T, n_feats)).astype(np.float32)
    for i in range(n):
        labels[i, :U_len[i]] = rng.integers(1, vocab, U_len[i])
        for j, y in enumerate(labels[i, :U_len[i]]):
            feats[i, 1 + 2 * j, y] += 1.5
        feats[i, T_len[i]:] = 0
    t = torch.from_numpy
    return t(feats), t(labels), t(T_len), t(U_len)


def init_weights(model, rng):
    for name, p in model.named_parameters():
        scale = 1 / np.sqrt(p.shape[-1]) if p.dim() > 1 else 0.1
        p.data.copy_(torch.from_numpy(rng.normal(0, scale, tuple(p.shape)).astype(np.float32)))


def main(steps=10, compile=False, seed=0, batch=6):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = Transducer()
    init_weights(model, rng)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = [utterances(rng, batch) for _ in range(steps)]
    net = model

    def step(feats, labels, T_len, U_len):
        optimizer.zero_grad()
        log_probs = net(feats, labels)
        nll = transducer_loss(log_probs, labels, T_len, U_len)
        loss = (nll / U_len).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        return loss, nll

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, nlls = [], []
    for feats, labels, T_len, U_len in data:
        loss, nll = step(feats, labels, T_len, U_len)
        losses.append(loss.item())
        nlls += nll.tolist()
    feats, labels, T_len, U_len = utterances(rng, 3)
    decoded = []
    with torch.no_grad():
        enc, _ = model.encoder(feats)
        for i in range(3):
            hyp, state = [BLANK], None
            out, state = model.predictor(model.embed(torch.tensor([[BLANK]])), state)
            for t in range(int(T_len[i])):
                k = int(model.joint(torch.tanh(enc[i, t] + out[0, -1])).argmax())
                if k != BLANK:
                    hyp.append(k)
                    out, state = model.predictor(model.embed(torch.tensor([[k]])), state)
            decoded += hyp[1:] + [-1]
    return {"losses": losses, "nll": nlls, "decoded": decoded}
