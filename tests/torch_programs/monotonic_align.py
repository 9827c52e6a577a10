"""A VITS/Glow-TTS-style aligner and duration model, written the way those repositories
are: ``sequence_mask(lengths, max_length)`` by ``torch.arange`` against
``lengths.unsqueeze(1)``, a text encoder of masked ``Conv1d`` layers, a Gaussian prior
(``m_p``, ``logs_p``) and the log-likelihood of each (text, frame) pair computed as
four ``torch.matmul`` terms; monotonic alignment search under ``torch.no_grad()`` written
in tensors (a max-plus recursion over frames with ``torch.maximum``, ``F.pad`` shifts and
``masked_fill`` of the impossible cells, then a backtrack that ``scatter_``s the path and
moves the index by ``gather`` comparisons); the durations ``attn.sum(2)``, a duration
predictor trained on ``torch.log(w + 1e-6) * x_mask``, and at inference ``generate_path``
from ``torch.ceil(torch.exp(logw))`` by ``torch.cumsum``, ``sequence_mask`` of the
cumulative durations and ``path - F.pad(path, [0, 0, 1, 0])[:, :-1]``; masked ``sum``
losses divided by mask sums; ``Adam`` with ``eps=1e-9``."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def sequence_mask(length, max_length=None):
    if max_length is None:
        max_length = length.max()
    x = torch.arange(max_length, dtype=length.dtype, device=length.device)
    return x.unsqueeze(0) < length.unsqueeze(1)


@torch.no_grad()
def maximum_path(neg_cent, mask):
    """The monotonic path through neg_cent (b, t_y, t_x) that maximises its sum."""
    b, t_y, t_x = neg_cent.shape
    neg_cent = neg_cent.masked_fill(~mask, -1e9)
    value = neg_cent.new_full((b, t_x), -1e9)
    value[:, 0] = neg_cent[:, 0, 0]
    values = [value]
    for y in range(1, t_y):
        shifted = F.pad(value[:, :-1], (1, 0), value=-1e9)
        value = torch.maximum(value, shifted) + neg_cent[:, y]
        values.append(value)
    values = torch.stack(values, 1)
    x_len = mask[:, 0, :].sum(1).long()
    y_len = mask[:, :, 0].sum(1).long()
    index = x_len - 1
    path = torch.zeros_like(neg_cent)
    for y in range(t_y - 1, -1, -1):
        inside = (y < y_len).unsqueeze(1)
        path[:, y].scatter_(1, index.unsqueeze(1), inside.float())
        if y == 0:
            break
        prev = values[:, y - 1]
        stay = prev.gather(1, index.unsqueeze(1)).squeeze(1)
        diag = prev.gather(1, (index - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        move = (index > 0) & ((index == y) | (diag > stay)) & (y < y_len)
        index = index - move.long()
    return path * mask


def generate_path(duration, mask):
    """duration (b, 1, t_x), mask (b, 1, t_y, t_x) -> the hard alignment."""
    b, _, t_y, t_x = mask.shape
    cum_duration = torch.cumsum(duration, -1)
    cum_duration_flat = cum_duration.view(b * t_x)
    path = sequence_mask(cum_duration_flat, t_y).to(mask.dtype)
    path = path.view(b, t_x, t_y)
    path = path - F.pad(path, [0, 0, 1, 0])[:, :-1]
    return path.unsqueeze(1).transpose(2, 3) * mask


class Aligner(nn.Module):
    def __init__(self, vocab=12, hidden=16, channels=6):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.convs = nn.ModuleList(nn.Conv1d(hidden, hidden, 3, padding=1) for _ in range(2))
        self.proj = nn.Conv1d(hidden, 2 * channels, 1)
        self.dp = nn.Sequential(nn.Conv1d(hidden, hidden, 3, padding=1), nn.ReLU(),
                                nn.Conv1d(hidden, 1, 1))
        self.channels = channels

    def encode(self, x, x_lengths):
        x = self.emb(x).transpose(1, 2) * math.sqrt(self.emb.embedding_dim)
        x_mask = sequence_mask(x_lengths, x.size(2)).unsqueeze(1).to(x.dtype)
        for conv in self.convs:
            x = torch.relu(conv(x * x_mask)) + x
        stats = self.proj(x) * x_mask
        m_p, logs_p = torch.split(stats, self.channels, dim=1)
        return x, m_p, logs_p, x_mask

    def forward(self, x, x_lengths, z, y_lengths):
        h, m_p, logs_p, x_mask = self.encode(x, x_lengths)
        y_mask = sequence_mask(y_lengths, z.size(2)).unsqueeze(1).to(z.dtype)
        attn_mask = torch.unsqueeze(x_mask, 2) * torch.unsqueeze(y_mask, -1)
        s_p_sq_r = torch.exp(-2 * logs_p)
        neg_cent1 = torch.sum(-0.5 * math.log(2 * math.pi) - logs_p, [1], keepdim=True)
        neg_cent2 = torch.matmul(-0.5 * (z ** 2).transpose(1, 2), s_p_sq_r)
        neg_cent3 = torch.matmul(z.transpose(1, 2), (m_p * s_p_sq_r))
        neg_cent4 = torch.sum(-0.5 * (m_p ** 2) * s_p_sq_r, [1], keepdim=True)
        neg_cent = neg_cent1 + neg_cent2 + neg_cent3 + neg_cent4
        attn = maximum_path(neg_cent, attn_mask.squeeze(1).bool()).unsqueeze(1).detach()
        w = attn.sum(2)
        logw_ = torch.log(w + 1e-6) * x_mask
        logw = self.dp(h.detach() * x_mask) * x_mask
        l_length = torch.sum((logw - logw_) ** 2, [1, 2]) / torch.sum(x_mask)
        m = torch.matmul(attn.squeeze(1), m_p.transpose(1, 2)).transpose(1, 2)
        logs = torch.matmul(attn.squeeze(1), logs_p.transpose(1, 2)).transpose(1, 2)
        nll = torch.sum((logs + 0.5 * (z - m) ** 2 * torch.exp(-2 * logs)) * y_mask)
        nll = nll / (torch.sum(y_mask) * self.channels)
        return nll + l_length.sum(), w.squeeze(1)

    @torch.no_grad()
    def infer(self, x, x_lengths, max_frames=16):
        h, m_p, _, x_mask = self.encode(x, x_lengths)
        logw = self.dp(h * x_mask) * x_mask
        w_ceil = torch.ceil(torch.exp(logw) * x_mask)
        y_lengths = torch.clamp_min(torch.sum(w_ceil, [1, 2]), 1).long()
        y_mask = sequence_mask(y_lengths, max_frames).unsqueeze(1).to(x_mask.dtype)
        attn_mask = torch.unsqueeze(x_mask, 2) * torch.unsqueeze(y_mask, -1)
        attn = generate_path(w_ceil, attn_mask)
        return torch.matmul(attn.squeeze(1), m_p.transpose(1, 2)).transpose(1, 2), y_lengths


def batch(rng, n=3, t_x=5, t_y=11):
    x_lengths = np.array([t_x, t_x - 1, t_x - 2])
    y_lengths = np.array([t_y, t_y - 2, t_y - 3])
    x = rng.integers(1, 12, (n, t_x)) * (np.arange(t_x)[None] < x_lengths[:, None])
    z = rng.normal(0, 1, (n, 6, t_y)).astype(np.float32)
    return (torch.from_numpy(x), torch.from_numpy(x_lengths), torch.from_numpy(z),
            torch.from_numpy(y_lengths))


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Aligner()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.Adam(model.parameters(), 1e-2, betas=(0.8, 0.99), eps=1e-9)
    net = torch.compile(model) if compile == "model" else model

    def step(x, x_lengths, z, y_lengths):
        optimizer.zero_grad()
        loss, durations = net(x, x_lengths, z, y_lengths)
        loss.backward()
        optimizer.step()
        return loss, durations

    if compile is True:
        step = torch.compile(step)
    losses, durations = [], []
    for _ in range(steps):
        loss, w = step(*batch(rng))
        losses.append(loss.item())
        durations.append(w.long().tolist())
    x, x_lengths, _, _ = batch(rng)
    means, y_lengths = model.infer(x, x_lengths)
    return {"losses": losses, "durations": durations, "means": means.flatten().tolist(),
            "frames": y_lengths.tolist()}
