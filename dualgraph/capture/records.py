"""What ``explain()`` lists of a compiled function: one :class:`Record` per capture, graph
break, split piece or fallback, with the times of its phases. Its own module so that the
capture (compile.py) and the splitting at graph breaks (split.py) both write them."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..kernels import native

RETRACE_LIMIT = 8   # graphs cached per compiled function before it runs eagerly


@dataclass
class Record:
    """One entry of ``explain()``: a capture, a graph break or a fallback."""
    kind: str   # "capture", "retrace", "break", "piece", "limit", "eager", "python",
    #             "static" (symbolic dims given up)
    detail: str
    fix: str = ""
    location: str = ""
    guards: list = field(default_factory=list)
    nodes: int = 0
    times: dict = field(default_factory=dict)   # phase -> seconds, in order (a capture's)
    entry: object = None    # the Entry this capture compiled (not one it reused), or None

    def describe_times(self) -> str:
        """``trace 41.0 ms, ..., first run 1.21 s (kernels: 3 compiled in 0.93 s)``: the
        phases of the capture, then the first run of each graph compiled for it, and the
        kernels its exact groups compiled at their second call (tiered)."""
        parts = [f"{phase} {_duration(seconds)}" for phase, seconds in self.times.items()]
        if self.entry is not None:
            for name, exe in (("first run", self.entry.executable),
                              ("first backward", self.entry.backward_executable)):
                if exe is not None and exe.first_run is not None:
                    parts.append(f"{name} {_describe_run(*exe.first_run)}")
                    late = exe.deferred_compiles()
                    if late is not None and _kernels(late):
                        parts.append(f"then at its second call: kernels: {_kernels(late)}")
        return ", ".join(parts)


def _describe_run(seconds: float, kernels: native.Activity) -> str:
    made = _kernels(kernels)
    return _duration(seconds) + (f" (kernels: {made})" if made else "")


def _kernels(kernels: native.Activity) -> str:
    """``3 compiled in 0.93 s, 2 loaded from the disk cache in 4.0 ms`` (empty: none)."""
    made = []
    if kernels.compiled:
        made.append(f"{kernels.compiled} compiled in {_duration(kernels.compiled_s)}")
    if kernels.loaded:
        made.append(f"{kernels.loaded} loaded from the disk cache in "
                    f"{_duration(kernels.loaded_s)}")
    return ", ".join(made)


def _duration(seconds: float) -> str:
    """``1.23 s`` from a second on, ``12.3 ms`` below (compile phases span both)."""
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__
