"""Distributions over integers and categories: Bernoulli, Categorical, OneHotCategorical,
Multinomial, Geometric (transforms of uniform draws), Poisson, Binomial and
NegativeBinomial (seeded draws of their own, ``random_poisson`` / ``random_binomial`` /
``random_gamma``). Only OneHotCategoricalStraightThrough has ``rsample`` (a
straight-through gradient)."""
from __future__ import annotations

import math

from ..autograd import no_grad
from ..ops import creation, elementwise as ew, index as index_ops, reduce as red
from ..ops import shape as shape_ops, special
from . import constraints
from .distribution import (Distribution, as_tensor, broadcast_all, finfo, probs_and_logits,
                           softplus, uniform_open)
from .gamma import standard_gamma

__all__ = ["Bernoulli", "Categorical", "OneHotCategorical", "OneHotCategoricalStraightThrough",
           "Multinomial", "Geometric", "Poisson", "Binomial", "NegativeBinomial"]


class Bernoulli(Distribution):
    """0/1 outcomes with ``probs`` or ``logits`` (the probability of 1)."""
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        self.probs, self.logits = probs_and_logits(probs, logits, "Bernoulli", binary=True)
        super().__init__(tuple(self.probs.shape), validate_args=validate_args)

    mean = property(lambda self: self.probs)
    variance = property(lambda self: self.probs * (1 - self.probs))
    param_shape = property(lambda self: self.probs.shape)

    @property
    def mode(self):
        """1 where ``probs`` > 0.5, 0 below, NaN at 0.5 (a tie), as torch."""
        return ew.where(self.probs == 0.5, math.nan, (self.probs > 0.5).to(self.probs.dtype))

    def sample(self, sample_shape=()):
        shape = self._extended(sample_shape)
        probs = shape_ops.expand(self.probs.detach(), shape)
        return (creation.rand(*shape, dtype=probs.dtype) < probs).to(probs.dtype)

    def log_prob(self, value):
        value, logits = broadcast_all(as_tensor(value, self.logits), self.logits)
        # -BCE with logits, stable: x * z - softplus(z)
        return value * logits - softplus(logits)

    def entropy(self):
        return softplus(self.logits) - self.probs * self.logits

    def enumerate_support(self, expand=True):
        values = creation.tensor([0.0, 1.0], dtype=self.probs.dtype)
        values = values.reshape(2, *([1] * len(self.batch_shape)))
        return values.expand(2, *self.batch_shape) if expand else values


class Categorical(Distribution):
    """Categories 0..K-1 with ``probs`` (normalised along the last dim) or ``logits``.

    >>> import dualgraph as dg
    >>> Categorical(logits=dg.zeros(2, 4)).log_prob(dg.tensor([0, 3]))
    tensor([-1.3863, -1.3863])
    """
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        self.probs, self.logits = probs_and_logits(probs, logits, "Categorical", binary=False)
        if self.logits.ndim < 1:
            raise ValueError("Categorical: probs or logits need at least one dim "
                             "(the categories)")
        self._num_events = self.logits.shape[-1]
        super().__init__(tuple(self.logits.shape[:-1]), validate_args=validate_args)

    @constraints.dependent_property(is_discrete=True)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    param_shape = property(lambda self: self.logits.shape)
    mean = property(lambda self: creation.full(tuple(self.batch_shape), math.nan,
                                               dtype=self.probs.dtype))
    variance = mean
    mode = property(lambda self: red.argmax(self.probs, -1))

    def sample(self, sample_shape=()):
        """Category indices (int64) by the inverse CDF of a uniform draw."""
        shape = tuple(sample_shape) + tuple(self.batch_shape)
        cdf = red.cumsum(self.probs.detach(), -1)
        u = creation.rand(*shape, 1, dtype=cdf.dtype) * shape_ops.narrow(
            cdf, -1, self._num_events - 1, 1)
        index = red.sum((cdf <= u).long(), -1)
        return ew.clamp_max(index, self._num_events - 1)

    def log_prob(self, value):
        value = as_tensor(value, self.logits).long()
        value, logits = broadcast_all(shape_ops.unsqueeze(value, -1), self.logits)
        value = shape_ops.narrow(value, -1, 0, 1)
        return shape_ops.squeeze(index_ops.gather(logits, -1, value), -1)

    def entropy(self):
        logits = ew.clamp_min(self.logits, float(finfo(self.logits).min))
        return -red.sum(logits * self.probs, -1)

    def enumerate_support(self, expand=True):
        values = creation.arange(self._num_events).reshape(
            self._num_events, *([1] * len(self.batch_shape)))
        return values.expand(self._num_events, *self.batch_shape) if expand else values


