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

