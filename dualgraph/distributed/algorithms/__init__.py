"""Algorithms on top of the collectives: data parallelism's communication hooks
(``ddp_comm_hooks``), as ``torch.distributed.algorithms``."""
from . import ddp_comm_hooks  # noqa: F401
