"""Which elementwise nodes can call a NumPy ufunc directly (and so write into ``out=``).

An op qualifies when its scalar expression (``elementwise=``) is one ufunc applied to its
inputs and number literals (``{0} + {1}``, ``maximum({0}, 0)``, ``exp({0})``), its inputs
already have the output dtype (float32 or float64, so the kernel's promotion is a no-op),
and the ufunc gives exactly the kernel's result on a probe of special values (NaN, infs,
signed zeros, ...) for that dtype. The probe keeps the kernel the definition: ``sign`` is
``sign({0})`` in its template but maps NaN to 0 like torch, so it keeps its kernel.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..graph import Node, Value

OPERATORS = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide,
             "**": np.power, "//": np.floor_divide, "%": np.remainder}
_BINARY = re.compile(r"\{(\d+)\} (\*\*|//|[-+*/%]) \{(\d+)\}")
_CALL = re.compile(r"(\w+)\((.*)\)")
_NUMBER = re.compile(r"-?\d+(\.\d*)?([eE][-+]?\d+)?")
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
PROBE = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-30, 88.0]


@dataclass(frozen=True)
class Lit:
    """A number written in the template itself (the ``0`` of ``maximum({0}, 0)``)."""
    value: float | int


def parse(template: str, attrs: dict):
    """``(ufunc, args)`` for a one-ufunc template, args being input positions or Lits;
    None for anything else."""
    if template == "-{0}":
        return np.negative, (0,)
    m = _BINARY.fullmatch(template)
    if m:
        return OPERATORS[m.group(2)], (int(m.group(1)), int(m.group(3)))
    m = _CALL.fullmatch(template)
    ufunc = getattr(np, m.group(1), None) if m else None
    if not isinstance(ufunc, np.ufunc):
        return None
    args = []
    for text in m.group(2).split(", "):
        arg = _arg(text, attrs)
        if arg is None:
            return None
        args.append(arg)
    return (ufunc, tuple(args)) if len(args) == ufunc.nin else None


def _arg(text: str, attrs: dict):
    if re.fullmatch(r"\{\d+\}", text):
        return int(text[1:-1])
    if _NUMBER.fullmatch(text):
        return Lit(float(text) if any(c in text for c in ".eE") else int(text))
    if re.fullmatch(r"\{\w+\}", text):
        val = attrs.get(text[1:-1])
        return Lit(val) if type(val) in (int, float) else None
    return None


def direct(node: Node):
    """``(ufunc, args)`` when ``node`` may call the ufunc instead of its kernel; else None."""
    op = node.op
    if op.elementwise is None or op.num_outputs != 1:
        return None
    dtype = node.outputs[0].dtype
    if dtype not in _DTYPES:
        return None
    for x in node.inputs:
        if isinstance(x, Value) and x.dtype != dtype:
            return None
        if not isinstance(x, Value) and type(x) not in (int, float):
            return None
    attrs = tuple(sorted((k, v) for k, v in node.attrs.items() if type(v) in (int, float)))
    if len(attrs) != len(node.attrs):
        return None
    literals = tuple((i, x) for i, x in enumerate(node.inputs) if not isinstance(x, Value))
    found = parse(op.elementwise, dict(attrs))
    if found is None or not agrees(op, dtype.name, literals, attrs):
        return None
    return found


@lru_cache(maxsize=None)
def agrees(op, dtype: str, literals: tuple, attrs: tuple) -> bool:
    """Does the ufunc give ``op``'s kernel's exact result (values, dtype, signed zeros) on
    every combination of probe values, with the node's literal inputs in place?"""
    ufunc, args = parse(op.elementwise, dict(attrs))
    positions = sorted({a for a in args if isinstance(a, int)} | {i for i, _ in literals})
    fixed = dict(literals)
    free = [i for i in positions if i not in fixed]
    grid = np.array(list(itertools.product(PROBE, repeat=len(free))), dtype=dtype)
    vals = {i: fixed[i] if i in fixed else grid[:, free.index(i)].copy() for i in positions}
    with np.errstate(all="ignore"):
        try:
            want = np.asarray(op.kernel(*(vals[i] for i in positions), **dict(attrs)))
            got = ufunc(*[vals[a] if isinstance(a, int) else a.value for a in args])
        except Exception:   # an op that rejects the probe keeps its kernel
            return False
    return (got.dtype == want.dtype and got.shape == want.shape
            and np.array_equal(got, want, equal_nan=True)
            and np.array_equal(np.signbit(got), np.signbit(want)))
