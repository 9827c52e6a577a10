"""Shapes: broadcasting, dim normalisation and symbolic dims.

A shape is a tuple of dims; a dim is an ``int`` or a :class:`Sym` (a named symbolic size such
as the batch ``B``). Shape rules in the op registry use only the helpers here, so that they
work the same on concrete and symbolic shapes.
"""
from __future__ import annotations

import sys
from collections import namedtuple

from ._helpers import _is_internal


class ShapeError(ValueError):
    """A shape mismatch; the message names the shapes involved and what to do."""


class Sym:
    """A symbolic dim: a polynomial with integer coefficients over named sizes. Usually one
    term, an integer coefficient times a product of names (``B``, ``784*B``, ``B*T``); a
    concatenation along a symbolic dim or a slice by constants from either end makes sums
    (``s0 + 1``, ``s0 - 1``, ``s0 + s1``). Two Syms are the same dim when their terms are
    equal (a canonical form: terms sorted, none zero).

    Closed under the arithmetic shape rules need (sums, products, and exact division: a
    reshape of ``B*784`` elements to ``(B, -1)`` infers 784), and print as expressions.
    Ordering is not defined: a rule that must compare a symbolic dim with a number (a
    clamp) asks :class:`SizeCases`, which decides it by the traced sizes and records the
    case (:func:`sym_slice`).
    """

    __slots__ = ("terms", "const")

    def __init__(self, name: str = "", coef: int = 1, names: tuple = None):
        self.terms = ((tuple(sorted(names if names is not None else (name,))), coef),)
        self.const = 0

    @property
    def name(self) -> str:
        return str(self)

    @property
    def is_sum(self) -> bool:
        """More than one term, or a constant term (``s0 + 1``): not a product of names."""
        return len(self.terms) > 1 or self.const != 0

    @property
    def coef(self) -> int:
        """A product's coefficient (1 for a sum: see :attr:`names`)."""
        return 1 if self.is_sum else self.terms[0][1]

    @property
    def names(self) -> tuple:
        """A product's names, repeated as they multiply; a sum's distinct names."""
        if self.is_sum:
            return tuple(sorted({n for names, _ in self.terms for n in names}))
        return self.terms[0][0]

    def __repr__(self):
        parts = []
        for names, coef in self.terms:
            text = "*".join(([] if abs(coef) == 1 else [str(abs(coef))]) + list(names))
            parts.append(("-" if coef < 0 else "+", text))
        if self.const:
            parts.append(("-" if self.const < 0 else "+", str(abs(self.const))))
        first_sign, first = parts[0]
        out = ("-" if first_sign == "-" else "") + first
        return out + "".join(f" {sign} {text}" for sign, text in parts[1:])

    def __eq__(self, other):
        """Equal Syms are the same dim. Against an int the answer is known where no size
        could make it true: a symbolic dim is never 0, 1 or negative (such sizes stay
        numbers) and is a multiple of its coefficient. Else (``B == 4``) it depends on the
        call: dualgraph's own code (shape rules, cache keys) takes it as "not that
        number", but the user's program (``if x.shape[0] == 4``) needs the value, so a
        ShapeError ends its trace (traced again with static shapes) rather than answer
        False for every size."""
        if isinstance(other, Sym):
            return other.terms == self.terms and other.const == self.const
        if not isinstance(other, int) or isinstance(other, bool):
            return NotImplemented
        if other <= 1 or other % self.coef or _is_internal(sys._getframe(1).f_code.co_filename):
            return False
        raise ShapeError(f"whether symbolic dim {self} == {other} depends on the call's "
                         "sizes")

    def __hash__(self):
        return hash(("Sym", self.terms, self.const))

    def _parts(self) -> dict:
        return dict(self.terms)

    def __add__(self, other):
        if isinstance(other, Sym):
            parts = self._parts()
            for names, coef in other.terms:
                parts[names] = parts.get(names, 0) + coef
            return _polynomial(parts, self.const + other.const)
        if type(other) is int or isinstance(other, int) and not isinstance(other, bool):
            return _polynomial(self._parts(), self.const + int(other))
        return NotImplemented

    __radd__ = __add__

    def __neg__(self):
        return _polynomial({n: -c for n, c in self.terms}, -self.const)

    def __sub__(self, other):
        if isinstance(other, (Sym, int)) and not isinstance(other, bool):
            return self + (-other)
        return NotImplemented

    def __rsub__(self, other):
        if isinstance(other, int) and not isinstance(other, bool):
            return (-self) + other
        return NotImplemented

    def __mul__(self, other):
        if isinstance(other, Sym):
            parts: dict = {}
            for a, ca in self.terms + (((), self.const),):
                for b, cb in other.terms + (((), other.const),):
                    key = tuple(sorted(a + b))
                    parts[key] = parts.get(key, 0) + ca * cb
            return _polynomial({k: c for k, c in parts.items() if k}, parts.get((), 0))
        if isinstance(other, int) and not isinstance(other, bool):
            return _polynomial({n: c * other for n, c in self.terms}, self.const * other)
        return NotImplemented

    __rmul__ = __mul__

    def __floordiv__(self, other):
        """Exact division by an int or a Sym that divides this one (else a ShapeError)."""
        if isinstance(other, Sym) and other == self:
            return 1
        if isinstance(other, Sym) and other.is_sum or self.is_sum and isinstance(other, Sym):
            # (a constant multiple of a sum: ``48*s0 + 48`` elements viewed as ``(3, s0 + 1,
            # 2, -1)``, a reshape of a cache grown by one)
            names, coef = other.terms[0]
            quotient = self._parts().get(names, 0) // coef
            if quotient and other * quotient == self:
                return quotient
            raise ShapeError(f"symbolic dim {self} is not divisible by {other}")
        coef, names = (other, ()) if isinstance(other, int) else other.terms[0][::-1]
        if coef == 0:
            raise ShapeError(f"symbolic dim {self} is not divisible by {other}")
        parts = {}
        for term, c in self.terms:
            rest = list(term)
            for n in names:
                if n not in rest:
                    raise ShapeError(f"symbolic dim {self} is not divisible by {other}")
                rest.remove(n)
            if c % coef:
                raise ShapeError(f"symbolic dim {self} is not divisible by {other}")
            parts[tuple(rest)] = c // coef
        if self.const % coef:
            raise ShapeError(f"symbolic dim {self} is not divisible by {other}")
        return _polynomial({k: c for k, c in parts.items() if k},
                           parts.get((), 0) + self.const // coef)

    def __mod__(self, other):
        """0 where every size divides (``4*B % 2``); else the remainder depends on the
        call's sizes (``B % 2``): a ShapeError ends the trace, as ``__eq__``'s."""
        try:
            self // other
        except ShapeError:
            raise ShapeError(f"symbolic dim {self} % {other} depends on the call's "
                             "sizes") from None
        return 0

    def evaluate(self, sizes: dict):
        """Its value for ``sizes`` (name -> int, or Sym: unbound names stay symbolic)."""
        total = self.const
        for names, coef in self.terms:
            term = coef
            for n in names:
                term = term * sizes.get(n, Sym(n))
            total = total + term
        return total


def _polynomial(parts: dict, const: int):
    """A Sym of the terms ``parts`` (names -> coefficient) plus ``const``, or a plain int
    when no term is left."""
    terms = tuple(sorted((n, c) for n, c in parts.items() if c))
    if not terms:
        return const
    dim = Sym.__new__(Sym)
    dim.terms, dim.const = terms, const
    return dim


class SizeCases:
    """The sizes a trace's symbols have at the call it traces, and the comparisons its
    shape rules decided by them (``facts``: expressions each at least 0).

    A slice clamps its bounds as Python does, which compares a symbolic size with a
    number or another size (``pos[:T]`` of a static dim of 12: T or 12; ``x[3:]`` of a
    symbolic dim: ``s0 - 3`` or 0). Its shape rule asks :meth:`at_least`, which answers
    for the traced sizes and records the answer as a fact; a graph runs only for sizes that
    keep its facts (capture/autodims.py ``DimFacts``), so the case it traced is the case
    that holds. Without sizes (``SizeCases(None)``), only comparisons that hold for every
    size are answered."""

    def __init__(self, sizes: dict | None):
        self.sizes, self.facts = sizes, set()

    def at_least(self, a, b) -> bool:
        """Whether ``a >= b`` (ints or Syms) at the traced sizes; a comparison that
        depends on the sizes is recorded as a fact (``a - b`` or ``b - a - 1`` at least
        0). A symbolic dim is at least 2 (automatic dynamic dims keep 0 and 1 numbers), so
        a difference whose terms all have one sign is decided without the sizes."""
        d = a - b
        if isinstance(d, int):
            return d >= 0
        coefs = [c for _, c in d.terms]
        at_two = d.evaluate(dict.fromkeys(d.names, 2))
        if all(c > 0 for c in coefs) and at_two >= 0:
            return True
        if all(c < 0 for c in coefs) and at_two < 0:
            return False
        value = d.evaluate(self.sizes) if self.sizes is not None else None
        if type(value) is not int:
            raise ShapeError(f"whether {a} >= {b} depends on the sizes")
        self.facts.add(d if value >= 0 else -d - 1)
        return value >= 0


def sym_slice(start, stop, step, n, cases: SizeCases | None = None):
    """``slice(start, stop, step).indices(n)`` with a stop at least the start, where the
    size ``n`` or a bound is symbolic (a Sym): each bound is clamped as Python clamps it
    (a negative one counts from the end, then ``[0, n]``), every comparison that takes
    decided by ``cases`` (the traced sizes: the case is recorded as a fact of the graph)
    or, without them, only where it holds for every size (else a ShapeError: the dim
    then stays static). A step other than 1 needs a length that is a constant (the
    length of ``x[::2]`` of a symbolic dim is not a sum of the symbols)."""
    cases = cases or SizeCases(None)

    def bound(b, default):
        if b is None:
            return default
        if not cases.at_least(b, 0):
            b = b + n
            return b if cases.at_least(b, 0) else 0
        return b if cases.at_least(n, b) else n

    step = 1 if step is None else step
    lo, hi = bound(start, 0), bound(stop, n)
    hi = hi if cases.at_least(hi, lo) else lo
    if step != 1 and not isinstance(hi - lo, int):
        raise ShapeError(f"a slice with step {step} of a dim of size {n}: its length is "
                         "not a sum of the symbols")
    return lo, hi, step


_INT = frozenset((int,))


def is_static(shape) -> bool:
    """Whether every dim is a plain int (no symbolic dims). (The set of the dims' types,
    built in C: shape checks of every reshape and slice ask this.)"""
    return set(map(type, shape)) <= _INT


ShapedType = namedtuple("ShapedType", "shape dtype")
ShapedType.ndim = property(lambda self: len(self.shape))
ShapedType.__doc__ = "The type of a value: its shape and NumPy dtype (an 'abstract array')."


def broadcast_shapes(*shapes) -> tuple:
    """NumPy/PyTorch broadcasting of several shapes; a mismatch names all of them."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(-ndim, 0):
        dim = 1
        for s in shapes:
            if len(s) < -i:
                continue
            d = s[i]
            if d == 1:
                continue
            if dim == 1:
                dim = d
            elif d != dim:
                listed = " and ".join(str(tuple(s)) for s in shapes)
                raise ShapeError(
                    f"shapes {listed} cannot be broadcast together: dim {i} is {dim} in one "
                    f"and {d} in another; sizes must match or be 1")
        out.append(dim)
    return tuple(out)


def normalize_dim(dim: int, ndim: int, what: str = "dim") -> int:
    """A possibly negative dim -> its index, with a clear error when out of range."""
    if not isinstance(dim, int):
        raise TypeError(f"{what} must be an int, got {type(dim).__name__}")
    n = ndim if ndim > 1 else 1   # (a 0-d tensor takes dim 0 and -1, as torch)
    if not -n <= dim < n:
        raise IndexError(
            f"{what} {dim} is out of range for a tensor with {ndim} dims "
            f"(expected a value in [{-n}, {n - 1}])")
    return dim % n


def normalize_dims(dims, ndim: int) -> tuple:
    """None -> all dims; an int or a sequence -> sorted unique non-negative dims."""
    if dims is None:
        return tuple(range(ndim))
    if type(dims) is int and -ndim <= dims < ndim:   # (the common case of reductions)
        return (dims % ndim,)
    if isinstance(dims, int):
        dims = (dims,)
    out = sorted({normalize_dim(d, ndim) for d in dims})
    # a 0-d tensor's dim 0 (or -1) is the tensor itself, as torch takes it: nothing to
    # reduce over (the array has no axis 0)
    return tuple(out) if ndim else ()


def numel(shape) -> int:
    n = 1
    for d in shape:
        n = n * d
    return n


def reduced_shape(shape, dims, keepdim: bool) -> tuple:
    """The shape after reducing ``dims`` (already normalised)."""
    if keepdim:
        return tuple(1 if i in dims else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in dims)


def infer_reshape(shape, new_shape) -> tuple:
    """Resolve a single -1 in ``new_shape`` and check the element count is kept."""
    new_shape = tuple(new_shape)
    total = numel(shape)
    if -1 not in new_shape and is_static(new_shape) and is_static(shape):   # the common case
        if numel(new_shape) != total:
            raise ShapeError(f"cannot reshape a tensor of shape {tuple(shape)} ({total} "
                             f"elements) to {new_shape} ({numel(new_shape)} elements)")
        return new_shape
    if new_shape.count(-1) > 1:
        raise ShapeError(f"reshape to {new_shape}: only one dim can be -1")
    if -1 in new_shape:
        known = numel(d for d in new_shape if d != -1)
        if isinstance(total, Sym) or isinstance(known, Sym):
            if isinstance(known, Sym) and not isinstance(total, Sym):
                raise ShapeError(f"cannot reshape {tuple(shape)} to {new_shape}: the symbolic "
                                 "dims don't divide the element count")
            return tuple(total // known if d == -1 else d for d in new_shape)
        if known == 0 or total % known:
            raise ShapeError(f"cannot reshape a tensor of shape {tuple(shape)} "
                             f"({total} elements) to {new_shape}")
        return tuple(total // known if d == -1 else d for d in new_shape)
    return new_shape   # (symbolic dims: the element counts can't be compared here)
