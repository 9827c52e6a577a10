"""``dg.jit.inspect``: before capturing, list every tracing hazard by file and line.

The function runs once under an :class:`InspectTracer`, which builds the graph *and*
computes every value on the example inputs, so code that turns a traced tensor into Python
(``.item()``, ``bool(x)``, ``print(x)``) can be noted and then continue with the real value.
The function's bytecode is scanned for the hazards tracing can't see: globals read as
constants, ``print`` calls and global writes that run only while tracing.
"""
from __future__ import annotations

import dis
import sys
import types
from dataclasses import dataclass

import numpy as np

from .._helpers import format_site, user_site
from ..errors import CaptureError
from ..tensor import Tensor
from .._pytree import flatten
from .scope import readable_names
from .trace import Tracer

# `dg.tensor` (the function) shadows the module as a package attribute: look it up by name.
tensor_module = sys.modules[Tensor.__module__]

BAKED, GUARDED, BREAK, COND, ERROR, INFO = (
    "baked-in constant", "guarded specialisation", "graph break", "convertible to cond",
    "error", "handled")

_CONVERSIONS = {
    "bool()": (COND, "a Python branch on a tensor value",
               "use dg.where / dg.cond, or dg.jit.to_static to convert the `if`"),
    "print()/str()": (BREAK, "printing a traced tensor",
                      "return the value and print it outside, or print only when eager"),
}
_DEFAULT_CONVERSION = (BREAK, "a tensor converted to a Python value",
                       "keep it a tensor (e.g. dg.where instead of a Python comparison), or "
                       "move this line out of the compiled function")


@dataclass
class Hazard:
    location: str
    kind: str
    what: str
    fix: str

    def __str__(self):
        return f"{self.location}: [{self.kind}] {self.what}. Fix: {self.fix}"


class Report(list):
    """The hazards found, printable one a line."""

    def __str__(self):
        if not self:
            return "no tracing hazards found"
        return "\n".join(str(h) for h in self)


class InspectTracer(Tracer):
    """A tracer that also evaluates every node on concrete values."""

    def __init__(self, names=None):
        super().__init__(names)
        self.concrete: dict = {}
        self.hazards = Report()

    def bind(self, t, kind, name=None, shape=None, index=-1):
        array = t._data
        binding = super().bind(t, kind, name, shape, index)
        self.concrete[binding.value] = array
        return binding

    def constant(self, array):
        value = super().constant(array)
        self.concrete[value] = array
        return value

    def run(self, op, args, attrs):
        outs = super().run(op, args, attrs)
        arrays = [self._concrete_of(a) if isinstance(a, Tensor) else a for a in args]
        raw = op.kernel(*arrays, **attrs)
        values = (outs,) if op.num_outputs == 1 else outs
        raws = (raw,) if op.num_outputs == 1 else raw
        for v, r in zip(values, raws):
            self.concrete[v] = np.asarray(r)
        return outs

    def grad_value(self, leaf):
        value = super().grad_value(leaf)
        self.concrete[value] = leaf.grad._data
        return value

    def _concrete_of(self, t):
        return self.concrete[self.value_of(t)]

    def note_mutation(self, target):
        super().note_mutation(target)
        binding = self._bound.get(id(target))
        if binding is not None:
            who = "input" if binding.kind == "arg" else "captured tensor"
            self.hazards.append(Hazard(
                format_site(user_site()), INFO,
                f"in-place update of {who} {binding.value.name}",
                "none needed: the graph returns the new value and it is written back after "
                "each call"))

    def concretize(self, t, what):
        kind, why, fix = _CONVERSIONS.get(what, _DEFAULT_CONVERSION)
        self.hazards.append(Hazard(format_site(user_site()), kind, f"{why} ({what})", fix))
        return self._concrete_of(t)


def inspect(fn, *example_inputs) -> Report:
    """Run ``fn`` once on ``example_inputs`` and report every tracing hazard: tensor-to-Python
    conversions, data-dependent branches, Python side effects, mutation of captured
    tensors, globals baked in as constants, Python-number arguments, each classified with
    its one-line fix.

    >>> import dualgraph as dg
    >>> def f(x):
    ...     if x.sum() > 0:
    ...         return x * 2
    ...     return x
    >>> print(dg.jit.inspect(f, dg.ones(2)))   # doctest: +ELLIPSIS
    ...: [convertible to cond] a Python branch on a tensor value (bool()). Fix: ...
    """
    tracer = InspectTracer(names=readable_names(fn))
    report = tracer.hazards
    leaves, _ = flatten((example_inputs, {}))
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, (bool, int, float)):
            report.append(Hazard(
                f"argument {i}", GUARDED, f"Python number {leaf!r} passed as an argument: "
                "dg.compile captures one graph per value",
                "pass it as a tensor (dg.tensor(value)) if it changes between calls"))
    report.extend(_scan_code(fn))
    tensor_module.concretize_hook = tracer.concretize
    try:
        with tracer:
            index = 0
            for leaf in leaves:
                if isinstance(leaf, Tensor):
                    tracer.bind(leaf, "arg", index=index)
                    index += 1
            fn(*example_inputs)
    except CaptureError as e:
        report.append(Hazard(e.location, ERROR, e.reason, e.fix))
    except Exception as e:   # anything else that stops tracing is the last hazard
        report.append(Hazard(format_site(_last_user_site(e)), ERROR,
                             f"{type(e).__name__}: {e}", "see the message"))
    finally:
        tensor_module.concretize_hook = None
    return report


def _last_user_site(exc):
    import traceback
    from .._helpers import _is_internal
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not _is_internal(frame.filename):
            return (frame.filename, frame.lineno)
    return None


_SAFE_GLOBAL_TYPES = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)


def _scan_code(fn) -> list:
    """Hazards visible in the bytecode: global constants, prints, global writes."""
    target = getattr(fn, "forward", fn)
    code = getattr(target, "__code__", None)
    if code is None:
        return []
    found = []
    globals_ = getattr(target, "__globals__", {})
    for c in _code_objects(code):
        for ins in dis.get_instructions(c):
            line = ins.positions.lineno if ins.positions else None
            where = f"{c.co_filename}:{line}"
            if ins.opname == "LOAD_GLOBAL" and ins.argval in globals_:
                val = globals_[ins.argval]
                if ins.argval == "print":
                    continue
                if isinstance(val, (bool, int, float, str, list, dict, tuple, np.ndarray)):
                    found.append(Hazard(where, BAKED, f"global {ins.argval} = {_short(val)} is "
                                        "read at trace time and baked into the graph",
                                        f"pass {ins.argval} as an argument (a tensor if it "
                                        "changes)"))
            elif ins.opname == "LOAD_GLOBAL" and ins.argval == "print":
                found.append(Hazard(where, BREAK, "print() runs once, while tracing, not at "
                                    "every call", "print outside the compiled function"))
            elif ins.opname in ("STORE_GLOBAL", "STORE_DEREF"):
                found.append(Hazard(where, BREAK, f"assignment to outer variable "
                                    f"{ins.argval} runs once, while tracing",
                                    "return the value instead of storing it"))
    return _dedupe(found)


def _code_objects(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _short(val) -> str:
    text = repr(val)
    return text if len(text) < 40 else text[:37] + "..."


def _dedupe(hazards):
    seen, out = set(), []
    for h in hazards:
        key = (h.location, h.what)
        if key not in seen:
            seen.add(key)
            out.append(h)
    return out
