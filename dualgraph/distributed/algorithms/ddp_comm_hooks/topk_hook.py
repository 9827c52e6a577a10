"""Top-k sparsification with error feedback: each rank sends only the ``ratio`` largest
entries (by magnitude) of its bucket, as (index, value) pairs gathered from every rank, and
keeps what it did not send in a residual that is added to its next gradient, so that no
gradient is lost, only delayed (Stich et al., "Sparsified SGD with memory", 2018).

The compression is written once, with dualgraph ops (:func:`select` before the gathers,
:func:`densify` after): the eager hook runs them around non-blocking gathers, and under
``dg.compile`` they are the hook's graph form (:func:`sparsify`), traced around the bucket's
``all_gather`` nodes when the step is captured, the residual a tensor the graph reads and
writes back.

>>> ddp.register_comm_hook(TopKState(ratio=0.01), topk_hook)
"""
from __future__ import annotations

import numpy as np

from .... import dtypes
from ....ops import collective
from ....ops.creation import zeros_like
from ....ops.index import argsort, index_put
from ....tensor import Tensor
from ... import collectives as dist
from ...groups import resolve
from .default_hooks import group_of


class TopKState:
    """``ratio``: the fraction of each bucket's entries a rank sends per step (at least
    one); ``residuals``: per bucket, what was not sent yet (a tensor); ``process_group``:
    the ranks that average (None: the DDP's)."""

    def __init__(self, ratio: float = 0.01, process_group=None):
        if not 0 < ratio <= 1:
            raise ValueError(f"TopKState(ratio={ratio}): the ratio must be in (0, 1]")
        self.ratio, self.process_group = ratio, process_group
        self.residuals: dict[int, Tensor] = {}

    def residual(self, bucket) -> Tensor:
        """The bucket's residual, zeros the first time (made outside any trace: a tensor
        the compiled step reads and updates in place, as it would an optimiser's state)."""
        index = bucket.index()
        if index not in self.residuals:
            b = bucket.buffer()
            self.residuals[index] = Tensor._make(np.zeros(tuple(b.shape), dtypes.to_np(b.dtype)))
        return self.residuals[index]


def select(state: TopKState, bucket) -> tuple:
    """(indices, values) of this rank's top ``state.ratio`` entries of its gradient plus
    residual; the residual keeps the rest. Dualgraph ops only, as :func:`densify`: they run
    eagerly and trace into a step's graph alike."""
    residual = state.residual(bucket)
    corrected = bucket.buffer() + residual
    k = max(1, int(state.ratio * corrected.numel()))
    index = argsort(corrected.abs(), descending=True)[:k]
    values = corrected[index]
    residual.copy_(index_put(corrected, (index,), zeros_like(values)))
    return index, values


def densify(bucket, all_index: Tensor, all_values: Tensor) -> Tensor:
    """The dense average of what every rank sent (``[world size, k]`` indices and values)."""
    buffer = bucket.buffer()
    return index_put(zeros_like(buffer), (all_index.reshape(-1),),
                     all_values.reshape(-1) / all_values.shape[0], accumulate=True)


def sparsify(state: TopKState, bucket) -> Tensor:
    """The hook's graph form: :func:`select`, an ``all_gather`` each of the indices and the
    values, :func:`densify`."""
    index, values = select(state, bucket)
    group = resolve(group_of(state.process_group, bucket))
    return densify(bucket, collective.all_gather(index, group),
                   collective.all_gather(values, group))


def topk_hook(state: TopKState, bucket) -> dist.Future:
    """Send the top ``state.ratio`` of the bucket (plus its residual), average what all
    ranks sent into a dense bucket: the gathers start now, the future densifies."""
    index, values = select(state, bucket)
    group = group_of(state.process_group, bucket)
    size = dist.get_world_size(group)
    all_index = Tensor._make(np.empty((size,) + tuple(index.shape), np.int64))
    all_values = Tensor._make(np.empty((size,) + tuple(values.shape),
                                       dtypes.to_np(values.dtype)))
    works = [dist.all_gather_into_tensor(out, x, group=group, async_op=True)
             for out, x in ((all_index, index), (all_values, values))]

    def finish():
        for work in works:
            work.wait()
        return densify(bucket, all_index, all_values)
    return dist.Future(finish)


topk_hook.graph_form = sparsify   # under dg.compile: the same ops, traced into the step
