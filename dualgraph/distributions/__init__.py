"""Probability distributions for policy gradients, VAEs and sampling, as
``torch.distributions``: ``Categorical``, ``Bernoulli``, ``Normal``, ``Independent`` and
``kl_divergence``.

Everything is built from ordinary ops, so ``log_prob``, ``entropy`` and ``rsample`` have
gradients and trace into compiled steps; ``sample`` draws from dualgraph's generator (a
``random`` node when traced), so its numbers are not torch's for the same seed. torch's
import paths (``torch.distributions.categorical``, ``.normal``, ``.kl``, ...) name this
module.

>>> import dualgraph as dg
>>> d = Categorical(logits=dg.zeros(2, 4))
>>> d.log_prob(dg.tensor([0, 3]))
tensor([-1.3863, -1.3863])
>>> round(Normal(0.0, 1.0).entropy().item(), 4)
1.4189
"""
from __future__ import annotations

import math
import sys
import types

import ml_dtypes

from .. import dtypes
from ..autograd import no_grad
from ..ops import creation, elementwise as ew, index as index_ops, reduce as red
from ..ops import shape as shape_ops
from ..shapes import broadcast_shapes
from ..tensor import Size, Tensor

__all__ = ["Distribution", "Categorical", "Bernoulli", "Normal", "Independent",
           "kl_divergence"]


def _as_tensor(value, like=None):
    if isinstance(value, Tensor):
        return value
    return creation.tensor(value, dtype=like.dtype if like is not None else dtypes.float32)


def _broadcast(*values):
    tensors = [_as_tensor(v) for v in values]
    shape = broadcast_shapes(*(tuple(t.shape) for t in tensors))
    return [t if tuple(t.shape) == shape else shape_ops.expand(t, shape) for t in tensors]


class Distribution:
    """The common interface: ``batch_shape``, ``event_shape``, ``sample``, ``rsample``,
    ``log_prob``, ``entropy``, ``mean``, ``variance``, ``stddev``."""

    has_rsample = False

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self.batch_shape = Size(batch_shape)
        self.event_shape = Size(event_shape)

    def _extended(self, sample_shape) -> tuple:
        return tuple(sample_shape) + tuple(self.batch_shape) + tuple(self.event_shape)

    def sample(self, sample_shape=()):
        """A draw without gradient (of shape ``sample_shape + batch_shape + event_shape``)."""
        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        raise NotImplementedError(
            f"{type(self).__name__} has no reparameterised sample (rsample); use sample() "
            f"and a score-function (log_prob) estimator")

    @property
    def stddev(self):
        return ew.sqrt(self.variance)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Categorical(Distribution):
    """Categories 0..K-1 with ``probs`` (normalised along the last dim) or ``logits``.

    >>> import dualgraph as dg
    >>> Categorical(probs=dg.tensor([0.25, 0.75])).entropy().item() > 0
    True
    """

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Categorical: give either probs or logits, not both")
        if probs is not None:
            probs = _as_tensor(probs)
            self.probs = probs / red.sum(probs, -1, keepdim=True)
            self.logits = ew.log(ew.clamp_min(self.probs, _tiny(self.probs)))
        else:
            logits = _as_tensor(logits)
            self.logits = logits - red.logsumexp(logits, -1, keepdim=True)
            self.probs = red.softmax(logits, -1)
        if self.logits.ndim < 1:
            raise ValueError("Categorical: probs or logits need at least one dim "
                             "(the categories)")
        self._num_events = self.logits.shape[-1]
        super().__init__(tuple(self.logits.shape[:-1]))

    @property
    def param_shape(self):
        return self.logits.shape

    @property
    def mean(self):
        return creation.full(tuple(self.batch_shape), math.nan, dtype=self.probs.dtype)

    @property
    def mode(self):
        return red.argmax(self.probs, -1)

    def sample(self, sample_shape=()):
        """Category indices (int64) by the inverse CDF of a uniform draw."""
        shape = tuple(sample_shape) + tuple(self.batch_shape)
        cdf = red.cumsum(self.probs.detach(), -1)
        u = creation.rand(*shape, 1, dtype=cdf.dtype) * shape_ops.narrow(
            cdf, -1, self._num_events - 1, 1)
        index = red.sum((cdf <= u).long(), -1)
        return ew.clamp_max(index, self._num_events - 1)

    def log_prob(self, value):
        value = _as_tensor(value, self.logits).long()
        value, logits = _broadcast(shape_ops.unsqueeze(value, -1), self.logits)
        value = shape_ops.narrow(value, -1, 0, 1)
        return shape_ops.squeeze(index_ops.gather(logits, -1, value), -1)

    def entropy(self):
        logits = ew.clamp_min(self.logits, float(_finfo(self.logits).min))
        return -red.sum(logits * self.probs, -1)

    def __repr__(self) -> str:
        return f"Categorical(probs: {tuple(self.probs.shape)})"


