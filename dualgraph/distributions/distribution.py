"""The base class every distribution shares, and the helpers the families build on.

A distribution holds its parameters as tensors broadcast to one batch shape; ``sample``
draws without gradient, ``rsample`` draws as a differentiable function of the parameters
(a transform of ``dg.rand`` / ``dg.randn`` draws, so it traces into compiled steps and
draws the same numbers compiled as eager). Parameters are checked against
``arg_constraints`` as torch checks them (``validate_args``, on by default as in torch),
eagerly only: while tracing, values are symbolic and nothing is checked.
"""
from __future__ import annotations

import ml_dtypes

from .. import dtypes
from ..autograd import no_grad
from ..dispatch import modes
from ..ops import creation, elementwise as ew, reduce as red, shape as shape_ops
from ..shapes import broadcast_shapes
from ..tensor import Size, Tensor
from . import constraints


def as_tensor(value, like=None):
    """``value`` as a tensor (numbers in ``like``'s dtype, else float32)."""
    if isinstance(value, Tensor):
        return value
    return creation.tensor(value, dtype=like.dtype if like is not None else dtypes.float32)


def broadcast_all(*values):
    """The values as tensors of one broadcast shape (numbers take a tensor's dtype)."""
    like = next((v for v in values if isinstance(v, Tensor)), None)
    tensors = [as_tensor(v, like) for v in values]
    shape = broadcast_shapes(*(tuple(t.shape) for t in tensors))
    return [t if tuple(t.shape) == shape else shape_ops.expand(t, shape) for t in tensors]


def finfo(t):
    return ml_dtypes.finfo(t.dtype.np)


def clamp_probs(probs):
    """``probs`` kept in [eps, 1 - eps] so that their logs stay finite."""
    eps = float(finfo(probs).eps)
    return ew.clamp(probs, eps, 1 - eps)


def clamp_open(t):
    """``t`` kept in (0, 1): in [smallest normal, 1 - eps], as torch keeps its draws."""
    return ew.clamp(t, float(finfo(t).smallest_normal), 1 - float(finfo(t).eps))


def uniform_open(shape, like):
    """Uniform draws in (0, 1): ``rand``'s [0, 1) with 0 moved to the smallest normal."""
    return clamp_open(creation.rand(*shape, dtype=like.dtype))


def softplus(x):
    """``log(1 + exp(x))``, stable for large |x|, its gradient ``sigmoid(x)`` everywhere
    (a ``max(x, 0) + log1p(exp(-|x|))`` form has the wrong one at 0)."""
    return ew.logaddexp(x, 0.0)


def sum_rightmost(t, n: int):
    """``t`` summed over its last ``n`` dims."""
    return red.sum(t, tuple(range(-n, 0))) if n > 0 else t


def probs_to_logits(probs, is_binary: bool = False):
    """Logits of probabilities (clamped away from 0 and 1): log-odds when ``is_binary``,
    else log-probabilities (``torch.distributions.utils``)."""
    clamped = clamp_probs(probs)
    return ew.log(clamped) - ew.log1p(-clamped) if is_binary else ew.log(clamped)


def logits_to_probs(logits, is_binary: bool = False):
    """Probabilities of logits: a sigmoid when ``is_binary``, else a softmax."""
    return ew.sigmoid(logits) if is_binary else red.softmax(logits, -1)


def probs_and_logits(probs, logits, name: str, binary: bool):
    """The (probs, logits) pair from the one given: Bernoulli-style (``binary``, the
    probability of 1) or categorical (normalised along the last dim)."""
    if (probs is None) == (logits is None):
        raise ValueError(f"{name}: give either probs or logits, not both")
    if probs is not None:
        probs = as_tensor(probs)
        if not binary:
            probs = probs / red.sum(probs, -1, keepdim=True)
        return probs, probs_to_logits(probs, binary)
    logits = as_tensor(logits)
    if not binary:
        logits = logits - red.logsumexp(logits, -1, keepdim=True)
    return logits_to_probs(logits, binary), logits


class Distribution:
    """The common interface, as ``torch.distributions.Distribution``: ``batch_shape``,
    ``event_shape``, ``sample``, ``rsample``, ``log_prob``, ``entropy``, ``mean``, ``mode``,
    ``variance``, ``stddev``, ``cdf``, ``icdf``, ``expand``, ``support``.

    A subclass names its parameter tensors in ``arg_constraints`` (checked at construction
    and expanded by ``expand``)."""

    has_rsample = False
    has_enumerate_support = False
    # (flattened as a structure of its attributes: dualgraph/_pytree.py)
    _flattens_by_attributes = True
    arg_constraints: dict = {}
    support = None
    _validate_default = True

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Whether distributions check their parameters when ``validate_args`` is not
        given (True at first, as in torch)."""
        Distribution._validate_default = bool(value)

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self.batch_shape = Size(batch_shape)
        self.event_shape = Size(event_shape)
        self._validate_args = Distribution._validate_default if validate_args is None \
            else validate_args
        if self._validate_args and not modes.building_graph():
            self._check_args()

    def _check_args(self) -> None:
        for name, constraint in self.arg_constraints.items():
            value = self._argument(name)
            if constraints.is_dependent(constraint) or not isinstance(value, Tensor):
                continue
            with no_grad():
                valid = constraint.check(value)
                if not bool(red.all(valid).item()):
                    raise ValueError(
                        f"Expected parameter {name} (Tensor of shape {tuple(value.shape)}) "
                        f"of distribution {self!r} to satisfy the constraint "
                        f"{constraint!r}, but found invalid values:\n{value}")

    def _argument(self, name: str):
        """The parameter ``name`` as given (None for a form not held)."""
        return self.__dict__.get(name)

    def _extended(self, sample_shape) -> tuple:
        return tuple(sample_shape) + tuple(self.batch_shape) + tuple(self.event_shape)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to ``batch_shape``."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        batch_shape = tuple(batch_shape)
        for name in self.arg_constraints:
            value = self.__dict__.get(name)
            if isinstance(value, Tensor):
                tail = tuple(value.shape)[len(self.batch_shape):]
                new.__dict__[name] = shape_ops.expand(value, batch_shape + tail)
        new.batch_shape = Size(batch_shape)
        return new

    def sample(self, sample_shape=()):
        """A draw without gradient (of shape ``sample_shape + batch_shape + event_shape``)."""
        with no_grad():
            return self.rsample(sample_shape)

    def sample_n(self, n: int):
        return self.sample((n,))

    def rsample(self, sample_shape=()):
        raise NotImplementedError(
            f"{type(self).__name__} has no reparameterised sample (rsample); use sample() "
            f"and a score-function (log_prob) estimator")

    def _missing(self, what: str):
        raise NotImplementedError(f"{type(self).__name__} has no {what}")

    def log_prob(self, value):
        self._missing("log_prob")

    def entropy(self):
        self._missing("entropy")

    def cdf(self, value):
        self._missing("cdf")

    def icdf(self, value):
        self._missing("icdf")

    @property
    def mean(self):
        self._missing("mean")

    @property
    def mode(self):
        self._missing("mode")

    @property
    def variance(self):
        self._missing("variance")

    @property
    def stddev(self):
        return ew.sqrt(self.variance)

    def perplexity(self):
        return ew.exp(self.entropy())

    def __repr__(self) -> str:
        shown = {k: self.__dict__[k] for k in self.arg_constraints
                 if isinstance(self.__dict__.get(k), Tensor)}
        args = ", ".join(f"{k}: {Size(v.shape) if v.ndim else v}" for k, v in shown.items())
        return f"{type(self).__name__}({args})"
