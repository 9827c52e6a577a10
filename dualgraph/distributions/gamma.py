"""The gamma family: Gamma, Chi2, Beta, Dirichlet and StudentT, all drawn from seeded
gamma draws (``random_gamma``: no transform of uniform or normal draws gives them).

torch's ``rsample`` of these differentiates the draw with respect to the concentrations by
implicit reparameterisation, which needs the derivative of the gamma CDF; that is not here,
so ``rsample`` raises when a concentration (or StudentT's ``df``) requires grad, rather than
give a wrong gradient (``_GammaDrawn``). Gradients with respect to ``rate``, ``loc`` and
``scale`` are exact.
"""
from __future__ import annotations

import math

import numpy as np

from ..autograd import is_grad_enabled, no_grad
from ..ops import creation, elementwise as ew, index as index_ops, random, reduce as red
from ..ops import special
from . import constraints
from .distribution import Distribution, as_tensor, broadcast_all, clamp_open, finfo

__all__ = ["Gamma", "Chi2", "Beta", "Dirichlet", "StudentT"]


def standard_gamma(concentration, shape):
    """Gamma(concentration, 1) draws of ``shape`` (without gradient), kept above 0."""
    draws = random.draw(random.RANDOM_GAMMA, params=(concentration,), shape=tuple(shape),
                        dtype=np.dtype(concentration.dtype.np))
    return ew.clamp_min(draws, float(finfo(concentration).smallest_normal))


class _GammaDrawn(Distribution):
    """A distribution drawn from gamma draws: ``_draw`` makes the draw, differentiable in
    every parameter but those named in ``_concentrations``; ``rsample`` refuses when one
    of those requires grad (and gradients are being recorded)."""
    has_rsample = True
    _concentrations: tuple = ()

    def rsample(self, sample_shape=()):
        if is_grad_enabled() and any(getattr(self, name).requires_grad
                                     for name in self._concentrations):
            raise NotImplementedError(
                f"{type(self).__name__}.rsample: the gradient with respect to "
                f"{' / '.join(self._concentrations)} (implicit reparameterisation of gamma "
                f"draws) is not implemented in dualgraph; use sample() with a "
                f"score-function (log_prob) estimator, or detach it")
        return self._draw(sample_shape)

    def sample(self, sample_shape=()):
        with no_grad():
            return self._draw(sample_shape)


def lbeta(a, b):
    return special.lgamma(a) + special.lgamma(b) - special.lgamma(a + b)


class Gamma(_GammaDrawn):
    """Gamma of shape ``concentration`` and inverse scale ``rate``."""
    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    _concentrations = ("concentration",)

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate = broadcast_all(concentration, rate)
        super().__init__(tuple(self.rate.shape), validate_args=validate_args)

    def _draw(self, sample_shape):
        shape = self._extended(sample_shape)
        draws = standard_gamma(self.concentration.expand(*shape), shape) / self.rate
        return ew.clamp_min(draws, float(finfo(draws).smallest_normal))

    def log_prob(self, value):
        c, rate = self.concentration, self.rate
        value = as_tensor(value, rate)
        return special.xlogy(c, rate) + special.xlogy(c - 1, value) - rate * value \
            - special.lgamma(c)

    def entropy(self):
        c = self.concentration
        return c - ew.log(self.rate) + special.lgamma(c) + (1.0 - c) * special.digamma(c)

    def cdf(self, value):
        """``P(concentration, rate * value)``: differentiable in ``rate`` and ``value``, not
        in ``concentration`` (raises, as torch does)."""
        return special.igamma(self.concentration, self.rate * as_tensor(value, self.rate))

    mean = property(lambda self: self.concentration / self.rate)
    mode = property(lambda self: ew.clamp_min((self.concentration - 1) / self.rate, 0.0))
    variance = property(lambda self: self.concentration / self.rate ** 2)


