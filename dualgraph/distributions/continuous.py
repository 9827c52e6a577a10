"""Continuous distributions on the real line that are transforms of uniform or normal
draws, so all of them have ``rsample``: Normal, Laplace, Cauchy, Gumbel (location-scale
families), Uniform, Exponential, HalfNormal, LogNormal."""
from __future__ import annotations

import math

from ..ops import creation, elementwise as ew, reduce as red, special
from . import constraints
from .distribution import Distribution, as_tensor, broadcast_all, finfo, uniform_open

__all__ = ["Normal", "Laplace", "Cauchy", "Gumbel", "Uniform", "Exponential", "HalfNormal",
           "LogNormal"]

_EULER = 0.57721566490153286061
_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


class _LocScale(Distribution):
    """A family ``loc + scale * Z`` for a standard draw ``Z`` (``_standard``)."""
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(tuple(self.loc.shape), validate_args=validate_args)

    def rsample(self, sample_shape=()):
        return self.loc + self._standard(self._extended(sample_shape)) * self.scale

    def _z(self, value):
        return (as_tensor(value, self.loc) - self.loc) / self.scale

    @property
    def mode(self):
        return self.loc


class Normal(_LocScale):
    """The Gaussian of mean ``loc`` and standard deviation ``scale`` (broadcast).

    >>> round(Normal(0.0, 1.0).entropy().item(), 4)
    1.4189
    """

    def _standard(self, shape):
        return creation.randn(*shape, dtype=self.loc.dtype)

    mean = property(lambda self: self.loc)
    stddev = property(lambda self: self.scale)
    variance = property(lambda self: self.scale * self.scale)

    def log_prob(self, value):
        return -(self._z(value) ** 2) / 2 - ew.log(self.scale) - _LOG_SQRT_2PI

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + ew.log(self.scale)

    def cdf(self, value):
        return 0.5 * (1 + ew.erf(self._z(value) / math.sqrt(2)))

    def icdf(self, value):
        return self.loc + self.scale * special.erfinv(2 * as_tensor(value, self.loc) - 1) \
            * math.sqrt(2)


class Laplace(_LocScale):
    """The double exponential ``exp(-|x - loc| / scale) / (2 scale)``."""

    def _standard(self, shape):
        eps = float(finfo(self.loc).eps)
        u = ew.clamp_min(2 * creation.rand(*shape, dtype=self.loc.dtype) - 1, eps - 1)
        return -ew.sign(u) * ew.log1p(-ew.abs(u))

    mean = property(lambda self: self.loc)
    variance = property(lambda self: 2 * self.scale * self.scale)
    stddev = property(lambda self: math.sqrt(2) * self.scale)

    def log_prob(self, value):
        return -ew.log(2 * self.scale) - ew.abs(self._z(value))

    def entropy(self):
        return 1 + ew.log(2 * self.scale)

    def cdf(self, value):
        z = self._z(value)
        return 0.5 - 0.5 * ew.sign(z) * ew.expm1(-ew.abs(z))

    def icdf(self, value):
        term = as_tensor(value, self.loc) - 0.5
        return self.loc - self.scale * ew.sign(term) * ew.log1p(-2 * ew.abs(term))


class Cauchy(_LocScale):
    """The Lorentz distribution: no mean (NaN) and infinite variance, as in torch."""

    def _standard(self, shape):
        return ew.tan(math.pi * (creation.rand(*shape, dtype=self.loc.dtype) - 0.5))

    mean = property(lambda self: creation.full_like(self.loc, math.nan))
    variance = property(lambda self: creation.full_like(self.loc, math.inf))

    def log_prob(self, value):
        return -math.log(math.pi) - ew.log(self.scale) - ew.log1p(self._z(value) ** 2)

    def entropy(self):
        return math.log(4 * math.pi) + ew.log(self.scale)

    def cdf(self, value):
        return ew.atan(self._z(value)) / math.pi + 0.5

    def icdf(self, value):
        return ew.tan(math.pi * (as_tensor(value, self.loc) - 0.5)) * self.scale + self.loc


class Gumbel(_LocScale):
    """The type-I extreme value distribution (the max of many draws)."""

    def _standard(self, shape):
        return -ew.log(-ew.log(uniform_open(shape, self.loc)))

    mean = property(lambda self: self.loc + self.scale * _EULER)
    variance = property(lambda self: (math.pi ** 2 / 6) * self.scale * self.scale)
    stddev = property(lambda self: (math.pi / math.sqrt(6)) * self.scale)

    def log_prob(self, value):
        z = self._z(value)
        return -(z + ew.exp(-z)) - ew.log(self.scale)

    def entropy(self):
        return ew.log(self.scale) + (1 + _EULER)

    def cdf(self, value):
        return ew.exp(-ew.exp(-self._z(value)))

    def icdf(self, value):
        return self.loc - self.scale * ew.log(-ew.log(as_tensor(value, self.loc)))


