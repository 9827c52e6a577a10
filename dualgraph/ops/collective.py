"""Collective communication as registry ops: ``all_reduce``, ``reduce``, ``broadcast``,
``all_gather``, ``reduce_scatter``, ``send`` and ``recv`` over the world of MPI ranks.

Each is a pure function of its inputs on every rank (``reduce`` gives zeros off its
destination), so it runs eagerly, traces into a graph node with the user's line, and has a
VJP written with these same ops: the gradient of ``all_gather`` is ``reduce_scatter``, of
``all_reduce(sum)`` is ``all_reduce(sum)``, of ``broadcast`` is ``reduce`` to the source.
An op runs over the world, or over a sub-group of it (``new_group``) named by its attr
``group``, the tuple of the group's global ranks (absent for the world), followed by
``'#n'`` for the n-th later group of the same ranks (each group has its own communicator,
so the ops of two groups never match each other); ``dst`` and ``src``
are then ranks within the group. All ranks (of the group) must run the same ops in the same
order, as MPI requires; a graph is compiled the
same way on every rank, so its nodes keep that order. The ops are flagged ``communicates``:
passes never fold them or drop them.

The kernels talk to the communicator ``STATE.comm`` that ``dg.distributed``'s
``init_process_group`` installs (``distributed/mpi.py``); this module knows no MPI.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes
from ..dispatch import apply
from ..shapes import ShapedType, ShapeError
from .opdef import defop

__all__: list = []


FIRST_BUCKET_BYTES = 1 << 20   # as torch's DDP: a small first bucket starts communicating early


class _State:
    def __init__(self):
        self.comm = None     # distributed.mpi.Communicator once init_process_group ran
        self.groups = {}     # a group's key -> its Communicator (None outside it)
        self.made = {}       # global ranks -> how many groups of them new_group made
        self.places = {}     # a place's key -> (shared window or None, arrays): see _place


STATE = _State()


def comm(group: tuple | None = None):
    """The communicator of the world (``group`` None) or of the sub-group with that key
    (its global ranks, and ``'#n'`` for a later group of the same ranks); a clear error
    before ``init_process_group`` or on a rank outside the group."""
    if STATE.comm is None:
        raise RuntimeError("the default process group is not initialised: call "
                           "dg.distributed.init_process_group() first")
    if group is None:
        return STATE.comm
    found = STATE.groups.get(group)
    if found is None:
        raise RuntimeError(
            f"global rank {STATE.comm.rank} is not a member of the process group of "
            f"{describe(group)} (or the group was destroyed): only its members may run "
            "collectives on it; test dist.get_rank(group) >= 0 first")
    return found


def describe(group: tuple) -> str:
    """A sub-group's key as errors name it: ``global ranks [0, 2]`` (``#1`` after it for
    the first later group of the same ranks)."""
    later = group[-1] if isinstance(group[-1], str) else ""
    ranks = group[:-1] if later else group
    return f"global ranks {list(ranks)}" + (f" {later}" if later else "")


def world(group: tuple | None = None) -> tuple[int, int]:
    """(rank, size) of this process in the world, or in the sub-group ``group``."""
    c = comm(group)
    return c.rank, c.size


def progress() -> None:
    """Let MPI move every operation in flight forward, on the world and the sub-groups."""
    STATE.comm.progress()
    for c in STATE.groups.values():
        if c is not None:
            c.progress()


def _same(x, **attrs):
    return ShapedType(tuple(x.shape), x.dtype)


# -- places: arrays that live where the communicator reduces them ------------------------------
# Data parallelism keeps each bucket of gradients in an array of its own, in a shared-memory
# window where the ranks share a machine (distributed/shm.py). It registers each as a
# *place*: ``STATE.places[key] = (window, every rank's array, apart)``, or ``(None, its
# array, False)`` where MPI reduces it. ``pack_bucket`` writes the gradients into it, and
# an ``all_reduce`` with ``place=key`` reduces that array where it lies, so that a compiled
# step fills a bucket in one pass and its allreduce copies nothing in, as the eager one;
# the result is the place's array, or (``apart``) a new array that this rank's share is
# summed into and the other shares copied into (shm.Window.all_reduce): the gradients of
# the step, which the next step's reduction does not overwrite, for half a pass over them
# instead of a copy of the bucket.
def add_place(key: str, window, arrays, apart: bool = False) -> None:
    """Register a place (see above): ``window`` a ``shm.Window`` with ``arrays`` every
    rank's array in it, or None with ``arrays`` this process's own array."""
    STATE.places[key] = (window, arrays, apart and window is not None)


def forget_places(keys) -> None:
    for key in keys:
        STATE.places.pop(key, None)


def _place(key: str):
    """(window or None, every rank's arrays or None, this rank's array, apart) of place
    ``key``."""
    found = STATE.places.get(key)
    if found is None:
        raise RuntimeError(
            f"no place {key!r}: a graph that reduces a DistributedDataParallel's buckets in "
            "place runs only in the process whose DistributedDataParallel made them, while "
            "it lives; capture the step again with the model you train")
    window, arrays, apart = found
    if window is None:
        return None, None, arrays, False
    return window, arrays, arrays[window.rank], apart


def pack(flat: np.ndarray, grads, sizes, divisor) -> np.ndarray:
    """Each of ``grads`` (arrays of ``sizes`` elements, or None for zeros) flattened and
    divided by ``divisor`` into its part of ``flat``, in order: one pass over them."""
    lo = 0
    for g, n in zip(grads, sizes):
        if g is None:
            flat[lo:lo + n] = 0
        else:
            np.divide(g.reshape(-1), divisor, out=flat[lo:lo + n], casting="unsafe")
        lo += n
    return flat


def _pack_kernel(*grads, divisor, place):
    return pack(_place(place)[2], grads, [g.size for g in grads], divisor)


def _infer_pack(*grads, divisor, place):
    return ShapedType((sum(math.prod(g.shape) for g in grads),), grads[0].dtype)


def _pack_vjp(g, out, *grads, divisor, place):
    parts, lo = [], 0
    for x in grads:
        hi = lo + math.prod(x.shape)
        parts.append(g[lo:hi].reshape(tuple(x.shape)) / divisor)
        lo = hi
    return tuple(parts)


# (``communicates``: it writes memory the other ranks read, so no pass may fold, merge or
# drop it; overlap_communication moves it with the allreduce it prepares)
PACK_BUCKET = defop(
    "pack_bucket", _pack_kernel, _infer_pack, _pack_vjp, attrs=("divisor", "place"), saves="",
    communicates=True, doc="The arrays flattened, each divided by ``divisor``, one after another in the array "
        "of ``place`` (a data-parallel bucket, reduced there by ``all_reduce(place=)``), "
        "which it returns: ``cat([x.reshape(-1) for x in xs]) / divisor`` in one pass.")


def _reduce(x, reduction, group=None, place=None):
    """Start the allreduce of ``x``; with ``place``, in that place's array (``x`` copied
    in first unless it is that array, as ``pack_bucket``'s result is)."""
    c = comm(group)
    if place is None:
        return c.all_reduce(x, reduction)
    window, arrays, mine, apart = _place(place)
    if x is not mine:
        np.copyto(mine, x.reshape(mine.shape))
    if window is None:
        return c.all_reduce(mine, reduction, inplace=True)
    into = np.empty_like(mine) if apart else None
    return c.all_reduce_shared(window, arrays, reduction, into)


