"""float32 ``sin`` and ``cos`` loops: correctly rounded (but for rare ties), and the same
bits as a fused kernel's ``sin32`` / ``cos32``.

Each loop runs in two passes: a branch-free pass (which vectorises) over every element with
``|x| < 2**18`` evaluates ``fastmath._trig_core``, then a scan gives the rare huge,
infinite or NaN elements the scalar function's own result (libm's double sin/cos).
Unlike the other eager loops these run at every size: a fused kernel of a small graph
(``codegen/program.py``) calls ``sin32`` too, and compiled must equal eager.
"""
from __future__ import annotations

import numpy as np

from . import helper, loop
from .fastmath import _TRIG_LIMIT, _trig32, _trig_core


@helper(inline="always", error_model="numpy")
def _trig(x, out, quarter_turns):
    n = x.size
    for i in range(n):
        d = np.float64(x[i])
        out[i] = np.float32(_trig_core(d if abs(d) < _TRIG_LIMIT else 0.0, quarter_turns))
    for i in range(n):
        if not abs(np.float64(x[i])) < _TRIG_LIMIT:
            out[i] = _trig32(x[i], quarter_turns)


@loop
def sin(x, out):
    """``out = sin(x)`` over flat float32 arrays."""
    _trig(x, out, 0)


@loop
def cos(x, out):
    """``out = cos(x)`` over flat float32 arrays."""
    _trig(x, out, 1)
