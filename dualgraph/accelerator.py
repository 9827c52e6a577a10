"""``dg.accelerator``: torch.accelerator's queries, answered for the CPU (no accelerator).

>>> import dualgraph as dg
>>> dg.accelerator.is_available(), dg.accelerator.current_accelerator()
(False, None)
"""
from __future__ import annotations


def is_available() -> bool:
    """False: dualgraph computes on the CPU, which torch does not count as an accelerator."""
    return False


def current_accelerator(check_available: bool = False):
    """None: there is no accelerator."""
    return None


def device_count() -> int:
    return 0


def synchronize(device=None) -> None:
    """A no-op: CPU work is finished when the call that did it returns."""


def empty_cache() -> None:
    """A no-op."""


def memory_allocated(device_index=None) -> int:
    return 0