def _all_reduce_vjp(g, out, x, reduction, group=None, place=None):
    if reduction in ("SUM", "AVG"):
        return all_reduce(g, reduction, group)
    if reduction in ("MAX", "MIN"):   # to the ranks that hold the extreme (each of them, on ties)
        return all_reduce(g, "SUM", group) * (x == out).to(g.dtype)
    return all_reduce(g * out, "SUM", group) / x   # product: d(prod)/dx = prod / x


ALL_REDUCE = defop(
    "all_reduce", lambda x, reduction, group=None, place=None: _reduce(
        x, reduction, group, place).wait(),
    _same, _all_reduce_vjp,
    attrs=("reduction", "group", "place"), saves="io", communicates=True,
    doc="The elementwise reduction (sum, avg, product, max, min) of ``x`` over all ranks "
        "(with ``place``, reduced in that place's array, which it returns, or, for a place "
        "that reduces apart, into a new array).")


def _compressed_kernel(x, reduction, dtype, group=None):
    sent = x.astype(dtype)
    return comm(group).all_reduce(sent, reduction).wait().astype(x.dtype)


def _infer_compressed(x, reduction, dtype, group=None):
    if reduction not in ("SUM", "AVG"):
        raise ShapeError(f"compressed_all_reduce: reduction {reduction!r}; a compressed "
                         "allreduce sums or averages")
    return _same(x)


