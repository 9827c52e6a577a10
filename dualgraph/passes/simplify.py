"""Algebraic simplification: local rewrites as data, run by one small driver.

A rule is a row ``Rule(pattern, replacement, comment)``. Patterns are trees of ``P(op,
*inputs, **attrs)`` (``op`` an OpDef) whose leaves are ``Var``s (bind any operand,
optionally tested) or, for attrs, plain values that must be equal; ``P(op, Parts(name))``
binds all the inputs of a variadic op (``cat``) as one list. A replacement gets the
bindings (``m.x``; ``m.constants``: the graph's constant arrays) and returns an existing
Value, a ``Call`` to emit instead (itself simplified again), or None to decline.

The driver, not the rules, guarantees safety: a rewrite is taken only when the replacement
has exactly the type (shape, dims, dtype) of the value it replaces. Some rules lean on that
on purpose: ``reshape(x) -> x`` fires only when the reshape did not change the shape.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable

import numpy as np

from ..dtypes import holds_exactly, result_type
from ..graph import Graph, Node, Value
from ..graph.ir import infer_types, same_type
from ..ops.elementwise import (ADD, CAST, DIV, ERF, GELU, GELU_TANH, GT, HARDSIGMOID, HARDSWISH,
                               HARDTANH, LOG, LT, MAXIMUM, MINIMUM, MUL, NEG, POW, SQRT, SUB,
                               TANH, WHERE, expand_power, power_by_products)
from ..ops.conv import AVG_POOL2D, CONV2D
from ..ops.creation import FULL, FULL_LIKE
from ..ops.linalg import LINEAR, MATMUL
from ..ops.opdef import OpDef
from ..ops.reduce import LOG_SOFTMAX, MEAN, SOFTMAX
from ..ops.shape import (CAT, EXPAND, PERMUTE, RESHAPE, SELECT, SLICE, SLICE_BACKWARD,
                         SLICE_UPDATE, STACK)
from .core import Builder, Report

MAX_DEPTH = 16   # rewrites of one node's rewrite; every rule shrinks the graph, so never hit


# -- patterns ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Var:
    """Binds an operand (or attr value) to ``name``; ``test(operand, constants)`` must hold.
    The same name twice in a pattern must bind the same operand."""
    name: str
    test: Callable | None = None


@dataclass(frozen=True)
class Parts:
    """As the only input of a pattern: binds the list of all of a node's inputs."""
    name: str


@dataclass
class P:
    """Matches a value computed by ``op`` on inputs matching ``inputs`` with attrs matching
    ``attrs``; inputs of commutative binary ops match in either order."""
    op: OpDef
    inputs: tuple
    attrs: dict

    def __init__(self, op: OpDef, *inputs, **attrs):
        self.op, self.inputs, self.attrs = op, inputs, attrs


@dataclass
class Call:
    """An op call the driver emits: the replacement of a rewrite, or a node being copied."""
    op: OpDef | None
    inputs: list
    attrs: dict = field(default_factory=dict)


def call(op: OpDef, inputs, **attrs) -> Call:
    """A Call to ``op``: the replacement a rule returns."""
    return Call(op, list(inputs), attrs)


def match(pat, operand, env: dict, constants: dict) -> dict | None:
    """Match ``pat`` against an operand (a new-graph Value or literal) or a root Call or
    Node."""
    if isinstance(pat, Var):
        return _bind(pat, operand, env, constants)
    if isinstance(operand, Value):
        node = operand.producer
    else:   # (a literal has no producer)
        node = operand if isinstance(operand, (Call, Node)) else None
    variadic = len(pat.inputs) == 1 and isinstance(pat.inputs[0], Parts)
    if node is None or node.op is not pat.op or (len(node.inputs) != len(pat.inputs)
                                                 and not variadic):
        return None
    for name, want in pat.attrs.items():
        got = node.attrs.get(name)
        env = _bind(want, got, env, constants) if isinstance(want, Var) else (
            env if got == want else None)
        if env is None:
            return None
    if variadic:
        return {**env, pat.inputs[0].name: list(node.inputs)}
    orders = [node.inputs]
    if pat.op.commutative and len(node.inputs) == 2:
        orders.append(node.inputs[::-1])
    for inputs in orders:
        found = env
        for p, x in zip(pat.inputs, inputs):
            found = (_bind(p, x, found, constants) if isinstance(p, Var)   # (most are)
                     else match(p, x, found, constants))
            if found is None:
                break
        else:
            return found
    return None


