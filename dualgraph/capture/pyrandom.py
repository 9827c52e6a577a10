"""Python-level random generators a trace may draw from.

A number drawn from Python's ``random``, NumPy's global generator or a generator object of
the user's (``random.Random(0)``, ``np.random.default_rng()``, a ``RandomState``) while
tracing would be baked into the graph: every later call would take the first call's branch
or scale. :class:`Draws` notes their states before a trace; a trace that changed one can't
be one graph (``compile.py`` then runs the function's Python at every call, which draws as
eager does), and an aborted trace puts them back, so that the run that follows draws the
same numbers.

>>> import random
>>> rand = random.Random(0)
>>> draws = Draws({"rand": rand})
>>> _ = rand.random()
>>> draws.drawn()
True
>>> draws.restore()
>>> draws.drawn()
False
"""
from __future__ import annotations

import random

import numpy as np

from ..errors import CaptureError
from ..ops import random as rnd
from .escape import user_code, reachable
from .records import _name

_GLOBAL_NUMPY = np.random.mtrand._rand   # (what np.random.uniform() draws from)


class Draws:
    """The states of the generators a trace may draw from: Python's and NumPy's global
    ones and those reachable from ``roots`` (name -> object). Also for a split call's
    trace, which runs its Python at every call: a trace that fails there is followed by
    the eager run, which must draw the numbers the trace drew."""

    def __init__(self, roots: dict):
        # (and the PCG64 stream of dualgraph's global generator: nn.init and the samplers
        # draw from it; dg.rand and its kin draw through graph nodes, ops/random.py)
        self.generators = [random._inst, _GLOBAL_NUMPY, rnd.default_generator.rng]
        # (also through the code of their classes: a module's forward may draw from a
        # generator that only its module's globals name)
        for _, g in reachable({**roots, **user_code(roots)}, _KINDS):
            if all(g is not known for known in self.generators):
                self.generators.append(g)
        self.before = [_state(g) for g in self.generators]

    def drawn(self) -> bool:
        """Whether any of them was drawn from since."""
        return not all(_same(_state(g), s) for g, s in zip(self.generators, self.before))

    def restore(self) -> None:
        """Put their states back."""
        for g, state in zip(self.generators, self.before):
            _set_state(g, state)


_KINDS = (random.Random, np.random.Generator, np.random.RandomState)


def _state(g):
    if isinstance(g, np.random.Generator):
        return g.bit_generator.state
    return g.getstate() if isinstance(g, random.Random) else g.get_state()


def _set_state(g, state) -> None:
    if isinstance(g, np.random.Generator):
        g.bit_generator.state = state
    elif isinstance(g, random.Random):
        g.setstate(state)
    else:
        g.set_state(state)


def _same(a, b) -> bool:
    """Equal states (NumPy's hold arrays: compared by value)."""
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and bool((a == b).all())
    if isinstance(a, dict):
        return (isinstance(b, dict) and a.keys() == b.keys()
                and all(_same(a[k], b[k]) for k in a))
    if isinstance(a, tuple):
        return (isinstance(b, tuple) and len(a) == len(b)
                and all(_same(x, y) for x, y in zip(a, b)))
    return a == b


def defined_at(fn) -> str:
    """Where ``fn`` (a function or a module's ``forward``) is defined: ``file:line``."""
    code = getattr(getattr(fn, "forward", fn), "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code else _name(fn)


class PythonRandom(CaptureError):
    """A trace drew from a Python-level generator (see the module docstring)."""

    why_every_call = ("it draws from Python's random module, NumPy's global generator or a "
                      "generator object: the numbers drawn steer its Python or its ops")

    def __init__(self, fn):
        where = defined_at(fn)
        super().__init__(
            "Python's random module, NumPy's global generator or a generator object was "
            "drawn from while tracing: the numbers drawn would be baked into the graph, the "
            "same at every call", where,
            "Draw them outside the compiled function and pass them in (a bool or a "
            "tensor), or use dualgraph's random ops (dg.rand, dg.randint, dropout), which "
            "draw anew at every call.")