COMPRESSED_ALL_REDUCE = defop(
    "compressed_all_reduce", _compressed_kernel, _infer_compressed,
    lambda g, out, x, reduction, dtype, group=None: compressed_all_reduce(g, reduction, dtype,
                                                                          group),
    attrs=("reduction", "dtype", "group"), saves="", communicates=True,
    doc="The sum (or average) of ``x`` over all ranks sent as ``dtype`` (half the bytes "
        "for a 16-bit one): ``x`` rounded to ``dtype``, reduced in it, and the result "
        "converted back to ``x``'s dtype. A data-parallel compression hook's graph form; "
        "the lowering rule ``compress_all_reduces`` makes it those three nodes.")


# -- an allreduce split in two, so that it overlaps the computation between -------------------
# ``overlap_communication`` (passes/communication.py) replaces a compiled graph's
# ``all_reduce`` by ``all_reduce_start`` where its input is ready, ``all_reduce_progress``
# after the work that follows (MPICH moves a message forward only inside MPI calls), and
# ``all_reduce_wait`` where its result is first read. The started operations are kept here
# by the id of the array MPI writes, which the start returns and the wait reads.
_STARTED: dict = {}


def _start_kernel(x, reduction, group=None, place=None):
    pending = _reduce(x, reduction, group, place)
    _STARTED[id(pending.result)] = pending
    return pending.result


def _progress_kernel(handle):
    progress()
    return handle


def _wait_kernel(handle, x, reduction, group=None, place=None):
    pending = _STARTED.pop(id(handle), None)
    if pending is None:
        if comm(group).size > 1:
            raise RuntimeError("all_reduce_wait: no allreduce was started into this array "
                               "(a graph whose all_reduce_start did not run)")
        return handle   # a lone process: the start's result is the reduction
    return pending.wait()


ALL_REDUCE_START = defop(
    "all_reduce_start", _start_kernel, _same, attrs=("reduction", "group", "place"),
    communicates=True, compiler_only=True,
    decomposition=lambda x, reduction, group=None, place=None: all_reduce(x, reduction, group,
                                                                          place),
    doc="Starts the allreduce of ``x`` without waiting; its value is the reduction once "
        "``all_reduce_wait`` has read it.")

ALL_REDUCE_PROGRESS = defop(
    "all_reduce_progress", _progress_kernel, _same, communicates=True, compiler_only=True,
    decomposition=lambda handle: handle,
    doc="Lets MPI move the started operations forward; returns its input.")

ALL_REDUCE_WAIT = defop(
    "all_reduce_wait", _wait_kernel,
    lambda handle, x, reduction, group=None, place=None: _same(handle),
    attrs=("reduction", "group", "place"), communicates=True, compiler_only=True,
    decomposition=lambda handle, x, reduction, group=None, place=None: handle,
    doc="Waits for the allreduce started into ``handle`` (its input ``x`` is read by MPI "
        "until then) and returns the reduction.")


def _reduce_vjp(g, out, x, dst, reduction, group=None):
    if reduction not in ("SUM", "AVG"):
        raise NotImplementedError(f"the gradient of reduce({reduction!r}); use all_reduce")
    g = broadcast(g, dst, group)
    return g / world(group)[1] if reduction == "AVG" else g


REDUCE = defop(
    "reduce", lambda x, dst, reduction, group=None: comm(group).reduce(x, dst, reduction).wait(),
    _same, _reduce_vjp, attrs=("dst", "reduction", "group"), saves="",
    communicates=True,
    doc="The reduction of ``x`` over all ranks on rank ``dst``, zeros on the others.")

BROADCAST = defop(
    "broadcast", lambda x, src, group=None: comm(group).broadcast(x, src).wait(), _same,
    lambda g, out, x, src, group=None: reduce(g, src, "SUM", group), attrs=("src", "group"),
    saves="",
    communicates=True, doc="Rank ``src``'s ``x`` on every rank.")


