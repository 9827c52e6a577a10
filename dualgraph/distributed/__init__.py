"""Distributed training on MPI, with ``torch.distributed``'s names (docs/distributed.md).

Launch one process per rank with ``mpiexec -n 2 python train.py``; a script run plainly is
a world of size 1. Every collective here writes its result into its tensor in place, as in
torch, and runs the registry op of ``ops/collective.py`` (so it traces into a compiled
graph and differentiates); ``dg.distributed.functional`` has the out-of-place forms.
``async_op=True`` starts the MPI operation and returns a :class:`Work` at once.

>>> import dualgraph as dg
>>> import dualgraph.distributed as dist
>>> dist.init_process_group("mpi")
>>> t = dg.ones(3) * (dist.get_rank() + 1)
>>> _ = dist.all_reduce(t)          # the sum over all ranks, in place
>>> dist.destroy_process_group()
"""
from .collectives import *  # noqa: F401,F403
from .collectives import __all__ as _collectives
from . import algorithms, functional, optim, pipeline  # noqa: F401,E402

__all__ = _collectives + ["algorithms", "functional", "optim"]
