"""Data parallelism: ``DistributedDataParallel``, as torch's (docs/distributed.md), and
``DataParallel``, which on a machine without GPUs is torch's plain wrapper (below).

Each rank runs the module on its own part of the batch; after the backward every rank holds
the gradients averaged over all ranks, so identical optimiser steps keep the replicas equal.
The gradients are reduced in buckets: the parameters, in reverse registration order (about
the order the backward produces their gradients), are grouped into buckets of at most
``bucket_cap_mb``; a post-accumulate-grad hook counts each bucket's gradients, and when its
last one is ready the bucket's non-blocking allreduce starts, while the backward computes
the gradients of earlier layers. Buckets start strictly in order (MPI needs every rank to
issue its collectives in one order). The same hooks call ``Test`` on the reductions in
flight, which is what makes MPICH move them forward; when the backward ends, a callback
starts the buckets still waiting (gradients a rank did not produce count as zeros), waits
for all of them and writes the averages into ``.grad``.

While a step is being captured by ``dg.compile`` the same buckets become ``all_reduce``
nodes of the step's graph, at the end of the backward (with a communication hook, its graph
form: ``compressed_all_reduce`` for the fp16 / bf16 hooks, the top-k and PowerSGD hooks'
ops around their collectives); the compiler's passes start each allreduce where its
gradients are ready (``passes/communication.py``).
"""
from __future__ import annotations

import contextlib
import itertools
import weakref

import numpy as np

from .. import distributed as dist
from ..autograd.engine import queue_callback
from ..autograd.tape import no_grad
from ..dispatch import modes
from ..ops import collective
from ..ops.collective import FIRST_BUCKET_BYTES
from ..ops.shape import cat
from ..tensor import Tensor, bump
from .module import Module

__all__ = ["DistributedDataParallel", "DataParallel"]

PACK_BYTES = 32 << 20   # at most this much is copied into one message (plus one tensor)
# An eager bucket through shared memory is summed straight into its .grads where they are
# this large on average: that saves half a copy of each (~0.05 us a KiB here), and costs
# some Python per .grad (~1.5 us), which smaller ones would not pay back
INTO_GRAD_BYTES = 32 << 10
_SERIAL = itertools.count()   # names the buckets' places (ops/collective.py) per process


class _Bucket:
    """Parameters whose gradients are reduced together: their places in one flat array
    (in a shared-memory window where the ranks share a machine: ``share``)."""

    def __init__(self, index: int, params: list):
        self.index, self.params = index, params
        self.sizes = [p.numel() for p in params]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).tolist()
        self.flat = np.empty(self.offsets[-1], params[0]._data.dtype)
        self.waiting = len(params)   # gradients not yet accumulated in this backward
        self.future = None
        self.window = self.arrays = None   # the shared window, every rank's flat array
        self.place = None   # its name as a place of ops/collective.py (a captured step's)

    def share(self, window, arrays: list) -> None:
        """Live in ``window``: ``arrays`` are every rank's flat array there."""
        self.window, self.arrays, self.flat = window, arrays, arrays[window.rank]

    def register(self, key: str, apart: bool) -> None:
        """Register the flat array as the place ``key`` (``collective.add_place``;
        ``apart``: a captured step's reduction goes into a new array, not the bucket)."""
        self.place = key
        if self.window is None:
            collective.add_place(key, None, self.flat)
        else:
            collective.add_place(key, self.window, self.arrays, apart)

    def outputs(self) -> list:
        """Where each parameter's averaged gradient is summed into (a reduction through
        shared memory): its ``.grad``'s own array where that can take it (it holds the
        local gradient, already copied into the bucket), else a new one."""
        dtype, outs = self.flat.dtype, []
        for p in self.params:
            g = None if p.grad is None else p.grad._data
            if (type(g) is not np.ndarray or g.dtype != dtype or not g.flags.c_contiguous
                    or not g.flags.writeable or g.shape != p._data.shape):
                g = np.empty(p._data.shape, dtype)
            outs.append(g)
        return outs