def _infer_all_gather(x, group=None):
    return ShapedType((world(group)[1],) + tuple(x.shape), x.dtype)


ALL_GATHER = defop(
    "all_gather", lambda x, group=None: comm(group).all_gather(x).wait(), _infer_all_gather,
    lambda g, out, x, group=None: reduce_scatter(g, "SUM", group), attrs=("group",), saves="",
    communicates=True,
    doc="The ``x`` of every rank stacked along a new leading dim of size world size.")


def _infer_reduce_scatter(x, reduction, group=None):
    size = world(group)[1]
    if len(x.shape) == 0 or x.shape[0] != size:
        raise ShapeError(f"reduce_scatter: input {tuple(x.shape)} must have {size} blocks "
                         "(one per rank) along dim 0")
    return ShapedType(tuple(x.shape[1:]), x.dtype)


def _reduce_scatter_vjp(g, out, x, reduction, group=None):
    gathered = all_gather(g, group)
    return gathered / world(group)[1] if reduction == "AVG" else gathered


REDUCE_SCATTER = defop(
    "reduce_scatter",
    lambda x, reduction, group=None: comm(group).reduce_scatter(x, reduction).wait(),
    _infer_reduce_scatter, _reduce_scatter_vjp, attrs=("reduction", "group"), saves="",
    communicates=True,
    doc="Block ``rank`` of the reduction over all ranks of ``x`` (``[world size, ...]``).")


def _send_kernel(x, dst, tag, group=None):
    comm(group).send(x, dst, tag).wait()
    return np.zeros((), np.int64)


SEND = defop(
    "send", _send_kernel, lambda x, dst, tag, group=None: ShapedType((), np.dtype(np.int64)),
    attrs=("dst", "tag", "group"), communicates=True,
    doc="Send ``x`` to rank ``dst``; returns a token (0) that orders later ops after it.")


def _recv_kernel(src, tag, shape, dtype, group=None):
    out = np.empty(shape, dtype)
    return comm(group).recv(out, src, tag).wait()


RECV = defop(
    "recv", _recv_kernel,
    lambda src, tag, shape, dtype, group=None: ShapedType(tuple(shape), np.dtype(dtype)),
    attrs=("src", "tag", "shape", "dtype", "group"), communicates=True,
    doc="A tensor of ``shape`` and ``dtype`` received from rank ``src``.")


# -- the functions (Tensors in, Tensors out) ----------------------------------------------------
# ``group``: a sub-group's global ranks (a tuple), or None for the world (no attr at all, so
# that graphs over the world print and serialise as before)
def _on(group) -> dict:
    return {} if group is None else {"group": tuple(group)}


def all_reduce(x, op: str = "SUM", group=None, place: str | None = None):
    at = {} if place is None else {"place": place}
    return apply(ALL_REDUCE, x, reduction=str(op).upper(), **_on(group), **at)


def pack_bucket(grads, divisor, place: str):
    return apply(PACK_BUCKET, *grads, divisor=divisor, place=place)


def compressed_all_reduce(x, op: str = "SUM", dtype="float16", group=None):
    return apply(COMPRESSED_ALL_REDUCE, x, reduction=str(op).upper(), dtype=dtypes.to_np(dtype),
                 **_on(group))


def reduce(x, dst: int, op: str = "SUM", group=None):
    return apply(REDUCE, x, dst=int(dst), reduction=str(op).upper(), **_on(group))


def broadcast(x, src: int, group=None):
    return apply(BROADCAST, x, src=int(src), **_on(group))


def all_gather(x, group=None):
    return apply(ALL_GATHER, x, **_on(group))


def reduce_scatter(x, op: str = "SUM", group=None):
    return apply(REDUCE_SCATTER, x, reduction=str(op).upper(), **_on(group))


def send(x, dst: int, tag: int = 0, group=None):
    return apply(SEND, x, dst=int(dst), tag=int(tag), **_on(group))


def recv(shape, dtype, src: int, tag: int = 0, group=None):
    return apply(RECV, src=int(src), tag=int(tag), shape=tuple(int(d) for d in shape),
                 dtype=np.dtype(dtype), **_on(group))