def _bind(var: Var, operand, env: dict, constants: dict) -> dict | None:
    if var.test is not None and not var.test(operand, constants):
        return None
    if var.name in env:
        return env if env[var.name] is operand else None
    return {**env, var.name: operand}


# -- operand tests -------------------------------------------------------------------------
def _is_number(x, constants=None) -> bool:
    return type(x) in (int, float)


def _equals(n):
    """True for the literal ``n`` (not a bool), a constant whose elements all equal it, or
    a fill with it (``full``, ``full_like``: what a chosen ``where`` branch becomes)."""
    def test(x, constants):
        if isinstance(x, Value):
            if x in constants:
                return bool((constants[x] == n).all())
            node = x.producer
            return (node is not None and node.op in (FULL, FULL_LIKE)
                    and _is_number(node.attrs["fill_value"]) and node.attrs["fill_value"] == n)
        return _is_number(x) and x == n
    return test


def _is_value(x, constants) -> bool:
    return isinstance(x, Value)


def _scalar(x, constants):
    """The number a literal or 0-d constant holds (None for anything else)."""
    if _is_number(x):
        return x
    if isinstance(x, Value) and x in constants and constants[x].ndim == 0:
        return constants[x].item()
    return None


def _constant_truth(x, constants):
    """True or False for a bool literal or a constant whose elements are all one of them
    (None for anything else)."""
    if type(x) is bool:
        return x
    if isinstance(x, Value) and x in constants and constants[x].dtype == np.bool_:
        values = constants[x]
        return True if values.all() else False if not values.any() else None
    return None


def _is_identity(perm, constants) -> bool:
    return tuple(perm) == tuple(range(len(perm)))


# -- the rules -----------------------------------------------------------------------------
@dataclass
class Rule:
    pattern: P
    replace: Callable   # (bindings) -> Value | Call | None
    comment: str


def _fold_scales(m):
    # only when the whole chain stays in x's dtype (an int chain times a float would move
    # the point where it becomes float) and x*(c*d) equals (x*c)*d: for integers when c*d
    # is in the dtype's range (wrapped products agree either way); for floats when c or d
    # is a power of two (scaling by it commutes with rounding, so both round once) and
    # neither shrinks (|c|, |d| >= 1: an intermediate overflows only if the result does,
    # and nothing rounds twice among subnormals). (x*0.1)*3 rounds twice and x*0.3 once:
    # they differ in the last bit, so it stays two products (one fused loop anyway).
    dtype = m.x.dtype
    if not result_type(m.x, m.c) == result_type(m.x, m.d) == dtype:
        return None
    product = m.c * m.d
    if np.issubdtype(dtype, np.integer):
        bounds = np.iinfo(dtype)
        exact = bounds.min <= product <= bounds.max
    else:
        exact = (min(abs(m.c), abs(m.d)) >= 1
                 and (_power_of_two(m.c) or _power_of_two(m.d)))
    return call(MUL, [m.x, product]) if exact else None


def _power_of_two(v) -> bool:
    return math.frexp(float(v))[0] in (0.5, -0.5)


def _fold_casts(m):
    # exact only when the first cast loses nothing (bf16 -> f32 -> bf16 is x; f32 -> bf16
    # -> f32 rounds, so it stays)
    if not holds_exactly(np.dtype(m.mid), m.x.dtype):
        return None
    return m.x if np.dtype(m.to) == m.x.dtype else call(CAST, [m.x], dtype=m.to)


def _power_products(m):
    # the pow kernel's own products (ops/elementwise.py), so compiled == eager: only where
    # x already has the result's dtype (the kernel casts first; the driver checks types)
    exponent = _scalar(m.c, m.constants)
    if exponent is None or not power_by_products(m.x.dtype, exponent):
        return None
    return expand_power(m.x, exponent, lambda a, b: call(MUL, [a, b]),
                        lambda a: call(SQRT, [a]), lambda a: call(DIV, [1.0, a]))


