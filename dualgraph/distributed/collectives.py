"""``torch.distributed``'s process group and collectives on Tensors, in place, with
``async_op=True`` handles; each runs the registry op of ``ops/collective.py``, or, eagerly
with ``async_op=True``, starts the MPI operation at once (``mpi.py``)."""
from __future__ import annotations

import datetime

import numpy as np

from ..autograd.tape import grad_mode
from ..dispatch import modes
from ..kernels import tuning
from ..ops import collective as _c
from ..ops.inplace import commit_inplace
from ..ops.shape import stack
from ..tensor import Tensor, bump as bump_version
from . import groups as _g
from .groups import *  # noqa: F401,F403
from .groups import group_peer, resolve
from .mpi import DeadlineError, DistributedError, connect

__all__ = ["init_process_group", "is_initialized", "is_available", "get_rank",
           "get_world_size", "get_backend", "barrier", "destroy_process_group", "ReduceOp",
           "Work", "Future", "GradBucket", "all_reduce", "reduce", "broadcast", "all_gather",
           "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "send", "recv",
           "isend", "irecv", "DeadlineError", "DistributedError", *_g.__all__]


class ReduceOp:
    """How a reduction combines the ranks' values (``dist.ReduceOp.SUM``)."""
    SUM = "SUM"
    AVG = "AVG"
    PRODUCT = "PRODUCT"
    MAX = "MAX"
    MIN = "MIN"


def is_available() -> bool:
    """True: MPI is the backend (mpi4py is needed only for more than one process)."""
    return True


def init_process_group(backend: str = "mpi", timeout: datetime.timedelta | None = None,
                       world_size: int = -1, rank: int = -1, **_ignored) -> None:
    """Join the world of ranks ``mpiexec`` started (a lone process is a world of size 1).

    ``timeout`` is the deadline of every operation (default 300 s, or the environment's
    ``DUALGRAPH_DIST_TIMEOUT`` seconds): past it the operation raises
    :class:`DeadlineError` and the job is aborted. With several ranks on one machine each
    uses its share of the cores (one each for two ranks on two cores) unless
    ``DUALGRAPH_NUM_THREADS`` says otherwise, and glibc keeps freed memory for reuse (the
    ``malloc`` trick of ``dg.tune_cpu``, unless ``DUALGRAPH_CPU_TUNING`` says otherwise).

    >>> dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=60))
    """
    if backend not in ("mpi", None):
        raise ValueError(f"backend {backend!r} is not available: dualgraph runs on MPI "
                         "(backend='mpi'; launch with mpiexec -n N python script.py)")
    if _c.STATE.comm is not None:
        raise RuntimeError("init_process_group was called twice; call "
                           "destroy_process_group() first")
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
    comm = connect(seconds)
    for name, given, actual in (("world_size", world_size, comm.size),
                                ("rank", rank, comm.rank)):
        if given not in (-1, None) and given != actual:
            raise ValueError(f"init_process_group({name}={given}) but MPI says {actual}: "
                             "mpiexec decides the ranks (mpiexec -n N)")
    _c.STATE.comm = comm
    if comm.size > 1:
        tuning.join_mpi(comm.local_size())


def is_initialized() -> bool:
    return _c.STATE.comm is not None


def get_rank(group=None) -> int:
    """This process's rank in the world, or in ``group`` (-1 if it is not a member)."""
    return _c.comm().rank if group is None else group.rank()


def get_world_size(group=None) -> int:
    """The number of ranks of the world, or of ``group`` (-1 on a non-member)."""
    return _c.comm().size if group is None else group.size()


def get_backend(group=None) -> str:
    _c.comm()
    return "mpi"


def destroy_process_group(group=None) -> None:
    """Leave ``group``, or (None) the world and every group (pending operations must have
    been waited on)."""
    if group is not None and group.key is not None:
        _g.destroy(group)
        return
    _g.destroy_all()
    comm = _c.STATE.comm
    if comm is not None:
        comm.close()
        _c.STATE.comm = None


class Future:
    """The result of an asynchronous operation (``torch.futures.Future``'s common subset):
    ``wait()`` / ``value()`` return it, ``then(fn)`` is a future of ``fn(self)``."""

    def __init__(self, resolve=None, value=None):
        self._resolve, self._value = resolve, value
        self._done = resolve is None

    def wait(self):
        if not self._done:
            self._value, self._resolve, self._done = self._resolve(), None, True
        return self._value

    value = wait

    def done(self) -> bool:
        return self._done

    def set_result(self, value) -> None:
        self._value, self._resolve, self._done = value, None, True

    def then(self, callback) -> "Future":
        return Future(lambda: callback(self._waited()))

    def _waited(self):
        self.wait()
        return self


class Work:
    """A started operation: ``wait()`` blocks (against the deadline) until it is done and
    its tensors hold the result; ``is_completed()`` tests without blocking."""

    def __init__(self, pending=None, finish=None, result=None):
        self._pending, self._finish, self._result = pending, finish, result

    def is_completed(self) -> bool:
        return self._pending is None or self._pending.test()

    def wait(self, timeout=None) -> bool:
        if self._pending is not None:
            array = self._pending.wait()
            self._pending = None
            if self._finish is not None:
                self._finish(array)
        return True

    def result(self):
        self.wait()
        return self._result

    def get_future(self) -> Future:
        return Future(self.result)


