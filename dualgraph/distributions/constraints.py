"""The sets a distribution's parameters and values live in, as ``torch.distributions
.constraints``: objects with ``check(value)`` (a bool tensor, one entry per event),
``is_discrete`` and ``event_dim``; argument validation and ``support`` read them.

>>> import dualgraph as dg
>>> positive.check(dg.tensor([1.0, -1.0])).tolist()
[True, False]
"""
from __future__ import annotations

from ..ops import creation, decompositions, elementwise as ew, index, linalg, reduce as red

__all__ = ["Constraint", "dependent", "dependent_property", "boolean", "real", "real_vector",
           "positive", "nonnegative", "greater_than", "greater_than_eq", "less_than",
           "interval", "half_open_interval", "unit_interval", "simplex", "integer_interval",
           "nonnegative_integer", "positive_integer", "lower_triangular", "lower_cholesky",
           "positive_definite", "one_hot", "independent", "is_dependent"]


def batch_diagonal(matrices):
    """The diagonals of a batch of square matrices (``index.diagonal`` takes one matrix)."""
    eye = creation.eye(matrices.shape[-1], dtype=matrices.dtype)
    return red.sum(matrices * eye, -1)


class Constraint:
    """A set of values; ``check`` says, per event, whether a value is in it."""
    is_discrete = False
    event_dim = 0

    def check(self, value):
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__[1:]}()"


class _Dependent(Constraint):
    """A set that depends on other parameters (``Uniform.support``): never checked."""

    def __init__(self, *, is_discrete=False, event_dim=0):
        self.is_discrete, self.event_dim = is_discrete, event_dim

    def __call__(self, *, is_discrete=False, event_dim=0):
        return _Dependent(is_discrete=is_discrete, event_dim=event_dim)

    def check(self, value):
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint) -> bool:
    return isinstance(constraint, _Dependent)


class dependent_property(property):
    """A property that is a constraint depending on the instance (``support`` of
    ``Uniform``); on the class it reads as ``dependent``."""

    def __init__(self, fn=None, *, is_discrete=False, event_dim=0):
        super().__init__(fn)
        self.is_discrete, self.event_dim = is_discrete, event_dim

    def __call__(self, fn):
        return dependent_property(fn, is_discrete=self.is_discrete, event_dim=self.event_dim)


class _Real(Constraint):
    def check(self, value):
        return value == value   # (NaN is not real)


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        return (value == 0) | (value == 1)


class _GreaterThan(Constraint):
    def __init__(self, lower_bound, strict=True):
        self.lower_bound, self._strict = lower_bound, strict

    def check(self, value):
        return value > self.lower_bound if self._strict else value >= self.lower_bound

    def __repr__(self) -> str:
        eq = "" if self._strict else "Eq"
        return f"GreaterThan{eq}(lower_bound={self.lower_bound})"


class _LessThan(Constraint):
    def __init__(self, upper_bound):
        self.upper_bound = upper_bound

    def check(self, value):
        return value < self.upper_bound

    def __repr__(self) -> str:
        return f"LessThan(upper_bound={self.upper_bound})"


class _Interval(Constraint):
    """``[lower, upper]``, or ``[lower, upper)`` when ``half_open``."""

    def __init__(self, lower_bound, upper_bound, half_open=False):
        self.lower_bound, self.upper_bound, self._half_open = lower_bound, upper_bound, half_open

    def check(self, value):
        upper = value < self.upper_bound if self._half_open else value <= self.upper_bound
        return (value >= self.lower_bound) & upper

    def __repr__(self) -> str:
        kind = "HalfOpenInterval" if self._half_open else "Interval"
        return f"{kind}(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _IntegerInterval(Constraint):
    """Integers in ``[lower_bound, upper_bound]`` (``upper_bound`` None: no upper bound)."""
    is_discrete = True

    def __init__(self, lower_bound, upper_bound=None):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        ok = (value % 1 == 0) & (value >= self.lower_bound)
        return ok if self.upper_bound is None else ok & (value <= self.upper_bound)

    def __repr__(self) -> str:
        return f"IntegerInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _Simplex(Constraint):
    """Nonnegative vectors summing to 1 (within 1e-6, as torch checks)."""
    event_dim = 1

    def check(self, value):
        return red.all(value >= 0, -1) & (ew.abs(red.sum(value, -1) - 1) < 1e-6)


class _OneHot(Constraint):
    """Vectors of zeros with a single one."""
    is_discrete = True
    event_dim = 1

    def check(self, value):
        return red.all((value == 0) | (value == 1), -1) & (red.sum(value, -1) == 1)


class _LowerTriangular(Constraint):
    event_dim = 2

    def check(self, value):
        return red.all(red.all(index.tril(value) == value, -1), -1)


class _LowerCholesky(_LowerTriangular):
    """Lower-triangular matrices with a positive diagonal."""

    def check(self, value):
        return super().check(value) & red.all(batch_diagonal(value) > 0, -1)


class _PositiveDefinite(Constraint):
    """Symmetric matrices whose eigenvalues are positive."""
    event_dim = 2

    def check(self, value):
        # (symmetric as torch.isclose(value, value.mT, atol=1e-6) sees it)
        transposed = linalg.mT(value)
        close = ew.abs(value - transposed) <= 1e-6 + 1e-5 * ew.abs(transposed)
        symmetric = red.all(red.all(close, -1), -1)
        return symmetric & red.all(decompositions.eigvalsh(value) > 0, -1)


class _Independent(Constraint):
    """``base`` with its last ``reinterpreted_batch_ndims`` dims made one event."""

    def __init__(self, base, reinterpreted_batch_ndims: int):
        self.base_constraint, self.reinterpreted_batch_ndims = base, reinterpreted_batch_ndims
        self.is_discrete = base.is_discrete
        self.event_dim = base.event_dim + reinterpreted_batch_ndims

    def check(self, value):
        ok = self.base_constraint.check(value)
        n = self.reinterpreted_batch_ndims
        return red.all(ok.reshape(*ok.shape[:ok.ndim - n], -1), -1) if n else ok

    def __repr__(self) -> str:
        return f"Independent({self.base_constraint!r}, {self.reinterpreted_batch_ndims})"


dependent = _Dependent()
boolean = _Boolean()
real = _Real()
real_vector = _Independent(real, 1)
positive = _GreaterThan(0.0)
nonnegative = _GreaterThan(0.0, strict=False)
unit_interval = _Interval(0.0, 1.0)
simplex = _Simplex()
one_hot = _OneHot()
nonnegative_integer = _IntegerInterval(0)
positive_integer = _IntegerInterval(1)
lower_triangular = _LowerTriangular()
lower_cholesky = _LowerCholesky()
positive_definite = _PositiveDefinite()
greater_than = _GreaterThan
less_than = _LessThan
interval = _Interval
integer_interval = _IntegerInterval
independent = _Independent


def greater_than_eq(lower_bound):
    return _GreaterThan(lower_bound, strict=False)


def half_open_interval(lower_bound, upper_bound):
    return _Interval(lower_bound, upper_bound, half_open=True)
