"""Rows for the collectives, run in a world of one process (a lone communicator, no MPI):
there each is the identity on its data (``all_gather`` adds a leading dim of 1), which is
what torch computes for the row, and its VJP is the identity on the gradient. The values
across two ranks, and their gradients, are checked against NumPy by
``tests/test_distributed.py`` under ``mpiexec -n 2``."""
import numpy as np

from dualgraph.distributed.mpi import Communicator
from dualgraph.dispatch import apply
from dualgraph.ops import collective as c

from . import In, OpCase

if c.STATE.comm is None:
    c.STATE.comm = Communicator(None, timeout=60.0)


def _row(dg_fn, torch_fn):
    return lambda m, *xs: torch_fn(*xs) if m.__name__ == "torch" else dg_fn(*xs)


def torch_cat(x, y):
    import torch
    return torch.cat([x.reshape(-1), y.reshape(-1)])


def _send_recv(x):
    token = c.send(x, 0, tag=3)
    return c.recv(tuple(x.shape), x._data.dtype, 0, tag=3) + token.to(x.dtype) * 0


def _split(x):
    """The allreduce as the compiled graph runs it: started, polled, waited on."""
    handle = apply(c.ALL_REDUCE_START, x, reduction="SUM")
    handle = apply(c.ALL_REDUCE_PROGRESS, handle)
    return apply(c.ALL_REDUCE_WAIT, handle, x, reduction="SUM")


def _pack(x, y):
    """A data-parallel bucket of two gradients: packed into its place (registered here, as
    DistributedDataParallel registers its buckets), then reduced there."""
    c.add_place("optable", None, np.empty(x.numel() + y.numel(), x._data.dtype))
    return c.all_reduce(c.pack_bucket([x, y], 2, "optable"), "SUM", place="optable")


CASES = [
    OpCase("all_reduce", _row(lambda x, op=op: c.all_reduce(x, op), lambda x: x.clone()),
           [In((3, 4), "distinct")], op.lower(), dtypes=("float32", "float64", "float16"))
    for op in ("SUM", "AVG", "MAX", "MIN")
] + [
    OpCase("all_reduce", _row(lambda x: c.all_reduce(x, "PRODUCT"), lambda x: x.clone()),
           [In((3, 4), "pos")], "product"),
    OpCase("compressed_all_reduce",
           _row(lambda x: c.compressed_all_reduce(x, "SUM", "float16"),
                lambda x: x.half().to(x.dtype)), [In((3, 4))], grad=False),
    OpCase("reduce", _row(lambda x: c.reduce(x, 0), lambda x: x.clone()), [In((2, 3))]),
    OpCase("broadcast", _row(lambda x: c.broadcast(x, 0), lambda x: x.clone()), [In((5,))],
           dtypes=("float32", "bfloat16")),
    OpCase("all_gather", _row(c.all_gather, lambda x: x.unsqueeze(0)), [In((2, 3))]),
    OpCase("reduce_scatter", _row(c.reduce_scatter, lambda x: x[0].clone()), [In((1, 4))]),
    OpCase("send", _row(_send_recv, lambda x: x.clone()), [In((2, 2))], grad=False),
    OpCase("recv", _row(_send_recv, lambda x: x.clone()), [In((3,))], grad=False),
    OpCase("pack_bucket", _row(_pack, lambda x, y: torch_cat(x, y) / 2),
           [In((3, 4)), In((5,))], dtypes=("float32", "float64")),
] + [
    OpCase(name, _row(_split, lambda x: x.clone()), [In((3, 4))], grad=False)
    for name in ("all_reduce_start", "all_reduce_progress", "all_reduce_wait")
]
