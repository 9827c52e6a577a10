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
    """A symbolic dim: an integer coefficient times a product of named sizes (``B``,
    ``784*B``, ``B*T``). Two Syms are the same dim when coefficient and names are equal.

    Monomials are closed under the arithmetic shape rules need (products and exact
    division: ``reshape(B*784 elements, (B, -1))`` infers 784), and print as expressions.
    """

    __slots__ = ("coef", "names")

    def __init__(self, name: str = "", coef: int = 1, names: tuple = None):
        self.coef = coef
        self.names = tuple(sorted(names if names is not None else (name,)))

    @property
    def name(self) -> str:
        return str(self)

    def __repr__(self):
        prefix = [] if self.coef == 1 else [str(self.coef)]
        return "*".join(prefix + list(self.names))

    def __eq__(self, other):
        """Equal Syms are the same dim. Against an int the answer is known where no size
        could make it true: a symbolic dim is never 0, 1 or negative (such sizes stay
        numbers) and is a multiple of its coefficient. Else (``B == 4``) it depends on the
        call: dualgraph's own code (shape rules, cache keys) takes it as "not that
        number", but the user's program (``if x.shape[0] == 4``) needs the value, so a
        ShapeError ends its trace (traced again with static shapes) rather than answer
        False for every size."""
        if isinstance(other, Sym):
            return other.coef == self.coef and other.names == self.names
        if not isinstance(other, int) or isinstance(other, bool):
            return NotImplemented
        if other <= 1 or other % self.coef or _is_internal(sys._getframe(1).f_code.co_filename):
            return False
        raise ShapeError(f"whether symbolic dim {self} == {other} depends on the call's "
                         "sizes")

    def __hash__(self):
        return hash(("Sym", self.coef, self.names))

    def __mul__(self, other):
        if isinstance(other, Sym):
            return _monomial(self.coef * other.coef, self.names + other.names)
        if isinstance(other, int):
            return _monomial(self.coef * other, self.names)
        return NotImplemented

    __rmul__ = __mul__

    def __floordiv__(self, other):
        """Exact division by an int or a Sym that divides this one (else a ShapeError)."""
        coef, names = (other, ()) if isinstance(other, int) else (other.coef, other.names)
        rest = list(self.names)
        for n in names:
            if n not in rest:
                raise ShapeError(f"symbolic dim {self} is not divisible by {other}")
            rest.remove(n)
        if coef == 0 or self.coef % coef:
            raise ShapeError(f"symbolic dim {self} is not divisible by {other}")
        return _monomial(self.coef // coef, tuple(rest))

    def __mod__(self, other):
        """0 where every size divides (``4*B % 2``); else the remainder depends on the
        call's sizes (``B % 2``): a ShapeError ends the trace, as ``__eq__``'s."""
        try:
            self // other
        except ShapeError:
            raise ShapeError(f"symbolic dim {self} % {other} depends on the call's "
                             "sizes") from None
        return 0


def _monomial(coef: int, names: tuple):
    """A Sym, or a plain int when no names are left."""
    return Sym(coef=coef, names=names) if names else coef


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
