"""Distributions over vectors and built from others: MultivariateNormal,
LowRankMultivariateNormal, Independent, MixtureSameFamily."""
from __future__ import annotations

import math

from ..ops import creation, decompositions, elementwise as ew, index as index_ops, linalg
from ..ops import reduce as red, shape as shape_ops
from ..shapes import broadcast_shapes
from . import constraints
from .distribution import Distribution, as_tensor, sum_rightmost

__all__ = ["MultivariateNormal", "LowRankMultivariateNormal", "Independent",
           "MixtureSameFamily"]


def _expand_batch(matrix, batch_shape):
    return shape_ops.expand(matrix, tuple(batch_shape) + tuple(matrix.shape[-2:]))


def mahalanobis(scale_tril, diff):
    """``|L^-1 diff|^2`` per vector of ``diff`` (batch dims broadcast with ``L``'s)."""
    batch = broadcast_shapes(tuple(scale_tril.shape[:-2]), tuple(diff.shape[:-1]))
    solved = decompositions.solve_triangular(
        _expand_batch(scale_tril, batch),
        shape_ops.unsqueeze(shape_ops.expand(diff, batch + tuple(diff.shape[-1:])), -1),
        upper=False)
    return red.sum(shape_ops.squeeze(solved, -1) ** 2, -1)


def half_log_det(scale_tril):
    """``log det(L)`` of a Cholesky factor: half the covariance's log-determinant."""
    return red.sum(ew.log(constraints.batch_diagonal(scale_tril)), -1)


class MultivariateNormal(Distribution):
    """The Gaussian of mean vector ``loc`` and one of ``covariance_matrix``,
    ``precision_matrix`` or ``scale_tril`` (the covariance's lower Cholesky factor)."""
    arg_constraints = {"loc": constraints.real_vector,
                       "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite,
                       "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args=None):
        given = [m is not None for m in (covariance_matrix, precision_matrix, scale_tril)]
        if sum(given) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or "
                             "scale_tril may be specified.")
        loc = as_tensor(loc)
        if loc.ndim < 1:
            raise ValueError("loc must be at least one-dimensional.")
        matrix = as_tensor(next(m for m in (covariance_matrix, precision_matrix, scale_tril)
                                if m is not None), loc)
        if matrix.ndim < 2:
            raise ValueError("scale_tril, covariance_matrix or precision_matrix must be at "
                             "least two-dimensional, with optional leading batch dimensions")
        self._given = ("covariance_matrix", "precision_matrix", "scale_tril")[
            given.index(True)], matrix
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = matrix
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = decompositions.cholesky(matrix)
        else:
            self._unbroadcasted_scale_tril = decompositions.cholesky(decompositions.inv(matrix))
        batch = broadcast_shapes(tuple(loc.shape[:-1]), tuple(matrix.shape[:-2]))
        self.loc = shape_ops.expand(loc, batch + tuple(loc.shape[-1:]))
        super().__init__(batch, tuple(loc.shape[-1:]), validate_args=validate_args)

    def _argument(self, name):
        return self._given[1] if name == self._given[0] else super()._argument(name)

    @property
    def scale_tril(self):
        return _expand_batch(self._unbroadcasted_scale_tril, self.batch_shape)

    @property
    def covariance_matrix(self):
        tril = self._unbroadcasted_scale_tril
        return _expand_batch(linalg.matmul(tril, linalg.mT(tril)), self.batch_shape)

    @property
    def precision_matrix(self):
        return decompositions.inv(self.covariance_matrix)

    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)

    @property
    def variance(self):
        variance = red.sum(self._unbroadcasted_scale_tril ** 2, -1)
        return shape_ops.expand(variance, tuple(self.batch_shape) + tuple(self.event_shape))

    def rsample(self, sample_shape=()):
        eps = creation.randn(*self._extended(sample_shape), dtype=self.loc.dtype)
        product = linalg.matmul(self._unbroadcasted_scale_tril, shape_ops.unsqueeze(eps, -1))
        return self.loc + shape_ops.squeeze(product, -1)

    def log_prob(self, value):
        diff = as_tensor(value, self.loc) - self.loc
        m = mahalanobis(self._unbroadcasted_scale_tril, diff)
        n = self.event_shape[0]
        return -0.5 * (n * math.log(2 * math.pi) + m) \
            - half_log_det(self._unbroadcasted_scale_tril)

    def entropy(self):
        n = self.event_shape[0]
        h = 0.5 * n * (1.0 + math.log(2 * math.pi)) + half_log_det(
            self._unbroadcasted_scale_tril)
        return shape_ops.expand(h, tuple(self.batch_shape)) if self.batch_shape else h