class DataParallel(Module):
    """``nn.DataParallel`` as torch runs it where no GPU is available: no replicas, the
    wrapped module called as it is, held as ``.module`` (so the state dict's keys start with
    ``module.``, as checkpoints saved from a wrapped model have them). Asking for devices
    raises: dualgraph runs on the CPU; ``DistributedDataParallel`` runs processes in
    parallel."""

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0):
        super().__init__()
        if device_ids:
            raise RuntimeError(f"DataParallel(device_ids={device_ids!r}): dualgraph runs on "
                               "the CPU, with no devices to replicate onto; use "
                               "DistributedDataParallel for data parallelism across processes")
        self.module = module
        self.device_ids, self.output_device, self.dim = [], None, dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


class DistributedDataParallel(Module):
    """Replicate ``module`` on every rank and average its gradients over the ranks.

    Parameters and buffers are broadcast from rank 0 when it is made, buffers again before
    every forward (``broadcast_buffers``), all of them in one message. ``process_group``
    (a ``dist.new_group``): the replicas are the ranks of that group (its first rank's
    values are broadcast), not the world. ``bucket_cap_mb`` bounds a bucket;
    ``comm_hook`` (or :meth:`register_comm_hook`) replaces the averaging allreduce.
    ``gradient_as_bucket_view``: after the reduction each ``.grad`` is a view of its
    bucket's flat array instead of a copy (one pass over the gradients fewer a step, and
    with ``zero_grad(set_to_none=False)`` the backward accumulates straight into the
    bucket); as in torch, a ``.grad`` kept across steps changes with the next backward.

    >>> model = dg.nn.parallel.DistributedDataParallel(dg.nn.Linear(4, 2))
    >>> loss = model(dg.randn(8, 4)).square().mean()
    >>> loss.backward()       # .grad is the average over the ranks
    """

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool = True, process_group=None,
                 bucket_cap_mb: float = 25, find_unused_parameters: bool = False,
                 gradient_as_bucket_view: bool = False, static_graph: bool = False,
                 comm_hook=None, comm_state=None):
        super().__init__()
        self.module = module
        self.broadcast_buffers = broadcast_buffers
        self.require_backward_grad_sync = True
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.process_group = process_group   # (None: the world)
        self._group = dist.groups.resolve(process_group)
        self._comm = collective.comm(self._group)
        self._hook, self._state = comm_hook, comm_state
        params = [p for p in module.parameters() if p.requires_grad]
        self._buckets = _make_buckets(params, bucket_cap_mb * (1 << 20))
        _share(self._buckets, self._comm)
        serial = next(_SERIAL)
        for bucket in self._buckets:
            bucket.register(f"ddp{serial}.{bucket.index}", not gradient_as_bucket_view)
        weakref.finalize(self, collective.forget_places, [b.place for b in self._buckets])
        self._next = 0             # the next bucket to start (they start in order)
        self._active = False       # a reduction is under way in this backward
        self._bucket_of = {}   # id(parameter) -> its bucket
        for bucket in self._buckets:
            for p in bucket.params:
                self._bucket_of[id(p)] = bucket
                p.register_post_accumulate_grad_hook(self._grad_ready)
        with no_grad():
            self._sync(list(module.parameters()) + list(module.buffers()))

    # -- the forward ----------------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        if self._active:
            self._reset()
            raise RuntimeError(
                "DistributedDataParallel: the previous backward's gradient reduction did not "
                "finish (a backward ended in an error?); its gradients are not averaged. Call "
                "zero_grad and run the step again on every rank")
        if self.broadcast_buffers and self._comm.size > 1:
            with no_grad():
                self._sync(list(self.module.buffers()))
        return self.module(*inputs, **kwargs)

    def _sync(self, tensors):
        """The values of the process group's rank 0 into ``tensors`` on its every rank:
        eagerly one broadcast of them packed as bytes per ``PACK_BYTES`` (a module's many
        small buffers, three a norm layer, cost one message instead of one each); while a
        step is captured, one ``broadcast`` node per tensor."""
        if modes.tracer is not None:
            src = dist.get_global_rank(self.process_group, 0)
            for t in tensors:
                dist.broadcast(t, src, group=self.process_group)
            return
        pack, size = [], 0
        for t in tensors + [None]:   # (None: the end, sends what is left)
            if pack and (t is None or size + t._data.nbytes > PACK_BYTES):
                self._broadcast_packed(pack)
                pack, size = [], 0
            if t is not None:
                pack.append(t)
                size += t._data.nbytes

    def _broadcast_packed(self, tensors) -> None:
        arrays = [t._data for t in tensors]
        packed = np.concatenate([np.ascontiguousarray(a).reshape(-1).view(np.uint8)
                                 for a in arrays])
        self._comm.broadcast(packed, 0, inplace=True).wait()
        if self._comm.rank == 0:
            return
        offset = 0
        for t, a in zip(tensors, arrays):
            a[...] = packed[offset:offset + a.nbytes].view(a.dtype).reshape(a.shape)
            bump(t)
            offset += a.nbytes

    @contextlib.contextmanager
    def no_sync(self):
        """Backwards inside accumulate gradients locally, without communication; the first
        backward after it reduces the sum of them all.

        >>> with model.no_sync():
        ...     model(x1).sum().backward()
        >>> model(x2).sum().backward()      # reduces the gradients of both
        """
        before, self.require_backward_grad_sync = self.require_backward_grad_sync, False
        try:
            yield
        finally:
            self.require_backward_grad_sync = before

    def register_comm_hook(self, state, hook) -> None:
        """Reduce each bucket with ``hook(state, bucket) -> Future`` (torch's shape): the
        future's value is the bucket's reduced flat gradient (``bucket.buffer()``'s shape).
        Built-in hooks are in ``dg.distributed.algorithms.ddp_comm_hooks``.

        >>> from dualgraph.distributed.algorithms.ddp_comm_hooks import default_hooks
        >>> model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        """
        if self._hook is not None:
            raise RuntimeError("register_comm_hook can only be called once")
        self._hook, self._state = hook, state

    # -- the reduction, driven by the backward ---------------------------------------------
    def _grad_ready(self, param: Tensor) -> None:
        if not self.require_backward_grad_sync:
            return
        if not self._active:
            self._active = True
            queue_callback(self._finish)
        self._bucket_of[id(param)].waiting -= 1
        if modes.tracer is None:
            while self._next < len(self._buckets) and not self._buckets[self._next].waiting:
                self._start(self._buckets[self._next])
            self._comm.progress()

    def _start(self, bucket: _Bucket) -> None:
        self._next += 1
        # the default reduction averages: each gradient is divided as it is copied in (one
        # pass over it); a hook gets the gradients as they are
        scale = 1 if self._hook is not None else self._comm.size
        flat = collective.pack(bucket.flat, [None if p.grad is None else p.grad._data
                                             for p in bucket.params], bucket.sizes, scale)
        if self._hook is not None:
            grad_bucket = dist.GradBucket(bucket, Tensor._make(flat),
                                          bucket.index == len(self._buckets) - 1,
                                          self.process_group)
            bucket.future = self._hook(self._state, grad_bucket)
            return
        if bucket.window is not None:   # (summed where it lies; the average into .grad)
            into = None
            if (not self.gradient_as_bucket_view
                    and bucket.flat.nbytes >= INTO_GRAD_BYTES * len(bucket.params)):
                into = bucket.outputs()
            pending = self._comm.all_reduce_shared(bucket.window, bucket.arrays, "SUM", into)
        else:
            pending = self._comm.all_reduce(flat, "SUM", inplace=True)
        bucket.future = dist.Future(pending.wait)

    def _finish(self) -> None:
        """At the end of the backward: start the buckets still waiting, wait for all of
        them, and write the averages into the parameters' gradients."""
        try:
            if modes.tracer is not None:
                self._finish_traced()
                return
            while self._next < len(self._buckets):
                self._start(self._buckets[self._next])
            for bucket in self._buckets:
                reduced = bucket.future.wait()
                if type(reduced) is list:   # (already in the gradients' arrays)
                    _set_grads(bucket, reduced)
                    continue
                reduced = reduced._data if isinstance(reduced, Tensor) else reduced
                _write_grads(bucket, reduced, self.gradient_as_bucket_view)
        finally:
            self._reset()

    def _reset(self) -> None:
        self._next, self._active = 0, False
        for bucket in self._buckets:
            bucket.waiting, bucket.future = len(bucket.params), None

    def _finish_traced(self) -> None:
        """The buckets as nodes of the graph being captured: an ``all_reduce`` each, or the
        hook's graph form (its ops traced around the bucket's collectives)."""
        graph_form = getattr(self._hook, "graph_form", None)
        if self._hook is not None and graph_form is None:
            raise NotImplementedError(
                f"DistributedDataParallel: the communication hook {_name(self._hook)} has no "
                "graph form (a `graph_form(state, bucket) -> Tensor` attribute written with "
                "dualgraph ops), so it runs eagerly only; the built-in hooks have one. Run "
                "this step eagerly, or give the hook a graph form")
        for bucket in self._buckets:
            missing = [name for name, p in self.module.named_parameters()
                       if p.grad is None and any(p is q for q in bucket.params)]
            if missing:   # (eagerly it depends on the other ranks: a graph can't know)
                raise RuntimeError(
                    f"DistributedDataParallel under dg.compile: parameters {missing} got no "
                    "gradient in the captured step; set requires_grad=False on them, or "
                    "run the step eagerly")
            if graph_form is None:   # (filled and reduced where the eager step's are)
                packed = collective.pack_bucket([p.grad for p in bucket.params],
                                                self._comm.size, bucket.place)
                reduced = collective.all_reduce(packed, "SUM", self._group, bucket.place)
                if bucket.window is None and not self.gradient_as_bucket_view:
                    reduced = reduced.clone()   # (the bucket: the next step overwrites it)
            else:
                grads = cat([p.grad.reshape(-1) for p in bucket.params])
                last = bucket.index == len(self._buckets) - 1
                reduced = graph_form(self._state, dist.GradBucket(bucket, grads, last,
                                                                  self.process_group))
            for p, lo, hi in zip(bucket.params, bucket.offsets, bucket.offsets[1:]):
                p.grad = reduced[lo:hi].reshape(tuple(p.shape))


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _make_buckets(params: list, cap_bytes: float) -> list:
    """Reverse registration order, split by dtype and by size (the first bucket small)."""
    buckets, current, size, cap = [], {}, {}, min(cap_bytes, FIRST_BUCKET_BYTES)
    for p in reversed(params):
        dtype = p._data.dtype
        current.setdefault(dtype, []).append(p)
        size[dtype] = size.get(dtype, 0) + p._data.nbytes
        if size[dtype] >= cap:
            buckets.append(_Bucket(len(buckets), current.pop(dtype)))
            size[dtype], cap = 0, cap_bytes
    for group in current.values():
        buckets.append(_Bucket(len(buckets), group))
    return buckets