class GradBucket:
    """What a data-parallel communication hook gets (torch's ``dist.GradBucket``): one
    bucket's gradients, flattened into ``buffer()`` in the order of ``parameters()``;
    ``process_group`` is the DDP's (None: the world), which the built-in hooks reduce over
    when their state names no group."""

    def __init__(self, bucket, buffer: Tensor, last: bool, process_group=None):
        self._bucket, self._buffer, self._last = bucket, buffer, last
        self.process_group = process_group

    def index(self) -> int:
        return self._bucket.index

    def buffer(self) -> Tensor:
        return self._buffer

    def set_buffer(self, tensor: Tensor) -> None:
        np.copyto(self._buffer._data, tensor._data, casting="unsafe")

    def parameters(self) -> list:
        return list(self._bucket.params)

    def gradients(self) -> list:
        """Each parameter's gradient, as a view of ``buffer()`` (Tensor ops: a hook's
        graph form reads them from a traced buffer too)."""
        b = self._bucket
        return [self._buffer[lo:hi].reshape(tuple(p.shape))
                for p, lo, hi in zip(b.params, b.offsets, b.offsets[1:])]

    def is_last(self) -> bool:
        return self._last


def _eager(*tensors) -> bool:
    """Whether the call can start MPI at once (no graph being built, no gradient to
    record): else it runs the registry op."""
    if modes.tracer is not None:
        return False
    if not grad_mode.enabled:
        return True
    for t in tensors:
        if t.requires_grad:
            return False
    return True


def _start(kind, tensor: Tensor, write, *args, target=None, group=None):
    """Start ``comm.kind(array, *args)``: (the pending operation, the function that
    writes its result into ``target`` once done, ``write`` or a copy into it). An allreduce
    or broadcast into a C-contiguous tensor itself runs in place (MPI writes the storage:
    no copy)."""
    data = tensor._data
    flags = data.flags
    if (kind in ("all_reduce", "broadcast") and target is tensor
            and flags.c_contiguous and flags.writeable):
        return getattr(_c.comm(group), kind)(data, *args, inplace=True), _bumper(tensor)
    return getattr(_c.comm(group), kind)(data, *args), write or _into(target)


def _bumper(tensor: Tensor):
    """A write for a result MPI already put in ``tensor``'s storage: its version moves."""
    def bump(array):
        bump_version(tensor)
    return bump


def _into(tensor: Tensor):
    """A function writing an array into ``tensor``'s storage, as an in-place op does."""
    def write(array):
        np.copyto(tensor._data, array.reshape(tensor._data.shape), casting="unsafe")
        bump_version(tensor)
    return write


def _run(tensor, async_op, kind, op_fn, *args, target=None, write=None, group=None):
    """The one path of every in-place collective: eagerly (no graph, no gradient) the MPI
    operation, started now and waited for unless ``async_op``; otherwise the registry op
    ``op_fn(tensor, *args, group=)`` committed into ``target`` (``tensor`` by default).
    ``group``: the ops' name of the group (``resolve``)."""
    target = tensor if target is None else target
    if _eager(tensor):
        pending, finish = _start(kind, tensor, write, *args, target=target, group=group)
        if async_op:
            return Work(pending, finish, [target])
        finish(pending.wait())
        return None
    result = op_fn(tensor, *args, group=group)
    if write is not None:
        write(result)
    else:
        commit_inplace(target, result.reshape(tuple(target.shape)))
    return Work(result=[target]) if async_op else None