def _bound_by(op):
    # clamp's where(x < lo, lo, x) is maximum(x, lo) (and where(x > hi, hi, x) minimum):
    # both keep x's NaN; a fused loop runs them in one pass where the where and its bool
    # mask are two NumPy passes (comparisons do not fuse)
    return lambda m: call(op, [m.x, m.c]) if m.c == m.d else None


def _hard_gate(v):
    # hardsigmoid's ops (the kernels of hardsigmoid and hardswish run them: the same bits),
    # the clamp and scale the epilogue rules read
    clamp = call(MINIMUM, [call(MAXIMUM, [call(ADD, [v, 3.0]), 0.0]), 6.0])
    return call(DIV, [clamp, 6.0])


_NUMPY = {DIV: np.divide, MUL: np.multiply}


def _scale_before_clamp(op):
    # clamp(x, lo, hi) / s -> clamp(x / s, lo / s, hi / s) (and * s) for a number s > 0:
    # rounding is monotone, so fl(x / s) is below fl(lo / s) exactly where x is below lo,
    # and the result is the same bits (NaN stays NaN). The scale then sits next to the
    # layer before the clamp, where fold_batchnorm folds it into the weights: torch's
    # hard-sigmoid, relu6(y + 3) / 6, becomes ONNX's clamp(y / 6 + 0.5, 0, 1)
    def rewrite(m):
        dtype, s = m.x.dtype, _scalar(m.s, m.constants)
        if (dtype.kind != "f" or s is None or not 0 < s < math.inf
                or result_type(m.x, m.s) != dtype):
            return None
        scaled = lambda v: float(_NUMPY[op](dtype.type(v), dtype.type(s)))
        return call(MINIMUM, [call(MAXIMUM, [call(op, [m.x, m.s]), scaled(m.c)]),
                              scaled(m.d)])
    return rewrite


def _global_mean(m):
    # an average pool whose one window is the whole unpadded plane (global average
    # pooling: adaptive_avg_pool2d(x, 1), squeeze-and-excitation) is a mean: one reduction
    # where the pool's kernel adds the plane's kh*kw shifted views one by one
    x, kernel, pads = m.x, tuple(m.k), tuple(m.pad)
    if (isinstance(x, Value) and x.ndim >= 3 and kernel == tuple(x.shape[-2:])
            and not any(pads) and not m.divisor):
        return call(MEAN, [x], dims=(x.ndim - 2, x.ndim - 1), keepdim=True)
    return None


def _chosen_branch(m):
    # where(True, a, b) is a and where(False, a, b) is b, broadcast to the result's shape
    # and cast to its dtype, as the kernel does (zero_() and fill_() trace as where(True,
    # value, x)); a number becomes a fill, shaped like an operand of the result's shape
    # when the shape has symbols
    want = WHERE.infer(m.cond, m.a, m.b)
    shape, dtype = tuple(want.shape), np.dtype(want.dtype)
    chosen = m.a if _constant_truth(m.cond, m.constants) else m.b
    if isinstance(chosen, Value):
        same_shape = tuple(chosen.shape) == shape
        if chosen.dtype != dtype:
            chosen = call(CAST, [chosen], dtype=dtype)
        return chosen if same_shape else call(EXPAND, [chosen], shape=shape)
    if not _is_number(chosen) and type(chosen) is not bool:
        return None
    like = [v for v in (m.cond, m.a, m.b) if isinstance(v, Value) and tuple(v.shape) == shape]
    if like:
        return call(FULL_LIKE, [like[0]], fill_value=chosen, dtype=dtype)
    if all(type(n) is int for n in shape):
        return call(FULL, [], shape=shape, fill_value=chosen, dtype=dtype)
    return None


def _compose(p, q) -> tuple:
    # permute(permute(x, p), q)[i] reads x's dim p[q[i]]
    return tuple(p[i] for i in q)


