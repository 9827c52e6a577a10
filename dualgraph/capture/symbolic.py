"""Python numbers a capture takes as graph inputs: a counter, a float attribute that changes.

Tracing bakes the Python numbers a function reads into its graph and guards them
(capture/pyvalues.py), so a value that changes at every call (a hand-written optimiser's
``state["step"] += 1``, a module's ``self.scale`` set by a schedule, a global step counter)
would retrace at every call. Once such a slot is seen to change between calls, or is
written by the traced call itself, the next trace gives the function a :class:`SymNumber`
in its place: a number whose arithmetic with Python numbers and other symbolic ones records
0-d int64 / float64 nodes by Python's rules (``1 - 0.9 ** step`` is a float64 computed as
Python computes it), and which meets a tensor as the Python number would (cast to the dtype
the op gives that number), so compiled equals eager value for value. The slot's value is
fed to the graph at every call and a value the trace wrote back (``state["step"] += 1``) is
a graph output, written back as a Python number of its type.

What needs the number's value in Python can't be traced: control flow (``if step % 10 ==
0``), a shape or an index (``range(step)``), ``math.exp(step)`` (``math.sqrt`` is taken,
:func:`math_functions`), a format, an op attribute.
Such a use raises :class:`NeedsValue` and is recorded on the tracer (in case the function
catches it), and the capture traces again with the value baked in and guarded, as before:
never a baked value that isn't guarded. Bools always stay guarded: they pick branches.

>>> import dualgraph as dg
>>> from dualgraph.capture.trace import Tracer
>>> import numpy as np
>>> holder = dg.tensor(3)
>>> with Tracer() as tracer:
...     step = SymNumber(tracer, int, "step", holder=holder)
...     out = dg.ones(2) * (1 - 0.5 ** step)
>>> [n.op.name for n in tracer.graph.nodes]
['cast', 'pow', 'sub', 'cast', 'mul']
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

from .._helpers import format_site, user_site
from .. import dtypes
from ..dispatch import modes
from ..graph.ir import Value
from ..ops import elementwise as ew
from ..tensor import MUTATIONS, Tensor
from .escape import reachable

F64, I64 = np.dtype(np.float64), np.dtype(np.int64)


class NeedsValue(Exception):
    """A traced Python number was used where its value is needed (see the module
    docstring): the capture traces again with the value baked in and guarded. (Not a
    TypeError or ValueError: op error handling must not turn it into an op's error.)"""


class SymNumber:
    """A Python int or float (``kind``) that a trace takes as a 0-d graph value: the input
    fed from ``holder`` (a 0-d tensor, bound on first use) or a value computed from it."""

    symbolic_number = True   # (dtypes.scalar_dtype and as_operand recognise it by this)
    __slots__ = ("tracer", "kind", "name", "holder", "_tensor")

    def __init__(self, tracer, kind, name, holder=None, tensor=None):
        self.tracer, self.kind, self.name = tracer, kind, name
        self.holder, self._tensor = holder, tensor
        tracer.numbers = True   # (dispatch lifts them from now on)

    @property
    def tensor(self) -> Tensor:
        """Its 0-d int64/float64 traced tensor."""
        if modes.tracer is not self.tracer:
            raise RuntimeError(f"the Python number {self.name} of a finished trace was used: "
                               "a traced number kept in Python state the capture does not "
                               "know (a list, an object it does not read)")
        if self._tensor is None:
            if type(self.holder._data) is not Value:
                self.tracer.value_of(self.holder)   # (binds it: a graph input)
            self._tensor = self.holder
        return self._tensor

    def needs_value(self, use: str):
        """Record that ``use`` needs the value, and raise :class:`NeedsValue`."""
        location = format_site(user_site())
        self.tracer.number_uses.append((self.name, use, location))
        raise NeedsValue(f"{self.name} is used as a Python {self.kind.__name__} ({use}) at "
                         f"{location}")

    # -- arithmetic: Python's rules, computed in int64 / float64 --------------------------
    def _binary(self, other, fn, reflected=False, true_div=False, power=False):
        if isinstance(other, SymNumber):
            other_kind = other.kind
        elif type(other) in (int, float, bool) or isinstance(other, float):
            other_kind = float if isinstance(other, float) else int
            other = other_kind(other)
        else:
            return NotImplemented   # (a tensor: its reflected method takes this as a number)
        kind = float if true_div or float in (self.kind, other_kind) else int
        if power and kind is int and (reflected or not isinstance(other, int) or other < 0):
            self.needs_value("an integer power, int or float by its sign")
        dt = F64 if kind is float else I64
        a = ew.cast_to(self.tensor, dt)
        b = ew.cast_to(other.tensor, dt) if isinstance(other, SymNumber) else other
        out = fn(b, a) if reflected else fn(a, b)
        return SymNumber(self.tracer, kind, self.name, tensor=out)

    def __add__(self, o): return self._binary(o, ew.add)
    def __radd__(self, o): return self._binary(o, ew.add, True)
    def __sub__(self, o): return self._binary(o, ew.sub)
    def __rsub__(self, o): return self._binary(o, ew.sub, True)
    def __mul__(self, o): return self._binary(o, ew.mul)
    def __rmul__(self, o): return self._binary(o, ew.mul, True)
    def __truediv__(self, o): return self._binary(o, ew.div, true_div=True)
    def __rtruediv__(self, o): return self._binary(o, ew.div, True, true_div=True)
    def __floordiv__(self, o): return self._binary(o, ew.floor_divide)
    def __rfloordiv__(self, o): return self._binary(o, ew.floor_divide, True)
    def __mod__(self, o): return self._binary(o, ew.remainder)
    def __rmod__(self, o): return self._binary(o, ew.remainder, True)
    def __pow__(self, o): return self._binary(o, ew.pow, power=True)
    def __rpow__(self, o): return self._binary(o, ew.pow, True, power=True)

    def __neg__(self):
        return SymNumber(self.tracer, self.kind, self.name, tensor=ew.neg(self.tensor))

    def __pos__(self):
        return self

    def __abs__(self):
        return SymNumber(self.tracer, self.kind, self.name, tensor=ew.abs(self.tensor))

    # -- what needs the value ---------------------------------------------------------------
    def __bool__(self): self.needs_value("a truth value: control flow")
    def __int__(self): self.needs_value("int()")
    def __float__(self): self.needs_value("float(), or a math function")
    def __index__(self): self.needs_value("an index, a size or a range")
    def __hash__(self): self.needs_value("a dict key or set member")
    def __eq__(self, o): self.needs_value("a comparison")
    def __ne__(self, o): self.needs_value("a comparison")
    def __lt__(self, o): self.needs_value("a comparison")
    def __le__(self, o): self.needs_value("a comparison")
    def __gt__(self, o): self.needs_value("a comparison")
    def __ge__(self, o): self.needs_value("a comparison")
    def __round__(self, n=None): self.needs_value("round()")
    def __trunc__(self): self.needs_value("math.trunc()")
    def __floor__(self): self.needs_value("math.floor()")
    def __ceil__(self): self.needs_value("math.ceil()")
    def __complex__(self): self.needs_value("complex()")
    def __format__(self, spec): self.needs_value("a format")
    def __str__(self): self.needs_value("str()")
    def __array__(self, *args, **kwargs): self.needs_value("a NumPy array")

    def __repr__(self):
        return f"<traced Python {self.kind.__name__} {self.name}>"


@contextlib.contextmanager
def math_functions(active: bool):
    """While a trace has symbolic numbers: ``math.sqrt`` (read from the ``math`` module at
    the call, as ``math.sqrt(c2)`` does) takes them too, giving the float64 square root
    NumPy computes, correctly rounded as ``math.sqrt``'s (a hand-written Adam's
    ``math.sqrt(bias_correction2)``). Other math functions need the value."""
    if not active:
        yield
        return
    real = math.sqrt

    def sqrt(x):
        if isinstance(x, SymNumber):
            return SymNumber(x.tracer, float, x.name, tensor=ew.sqrt(ew.cast_to(x.tensor, F64)))
        return real(x)

    math.sqrt = sqrt
    try:
        yield
    finally:
        math.sqrt = real


def lift(args) -> tuple:
    """An op's arguments (as they are when none is symbolic) with each :class:`SymNumber` a 0-d tensor of the dtype the op
    gives the Python number it stands for (``x * scale``: ``x``'s dtype, as eager)."""
    if not any(isinstance(a, SymNumber) for a in args):
        return args
    examples = []
    for a in args:
        if isinstance(a, SymNumber):
            examples.append(a.kind(0))
        elif isinstance(a, Tensor):
            examples.append(a._data)
        elif type(a) in (bool, int, float):
            examples.append(a)
    dt = dtypes.result_type(*examples)
    return tuple(ew.cast_to(a.tensor, dt) if isinstance(a, SymNumber) else a for a in args)


def in_attrs(attrs: dict) -> SymNumber | None:
    """A symbolic number among an op's attributes (a static value of the graph), if any."""
    for v in attrs.values():
        if isinstance(v, SymNumber):
            return v
        if type(v) in (tuple, list):
            for x in v:
                if isinstance(x, SymNumber):
                    return x
    return None



# The types of numbers that can be graph inputs, and the Python type each is traced as:
# NumPy's float64 scalars (``2. / (1. + np.exp(-10 * p)) - 1``, a schedule computed with
# NumPy) are floats (a subclass), and behave as Python floats in tensor arithmetic
NUMBER_KINDS = {int: int, float: float, np.float64: float}


class NumberInputs:
    """The slots (capture/pyvalues.py) of one compiled function that are graph inputs, the
    0-d tensor each is fed through, and those kept baked in (a use needed the value)."""

    def __init__(self):
        self.holders: dict = {}   # slot identity -> (slot, 0-d int64/float64 tensor)
        self.baked: dict = {}     # slot identity -> why it stays baked in
        # the same for the function's Python number arguments, by argument leaf position
        self.args: dict = {}      # leaf position -> (kind, 0-d tensor)
        self.baked_args: set = set()

    def promote_arg(self, index: int, value) -> bool:
        """Make argument leaf ``index`` (now ``value``, an int or float) a graph input."""
        kind = type(value)
        if index in self.baked_args or index in self.args or kind not in NUMBER_KINDS:
            return False
        array = np.array(value, I64 if NUMBER_KINDS[kind] is int else F64)
        self.args[index] = (kind, Tensor._make(array))
        return True

    def feed_args(self, leaves) -> None:
        for i, (kind, holder) in self.args.items():
            if i < len(leaves) and type(leaves[i]) is kind:
                holder._data[()] = leaves[i]

    def swap_args(self, tracer, leaves, names: list) -> list:
        """The argument leaves with a :class:`SymNumber` for each that is a graph input
        (and holds a number of its type); the positions swapped are ``tracer.arg_numbers``."""
        leaves = list(leaves)
        for i, (kind, holder) in self.args.items():
            if i < len(leaves) and type(leaves[i]) is kind:
                name = names[i] if i < len(names) else f"argument {i}"
                leaves[i] = SymNumber(tracer, NUMBER_KINDS[kind], name, holder=holder)
                tracer.arg_numbers.append(i)
        return leaves

    def promote(self, slot, kind) -> bool:
        """Make ``slot`` (holding a ``kind``, int or float) a graph input from the next
        trace on, unless it is kept baked in; whether it became one."""
        key = slot.identity()
        if key in self.baked or key in self.holders or kind not in (int, float):
            return False
        slot.number = kind
        value = slot.get()
        array = np.array(value if type(value) is kind else 0, I64 if kind is int else F64)
        self.holders[key] = (slot, Tensor._make(array))
        return True

    def bake(self, slot, why: str) -> None:
        """Keep ``slot`` baked in and guarded from now on (``why``: the use that needs it)."""
        key = slot.identity()
        self.holders.pop(key, None)
        slot.number = None
        self.baked[key] = why

    def feed(self) -> None:
        """Write the slots' current values into their tensors (the graph reads those
        arrays); a value of another type is guarded, not fed."""
        for slot, holder in self.holders.values():
            v = slot.get()
            if type(v) is slot.number:
                holder._data[()] = v

    def swap_in(self, tracer, names: dict) -> list:
        """Before a trace: each input slot holding a number of its type holds a
        :class:`SymNumber` instead; ``[(slot, value before, symbolic)]``."""
        swapped = []
        for slot, holder in self.holders.values():
            before = slot.get()
            if type(before) is slot.number:
                sym = SymNumber(tracer, slot.number, slot.name, holder=holder)
                names[id(holder)] = slot.name
                slot.set(sym)
                swapped.append((slot, before, sym))
        return swapped

    def writes(self, tracer, swapped: list) -> tuple[list, list]:
        """After the traced call, still tracing: ``(number writes, Python writes)``. A slot
        given a traced value (``state["step"] += 1``) has it written into its tensor as an
        in-place update (a graph output), ``(slot, tensor)``; one given a plain Python value
        (``step = 0``) is a Python write, ``(slot, value)``. Each slot holds its value from
        before again (the compiled call writes the new one)."""
        numbers, python = [], []
        for slot, before, sym in swapped:
            now = slot.get()
            if isinstance(now, SymNumber) and now is not sym:
                if now.kind is not slot.number:
                    now.needs_value(f"written back as a {now.kind.__name__}")
                holder = self.holders[slot.identity()][1]
                value = ew.cast_to(now.tensor, holder._data.dtype)
                tracer.note_mutation(holder)
                holder._data = value._data
                MUTATIONS[0] += 1
                numbers.append((slot, holder))
            elif not isinstance(now, SymNumber) and now is not before:
                python.append((slot, now))
            slot.set(before)
        return numbers, python

    @staticmethod
    def restore(swapped: list) -> None:
        """Give the slots their values from before a trace that failed."""
        for slot, before, _ in swapped:
            slot.set(before)



def leaked(roots: dict, result_leaves) -> tuple | None:
    """``(name, where)`` of a traced number kept where the capture does not write it back
    (state it does not read as a slot, the function's result), if any: such a trace can't
    be used. ``roots``: where the function keeps state (capture/escape.py)."""
    for v in result_leaves:
        if isinstance(v, SymNumber):
            return v.name, "returned"
    found = reachable(roots, SymNumber)
    return (found[0][1].name, f"in {found[0][0]}") if found else None