def _finfo(t):
    return ml_dtypes.finfo(t.dtype.np)


def _tiny(t) -> float:
    return float(_finfo(t).smallest_normal)


class Bernoulli(Distribution):
    """0/1 outcomes with ``probs`` or ``logits`` (the probability of 1)."""

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Bernoulli: give either probs or logits, not both")
        if probs is not None:
            self.probs = _as_tensor(probs)
            eps = float(_finfo(self.probs).eps)
            clamped = ew.clamp(self.probs, eps, 1 - eps)
            self.logits = ew.log(clamped) - ew.log1p(-clamped)
        else:
            self.logits = _as_tensor(logits)
            self.probs = ew.sigmoid(self.logits)
        super().__init__(tuple(self.probs.shape))

    @property
    def mean(self):
        return self.probs

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        shape = self._extended(sample_shape)
        probs = shape_ops.expand(self.probs.detach(), shape)
        return (creation.rand(*shape, dtype=probs.dtype) < probs).to(probs.dtype)

    def log_prob(self, value):
        value, logits = _broadcast(_as_tensor(value, self.logits), self.logits)
        # -BCE with logits, stable: x * z - softplus(z)
        return value * logits - _softplus(logits)

    def entropy(self):
        return _softplus(self.logits) - self.probs * self.logits


def _softplus(x):
    return ew.clamp_min(x, 0.0) + ew.log1p(ew.exp(-ew.abs(x)))


class Normal(Distribution):
    """The Gaussian of mean ``loc`` and standard deviation ``scale`` (broadcast)."""

    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        like = loc if isinstance(loc, Tensor) else scale if isinstance(scale, Tensor) else None
        self.loc, self.scale = _broadcast(_as_tensor(loc, like), _as_tensor(scale, like))
        super().__init__(tuple(self.loc.shape))

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale * self.scale

    def rsample(self, sample_shape=()):
        eps = creation.randn(*self._extended(sample_shape), dtype=self.loc.dtype)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        value = _as_tensor(value, self.loc)
        return (-((value - self.loc) ** 2) / (2 * self.variance) - ew.log(self.scale)
                - math.log(math.sqrt(2 * math.pi)))

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + ew.log(self.scale)

    def cdf(self, value):
        value = _as_tensor(value, self.loc)
        return 0.5 * (1 + ew.erf((value - self.loc) / (self.scale * math.sqrt(2))))

    def __repr__(self) -> str:
        return f"Normal(loc: {tuple(self.loc.shape)}, scale: {tuple(self.scale.shape)})"


class Independent(Distribution):
    """``base`` with its last ``reinterpreted_batch_ndims`` batch dims made event dims:
    ``log_prob`` and ``entropy`` sum over them (a diagonal Gaussian policy, say)."""

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
        super().__init__(shape[:cut], shape[cut:])

    def _sum(self, t):
        n = self.reinterpreted_batch_ndims
        return red.sum(t, tuple(range(-n, 0))) if n else t

    mean = property(lambda self: self.base_dist.mean)
    variance = property(lambda self: self.base_dist.variance)

    def sample(self, sample_shape=()):
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape=()):
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value):
        return self._sum(self.base_dist.log_prob(value))

    def entropy(self):
        return self._sum(self.base_dist.entropy())


def kl_divergence(p: Distribution, q: Distribution):
    """KL(p || q) for two Normals, two Categoricals, two Bernoullis or two Independents of
    those (summed over their event dims)."""
    if isinstance(p, Independent) and isinstance(q, Independent) and \
            p.reinterpreted_batch_ndims == q.reinterpreted_batch_ndims:
        return p._sum(kl_divergence(p.base_dist, q.base_dist))
    if isinstance(p, Normal) and isinstance(q, Normal):
        ratio = (p.scale / q.scale) ** 2
        return 0.5 * (ratio + ((p.loc - q.loc) / q.scale) ** 2 - 1 - ew.log(ratio))
    if isinstance(p, Categorical) and isinstance(q, Categorical):
        return red.sum(p.probs * (p.logits - q.logits), -1)
    if isinstance(p, Bernoulli) and isinstance(q, Bernoulli):
        return (p.probs * (_softplus(-q.logits) - _softplus(-p.logits))
                + (1 - p.probs) * (_softplus(q.logits) - _softplus(p.logits)))
    raise NotImplementedError(f"kl_divergence of {type(p).__name__} and {type(q).__name__} "
                              f"is not implemented; write it from their log_prob")


# torch.distributions' submodule paths (``from torch.distributions.categorical import
# Categorical``) name this module
for _name in ("distribution", "categorical", "bernoulli", "normal", "independent", "kl"):
    sys.modules[f"{__name__}.{_name}"] = types.ModuleType(f"{__name__}.{_name}")
    sys.modules[f"{__name__}.{_name}"].__dict__.update(
        {k: globals()[k] for k in __all__})
