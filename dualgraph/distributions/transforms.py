"""Bijections and the distributions they push forward, as ``torch.distributions.transforms``:
``AffineTransform``, ``ExpTransform``, ``SigmoidTransform``, ``TanhTransform``,
``ComposeTransform``, each with ``inv`` and ``log_abs_det_jacobian(x, y)``, and
``TransformedDistribution`` (SAC's squashed Gaussian: ``Normal`` + ``TanhTransform``).

With ``cache_size=1`` a transform remembers its last ``(x, y)`` pair, so ``inv(y)`` of the
``y`` it just made returns that ``x`` (an ``rsample`` then ``log_prob`` of it never inverts
tanh numerically near +-1), as torch's cache does.
"""
from __future__ import annotations

import math

from ..autograd import no_grad
from ..ops import creation, elementwise as ew
from . import constraints
from .distribution import (Distribution, as_tensor, broadcast_all, finfo, softplus,
                           sum_rightmost)

__all__ = ["Transform", "AffineTransform", "ExpTransform", "SigmoidTransform",
           "TanhTransform", "ComposeTransform", "identity_transform",
           "TransformedDistribution"]


class Transform:
    """A bijection ``y = self(x)`` with ``inv`` and ``log_abs_det_jacobian(x, y)``; a
    subclass gives ``_call``, ``_inverse`` and ``_log_abs_det_jacobian``."""
    bijective = True
    domain = constraints.real
    codomain = constraints.real
    sign = 1

    def __init__(self, cache_size: int = 0):
        if cache_size not in (0, 1):
            raise ValueError("cache_size must be 0 or 1")
        self._cache_size = cache_size
        self._cached = None   # (x, y) of the last call or inversion

    @property
    def event_dim(self) -> int:
        return self.domain.event_dim

    @property
    def inv(self) -> "Transform":
        return _Inverse(self)

    def with_cache(self, cache_size: int = 1) -> "Transform":
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._cache_size, new._cached = cache_size, None
        return new

    def __call__(self, x):
        return self._through_cache(x, 0, self._call)

    def _inv_call(self, y):
        return self._through_cache(y, 1, self._inverse)

    def _through_cache(self, value, side: int, fn):
        """``fn(value)``, or the other side of the cached pair whose ``side`` (0: x, 1: y)
        is ``value`` itself."""
        if self._cached is not None and self._cached[side] is value:
            return self._cached[1 - side]
        result = fn(value)
        if self._cache_size:
            self._cached = (value, result) if side == 0 else (result, value)
        return result

    def log_abs_det_jacobian(self, x, y):
        return self._log_abs_det_jacobian(x, y)

    def forward_shape(self, shape):
        return shape

    def inverse_shape(self, shape):
        return shape

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _Inverse(Transform):
    """``transform.inv``: the same bijection read backwards (sharing its cache)."""

    def __init__(self, transform: Transform):
        super().__init__()
        self._inv = transform
        self.domain, self.codomain = transform.codomain, transform.domain
        self.sign = transform.sign

    @property
    def inv(self) -> Transform:
        return self._inv

    def __call__(self, y):
        return self._inv._inv_call(y)

    def _inv_call(self, x):
        return self._inv(x)

    def log_abs_det_jacobian(self, x, y):
        return -self._inv.log_abs_det_jacobian(y, x)

    def __repr__(self) -> str:
        return f"{self._inv!r}.inv"


class ExpTransform(Transform):
    """``y = exp(x)``."""
    codomain = constraints.positive

    def _call(self, x):
        return ew.exp(x)

    def _inverse(self, y):
        return ew.log(y)

    def _log_abs_det_jacobian(self, x, y):
        return x


class SigmoidTransform(Transform):
    """``y = sigmoid(x)``; the inverse clamps ``y`` into (0, 1) as torch does."""
    codomain = constraints.unit_interval

    def _call(self, x):
        return ew.clamp(ew.sigmoid(x), float(finfo(x).tiny), 1 - float(finfo(x).eps))

    def _inverse(self, y):
        y = ew.clamp(y, float(finfo(y).tiny), 1 - float(finfo(y).eps))
        return ew.log(y) - ew.log1p(-y)

    def _log_abs_det_jacobian(self, x, y):
        return -softplus(-x) - softplus(x)


class TanhTransform(Transform):
    """``y = tanh(x)``; use ``cache_size=1`` so that ``log_prob`` of a sample reads its
    pre-image instead of ``atanh`` of a value rounded to +-1."""
    codomain = constraints.interval(-1.0, 1.0)
    sign = 1

    def _call(self, x):
        return ew.tanh(x)

    def _inverse(self, y):
        return 0.5 * (ew.log1p(y) - ew.log1p(-y))

    def _log_abs_det_jacobian(self, x, y):
        # log(1 - tanh(x)^2), stable: 2 * (log 2 - x - softplus(-2x))
        return 2.0 * (math.log(2.0) - x - softplus(-2.0 * x))