def all_reduce(tensor: Tensor, op: str = ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce ``tensor`` over all ranks, in place.

    >>> t = dg.ones(2)
    >>> dist.all_reduce(t, op=dist.ReduceOp.SUM)   # t == world size
    """
    key = None if group is None else resolve(group)
    data = tensor._data
    if not async_op and modes.tracer is None and not tensor.requires_grad and type(
            data) is np.ndarray and data.flags.carray:
        # the short path (C-contiguous and writeable: in place), no handle: the time of a
        # small allreduce is mostly this Python
        _c.comm(key).all_reduce_now(data, op)
        bump_version(tensor)
        return None
    return _run(tensor, async_op, "all_reduce", _c.all_reduce, op, group=key)


def reduce(tensor: Tensor, dst: int, op: str = ReduceOp.SUM, group=None,
           async_op: bool = False):
    """The reduction over all ranks (of ``group``) into ``tensor`` on global rank ``dst``
    (the others' tensors are left as they are)."""
    key = resolve(group)
    mine = _c.comm().rank == dst
    dst = group_peer(group, dst, "dst")

    def write(result):
        if mine:
            (_into(tensor) if isinstance(result, np.ndarray) else
             lambda r: commit_inplace(tensor, r))(result)
    return _run(tensor, async_op, "reduce", _c.reduce, dst, op, write=write, group=key)


def broadcast(tensor: Tensor, src: int, group=None, async_op: bool = False):
    """Global rank ``src``'s ``tensor`` into ``tensor`` on every rank (of ``group``)."""
    key = resolve(group)
    return _run(tensor, async_op, "broadcast", _c.broadcast, group_peer(group, src, "src"),
                group=key)


def _write_list(tensors):
    def write(result):
        for i, t in enumerate(tensors):
            part = result[i]
            if isinstance(part, Tensor):
                commit_inplace(t, part)
            else:
                _into(t)(part)
    return write


def all_gather(tensor_list: list, tensor: Tensor, group=None, async_op: bool = False):
    """Every rank's ``tensor`` into ``tensor_list[rank]``.

    >>> parts = [dg.zeros(2) for _ in range(dist.get_world_size())]
    >>> dist.all_gather(parts, dg.ones(2))
    """
    key = resolve(group)
    _check_list(tensor_list, tensor, "all_gather", group)
    return _run(tensor, async_op, "all_gather", _c.all_gather, write=_write_list(tensor_list),
                group=key)


def all_gather_into_tensor(output_tensor: Tensor, input_tensor: Tensor, group=None,
                           async_op: bool = False):
    """Every rank's input concatenated along dim 0 (or stacked, for an output of shape
    ``[world size, *input.shape]``) into ``output_tensor``."""
    key = resolve(group)
    _check_numel(output_tensor, input_tensor, get_world_size(group), "all_gather_into_tensor")
    return _run(input_tensor, async_op, "all_gather", _c.all_gather, target=output_tensor,
                group=key)


def reduce_scatter(output: Tensor, input_list: list, op: str = ReduceOp.SUM, group=None,
                   async_op: bool = False):
    """The reduction over ranks of ``input_list[rank]`` into ``output``."""
    key = resolve(group)
    _check_list(input_list, output, "reduce_scatter", group)
    return _run(stack(list(input_list)), async_op, "reduce_scatter", _c.reduce_scatter, op,
                target=output, group=key)


def reduce_scatter_tensor(output: Tensor, input: Tensor, op: str = ReduceOp.SUM, group=None,
                          async_op: bool = False):
    """Block ``rank`` (along dim 0) of the reduction over ranks of ``input`` into
    ``output``; ``input`` has world size times ``output``'s elements."""
    key = resolve(group)
    size = get_world_size(group)
    _check_numel(input, output, size, "reduce_scatter_tensor")
    blocks = input.reshape(size, *output.shape)
    return _run(blocks, async_op, "reduce_scatter", _c.reduce_scatter, op, target=output,
                group=key)


def send(tensor: Tensor, dst: int, group=None, tag: int = 0) -> None:
    """Send ``tensor`` to global rank ``dst`` (returns when it may be changed again)."""
    key = resolve(group)
    _c.send(tensor, group_peer(group, dst, "dst"), tag, key)


def recv(tensor: Tensor, src: int | None = None, group=None, tag: int = 0) -> int:
    """Receive into ``tensor`` from global rank ``src``; returns ``src``."""
    if src is None:
        raise ValueError("recv needs src= (receiving from any rank is not supported)")
    key = resolve(group)
    commit_inplace(tensor, _c.recv(tuple(tensor.shape), tensor._data.dtype,
                                   group_peer(group, src, "src"), tag, key))
    return src


def isend(tensor: Tensor, dst: int, group=None, tag: int = 0) -> Work:
    """``send`` started without waiting; ``tensor`` must not change until ``wait()``."""
    if not _eager():
        send(tensor, dst, group, tag=tag)
        return Work()
    key = resolve(group)
    return Work(_c.comm(key).send(tensor._data, group_peer(group, dst, "dst"), tag))


def irecv(tensor: Tensor, src: int | None = None, group=None, tag: int = 0) -> Work:
    """``recv`` started without waiting; ``tensor`` holds the data after ``wait()``."""
    if src is None or not _eager():
        recv(tensor, src, group, tag=tag)
        return Work()
    key = resolve(group)
    buffer = np.empty(tensor._data.shape, tensor._data.dtype)
    return Work(_c.comm(key).recv(buffer, group_peer(group, src, "src"), tag), _into(tensor))


def barrier(group=None, async_op: bool = False):
    """Wait until every rank (of ``group``) has called ``barrier``."""
    work = Work(_c.comm(resolve(group)).barrier())
    if async_op:
        return work
    work.wait()


def _check_list(tensors, like, what, group=None):
    size = get_world_size(group)
    if len(tensors) != size:
        raise ValueError(f"{what}: a list of {len(tensors)} tensors for a group of {size}")
    for t in tensors:
        if tuple(t.shape) != tuple(like.shape):
            raise ValueError(f"{what}: tensors of shape {tuple(t.shape)} and "
                             f"{tuple(like.shape)}; all must have one shape")


def _check_numel(big, small, size, what):
    if big.numel() != size * small.numel():
        raise ValueError(f"{what}: {tuple(big.shape)} must have world size ({size}) times "
                         f"the elements of {tuple(small.shape)}")
