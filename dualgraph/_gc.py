"""The garbage collector and the eager tape: the objects that exist when ``import
dualgraph`` ends are frozen (``gc.freeze``), so that full collections skip them.

Each op recorded eagerly leaves a few Python objects on the autograd tape (its node, the
saved tensors' version pairs) that live until the backward: long enough to reach the oldest
generation. Python runs a full collection whenever that generation has grown by a quarter,
and a full collection walks every tracked object of the process, ~40k after importing
Python's, NumPy's and dualgraph's modules (~20 ms of CPU). An eager training step of a few
hundred small ops paid that walk every few steps: a third of some ported programs' time
(an RNN with decay gates 40 -> 22 ms for 4 steps, against torch's 14; docs/benchmarks.md).
Frozen objects (modules, classes, functions: nothing a program drops later) are never walked
again; everything made afterwards is collected as before. The cost: a cycle of objects made
*before* the import and dropped after it is never freed. ``DUALGRAPH_GC_FREEZE=0`` leaves
the collector alone.
"""
from __future__ import annotations

import gc
import os


def freeze_import_time_objects() -> None:
    """``gc.freeze()``, unless ``DUALGRAPH_GC_FREEZE=0``."""
    if os.environ.get("DUALGRAPH_GC_FREEZE", "1") != "0":
        gc.freeze()