class LowRankMultivariateNormal(MultivariateNormal):
    """The Gaussian of covariance ``cov_factor @ cov_factor.mT + diag(cov_diag)``: a
    ``MultivariateNormal`` of that covariance (its Cholesky factor, where torch works
    through the capacitance matrix: the same values to rounding; the event sizes policies
    and factor models use are small), whose draws add ``cov_factor`` times a normal vector of
    the factor's rank to ``sqrt(cov_diag)`` times one of the event's size, as torch's."""
    arg_constraints = {"loc": constraints.real_vector,
                       "cov_factor": constraints.independent(constraints.real, 2),
                       "cov_diag": constraints.independent(constraints.positive, 1)}

    def __init__(self, loc, cov_factor, cov_diag, validate_args=None):
        loc = as_tensor(loc)
        cov_factor, cov_diag = as_tensor(cov_factor, loc), as_tensor(cov_diag, loc)
        if loc.ndim < 1 or cov_factor.ndim < 2 or cov_diag.ndim < 1:
            raise ValueError("loc and cov_diag must be at least one-dimensional and "
                             "cov_factor at least two-dimensional")
        n = loc.shape[-1]
        if cov_factor.shape[-2] != n or cov_diag.shape[-1] != n:
            raise ValueError(f"cov_factor must be a batch of matrices with shape {n} x m "
                             f"and cov_diag a batch of vectors of size {n}")
        self.cov_factor, self.cov_diag = cov_factor, cov_diag
        covariance = linalg.matmul(cov_factor, linalg.mT(cov_factor)) \
            + index_ops.diag_embed(cov_diag)
        super().__init__(loc, covariance_matrix=covariance, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        batch, event = tuple(batch_shape), tuple(self.event_shape)
        return LowRankMultivariateNormal(
            shape_ops.expand(self.loc, batch + event),
            shape_ops.expand(self.cov_factor, batch + tuple(self.cov_factor.shape[-2:])),
            shape_ops.expand(self.cov_diag, batch + event), validate_args=False)

    @property
    def variance(self):
        variance = red.sum(self.cov_factor ** 2, -1) + self.cov_diag
        return shape_ops.expand(variance, tuple(self.batch_shape) + tuple(self.event_shape))

    def rsample(self, sample_shape=()):
        shape = self._extended(sample_shape)
        eps_w = creation.randn(*shape[:-1], self.cov_factor.shape[-1], dtype=self.loc.dtype)
        eps_d = creation.randn(*shape, dtype=self.loc.dtype)
        product = linalg.matmul(self.cov_factor, shape_ops.unsqueeze(eps_w, -1))
        return self.loc + shape_ops.squeeze(product, -1) + ew.sqrt(self.cov_diag) * eps_d


class Independent(Distribution):
    """``base`` with its last ``reinterpreted_batch_ndims`` batch dims made event dims:
    ``log_prob`` and ``entropy`` sum over them (a diagonal Gaussian policy, say)."""
    arg_constraints: dict = {}

    def __init__(self, base_distribution, reinterpreted_batch_ndims: int, validate_args=None):
        self.base_dist = base_distribution
        self.reinterpreted_batch_ndims = n = int(reinterpreted_batch_ndims)
        shape = tuple(base_distribution.batch_shape) + tuple(base_distribution.event_shape)
        cut = len(base_distribution.batch_shape) - n
        if cut < 0:
            raise ValueError(f"Independent: reinterpreted_batch_ndims {n} is more than the "
                             f"{len(base_distribution.batch_shape)} batch dims of "
                             f"{base_distribution!r}")
        self.has_rsample = base_distribution.has_rsample
        self.has_enumerate_support = False
        super().__init__(shape[:cut], shape[cut:], validate_args=validate_args)

    @property
    def support(self):
        return constraints.independent(self.base_dist.support, self.reinterpreted_batch_ndims)

    def expand(self, batch_shape, _instance=None):
        n = self.reinterpreted_batch_ndims
        base_batch = tuple(batch_shape) + tuple(self.event_shape)[
            :len(self.event_shape) - len(self.base_dist.event_shape)]
        return Independent(self.base_dist.expand(base_batch), n, validate_args=False)

    def _sum(self, t):
        return sum_rightmost(t, self.reinterpreted_batch_ndims)

    mean = property(lambda self: self.base_dist.mean)
    mode = property(lambda self: self.base_dist.mode)
    variance = property(lambda self: self.base_dist.variance)

    def sample(self, sample_shape=()):
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape=()):
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value):
        return self._sum(self.base_dist.log_prob(value))

    def entropy(self):
        return self._sum(self.base_dist.entropy())

    def __repr__(self) -> str:
        return f"Independent({self.base_dist!r}, {self.reinterpreted_batch_ndims})"