def _join_slice_grads(m):
    # Two gradients of slices of one shape, in adjacent blocks of one dim (the parts of a
    # split, or x[:, t] and x[:, t + 1] of a loop): the block is the parts concatenated,
    # and the whole array when the blocks tile it; zeros, writes and additions go away.
    # (Cats of cats along the same dim are flattened, so a chain of n parts is one cat.)
    dim, lo, hi = _adjacent_blocks(m.i, m.j)
    if dim is None:
        return None
    first, second = (m.a, m.b) if m.i[dim][0] == lo else (m.b, m.a)
    joined = call(CAT, _cat_parts(first, dim) + _cat_parts(second, dim), dim=dim)
    index = m.i[:dim] + ((lo, hi, 1),) + m.i[dim + 1:]
    if lo == 0 and hi == m.x.shape[dim] and all(k is None for k in m.i[:dim] + m.i[dim + 1:]):
        return joined
    return call(SLICE_BACKWARD, [joined, m.x], index=index)


def _adjacent_blocks(i: tuple, j: tuple):
    """``(dim, start, stop)`` when slice indices ``i`` and ``j`` differ in one dim only,
    where both take adjacent unit-step blocks; else ``(None, None, None)``."""
    differ = [d for d, (u, v) in enumerate(zip(i, j)) if u != v]
    if len(i) != len(j) or len(differ) != 1:
        return None, None, None
    (d,) = differ
    u, v = i[d], j[d]
    if u is None or v is None or u[2] != 1 or v[2] != 1 or (u[1] != v[0] and v[1] != u[0]):
        return None, None, None
    return d, min(u[0], v[0]), max(u[1], v[1])


def _select_as_slice(m):
    # select is the block x[.., k:k+1, ..] with its dim dropped: under a reshape, the
    # block itself, so that the reshapes merge (and vanish where the block's shape is kept)
    index = tuple((m.k, m.k + 1, 1) if i == m.dim else None for i in range(m.x.ndim))
    return call(RESHAPE, [call(SLICE, [m.x], index=index)], shape=m.s)


def _stack_as_cat(m):
    # the cat of the parts, each with the new dim: what the cat rules (and batch_linears'
    # per-step blocks, joined again by _sliced_whole) read
    shape = tuple(m.parts[0].shape)
    block = shape[:m.dim] + (1,) + shape[m.dim:]
    return call(CAT, [call(RESHAPE, [x], shape=block) for x in m.parts], dim=m.dim)


def _sliced_whole(m):
    # cat(x[:, 0:1], x[:, 1:2], ..., x[:, n-1:n], dim=1) is x: a batched product's result
    # cut into per-step blocks (batch_linears) that a sum of slice gradients joined again
    source, at = None, 0
    for part in m.parts:
        node = getattr(part, "producer", None)
        if node is None or node.op is not SLICE:
            return None
        index = node.attrs["index"]
        if source is None:
            source = node.inputs[0]
        dim = m.dim % source.ndim
        block = index[dim] if len(index) == source.ndim else None
        if (node.inputs[0] is not source or block is None or tuple(block[:1]) != (at,)
                or block[2] != 1 or any(k is not None for k in index[:dim] + index[dim + 1:])):
            return None
        at = block[1]
    return source if at == source.shape[dim] else None


def _zero_padding(v, constants):
    """``(x, ((top, bottom), (left, right)))`` where ``v`` is ``x`` with zeros around its
    last two dims and nothing else: ``F.pad``'s form (``slice_update`` of ``x`` into a
    zero fill, at unit steps) or an imported ONNX ``Pad``'s (a ``cat`` of zero constants
    and ``x`` along one of those dims); else None."""
    node = getattr(v, "producer", None)
    zero = _equals(0)
    if node is None or v.ndim != 4:
        return None
    if node.op is SLICE_UPDATE and zero(node.inputs[0], constants):
        x, index = node.inputs[1], node.attrs["index"]
        if (not isinstance(x, Value) or len(index) != 4 or index[0] is not None
                or index[1] is not None):
            return None
        pads = []
        for d in (2, 3):
            block = index[d] or (0, v.shape[d], 1)
            if block[2] != 1 or block[1] - block[0] != x.shape[d]:
                return None
            pads.append((block[0], v.shape[d] - block[1]))
        return _static(x, pads)
    if node.op is CAT and node.attrs["dim"] % 4 in (2, 3):
        dim = node.attrs["dim"] % 4
        inner = [k for k, part in enumerate(node.inputs) if not zero(part, constants)]
        if len(inner) != 1:
            return None
        x = node.inputs[inner[0]]
        before = sum(part.shape[dim] for part in node.inputs[:inner[0]])
        pads = [(0, 0), (0, 0)]
        pads[dim - 2] = (before, v.shape[dim] - before - x.shape[dim])
        return _static(x, pads)
    return None


