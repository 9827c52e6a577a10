"""``dg.cuda``: torch.cuda's queries, answered for a CPU-only framework.

Programs ask these to choose a device (``"cuda" if dg.cuda.is_available() else "cpu"``) and
to seed or report memory; the answers are those of a CPU-only torch build: no devices, zero
bytes, seeding is a no-op. Calls that only make sense with a GPU raise a ``RuntimeError``.

>>> import dualgraph as dg
>>> dg.cuda.is_available(), dg.cuda.device_count()
(False, 0)
"""
from __future__ import annotations

from .amp import cuda as amp  # noqa: F401  (torch.cuda.amp: disabled here, with a warning)


def _no_gpu(name: str):
    def call(*args, **kwargs):
        raise RuntimeError(f"dg.cuda.{name}() needs a CUDA device, and dualgraph runs on the "
                           "CPU only; guard the call with dg.cuda.is_available()")
    call.__name__ = name
    call.__doc__ = f"Raises: ``{name}`` needs a GPU (see the module docstring)."
    return call


def is_available() -> bool:
    """False: dualgraph has no CUDA backend."""
    return False


def device_count() -> int:
    """0 CUDA devices."""
    return 0


def is_initialized() -> bool:
    return False


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return False


def manual_seed(seed: int) -> None:
    """A no-op, as in a CPU-only torch (seed the CPU generator with ``dg.manual_seed``)."""


manual_seed_all = manual_seed


def seed() -> None:
    """A no-op (no CUDA generators)."""


seed_all = seed


def empty_cache() -> None:
    """A no-op (no CUDA memory is held)."""


def memory_allocated(device=None) -> int:
    """0 bytes (no CUDA memory), as in a CPU-only torch."""
    return 0


max_memory_allocated = memory_reserved = max_memory_reserved = memory_allocated

for _name in ("synchronize", "current_device", "set_device", "get_device_name",
              "get_device_capability", "get_device_properties", "mem_get_info",
              "reset_peak_memory_stats", "ipc_collect", "Stream", "Event", "stream"):
    globals()[_name] = _no_gpu(_name)
del _name