class MixtureSameFamily(Distribution):
    """A mixture: a ``Categorical`` over the last batch dim of ``component_distribution``
    picks the component of each draw."""
    arg_constraints: dict = {}

    def __init__(self, mixture_distribution, component_distribution, validate_args=None):
        self._mixture_distribution = mixture_distribution
        self._component_distribution = component_distribution
        components = component_distribution.batch_shape
        if not components or components[-1] != mixture_distribution.logits.shape[-1]:
            raise ValueError(
                f"The mixture distribution's number of categories "
                f"({mixture_distribution.logits.shape[-1]}) must equal the last batch dim "
                f"of the component distribution ({tuple(components)})")
        self._event_ndims = len(component_distribution.event_shape)
        super().__init__(tuple(components[:-1]), component_distribution.event_shape,
                         validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        batch_shape = tuple(batch_shape)
        k = self._component_distribution.batch_shape[-1]
        return MixtureSameFamily(self._mixture_distribution.expand(batch_shape),
                                 self._component_distribution.expand(batch_shape + (k,)),
                                 validate_args=False)

    mixture_distribution = property(lambda self: self._mixture_distribution)
    component_distribution = property(lambda self: self._component_distribution)
    support = property(lambda self: self._component_distribution.support)

    def _pad(self, t):
        """Mixture weights (``batch + (K,)``) with a 1 for every event dim."""
        return t.reshape(*t.shape, *([1] * self._event_ndims))

    @property
    def mean(self):
        probs = self._pad(self._mixture_distribution.probs)
        return red.sum(probs * self._component_distribution.mean, -1 - self._event_ndims)

    @property
    def variance(self):
        probs = self._pad(self._mixture_distribution.probs)
        dim = -1 - self._event_ndims
        means = self._component_distribution.mean
        within = red.sum(probs * self._component_distribution.variance, dim)
        between = red.sum(probs * (means - shape_ops.unsqueeze(self.mean, dim)) ** 2, dim)
        return within + between

    def cdf(self, value):
        value = shape_ops.unsqueeze(as_tensor(value), -1 - self._event_ndims)
        return red.sum(self._component_distribution.cdf(value)
                       * self._mixture_distribution.probs, -1)

    def log_prob(self, value):
        value = shape_ops.unsqueeze(as_tensor(value), -1 - self._event_ndims)
        log_prob = self._component_distribution.log_prob(value)
        weights = red.log_softmax(self._mixture_distribution.logits, -1)
        return red.logsumexp(log_prob + weights, -1)

    def sample(self, sample_shape=()):
        which = self._mixture_distribution.sample(sample_shape)   # sample + batch
        draws = self._component_distribution.sample(sample_shape)  # sample + batch + (K,) + event
        event = tuple(self.event_shape)
        index = which.reshape(*which.shape, 1, *([1] * len(event)))
        index = shape_ops.expand(index, tuple(which.shape) + (1,) + event)
        return shape_ops.squeeze(index_ops.gather(draws, -1 - len(event), index),
                                 -1 - len(event))

    def __repr__(self) -> str:
        return (f"MixtureSameFamily(\n  {self._mixture_distribution!r},\n"
                f"  {self._component_distribution!r})")