def _static(x, pads):
    """``(x, pads)`` where every pad is a known count (not a symbolic dim's); else None."""
    flat = [p for pair in pads for p in pair]
    return (x, tuple(pads)) if all(type(p) is int and p >= 0 for p in flat) else None


def _padding_into_conv(m, weights: list):
    # conv2d(zero-pad(x), padding p) -> conv2d(x, padding p + the pad's): the kernels pad
    # inside their loops, so the padded copy is never made (F.pad / nn.ZeroPad2d before a
    # conv, "same" padding exported as an ONNX Pad). (Equal sums: the padded copy's zeros
    # add zero products; only weights of inf or NaN, whose products with them are NaN,
    # differ.)
    x, pads = _zero_padding(m.padded, m.constants)
    padding = tuple((a + c, b + d) for (a, b), (c, d) in zip(m.pad, pads))
    return call(CONV2D, [x, *weights], stride=m.st, padding=padding, dilation=m.dil,
                groups=m.g)


def _near(n: float):
    """True for a number, or a one-element float constant, within float32 rounding of
    ``n`` (an exported ``sqrt(2)`` is the float32 1.4142135)."""
    def test(x, constants):
        v = _scalar(x, constants)
        return v is not None and type(v) is not bool and abs(v - n) <= 4e-7 * abs(n)
    return test


def _erf_gelu_rules() -> list:
    """``x * 0.5 * (1 + erf(x / sqrt 2))`` in the orders and spellings code and exporters
    write it (torch's ONNX export below opset 20: Div, Erf, Add, Mul, Mul) -> ``gelu(x)``,
    one op a linear's epilogue takes. (GELU's loop computes Phi through erfc: where the
    written form's ``1 + erf`` cancels to 0, below x = -5.9, it gives the tiny negative
    values torch's gelu gives, not 0.)"""
    halves = Var("half", _near(0.5))
    scaled = (P(DIV, x, Var("root2", _near(math.sqrt(2)))),
              P(MUL, x, Var("inv_root2", _near(1 / math.sqrt(2)))))
    rows = []
    for inner in scaled:
        phi2 = P(ADD, P(ERF, inner), ONE)
        for pattern in (P(MUL, P(MUL, x, phi2), halves), P(MUL, P(MUL, x, halves), phi2)):
            rows.append(Rule(pattern, lambda m: call(GELU, [m.x]),
                             "x * 0.5 * (1 + erf(x / sqrt 2)) -> gelu(x)"))
    return rows


def _cube_term(v, x, constants, depth=4) -> tuple[int, float] | None:
    """``(count, c)`` where ``v`` is a product of ``count`` factors ``x`` and numbers whose
    product is ``c`` (``0.044715 * x * x * x`` in any order and grouping); else None."""
    if v is x:
        return 1, 1.0
    number = _scalar(v, constants)
    if number is not None and type(number) is not bool:
        return 0, float(number)
    node = getattr(v, "producer", None)
    if depth == 0 or node is None or node.op is not MUL:
        return None
    parts = [_cube_term(u, x, constants, depth - 1) for u in node.inputs]
    if None in parts:
        return None
    return parts[0][0] + parts[1][0], parts[0][1] * parts[1][1]


def _tanh_gelu(m):
    term = _cube_term(m.cubic, m.x, m.constants)
    if term is None or term[0] != 3 or abs(term[1] - 0.044715) > 1e-6:
        return None
    return call(GELU_TANH, [m.x])


def _tanh_gelu_rules() -> list:
    """``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`` (GPT-2's and minGPT's
    ``NewGELU``, their ONNX exports) -> ``gelu_tanh(x)``, one op a linear's epilogue
    takes."""
    inner = P(ADD, P(TANH, P(MUL, P(ADD, x, Var("cubic")),
                             Var("k", _near(math.sqrt(2 / math.pi))))), ONE)
    half = Var("half", _near(0.5))
    return [Rule(pattern, _tanh_gelu,
                 "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) -> gelu_tanh(x)")
            for pattern in (P(MUL, P(MUL, x, half), inner), P(MUL, P(MUL, x, inner), half))]