class OneHotCategorical(Distribution):
    """Categorical draws as one-hot vectors (event shape ``(K,)``)."""
    arg_constraints = Categorical.arg_constraints
    support = constraints.one_hot
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs, logits, validate_args=validate_args)
        self.probs, self.logits = self._categorical.probs, self._categorical.logits
        super().__init__(self._categorical.batch_shape, self.logits.shape[-1:],
                         validate_args=False)

    def expand(self, batch_shape, _instance=None):
        shape = tuple(batch_shape) + tuple(self.event_shape)
        return type(self)(logits=self.logits.expand(*shape), validate_args=False)

    param_shape = property(lambda self: self.logits.shape)
    mean = property(lambda self: self.probs)
    variance = property(lambda self: self.probs * (1 - self.probs))

    @property
    def mode(self):
        k = self.event_shape[0]
        return index_ops.one_hot(red.argmax(self.probs, -1), k).to(self.probs.dtype)

    def sample(self, sample_shape=()):
        k = self.event_shape[0]
        return index_ops.one_hot(self._categorical.sample(sample_shape), k).to(self.probs.dtype)

    def log_prob(self, value):
        return self._categorical.log_prob(red.argmax(as_tensor(value, self.probs), -1))

    def entropy(self):
        return self._categorical.entropy()

    def enumerate_support(self, expand=True):
        k = self.event_shape[0]
        values = creation.eye(k, dtype=self.probs.dtype).reshape(
            k, *([1] * len(self.batch_shape)), k)
        return values.expand(k, *self.batch_shape, k) if expand else values


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """One-hot draws whose ``rsample`` passes the gradient of ``probs`` straight through
    (the forward value is the draw, the gradient that of ``probs``)."""
    has_rsample = True

    def rsample(self, sample_shape=()):
        draws = self.sample(sample_shape)
        return draws + (self.probs - self.probs.detach())


class Multinomial(Distribution):
    """Counts of each category in ``total_count`` Categorical(``probs``) draws (event
    shape ``(K,)``)."""
    arg_constraints = Categorical.arg_constraints

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        if not isinstance(total_count, int):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        self._categorical = Categorical(probs, logits, validate_args=validate_args)
        self.probs, self.logits = self._categorical.probs, self._categorical.logits
        super().__init__(self._categorical.batch_shape, self.logits.shape[-1:],
                         validate_args=False)

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.independent(constraints.integer_interval(0, self.total_count), 1)

    def expand(self, batch_shape, _instance=None):
        shape = tuple(batch_shape) + tuple(self.event_shape)
        return Multinomial(self.total_count, logits=self.logits.expand(*shape),
                           validate_args=False)

    param_shape = property(lambda self: self.logits.shape)
    mean = property(lambda self: self.total_count * self.probs)
    variance = property(lambda self: self.total_count * self.probs * (1 - self.probs))

    def sample(self, sample_shape=()):
        k = self.event_shape[0]
        draws = self._categorical.sample((self.total_count,) + tuple(sample_shape))
        return red.sum(index_ops.one_hot(draws, k), 0).to(self.probs.dtype)

    def log_prob(self, value):
        value, logits = broadcast_all(as_tensor(value, self.logits), self.logits)
        # (a category of probability 0 drawn 0 times adds 0, not 0 * -inf)
        logits = ew.where((value == 0) & (logits == -math.inf), 0.0, logits)
        return special.lgamma(red.sum(value, -1) + 1) \
            - red.sum(special.lgamma(value + 1), -1) + red.sum(logits * value, -1)


