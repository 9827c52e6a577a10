"""A GRU language model trained with teacher forcing and decoded by batched beam search, as
seq2seq codebases write it: ``nn.GRU`` over embedded prefixes, the beams kept flattened
as ``batch * beam`` rows; each step's ``log_softmax`` scores added to the beams' running
scores, flattened to ``(batch, beam * vocab)`` and cut by ``topk``, the source beam and the
token recovered with ``torch.div(idx, vocab, rounding_mode="floor")`` and ``idx % vocab``,
the hidden state reordered by ``index_select`` on ``beam_origin + batch offsets``,
finished beams (those that emitted EOS) frozen by ``masked_fill`` of every continuation but
EOS with ``-inf`` (``float("-inf")``), the history grown with ``torch.cat`` after
``history[origin]`` reordering, length-normalised final scores (``scores / lengths ** alpha``)
and the best beam picked with ``argmax`` and ``gather``. Training uses ``pack``-free padded
batches with ``ignore_index`` and a ``StepLR``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

BOS, EOS, PAD, VOCAB = 1, 2, 0, 9


class GRULM(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim, padding_idx=PAD)
        self.gru = nn.GRU(dim, dim, batch_first=True)
        self.out = nn.Linear(dim, VOCAB)

    def forward(self, tokens, h=None):
        y, h = self.gru(self.embed(tokens), h)
        return self.out(y), h


def sequences(rng, n, max_len=7):
    """BOS, an arithmetic run of tokens 3..8, EOS, padding."""
    out = np.full((n, max_len + 2), PAD, dtype=np.int64)
    for i in range(n):
        length = rng.integers(2, max_len + 1)
        start = rng.integers(3, 9)
        out[i, 0] = BOS
        out[i, 1:length + 1] = 3 + (start - 3 + np.arange(length)) % 6
        out[i, length + 1] = EOS
    return torch.from_numpy(out)


def beam_search(model, prefix, beam=3, steps=6, alpha=0.7):
    B = prefix.shape[0]
    logits, h = model(prefix)
    logp = logits[:, -1].log_softmax(-1)
    scores, tokens = logp.topk(beam, dim=-1)                           # (B, beam)
    h = h.repeat_interleave(beam, dim=1)                               # (1, B * beam, d)
    history = tokens.reshape(B * beam, 1)
    finished = tokens.reshape(-1) == EOS
    lengths = torch.ones(B * beam)
    offsets = (torch.arange(B) * beam).unsqueeze(1)
    for _ in range(steps - 1):
        logits, h = model(history[:, -1:], h)
        logp = logits[:, -1].log_softmax(-1)
        frozen = torch.full_like(logp, float("-inf"))
        frozen[:, EOS] = 0.0
        logp = torch.where(finished.unsqueeze(1), frozen, logp)
        total = (scores.reshape(-1, 1) + logp).reshape(B, beam * VOCAB)
        scores, idx = total.topk(beam, dim=-1)
        origin = torch.div(idx, VOCAB, rounding_mode="floor")
        token = idx % VOCAB
        rows = (origin + offsets).reshape(-1)
        h = h.index_select(1, rows)
        lengths = lengths[rows] + (~finished[rows]).float()
        history = torch.cat([history[rows], token.reshape(-1, 1)], dim=1)
        finished = finished[rows] | (token.reshape(-1) == EOS)
    final = scores / lengths.reshape(B, beam) ** alpha
    best = final.argmax(-1, keepdim=True)
    chosen = history.reshape(B, beam, -1).gather(
        1, best.unsqueeze(-1).expand(B, 1, history.shape[1])).squeeze(1)
    return chosen, final.gather(1, best).squeeze(1)


def init_weights(model, rng):
    for name, p in model.named_parameters():
        p.data.copy_(torch.from_numpy(rng.normal(0, 1 / np.sqrt(p.shape[-1]), tuple(p.shape))
                                      .astype(np.float32)))
    with torch.no_grad():
        model.embed.weight[PAD].zero_()


def main(steps=10, compile=False, seed=0, batch=12):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = GRULM()
    init_weights(model, rng)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100, gamma=0.5)
    data = [sequences(rng, batch) for _ in range(steps)]
    net = model

    def step(seqs):
        optimizer.zero_grad()
        logits, _ = net(seqs[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), seqs[:, 1:].reshape(-1),
                               ignore_index=PAD)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses = []
    for seqs in data:
        losses.append(step(seqs).item())
        scheduler.step()
    model.eval()
    prefix = sequences(rng, 4)[:, :3]
    with torch.no_grad():
        chosen, score = beam_search(net, prefix)
    return {"losses": losses, "decoded": chosen.flatten().tolist(), "scores": score.tolist()}