def _cat_parts(v: Value, dim: int) -> list:
    node = getattr(v, "producer", None)
    if node is not None and node.op is CAT and node.attrs["dim"] % v.ndim == dim:
        return list(node.inputs)
    return [v]


x, w, b = Var("x", _is_value), Var("w", _is_value), Var("b", _is_value)
ONE, ZERO = Var("one", _equals(1)), Var("zero", _equals(0))
THREE, SIX, SIX_ = Var("three", _equals(3)), Var("six", _equals(6)), Var("six_", _equals(6))
c, d = Var("c", _is_number), Var("d", _is_number)
p, q, s, dim = Var("p"), Var("q"), Var("s"), Var("dim")

PADDED = Var("padded", lambda v, k: _zero_padding(v, k) is not None)
CONV_ATTRS = dict(stride=Var("st"), padding=Var("pad"), dilation=Var("dil"), groups=Var("g"))

RULES = [
    Rule(P(MUL, x, ONE), lambda m: m.x, "x*1 -> x"),                    # and 1*x
    Rule(P(ADD, x, ZERO), lambda m: m.x, "x+0 -> x"),                   # and 0+x
    Rule(P(SUB, x, ZERO), lambda m: m.x, "x-0 -> x"),
    Rule(P(DIV, x, ONE), lambda m: m.x, "x/1 -> x"),
    Rule(P(POW, x, ONE), lambda m: m.x, "x**1 -> x"),
    Rule(P(POW, x, Var("c", lambda v, k: _scalar(v, k) is not None)), _power_products,
         "x**2 -> x*x, x**3 -> x*x*x, x**0.5 -> sqrt(x), x**-1 -> 1/x, ... (as the kernel)"),
    Rule(P(NEG, P(NEG, x)), lambda m: m.x, "-(-x) -> x"),
    Rule(P(MUL, P(MUL, x, c), d), _fold_scales, "(x*c)*d -> x*(c*d) (when exact)"),
    Rule(P(PERMUTE, x, perm=Var("id", _is_identity)), lambda m: m.x, "permute(x, id) -> x"),
    Rule(P(PERMUTE, P(PERMUTE, x, perm=p), perm=q),
         lambda m: call(PERMUTE, [m.x], perm=_compose(m.p, m.q)),
         "permute(permute(x, p), q) -> permute(x, p[q])"),
    Rule(P(RESHAPE, P(RESHAPE, x), shape=s), lambda m: call(RESHAPE, [m.x], shape=m.s),
         "reshape(reshape(x)) -> reshape(x)"),
    Rule(P(RESHAPE, P(SELECT, x, dim=dim, index=Var("k")), shape=s), _select_as_slice,
         "reshape(select(x, d, k)) -> reshape(x[.., k:k+1, ..]) (then one reshape or none)"),
    # the type check is the condition of the next three: they fire only on no-ops
    Rule(P(RESHAPE, x), lambda m: m.x, "reshape(x) -> x (same shape)"),
    Rule(P(EXPAND, x), lambda m: m.x, "expand(x) -> x (same shape)"),
    Rule(P(CAST, x), lambda m: m.x, "cast(x) -> x (same dtype)"),
    Rule(P(CAST, P(CAST, x, dtype=Var("mid")), dtype=Var("to")), _fold_casts,
         "cast(cast(x, wider), t) -> cast(x, t) (the first cast exact: x if t is x's)"),
    Rule(P(WHERE, P(LT, x, c), d, x), _bound_by(MAXIMUM),
         "where(x < c, c, x) -> maximum(x, c) (clamp's lower bound)"),
    Rule(P(WHERE, P(GT, x, c), d, x), _bound_by(MINIMUM),
         "where(x > c, c, x) -> minimum(x, c) (clamp's upper bound)"),
    Rule(P(HARDTANH, x, min_val=Var("lo"), max_val=Var("hi")),
         lambda m: call(MINIMUM, [call(MAXIMUM, [m.x, m.lo]), m.hi]),
         "hardtanh(x, lo, hi) -> minimum(maximum(x, lo), hi) (the clamp the rules read)"),
    Rule(P(HARDSIGMOID, x), lambda m: _hard_gate(m.x),
         "hardsigmoid(x) -> minimum(maximum(x + 3, 0), 6) / 6"),
    Rule(P(HARDSWISH, x), lambda m: call(MUL, [m.x, _hard_gate(m.x)]),
         "hardswish(x) -> x * (minimum(maximum(x + 3, 0), 6) / 6)"),
    Rule(P(DIV, P(MUL, x, P(MINIMUM, P(MAXIMUM, P(ADD, x, THREE), ZERO), SIX)), SIX_),
         lambda m: call(MUL, [m.x, _hard_gate(m.x)]),
         "x * relu6(x + 3) / 6 -> x * (relu6(x + 3) / 6) (hard-swish, as the epilogues read it)"),
    Rule(P(DIV, P(MINIMUM, P(MAXIMUM, x, c), d), Var("s")), _scale_before_clamp(DIV),
         "clamp(x, lo, hi) / s -> clamp(x / s, lo / s, hi / s) (s > 0: the same bits)"),
    Rule(P(MUL, P(MINIMUM, P(MAXIMUM, x, c), d), Var("s")), _scale_before_clamp(MUL),
         "clamp(x, lo, hi) * s -> clamp(x * s, lo * s, hi * s) (s > 0: the same bits)"),
    Rule(P(WHERE, Var("cond", lambda v, k: _constant_truth(v, k) is not None), Var("a"),
           Var("b")), _chosen_branch,
         "where(True, a, b) -> a, where(False, a, b) -> b (broadcast and cast as where)"),
    Rule(P(AVG_POOL2D, x, kernel_size=Var("k"), padding=Var("pad"),
           divisor_override=Var("divisor")), _global_mean,
         "avg_pool2d(x) over the whole plane -> mean(x, dims=(-2, -1), keepdim=True)"),
    Rule(P(LOG, P(SOFTMAX, x, dim=dim)), lambda m: call(LOG_SOFTMAX, [m.x], dim=m.dim),
         "log(softmax(x)) -> log_softmax(x)"),
    Rule(P(ADD, P(MATMUL, x, P(PERMUTE, w, perm=(1, 0))), b),
         lambda m: call(LINEAR, [m.x, m.w, m.b]), "x @ W.T + b -> linear(x, W, b)"),
    Rule(P(STACK, Parts("parts"), dim=dim), _stack_as_cat,
         "stack(xs, d) -> cat(unsqueeze(x, d), d) (the form the cat rules read)"),
    Rule(P(CAT, Parts("parts"), dim=dim), _sliced_whole,
         "cat(x[.., 0:k], x[.., k:2k], ...) -> x (the blocks tile x along the cat's dim)"),
    Rule(P(ADD, P(SLICE_BACKWARD, Var("a"), x, index=Var("i")),
           P(SLICE_BACKWARD, Var("b"), Var("y"), index=Var("j"))), _join_slice_grads,
         "slice_grad(a) + slice_grad(b), adjacent blocks -> slice_grad(cat(a, b))"),
    Rule(P(CONV2D, PADDED, Var("w"), **CONV_ATTRS),
         lambda m: _padding_into_conv(m, [m.w]),
         "conv2d(pad(x, zeros)) -> conv2d(x) padded inside (no bias)"),
    Rule(P(CONV2D, PADDED, Var("w"), Var("bias"), **CONV_ATTRS),
         lambda m: _padding_into_conv(m, [m.w, m.bias]),
         "conv2d(pad(x, zeros), w, b) -> conv2d(x, w, b) padded inside"),
    *_erf_gelu_rules(),
    *_tanh_gelu_rules(),
]


