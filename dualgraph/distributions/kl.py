"""``kl_divergence(p, q)`` and ``register_kl``, as ``torch.distributions.kl``: a table of
closed forms keyed by the two distributions' classes; the most specific registered pair
(by the classes' method resolution order) answers.

>>> import dualgraph as dg
>>> from dualgraph.distributions import Normal
>>> kl_divergence(Normal(0.0, 1.0), Normal(0.0, 1.0)).item()
0.0
"""
from __future__ import annotations

import math

from ..ops import decompositions, elementwise as ew, reduce as red, shape as shape_ops
from ..ops import special
from ..shapes import broadcast_shapes
from .continuous import Exponential, Laplace, Normal, Uniform
from .discrete import Bernoulli, Categorical, OneHotCategorical, Poisson
from .distribution import softplus
from .gamma import Beta, Dirichlet, Gamma, lbeta
from .multivariate import Independent, MultivariateNormal, half_log_det, mahalanobis

__all__ = ["kl_divergence", "register_kl"]

_KL: dict = {}


def register_kl(type_p, type_q):
    """Decorator: ``@register_kl(P, Q) def kl(p, q): ...`` adds a closed form."""
    def decorate(fn):
        _KL[type_p, type_q] = fn
        return fn
    return decorate


def _lookup(type_p, type_q):
    """The registered pair nearest to (type_p, type_q) along both MROs, or None."""
    best, best_rank = None, None
    for (p, q), fn in _KL.items():
        if issubclass(type_p, p) and issubclass(type_q, q):
            rank = (type_p.__mro__.index(p), type_q.__mro__.index(q))
            if best_rank is None or rank < best_rank:
                best, best_rank = fn, rank
    return best


def kl_divergence(p, q):
    """KL(p || q) for a registered pair of distributions (per batch element)."""
    fn = _lookup(type(p), type(q))
    if fn is None:
        raise NotImplementedError(
            f"kl_divergence({type(p).__name__}, {type(q).__name__}) is not implemented; "
            f"register one with @register_kl({type(p).__name__}, {type(q).__name__})")
    return fn(p, q)


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    ratio = (p.scale / q.scale) ** 2
    return 0.5 * (ratio + ((p.loc - q.loc) / q.scale) ** 2 - 1 - ew.log(ratio))


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = ew.log((q.high - q.low) / (p.high - p.low))
    outside = (q.low > p.low) | (q.high < p.high)
    return ew.where(outside, math.inf, result)


@register_kl(Exponential, Exponential)
def _kl_exponential_exponential(p, q):
    ratio = q.rate / p.rate
    return ratio - 1 - ew.log(ratio)


@register_kl(Laplace, Laplace)
def _kl_laplace_laplace(p, q):
    scale_ratio = p.scale / q.scale
    distance = ew.abs(p.loc - q.loc)
    return -ew.log(scale_ratio) + distance / q.scale \
        + scale_ratio * ew.exp(-distance / p.scale) - 1


@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p, q):
    return q.concentration * ew.log(p.rate / q.rate) \
        + special.lgamma(q.concentration) - special.lgamma(p.concentration) \
        + (p.concentration - q.concentration) * special.digamma(p.concentration) \
        + (q.rate - p.rate) * (p.concentration / p.rate)


@register_kl(Beta, Beta)
def _kl_beta_beta(p, q):
    p_total = p.concentration1 + p.concentration0
    q_total = q.concentration1 + q.concentration0
    return lbeta(q.concentration1, q.concentration0) - lbeta(p.concentration1, p.concentration0) \
        + (p.concentration1 - q.concentration1) * special.digamma(p.concentration1) \
        + (p.concentration0 - q.concentration0) * special.digamma(p.concentration0) \
        + (q_total - p_total) * special.digamma(p_total)


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p, q):
    p_total = red.sum(p.concentration, -1)
    q_total = red.sum(q.concentration, -1)
    digamma_gap = special.digamma(p.concentration) - shape_ops.unsqueeze(
        special.digamma(p_total), -1)
    return special.lgamma(p_total) - special.lgamma(q_total) \
        - red.sum(special.lgamma(p.concentration) - special.lgamma(q.concentration), -1) \
        + red.sum((p.concentration - q.concentration) * digamma_gap, -1)


@register_kl(Poisson, Poisson)
def _kl_poisson_poisson(p, q):
    return p.rate * (ew.log(p.rate) - ew.log(q.rate)) - (p.rate - q.rate)


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    terms = p.probs * (p.logits - q.logits)
    terms = ew.where(q.probs == 0, math.inf, terms)
    return red.sum(ew.where(p.probs == 0, 0.0, terms), -1)


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehot_onehot(p, q):
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    return (p.probs * (softplus(-q.logits) - softplus(-p.logits))
            + (1 - p.probs) * (softplus(q.logits) - softplus(p.logits)))


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_mvn_mvn(p, q):
    if p.event_shape != q.event_shape:
        raise ValueError("KL-divergence between two Multivariate Normals with different "
                         "event shapes cannot be computed")
    p_tril, q_tril = p._unbroadcasted_scale_tril, q._unbroadcasted_scale_tril
    n = p.event_shape[0]
    batch = broadcast_shapes(tuple(p_tril.shape[:-2]), tuple(q_tril.shape[:-2]))
    solved = decompositions.solve_triangular(
        shape_ops.expand(q_tril, batch + (n, n)), shape_ops.expand(p_tril, batch + (n, n)),
        upper=False)
    trace = red.sum(solved ** 2, (-2, -1))
    return half_log_det(q_tril) - half_log_det(p_tril) \
        + 0.5 * (trace + mahalanobis(q_tril, q.loc - p.loc) - n)


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError("kl_divergence of Independents with different "
                                  "reinterpreted_batch_ndims is not implemented")
    return p._sum(kl_divergence(p.base_dist, q.base_dist))
