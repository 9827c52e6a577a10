"""Shapes: broadcasting, dim normalisation and symbolic dims.

A shape is a tuple of dims; a dim is an ``int`` or a :class:`Sym` (a named symbolic size such
as the batch ``B``). Shape rules in the op registry use only the helpers here, so that they
work the same on concrete and symbolic shapes.
"""
from __future__ import annotations

from collections import namedtuple


class ShapeError(ValueError):
    """A shape mismatch; the message names the shapes involved and what to do."""


class Sym:
    """A symbolic dim. Two Syms are the same dim when their names are equal.

    Products and sums of dims (``B*64``) are kept as Syms whose name is the expression, which
    is all that reshape and concatenation need; dims are never compared numerically.
    """

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return self.name

    def __eq__(self, other):
        return isinstance(other, Sym) and other.name == self.name

    def __hash__(self):
        return hash(("Sym", self.name))

    def _op(self, other, sym):
        if isinstance(other, int) and not isinstance(other, Sym):
            if sym == "*" and other == 1 or sym == "+" and other == 0:
                return self
        return Sym(f"{_paren(self)}{sym}{_paren(other)}")

    def __mul__(self, other):
        return self._op(other, "*")

    __rmul__ = __mul__

    def __add__(self, other):
        return self._op(other, "+")

    __radd__ = __add__

    def __floordiv__(self, other):
        return self._op(other, "//")


def _paren(d):
    s = str(d)
    return f"({s})" if any(c in s for c in "+-*/ ") else s


def is_static(shape) -> bool:
    return all(type(d) is int for d in shape)


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
    lo, hi = -max(ndim, 1), max(ndim, 1) - 1
    if not lo <= dim <= hi:
        raise IndexError(
            f"{what} {dim} is out of range for a tensor with {ndim} dims "
            f"(expected a value in [{lo}, {hi}])")
    return dim % max(ndim, 1)


def normalize_dims(dims, ndim: int) -> tuple:
    """None -> all dims; an int or a sequence -> sorted unique non-negative dims."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    out = sorted({normalize_dim(d, ndim) for d in dims})
    return tuple(out)


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
    if new_shape.count(-1) > 1:
        raise ShapeError(f"reshape to {new_shape}: only one dim can be -1")
    if -1 in new_shape:
        known = numel(d for d in new_shape if d != -1)
        if isinstance(total, Sym) or isinstance(known, Sym):
            if known == 1:
                return tuple(total if d == -1 else d for d in new_shape)
            raise ShapeError(f"cannot infer -1 in reshape {tuple(shape)} -> {new_shape} "
                             "with symbolic dims; name the dims explicitly")
        if known == 0 or total % known:
            raise ShapeError(f"cannot reshape a tensor of shape {tuple(shape)} "
                             f"({total} elements) to {new_shape}")
        return tuple(total // known if d == -1 else d for d in new_shape)
    if is_static(shape) and is_static(new_shape) and numel(new_shape) != total:
        raise ShapeError(f"cannot reshape a tensor of shape {tuple(shape)} ({total} elements) "
                         f"to {new_shape} ({numel(new_shape)} elements)")
    return new_shape
