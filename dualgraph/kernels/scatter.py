"""Scatter-add of rows: the gradient of picking rows by index (embeddings, class-index
losses), which NumPy's ``np.add.at`` does one element at a time through a slow path."""
from __future__ import annotations

from . import loop


@loop
def add_rows(out, rows, values):
    """``out[rows[i]] += values[i]`` for each i in order (rows may repeat: they sum)."""
    for i in range(rows.size):
        target, source = out[rows[i]], values[i]
        for j in range(target.size):
            target[j] += source[j]


@loop
def add_shifted_runs(runs, starts, length, out):
    """``out[n, c, starts[p]:starts[p] + length] += runs[c, p, n, :length]`` for every
    position p, with ``out`` zeroed first: a stride-1 convolution's input gradient summed
    from its columns (``ops/conv.py``), each output plane finished while it is in L1,
    where NumPy's strided adds pass over all of them once per kernel position."""
    channels, positions, batch = runs.shape[0], runs.shape[1], runs.shape[2]
    for n in range(batch):
        for c in range(channels):
            plane = out[n, c]
            for i in range(plane.size):
                plane[i] = 0
            for p in range(positions):   # (slices: no negative-index check in the loop)
                source, target = runs[c, p, n], plane[starts[p]:starts[p] + length]
                for i in range(length):
                    target[i] += source[i]