# -- the driver ------------------------------------------------------------------------------
def simplify(graph: Graph, rules=RULES) -> tuple[Graph, Report]:
    """Apply the rewrite rules (``RULES``: x*1, x+0, x-0, x/1, x**1, small integer and
    half powers as products, --x, chains of scalar multiplies, clamp's where(x < c, c, x)
    as maximum (and minimum), hardtanh, hardsigmoid and hardswish as that clamp, a positive
    scale of a clamp moved before it, a where with a constant condition as the chosen
    branch, global average pooling as a mean, permute and reshape chains (a select under a
    reshape as a slice), no-op reshape/expand/cast, a cast after an exact (widening) cast,
    log(softmax), x @ W.T + b -> linear, stack as a cat of unsqueezes, a cat of slices
    tiling one tensor -> the tensor, sums of adjacent slice gradients -> cat, zero padding
    before a conv as the conv's own padding, the exact and tanh GELUs written out as
    ``gelu`` and ``gelu_tanh``,
    ``x * relu6(x + 3) / 6`` as hard-swish's product) to each node,
    in order, to a fixed point per node.

    Preserves: the type of every value (a rewrite whose replacement is typed differently is
    not taken), the inputs and outputs, and values up to floating-point rounding (``x*2*3``
    becomes ``x*6``; ``x+0`` and a ``cat`` of slice gradients keep a ``-0.0`` that the
    addition would have made ``+0.0``).
    Nodes made dead by a rewrite stay for ``dce``.

    Before::                              After::

        %a = mul(%x, 2.0)                     %a = mul(%x, 2.0)
        %b = mul(%a, 3.0)                     %b = mul(%x, 6.0)
        %c = mul(%b, 1)                       return (%b)
        return (%c)
    """
    report = Report("simplify", len(graph.nodes), len(graph.nodes))
    by_op: dict[OpDef, list] = {}   # the rules whose pattern's root is this op
    for rule in rules:
        by_op.setdefault(rule.pattern.op, []).append(rule)
    if not any(match(rule.pattern, node, {}, graph.constants) is not None
               for node in graph.nodes for rule in by_op.get(node.op, ())):
        return graph, report   # no pattern matches anywhere: no copy (graphs are immutable)
    b = Builder(graph)
    for node in graph.nodes:
        inputs = [b.get(x) for x in node.inputs]
        outs = _emit(b, Call(node.op, inputs, node.attrs), node, by_op, report, 0)
        b.env.update(zip(node.outputs, outs))
    report.nodes_after = len(b.graph.nodes)
    return b.finish(), report


