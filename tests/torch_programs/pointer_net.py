"""A pointer network that learns to sort short sequences of numbers, with beam-search
decoding, written the way PyTorch pointer-network and seq2seq tutorials are: an
``nn.LSTM(batch_first=True)`` encoder, an ``nn.LSTMCell`` decoder fed the embedding of the
element it pointed at last (``torch.gather`` with an index ``expand``-ed over the hidden
size), additive attention ``self.v(torch.tanh(self.W1(enc) + self.W2(dec).unsqueeze(1)))
.squeeze(-1)`` whose scores over already chosen positions are ``masked_fill``-ed with
``float("-inf")`` (the mask updated with ``mask.scatter(1, idx, True)``), teacher forcing
with ``F.log_softmax`` and ``nll_loss``, ``clip_grad_norm_``; and at test time beam search
under ``torch.no_grad()``: scores of the beams ``view(-1)`` and ``topk`` over beam x
position, the beam of each with ``torch.div(top, n, rounding_mode="floor")`` and the
position with ``%``, states reordered with ``index_select``, back-pointers followed at the
end; plus greedy decoding with ``argmax`` compared to it."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class PointerNet(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.hidden = hidden
        self.embed = nn.Linear(1, hidden)
        self.encoder = nn.LSTM(hidden, hidden, batch_first=True)
        self.decoder = nn.LSTMCell(hidden, hidden)
        self.W1 = nn.Linear(hidden, hidden, bias=False)
        self.W2 = nn.Linear(hidden, hidden, bias=False)
        self.v = nn.Linear(hidden, 1, bias=False)
        self.start = nn.Parameter(torch.zeros(hidden))

    def encode(self, x):
        emb = self.embed(x.unsqueeze(-1))
        enc, (h, c) = self.encoder(emb)
        return emb, enc, (h.squeeze(0), c.squeeze(0))

    def scores(self, enc, h, mask):
        u = self.v(torch.tanh(self.W1(enc) + self.W2(h).unsqueeze(1))).squeeze(-1)
        return u.masked_fill(mask, float("-inf"))

    def forward(self, x, targets):
        """Teacher-forced log-probabilities of pointing at ``targets`` (B, n)."""
        B, n = x.shape
        emb, enc, (h, c) = self.encode(x)
        inp = self.start.unsqueeze(0).expand(B, -1)
        mask = torch.zeros(B, n, dtype=torch.bool)
        log_probs = []
        for t in range(n):
            h, c = self.decoder(inp, (h, c))
            log_probs.append(F.log_softmax(self.scores(enc, h, mask), dim=-1))
            idx = targets[:, t:t + 1]
            mask = mask.scatter(1, idx, True)
            inp = torch.gather(emb, 1, idx.unsqueeze(-1).expand(-1, -1, self.hidden)).squeeze(1)
        return torch.stack(log_probs, dim=1)


@torch.no_grad()
def greedy(model, x):
    B, n = x.shape
    emb, enc, (h, c) = model.encode(x)
    inp = model.start.unsqueeze(0).expand(B, -1)
    mask = torch.zeros(B, n, dtype=torch.bool)
    out = []
    for _ in range(n):
        h, c = model.decoder(inp, (h, c))
        idx = model.scores(enc, h, mask).argmax(dim=-1, keepdim=True)
        out.append(idx)
        mask = mask.scatter(1, idx, True)
        inp = torch.gather(emb, 1, idx.unsqueeze(-1).expand(-1, -1, model.hidden)).squeeze(1)
    return torch.cat(out, dim=1)


@torch.no_grad()
def beam_search(model, x, beam=3):
    """One sequence (1, n): keep the ``beam`` best partial permutations."""
    n = x.shape[1]
    emb, enc, (h, c) = model.encode(x)
    inp = model.start.unsqueeze(0)
    mask = torch.zeros(1, n, dtype=torch.bool)
    beam_scores = torch.zeros(1)
    history, parents = [], []
    for t in range(n):
        h, c = model.decoder(inp, (h, c))
        k = enc.shape[0]
        log_p = F.log_softmax(model.scores(enc.expand(k, -1, -1), h, mask), dim=-1)
        total = (beam_scores.unsqueeze(1) + log_p).view(-1)
        width = min(beam, int(torch.isfinite(total).sum()))
        beam_scores, top = total.topk(width)
        parent = torch.div(top, n, rounding_mode="floor")
        pos = top % n
        h, c = h.index_select(0, parent), c.index_select(0, parent)
        mask = mask.index_select(0, parent).scatter(1, pos.unsqueeze(1), True)
        inp = emb[0].index_select(0, pos)
        enc = enc[:1].expand(width, -1, -1)
        history.append(pos)
        parents.append(parent)
    best = [int(beam_scores.argmax())]
    for t in range(n - 1, 0, -1):
        best.append(int(parents[t][best[-1]]))
    seq = [int(history[t][b]) for t, b in zip(range(n), reversed(best))]
    return seq, beam_scores.tolist()


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor(rng.normal(0, 0.35, tuple(v.shape)).astype(np.float32))
        for k, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch=8, n=5):
    model = PointerNet()
    init_weights(model, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(seed + 1)

    def train_step(x, targets):
        log_probs = model(x, targets)
        loss = F.nll_loss(log_probs.reshape(-1, log_probs.size(-1)), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=2.0)
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses = []
    for _ in range(steps):
        x = torch.tensor(rng.uniform(size=(batch, n)).astype(np.float32))
        losses.append(train_step(x, torch.argsort(x, dim=1)).item())
    x = torch.tensor(rng.uniform(size=(1, n)).astype(np.float32))
    net = getattr(model, "_orig_mod", model)
    seq, scores = beam_search(net, x)
    return {"losses": losses, "beam": seq, "beam_scores": scores,
            "greedy": greedy(net, x)[0].tolist()}
