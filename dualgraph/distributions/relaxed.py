"""Continuous relaxations of discrete draws (Concrete / Gumbel-softmax), differentiable in
their parameters through ``rsample``: RelaxedBernoulli and RelaxedOneHotCategorical, built
as torch builds them, a logit-space base pushed through a sigmoid or an exp."""
from __future__ import annotations

from ..ops import creation, elementwise as ew, reduce as red, special
from . import constraints
from .distribution import (Distribution, as_tensor, broadcast_all, probs_and_logits,
                           softplus, uniform_open)
from .transforms import ExpTransform, SigmoidTransform, TransformedDistribution

__all__ = ["LogitRelaxedBernoulli", "RelaxedBernoulli", "ExpRelaxedCategorical",
           "RelaxedOneHotCategorical"]


class LogitRelaxedBernoulli(Distribution):
    """The logit of a RelaxedBernoulli draw: ``(logits + logistic noise) / temperature``."""
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        probs, logits = probs_and_logits(probs, logits, "RelaxedBernoulli", binary=True)
        self.probs, self.logits = broadcast_all(probs, logits)
        self.temperature = as_tensor(temperature, self.logits)
        super().__init__(tuple(self.logits.shape), validate_args=validate_args)

    def rsample(self, sample_shape=()):
        u = uniform_open(self._extended(sample_shape), self.logits)
        return (self.logits + ew.log(u) - ew.log1p(-u)) / self.temperature

    def log_prob(self, value):
        diff = self.logits - as_tensor(value, self.logits) * self.temperature
        return ew.log(self.temperature) + diff - 2 * softplus(diff)


class _Relaxed(TransformedDistribution):
    """A relaxed distribution: its logit- or log-space ``_base`` through ``_transform``."""

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        base = self._base(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base, self._transform(), validate_args=False)

    temperature = property(lambda self: self.base_dist.temperature)
    logits = property(lambda self: self.base_dist.logits)
    probs = property(lambda self: self.base_dist.probs)


class RelaxedBernoulli(_Relaxed):
    """Values in (0, 1) that approach Bernoulli(``probs``) draws as ``temperature`` -> 0."""
    arg_constraints = LogitRelaxedBernoulli.arg_constraints
    support = constraints.unit_interval
    _base, _transform = LogitRelaxedBernoulli, SigmoidTransform


class ExpRelaxedCategorical(Distribution):
    """The log of a RelaxedOneHotCategorical draw: a Gumbel-softmax in log space."""
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        self.probs, self.logits = probs_and_logits(probs, logits, "RelaxedOneHotCategorical",
                                                   binary=False)
        self.temperature = as_tensor(temperature, self.logits)
        shape = tuple(self.logits.shape)
        super().__init__(shape[:-1], shape[-1:], validate_args=validate_args)

    def rsample(self, sample_shape=()):
        u = uniform_open(self._extended(sample_shape), self.logits)
        scores = (self.logits - ew.log(-ew.log(u))) / self.temperature
        return scores - red.logsumexp(scores, -1, keepdim=True)

    def log_prob(self, value):
        k = self.event_shape[0]
        log_scale = special.lgamma(creation.full_like(self.temperature, float(k))) \
            + (k - 1) * ew.log(self.temperature)
        score = self.logits - as_tensor(value, self.logits) * self.temperature
        score = red.sum(score - red.logsumexp(score, -1, keepdim=True), -1)
        return score + log_scale


class RelaxedOneHotCategorical(_Relaxed):
    """Points of the simplex that approach one-hot Categorical draws as ``temperature``
    -> 0 (the Gumbel-softmax / Concrete distribution)."""
    arg_constraints = ExpRelaxedCategorical.arg_constraints
    support = constraints.simplex
    _base, _transform = ExpRelaxedCategorical, ExpTransform