def _emit(b: Builder, root: Call, node, rules: dict, report: Report, depth: int) -> tuple:
    """Emit ``root`` (a rewrite of ``node``) or what the first matching rule (of ``rules``,
    by root op) makes of it."""
    names = [v.name for v in node.outputs]
    single = root.op.num_outputs == 1 and depth < MAX_DEPTH   # (rules rewrite one value)
    want = None
    for rule in rules.get(root.op, ()) if single else ():
        env = match(rule.pattern, root, {}, b.graph.constants)
        if env is None:
            continue
        if want is None:
            (want,) = infer_types(root.op, root.inputs, root.attrs)
        new = rule.replace(SimpleNamespace(**env, constants=b.graph.constants))
        if isinstance(new, Value) and same_type(new, want):
            report.count("rewrites", f"{rule.comment}: %{names[0]} -> %{new.name}")
            return (new,)
        if isinstance(new, Call):
            new = _emit_inputs(b, new, node, rules, report, depth)
        if isinstance(new, Call) and new.op is not None and _typed(new) == (want,):
            report.count("rewrites", f"{rule.comment}: %{names[0]}")
            return _emit(b, new, node, rules, report, depth + 1)
    if depth == 0:   # not rewritten: the node as it was (shared when its operands are)
        return b.copy(node)
    return b.add(root.op, root.inputs, root.attrs, node.location, names)


def _emit_inputs(b: Builder, c: Call, node, rules: dict, report: Report, depth: int) -> Call:
    """``c`` with the Calls among its inputs (at any depth: ``1 / (x*x*x)``) emitted (and
    simplified) first, innermost first; a rewrite declined after that leaves them for
    ``dce``."""
    if not any(isinstance(x, Call) for x in c.inputs):
        return c
    inputs = []
    for x in c.inputs:
        if isinstance(x, Call):
            x = _emit_inputs(b, x, node, rules, report, depth)
            if x.op is None or _typed(x) is None:
                return Call(None, c.inputs, c.attrs)   # (declined)
            x = _emit(b, x, node, rules, report, depth + 1)[0]
        inputs.append(x)
    return Call(c.op, inputs, c.attrs)


def _typed(c: Call):
    """The types ``c`` would have, or None when its op rejects these inputs."""
    try:
        return infer_types(c.op, c.inputs, c.attrs)
    except Exception:   # any rejection by the shape rule means: not this rewrite
        return None
