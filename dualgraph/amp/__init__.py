"""Mixed precision: ``autocast`` (per-op low-precision compute) and ``GradScaler`` (dynamic
loss scaling), as ``torch.amp``; see docs/amp.md.

``cpu`` and ``cuda`` hold torch's device-bound spellings (``torch.cpu.amp.autocast``,
``torch.cuda.amp.GradScaler``): the CPU ones default to bfloat16 and work; the CUDA ones
warn and stay disabled, as they do in a CPU-only torch.
"""
from __future__ import annotations

import types

from .. import dtypes
from .autocast_mode import (autocast, get_autocast_dtype, is_autocast_available,  # noqa: F401
                            is_autocast_enabled)
from .grad_scaler import GradScaler  # noqa: F401


def _device_namespace(device: str, default_dtype) -> types.SimpleNamespace:
    """``autocast`` and ``GradScaler`` bound to ``device``, with torch's per-device
    signatures (``torch.cpu.amp.autocast(enabled=True, dtype=torch.bfloat16, ...)``)."""

    class DeviceAutocast(autocast):
        __doc__ = f"``dg.autocast('{device}', ...)`` (``torch.{device}.amp.autocast``)."

        def __init__(self, enabled: bool = True, dtype=default_dtype,
                     cache_enabled: bool = True):
            super().__init__(device, dtype, enabled, cache_enabled)

    class DeviceGradScaler(GradScaler):
        __doc__ = f"``dg.amp.GradScaler('{device}', ...)`` (``torch.{device}.amp``)."

        def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                     backoff_factor: float = 0.5, growth_interval: int = 2000,
                     enabled: bool = True):
            super().__init__(device, init_scale, growth_factor, backoff_factor,
                             growth_interval, enabled)

    DeviceAutocast.__name__ = DeviceAutocast.__qualname__ = "autocast"
    DeviceGradScaler.__name__ = DeviceGradScaler.__qualname__ = "GradScaler"
    return types.SimpleNamespace(autocast=DeviceAutocast, GradScaler=DeviceGradScaler)


cpu = _device_namespace("cpu", dtypes.bfloat16)
cuda = _device_namespace("cuda", dtypes.float16)
