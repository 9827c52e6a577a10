"""Top-k sparsification with error feedback: each rank sends only the ``ratio`` largest
entries (by magnitude) of its bucket, as (index, value) pairs gathered from every rank, and
keeps what it did not send in a residual that is added to its next gradient, so that no
gradient is lost, only delayed (Stich et al., "Sparsified SGD with memory", 2018).

>>> ddp.register_comm_hook(TopKState(ratio=0.01), topk_hook)
"""
from __future__ import annotations

import numpy as np

from ... import collectives as dist
from ....tensor import Tensor


class TopKState:
    """``ratio``: the fraction of each bucket's entries a rank sends per step (at least
    one); ``residuals``: per bucket, what was not sent yet."""

    def __init__(self, ratio: float = 0.01):
        if not 0 < ratio <= 1:
            raise ValueError(f"TopKState(ratio={ratio}): the ratio must be in (0, 1]")
        self.ratio = ratio
        self.residuals: dict[int, np.ndarray] = {}


def topk_hook(state: TopKState, bucket) -> dist.Future:
    """Send the top ``state.ratio`` of the bucket (plus its residual), average what all
    ranks sent into a dense bucket."""
    buffer = bucket.buffer()
    flat = buffer.numpy()
    corrected = flat + state.residuals.get(bucket.index(), 0)
    k = max(1, int(state.ratio * corrected.size))
    index = np.argpartition(np.abs(corrected), corrected.size - k)[-k:].astype(np.int64)
    values = corrected[index]
    corrected[index] = 0
    state.residuals[bucket.index()] = corrected
    size = dist.get_world_size()
    all_index = Tensor._make(np.empty(size * k, np.int64))
    all_values = Tensor._make(np.empty(size * k, flat.dtype))
    works = [dist.all_gather_into_tensor(all_index, Tensor._make(index), async_op=True),
             dist.all_gather_into_tensor(all_values, Tensor._make(values), async_op=True)]

    def densify():
        for work in works:
            work.wait()
        flat[...] = 0
        np.add.at(flat, all_index.numpy(), all_values.numpy() / size)
        return buffer
    return dist.Future(densify)