class Chi2(Gamma):
    """The sum of ``df`` squared standard normals: Gamma(df / 2, 1 / 2)."""
    arg_constraints = {"df": constraints.positive}

    def __init__(self, df, validate_args=None):
        self.df = as_tensor(df)
        super().__init__(0.5 * self.df, 0.5, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return Chi2(self.df.expand(*batch_shape), validate_args=False)


class Dirichlet(_GammaDrawn):
    """Points of the simplex with density proportional to ``prod x_i^(c_i - 1)``."""
    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    _concentrations = ("concentration",)

    def __init__(self, concentration, validate_args=None):
        self.concentration = as_tensor(concentration)
        if self.concentration.ndim < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        shape = tuple(self.concentration.shape)
        super().__init__(shape[:-1], shape[-1:], validate_args=validate_args)

    def _draw(self, sample_shape):
        shape = self._extended(sample_shape)
        draws = standard_gamma(self.concentration.expand(*shape), shape)
        return clamp_open(draws / red.sum(draws, -1, keepdim=True))

    def log_prob(self, value):
        c = self.concentration
        value = as_tensor(value, c)
        return red.sum(special.xlogy(c - 1, value), -1) + special.lgamma(red.sum(c, -1)) \
            - red.sum(special.lgamma(c), -1)

    def entropy(self):
        c = self.concentration
        k, total = c.shape[-1], red.sum(c, -1)
        return red.sum(special.lgamma(c), -1) - special.lgamma(total) \
            - (k - total) * special.digamma(total) - red.sum((c - 1) * special.digamma(c), -1)

    mean = property(lambda self: self.concentration / red.sum(self.concentration, -1, True))

    @property
    def mode(self):
        c = self.concentration
        excess = ew.clamp_min(c - 1, 0.0)
        mode = excess / red.sum(excess, -1, keepdim=True)
        # (all concentrations below 1: the density peaks at the largest one's vertex)
        vertex = index_ops.one_hot(red.argmax(c, -1), c.shape[-1]).to(c.dtype)
        return ew.where(red.all(c < 1, -1, keepdim=True), vertex, mode)

    @property
    def variance(self):
        c = self.concentration
        total = red.sum(c, -1, keepdim=True)
        return c * (total - c) / (total ** 2 * (total + 1))


class Beta(_GammaDrawn):
    """Probabilities in (0, 1) with density ``x^(a - 1) (1 - x)^(b - 1) / B(a, b)``."""
    arg_constraints = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}
    support = constraints.unit_interval
    _concentrations = ("concentration1", "concentration0")

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        super().__init__(tuple(self.concentration1.shape), validate_args=validate_args)

    def _draw(self, sample_shape):
        shape = self._extended(sample_shape)
        x = standard_gamma(self.concentration1.expand(*shape), shape)
        y = standard_gamma(self.concentration0.expand(*shape), shape)
        return clamp_open(x / (x + y))

    def log_prob(self, value):
        a, b = self.concentration1, self.concentration0
        value = as_tensor(value, a)
        return special.xlogy(a - 1, value) + special.xlogy(b - 1, 1 - value) - lbeta(a, b)

    def entropy(self):
        a, b = self.concentration1, self.concentration0
        return lbeta(a, b) - (a - 1) * special.digamma(a) - (b - 1) * special.digamma(b) \
            + (a + b - 2) * special.digamma(a + b)

    mean = property(lambda self: self.concentration1 / (self.concentration1
                                                        + self.concentration0))
    mode = property(lambda self: (self.concentration1 - 1)
                    / (self.concentration1 + self.concentration0 - 2))

    @property
    def variance(self):
        a, b = self.concentration1, self.concentration0
        total = a + b
        return a * b / (total ** 2 * (total + 1))


class StudentT(_GammaDrawn):
    """Student's t with ``df`` degrees of freedom, location ``loc`` and scale ``scale``."""
    arg_constraints = {"df": constraints.positive, "loc": constraints.real,
                       "scale": constraints.positive}
    support = constraints.real
    _concentrations = ("df",)

    def __init__(self, df, loc=0.0, scale=1.0, validate_args=None):
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        super().__init__(tuple(self.df.shape), validate_args=validate_args)

    def _draw(self, sample_shape):
        shape = self._extended(sample_shape)
        normal = creation.randn(*shape, dtype=self.loc.dtype)
        chi2 = 2 * standard_gamma(0.5 * self.df.expand(*shape), shape)
        return self.loc + self.scale * normal * ew.rsqrt(chi2 / self.df)

    def log_prob(self, value):
        df = self.df
        y = (as_tensor(value, self.loc) - self.loc) / self.scale
        z = ew.log(self.scale) + 0.5 * ew.log(df) + 0.5 * math.log(math.pi) \
            + special.lgamma(0.5 * df) - special.lgamma(0.5 * (df + 1.0))
        return -0.5 * (df + 1.0) * ew.log1p(y ** 2 / df) - z

    def entropy(self):
        df = self.df
        return ew.log(self.scale) + 0.5 * (df + 1) * (special.digamma(0.5 * (df + 1))
                                                      - special.digamma(0.5 * df)) \
            + 0.5 * ew.log(df) + lbeta(0.5 * df, creation.full_like(df, 0.5))

    mean = property(lambda self: ew.where(self.df > 1, self.loc, math.nan))
    mode = property(lambda self: self.loc)

    @property
    def variance(self):
        df = self.df
        finite = self.scale ** 2 * df / ew.where(df > 2, df - 2, 1.0)
        return ew.where(df > 2, finite, ew.where(df > 1, math.inf, math.nan))