class Uniform(Distribution):
    """Uniform on ``[low, high)``."""
    arg_constraints = {"low": constraints.dependent, "high": constraints.dependent}
    has_rsample = True

    def __init__(self, low, high, validate_args=None):
        self.low, self.high = broadcast_all(low, high)
        super().__init__(tuple(self.low.shape), validate_args=validate_args)

    def _check_args(self) -> None:
        if not bool(red.all(self.low < self.high).item()):
            raise ValueError(f"Uniform: low must be below high, got low={self.low}, "
                             f"high={self.high}")

    @constraints.dependent_property
    def support(self):
        return constraints.half_open_interval(self.low, self.high)

    def rsample(self, sample_shape=()):
        u = creation.rand(*self._extended(sample_shape), dtype=self.low.dtype)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value):
        value = as_tensor(value, self.low)
        inside = (self.low <= value) & (value < self.high)
        return ew.where(inside, -ew.log(self.high - self.low), -math.inf)

    def cdf(self, value):
        return ew.clamp((as_tensor(value, self.low) - self.low) / (self.high - self.low), 0, 1)

    def icdf(self, value):
        return as_tensor(value, self.low) * (self.high - self.low) + self.low

    def entropy(self):
        return ew.log(self.high - self.low)

    mean = property(lambda self: (self.high + self.low) / 2)
    mode = property(lambda self: creation.full_like(self.low, math.nan))
    variance = property(lambda self: (self.high - self.low) ** 2 / 12)
    stddev = property(lambda self: (self.high - self.low) / math.sqrt(12))


class Exponential(Distribution):
    """Waiting times of rate ``rate``: ``rate * exp(-rate * x)`` on x >= 0."""
    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, rate, validate_args=None):
        self.rate = as_tensor(rate)
        super().__init__(tuple(self.rate.shape), validate_args=validate_args)

    def rsample(self, sample_shape=()):
        u = creation.rand(*self._extended(sample_shape), dtype=self.rate.dtype)
        return -ew.log1p(-u) / self.rate

    def log_prob(self, value):
        return ew.log(self.rate) - self.rate * as_tensor(value, self.rate)

    def cdf(self, value):
        return 1 - ew.exp(-self.rate * as_tensor(value, self.rate))

    def icdf(self, value):
        return -ew.log1p(-as_tensor(value, self.rate)) / self.rate

    def entropy(self):
        return 1.0 - ew.log(self.rate)

    mean = property(lambda self: 1 / self.rate)
    mode = property(lambda self: creation.zeros_like(self.rate))
    variance = property(lambda self: self.rate ** -2)
    stddev = property(lambda self: 1 / self.rate)


class HalfNormal(Distribution):
    """``|X|`` for X ~ Normal(0, scale)."""
    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, scale, validate_args=None):
        self.scale = as_tensor(scale)
        self.base_dist = Normal(0.0, self.scale, validate_args=False)
        super().__init__(tuple(self.scale.shape), validate_args=validate_args)

    def rsample(self, sample_shape=()):
        return ew.abs(self.base_dist.rsample(sample_shape))

    def log_prob(self, value):
        value = as_tensor(value, self.scale)
        return ew.where(value >= 0, self.base_dist.log_prob(value) + math.log(2), -math.inf)

    def cdf(self, value):
        return 2 * self.base_dist.cdf(value) - 1

    def icdf(self, value):
        return self.base_dist.icdf((as_tensor(value, self.scale) + 1) / 2)

    def entropy(self):
        return self.base_dist.entropy() - math.log(2)

    def expand(self, batch_shape, _instance=None):
        return HalfNormal(self.scale.expand(*batch_shape), validate_args=False)

    mean = property(lambda self: self.scale * math.sqrt(2 / math.pi))
    mode = property(lambda self: creation.zeros_like(self.scale))
    variance = property(lambda self: self.scale * self.scale * (1 - 2 / math.pi))


class LogNormal(Distribution):
    """``exp(X)`` for X ~ Normal(loc, scale)."""
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.base_dist = Normal(loc, scale, validate_args=validate_args)
        self.loc, self.scale = self.base_dist.loc, self.base_dist.scale
        super().__init__(tuple(self.loc.shape), validate_args=False)

    def rsample(self, sample_shape=()):
        return ew.exp(self.base_dist.rsample(sample_shape))

    def log_prob(self, value):
        log_value = ew.log(as_tensor(value, self.loc))
        return self.base_dist.log_prob(log_value) - log_value

    def cdf(self, value):
        return self.base_dist.cdf(ew.log(as_tensor(value, self.loc)))

    def icdf(self, value):
        return ew.exp(self.base_dist.icdf(value))

    def entropy(self):
        return self.base_dist.entropy() + self.loc

    def expand(self, batch_shape, _instance=None):
        shape = tuple(batch_shape)
        return LogNormal(self.loc.expand(*shape), self.scale.expand(*shape), validate_args=False)

    mean = property(lambda self: ew.exp(self.loc + self.scale * self.scale / 2))
    mode = property(lambda self: ew.exp(self.loc - self.scale * self.scale))

    @property
    def variance(self):
        s2 = self.scale * self.scale
        return ew.expm1(s2) * ew.exp(2 * self.loc + s2)