class Geometric(Distribution):
    """The number of failures before the first success of Bernoulli(``probs``) trials."""
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, probs=None, logits=None, validate_args=None):
        self.probs, self.logits = probs_and_logits(probs, logits, "Geometric", binary=True)
        super().__init__(tuple(self.probs.shape), validate_args=validate_args)

    mean = property(lambda self: 1.0 / self.probs - 1.0)
    mode = property(lambda self: creation.zeros_like(self.probs))
    variance = property(lambda self: (1.0 / self.probs - 1.0) / self.probs)

    def sample(self, sample_shape=()):
        u = uniform_open(self._extended(sample_shape), self.probs)
        return ew.floor(ew.log(u) / ew.log1p(-self.probs.detach()))

    def log_prob(self, value):
        value, probs = broadcast_all(as_tensor(value, self.probs), self.probs)
        # (probs == 1 with value 0 is log 1 = 0, not 0 * -inf)
        failures = ew.where((probs == 1) & (value == 0), 0.0, probs)
        return value * ew.log1p(-failures) + ew.log(self.probs)

    def entropy(self):
        return (softplus(self.logits) - self.probs * self.logits) / self.probs


class Poisson(Distribution):
    """Counts of events at ``rate`` per interval."""
    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer

    def __init__(self, rate, validate_args=None):
        self.rate = as_tensor(rate)
        super().__init__(tuple(self.rate.shape), validate_args=validate_args)

    mean = property(lambda self: self.rate)
    mode = property(lambda self: ew.floor(self.rate))
    variance = property(lambda self: self.rate)

    def sample(self, sample_shape=()):
        return creation.poisson(self.rate.detach().expand(*self._extended(sample_shape)))

    def log_prob(self, value):
        value, rate = broadcast_all(as_tensor(value, self.rate), self.rate)
        return special.xlogy(value, rate) - rate - special.lgamma(value + 1)


class Binomial(Distribution):
    """Successes in ``total_count`` Bernoulli(``probs``) trials."""
    arg_constraints = {"total_count": constraints.nonnegative_integer,
                       "probs": constraints.unit_interval, "logits": constraints.real}

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        probs, logits = probs_and_logits(probs, logits, "Binomial", binary=True)
        self.total_count, self.probs, self.logits = broadcast_all(total_count, probs, logits)
        self.total_count = self.total_count.to(self.probs.dtype)
        super().__init__(tuple(self.probs.shape), validate_args=validate_args)

    @constraints.dependent_property(is_discrete=True)
    def support(self):
        return constraints.integer_interval(0, self.total_count)

    mean = property(lambda self: self.total_count * self.probs)
    variance = property(lambda self: self.total_count * self.probs * (1 - self.probs))

    @property
    def mode(self):
        return ew.minimum(ew.floor((self.total_count + 1) * self.probs), self.total_count)

    def sample(self, sample_shape=()):
        shape = self._extended(sample_shape)
        return creation.binomial(self.total_count.expand(*shape),
                                 self.probs.detach().expand(*shape))

    def log_prob(self, value):
        n, logits = self.total_count, self.logits
        value = as_tensor(value, logits)
        normalize = n * softplus(logits) - special.lgamma(n + 1)
        return value * logits - special.lgamma(value + 1) - special.lgamma(n - value + 1) \
            - normalize


class NegativeBinomial(Distribution):
    """Successes before ``total_count`` failures of Bernoulli(``probs``) trials: a Poisson
    of Gamma-distributed rate (its draw)."""
    arg_constraints = {"total_count": constraints.nonnegative,
                       "probs": constraints.half_open_interval(0.0, 1.0),
                       "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, total_count, probs=None, logits=None, validate_args=None):
        probs, logits = probs_and_logits(probs, logits, "NegativeBinomial", binary=True)
        self.total_count, self.probs, self.logits = broadcast_all(total_count, probs, logits)
        self.total_count = self.total_count.to(self.probs.dtype)
        super().__init__(tuple(self.probs.shape), validate_args=validate_args)

    mean = property(lambda self: self.total_count * ew.exp(self.logits))
    variance = property(lambda self: self.mean / ew.sigmoid(-self.logits))

    @property
    def mode(self):
        return ew.clamp_min(ew.floor((self.total_count - 1) * ew.exp(self.logits)), 0.0)

    def sample(self, sample_shape=()):
        shape = self._extended(sample_shape)
        with no_grad():
            rate = standard_gamma(self.total_count.expand(*shape), shape) * ew.exp(self.logits)
            return creation.poisson(rate)

    def log_prob(self, value):
        n, logits = self.total_count, self.logits
        value = as_tensor(value, logits)
        unnormalized = -n * softplus(logits) - value * softplus(-logits)
        normalization = special.lgamma(1.0 + value) + special.lgamma(n) \
            - special.lgamma(n + value)
        return unnormalized - ew.where(n + value == 0, 0.0, normalization)