def _share(buckets: list, comm) -> None:
    """Put the buckets' flat arrays in a shared-memory window, where the communicator
    reduces through shared memory (each bucket's allreduce then sums it where it lies)."""
    shared = comm.shared_arrays([b.flat for b in buckets]) if buckets else None
    if shared is not None:
        window, arrays = shared
        for bucket, every in zip(buckets, arrays):
            bucket.share(window, every)


def _set_grads(bucket: _Bucket, outs: list) -> None:
    """The arrays a bucket's averages were summed into (``_Bucket.outputs``) as the
    ``.grad``s."""
    for p, out in zip(bucket.params, outs):
        if p.grad is not None and p.grad._data is out:
            bump(p.grad)
        elif p.grad is not None:   # (one it could not write into: another layout)
            np.copyto(p.grad._data, out, casting="unsafe")
            bump(p.grad)
        elif out.any():   # (no rank had a gradient: leave it None)
            p.grad = Tensor._make(out)


def _write_grads(bucket: _Bucket, reduced: np.ndarray, as_view: bool) -> None:
    """The reduced gradients into ``.grad``: copies, or (``as_view``, where the reduction
    is the bucket's own array) views of the bucket."""
    as_view = as_view and reduced is bucket.flat
    for p, lo, hi in zip(bucket.params, bucket.offsets, bucket.offsets[1:]):
        part = reduced[lo:hi].reshape(p._data.shape)
        if p.grad is None and not part.any():   # no rank had a gradient: leave it None
            continue
        if as_view and (p.grad is None or not np.may_share_memory(p.grad._data, part)):
            p.grad = Tensor._make(part)
        elif p.grad is None:
            p.grad = Tensor._make(np.array(part))
        elif as_view:   # (already the view: the backward accumulated into the bucket)
            bump(p.grad)
        else:
            np.copyto(p.grad._data, part, casting="unsafe")
            bump(p.grad)
