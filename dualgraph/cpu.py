"""``dg.cpu``: torch.cpu's queries and its ``amp`` spellings, for dualgraph's one device.

>>> import dualgraph as dg
>>> dg.cpu.is_available(), dg.cpu.device_count()
(True, 1)
>>> with dg.cpu.amp.autocast():
...     dg.get_autocast_dtype("cpu")
dualgraph.bfloat16
"""
from __future__ import annotations

from .amp import cpu as amp  # noqa: F401  (torch.cpu.amp.autocast, .GradScaler)


def is_available() -> bool:
    """True: the CPU is always there."""
    return True


def device_count() -> int:
    """1, as torch.cpu.device_count()."""
    return 1


def current_device() -> str:
    return "cpu"


def synchronize(device=None) -> None:
    """A no-op: CPU work is finished when the call that did it returns."""
