"""A Deep Sets / graph-readout style model over variable-size sets packed flat, as
PyTorch Geometric-free research code writes it: segment ids by ``torch.repeat_interleave``
of the set sizes, segment sums by ``index_add_`` into ``new_zeros``, segment maxima by
``scatter_reduce(..., "amax", include_self=False)`` and counts by ``scatter_add_``; the
sets cut apart again by ``torch.split`` with a list of sizes and padded by
``nn.utils.rnn.pad_sequence``; in-place edits of views (``h[:, 0] += ...``,
``torch.where`` written into a slice, ``masked_fill_`` through a broadcast mask);
``torch.unbind`` and ``narrow`` in the pooling head; a Siamese objective on pairs of sets by
``nn.CosineEmbeddingLoss``."""
import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pad_sequence


class SetEncoder(nn.Module):
    def __init__(self, dim=5, hidden=12):
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.rho = nn.Sequential(nn.Linear(3 * hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, 6))

    def forward(self, points, sizes):
        seg = torch.repeat_interleave(torch.arange(sizes.shape[0]), sizes)
        h = self.phi(points)
        h[:, 0] += 0.1 * seg.float()                     # a segment-position feature
        n = sizes.shape[0]
        total = h.new_zeros(n, h.shape[1]).index_add_(0, seg, h)
        count = h.new_zeros(n).scatter_add_(0, seg, torch.ones_like(seg, dtype=h.dtype))
        top = h.new_zeros(n, h.shape[1]).scatter_reduce(
            0, seg.unsqueeze(1).expand_as(h), h, reduce="amax", include_self=False)
        # attention-free second moment over the padded sets
        padded = pad_sequence(torch.split(h, sizes.tolist()), batch_first=True)
        valid = torch.arange(padded.shape[1]).unsqueeze(0) < sizes.unsqueeze(1)
        padded.masked_fill_(~valid.unsqueeze(-1), 0.0)
        spread = padded.pow(2).sum(1) / count.unsqueeze(1) - (total / count.unsqueeze(1)) ** 2
        pooled = torch.cat([total / count.unsqueeze(1), top, spread.clamp(min=0).sqrt()], 1)
        out = self.rho(pooled)
        a, b = out.narrow(1, 0, 3), out.narrow(1, 3, 3)
        out[:, :3] = torch.where(a > b, a, 0.5 * (a + b))
        return out


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = SetEncoder()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.4, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    criterion = nn.CosineEmbeddingLoss(margin=0.2)
    net = torch.compile(model) if compile == "model" else model

    def step(points, sizes, target):
        optimizer.zero_grad()
        emb = net(points, sizes)
        left, right = torch.unbind(emb.view(-1, 2, emb.shape[1]), dim=1)
        loss = criterion(left, right, target)
        loss.backward()
        optimizer.step()
        return loss, emb.detach().abs().sum()

    if compile is True:
        step = torch.compile(step)
    losses = []
    sizes = torch.tensor([3, 1, 4, 2, 2, 5])
    for i in range(steps):
        points = torch.from_numpy(rng.normal(0, 1, (int(sizes.sum()), 5)).astype(np.float32))
        target = torch.tensor([1.0, -1.0, 1.0 if i % 2 else -1.0])
        losses.append([v.item() for v in step(points, sizes, target)])
    return {"losses": losses}
