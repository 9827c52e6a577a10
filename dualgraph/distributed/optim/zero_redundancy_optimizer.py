"""``ZeroRedundancyOptimizer``, as torch's: the optimiser's state and update sharded over
the ranks (ZeRO stage 1).

Each parameter is owned by one rank (torch's partition: largest first, each to the rank
with the fewest elements so far). A rank keeps optimiser state only for the parameters it
owns and updates only those; then every owner broadcasts its parameters' new values, one
flat message per rank, all started before any is waited on. With data parallelism the
gradients are already averaged on every rank, so the result is the unsharded optimiser's,
while each rank holds 1/world of the state (Adam's two moments) and does 1/world of the
update's memory traffic.

>>> opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=dg.optim.Adam, lr=1e-3)
"""
from __future__ import annotations

import numpy as np

from ...autograd.tape import no_grad
from ...dispatch import modes
from ...ops import collective
from ...ops.shape import cat
from ...tensor import bump
from ..groups import resolve


class ZeroRedundancyOptimizer:
    """Wrap ``optimizer_class`` so that each rank updates only its shard of ``params``.

    ``params``: tensors or parameter groups, as any optimiser; ``defaults``: the wrapped
    optimiser's keyword arguments. ``param_groups`` are the local optimiser's (an LR
    scheduler changes them on every rank alike). Inside ``dg.compile`` the step is part of
    the graph: the shard's update, then one ``broadcast`` node per rank's shard. Not
    supported: ``overlap_with_ddp`` and ``parameters_as_bucket_view`` (accepted as False
    only), and ``consolidate_state_dict`` (each rank's ``state_dict()`` holds its own
    shard).
    """

    def __init__(self, params, optimizer_class, process_group=None,
                 parameters_as_bucket_view: bool = False, overlap_with_ddp: bool = False,
                 **defaults):
        if parameters_as_bucket_view or overlap_with_ddp:
            raise NotImplementedError("ZeroRedundancyOptimizer: parameters_as_bucket_view "
                                      "and overlap_with_ddp are not supported")
        self._group = resolve(process_group)   # (the ranks that share the state; the world)
        self._comm = collective.comm(self._group)
        groups = list(params)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self._params = [p for g in groups for p in g["params"]]
        self.owner = _partition(self._params, self._comm.size)
        mine = [dict(g, params=[p for p in g["params"] if self.owner[id(p)] == self._comm.rank])
                for g in groups]
        mine = [g for g in mine if g["params"]]
        self.optim = optimizer_class(mine, **defaults) if mine else None
        self._shards = [[p for p in self._params if self.owner[id(p)] == r]
                        for r in range(self._comm.size)]
        self._flat = [np.empty(sum(p.numel() for p in shard), _dtype(shard))
                      for shard in self._shards]

    @property
    def param_groups(self) -> list:
        return self.optim.param_groups if self.optim is not None else []

    @property
    def state(self):
        return self.optim.state if self.optim is not None else {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self._params:
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad._data[...] = 0

    def step(self, closure=None):
        """Update this rank's shard, then give every rank every shard's new values."""
        loss = self.optim.step(closure) if self.optim is not None else None
        if self._comm.size > 1:
            if modes.tracer is not None:
                self._sync_traced()
            else:
                self._sync()
        return loss

    def _sync(self) -> None:
        rank, started = self._comm.rank, []
        for owner, (shard, flat) in enumerate(zip(self._shards, self._flat)):
            if not shard:
                continue
            if owner == rank:
                _pack(shard, flat)
            started.append((owner, shard, flat,
                            self._comm.broadcast(flat, owner, inplace=True)))
        for owner, shard, flat, pending in started:
            pending.wait()
            if owner != rank:
                _unpack(flat, shard)

    def _sync_traced(self) -> None:
        """Inside ``dg.compile``: per shard a ``broadcast`` node from its owner of the
        shard's parameters concatenated, and the other ranks' parameters set from it (in
        place: the compiled step writes them back)."""
        with no_grad():
            for owner, shard in enumerate(self._shards):
                if not shard:
                    continue
                flat = collective.broadcast(cat([p.reshape(-1) for p in shard]), owner,
                                            self._group)
                if owner == self._comm.rank:
                    continue
                offset = 0
                for p in shard:
                    n = p.numel()
                    p.copy_(flat[offset:offset + n].reshape(tuple(p.shape)))
                    offset += n

    def state_dict(self) -> dict:
        """This rank's shard of the optimiser state (torch's needs consolidate first)."""
        return self.optim.state_dict() if self.optim is not None else {}

    def load_state_dict(self, state_dict: dict) -> None:
        if self.optim is not None:
            self.optim.load_state_dict(state_dict)


def _partition(params: list, size: int) -> dict:
    """id(parameter) -> the rank that owns it: largest first, each to the least loaded
    rank (ties to the lowest), as torch partitions."""
    load, owner = [0] * size, {}
    for p in sorted(params, key=lambda p: -p.numel()):
        r = load.index(min(load))
        owner[id(p)] = r
        load[r] += p.numel()
    return owner


def _dtype(shard: list):
    dtypes = {p._data.dtype for p in shard}
    if len(dtypes) > 1:
        raise TypeError(f"ZeroRedundancyOptimizer: parameters of several dtypes {dtypes}; "
                        "give one dtype")
    return dtypes.pop() if dtypes else np.float32


def _pack(shard: list, flat: np.ndarray) -> None:
    offset = 0
    for p in shard:
        n = p.numel()
        flat[offset:offset + n] = p._data.reshape(-1)
        offset += n


def _unpack(flat: np.ndarray, shard: list) -> None:
    offset = 0
    for p in shard:
        n = p.numel()
        p._data[...] = flat[offset:offset + n].reshape(p._data.shape)
        bump(p)
        offset += n