class AffineTransform(Transform):
    """``y = loc + scale * x`` over events of ``event_dim`` dims."""

    def __init__(self, loc, scale, event_dim: int = 0, cache_size: int = 0):
        super().__init__(cache_size)
        self.loc, self.scale = loc, scale
        self._event_dim = event_dim

    @property
    def event_dim(self) -> int:
        return self._event_dim

    @property
    def domain(self):
        return constraints.independent(constraints.real, self._event_dim)

    codomain = domain

    @property
    def sign(self):
        if isinstance(self.scale, (int, float)):
            return 1 if self.scale > 0 else -1
        return ew.sign(self.scale)

    def _call(self, x):
        return self.loc + self.scale * x

    def _inverse(self, y):
        return (y - self.loc) / self.scale

    def _log_abs_det_jacobian(self, x, y):
        log_scale = ew.log(ew.abs(as_tensor(self.scale, x)))
        return sum_rightmost(broadcast_all(x, log_scale)[1], self._event_dim)


class ComposeTransform(Transform):
    """``parts`` applied in order; the Jacobian terms add (summed to the widest event)."""

    def __init__(self, parts, cache_size: int = 0):
        super().__init__(cache_size)
        self.parts = list(parts)

    @property
    def event_dim(self) -> int:
        return max((p.event_dim for p in self.parts), default=0)

    @property
    def domain(self):
        return self.parts[0].domain if self.parts else constraints.real

    @property
    def codomain(self):
        return self.parts[-1].codomain if self.parts else constraints.real

    @property
    def inv(self) -> Transform:
        return ComposeTransform([p.inv for p in reversed(self.parts)])

    def _call(self, x):
        for part in self.parts:
            x = part(x)
        return x

    def _inverse(self, y):
        for part in reversed(self.parts):
            y = part.inv(y)
        return y

    def _log_abs_det_jacobian(self, x, y):
        if not self.parts:
            return creation.zeros_like(x)
        total, event_dim = 0.0, self.event_dim
        for part in self.parts:
            y_part = part(x)
            total = total + sum_rightmost(part.log_abs_det_jacobian(x, y_part),
                                          event_dim - part.event_dim)
            x = y_part
        return total

    def __repr__(self) -> str:
        return f"ComposeTransform({', '.join(map(repr, self.parts))})"


identity_transform = ComposeTransform([])


class TransformedDistribution(Distribution):
    """``base_distribution`` pushed through ``transforms`` (one or a list, applied in
    order): ``log_prob(y)`` is the base's at ``x = inv(y)`` minus the log-Jacobians."""

    def __init__(self, base_distribution, transforms, validate_args=None):
        self.base_dist = base_distribution
        self.transforms = [transforms] if isinstance(transforms, Transform) else list(transforms)
        event_dim = max([len(base_distribution.event_shape)]
                        + [t.event_dim for t in self.transforms])
        shape = tuple(base_distribution.batch_shape) + tuple(base_distribution.event_shape)
        cut = len(shape) - event_dim
        self.has_rsample = base_distribution.has_rsample
        super().__init__(shape[:cut], shape[cut:], validate_args=validate_args)

    @property
    def support(self):
        return self.transforms[-1].codomain if self.transforms else self.base_dist.support

    def expand(self, batch_shape, _instance=None):
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        base_batch = tuple(batch_shape) + tuple(self.event_shape)[
            :len(self.event_shape) - len(self.base_dist.event_shape)]
        new.base_dist = self.base_dist.expand(base_batch)
        new.batch_shape = type(self.batch_shape)(batch_shape)
        return new

    def rsample(self, sample_shape=()):
        x = self.base_dist.rsample(sample_shape)
        for transform in self.transforms:
            x = transform(x)
        return x

    def sample(self, sample_shape=()):
        """A draw without gradient (the transforms' parameters' included)."""
        with no_grad():
            x = self.base_dist.sample(sample_shape)
            for transform in self.transforms:
                x = transform(x)
            return x

    def log_prob(self, value):
        y = as_tensor(value)
        event_dim = len(self.event_shape)
        log_prob = 0.0
        for transform in reversed(self.transforms):
            x = transform.inv(y)
            log_prob = log_prob - sum_rightmost(transform.log_abs_det_jacobian(x, y),
                                                event_dim - transform.event_dim)
            y = x
        base = self.base_dist.log_prob(y)
        return log_prob + sum_rightmost(base, event_dim - len(self.base_dist.event_shape))

    def _monotonize(self, p):
        """``p`` for increasing transforms, ``1 - p`` where they decrease (the sign may
        be a tensor: an ``AffineTransform`` of tensor ``scale``)."""
        sign = 1
        for transform in self.transforms:
            sign = sign * transform.sign
        return p if isinstance(sign, int) and sign == 1 else sign * (p - 0.5) + 0.5

    def cdf(self, value):
        y = as_tensor(value)
        for transform in reversed(self.transforms):
            y = transform.inv(y)
        return self._monotonize(self.base_dist.cdf(y))

    def icdf(self, value):
        x = self.base_dist.icdf(self._monotonize(as_tensor(value)))
        for transform in self.transforms:
            x = transform(x)
        return x
