"""dg.distributions against torch.distributions (float64): log_prob, entropy, moments,
cdf / icdf and kl_divergence by value and gradient; samples by shape, dtype and statistics;
rsample's gradients through their expectation; compiled draws equal to eager draws; and a
SAC-style squashed-Gaussian policy trained eagerly and compiled."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dualgraph as dg
import dualgraph.nn.functional as F

RNG = np.random.default_rng(0)


def real(*shape):
    return RNG.standard_normal(shape)


def pos(*shape, low=0.5, high=2.0):
    return RNG.uniform(low, high, shape)


def unit(*shape):
    return RNG.uniform(0.1, 0.9, shape)


def counts(*shape):
    return RNG.integers(0, 6, shape).astype(np.float64)


def _tril(lib, a):
    """A lower Cholesky factor from any square matrices ``a``."""
    eye = lib.eye(a.shape[-1], dtype=a.dtype)
    return lib.tril(a, -1) + eye * lib.exp(a)


def _spd(lib, a):
    t = _tril(lib, a)
    return t @ t.transpose(-1, -2)


# name -> (build(D, *params), params, value, the statistics to compare). Parameters are
# float64 arrays (their gradients are checked); the value is a fixed array in the support.
CASES = {
    "Normal": (lambda D, m, s: D.Normal(m, s), [real(3), pos(3)], real(3),
               "log_prob entropy mean variance stddev mode cdf icdf"),
    "Uniform": (lambda D, lo, w: D.Uniform(lo, lo + w), [real(3), pos(3)], None,
                "log_prob entropy mean variance stddev cdf icdf"),
    "Exponential": (lambda D, r: D.Exponential(r), [pos(3)], pos(3),
                    "log_prob entropy mean variance stddev mode cdf icdf"),
    "Laplace": (lambda D, m, s: D.Laplace(m, s), [real(3), pos(3)], real(3),
                "log_prob entropy mean variance stddev mode cdf icdf"),
    "Cauchy": (lambda D, m, s: D.Cauchy(m, s), [real(3), pos(3)], real(3),
               "log_prob entropy mode cdf icdf"),
    "Gumbel": (lambda D, m, s: D.Gumbel(m, s), [real(3), pos(3)], real(3),
               "log_prob entropy mean variance stddev mode cdf icdf"),
    "HalfNormal": (lambda D, s: D.HalfNormal(s), [pos(3)], pos(3),
                   "log_prob entropy mean variance mode cdf icdf"),
    "LogNormal": (lambda D, m, s: D.LogNormal(m, s), [real(3), pos(3, high=1.0)], pos(3),
                  "log_prob entropy mean variance mode cdf icdf"),
    "Gamma": (lambda D, c, r: D.Gamma(c, r), [pos(2, 3), pos(3)], pos(2, 3),
              "log_prob entropy mean variance mode"),
    "Chi2": (lambda D, df: D.Chi2(df), [pos(3, low=2.5, high=5.0)], pos(3),
             "log_prob entropy mean variance mode"),
    "Beta": (lambda D, a, b: D.Beta(a, b), [pos(3, low=1.2), pos(3, low=1.2)], unit(3),
             "log_prob entropy mean variance mode"),
    "Dirichlet": (lambda D, c: D.Dirichlet(c), [pos(2, 4, low=1.2)], None,
                  "log_prob entropy mean variance mode"),
    "StudentT": (lambda D, df, m, s: D.StudentT(df, m, s), [pos(3, low=2.5, high=6), real(3),
                                                              pos(3)], real(3),
                 "log_prob entropy mean variance mode"),
    "Poisson": (lambda D, r: D.Poisson(r), [pos(3)], counts(3), "log_prob mean variance mode"),
    "Binomial": (lambda D, p: D.Binomial(7, probs=p), [unit(3)], counts(3),
                 "log_prob mean variance mode"),
    "BinomialLogits": (lambda D, z: D.Binomial(7, logits=z), [real(3)], counts(3),
                       "log_prob mean variance"),
    "Geometric": (lambda D, p: D.Geometric(p), [unit(3)], counts(3),
                  "log_prob entropy mean variance mode"),
    "OneHotCategorical": (lambda D, z: D.OneHotCategorical(logits=z), [real(2, 4)],
                          np.eye(4)[[1, 3]], "log_prob entropy mean variance mode"),
    "MVNScaleTril": (lambda D, m, a: D.MultivariateNormal(m, scale_tril=_tril(D.lib, a)),
                     [real(2, 3), real(3, 3) * 0.3], real(2, 3),
                     "log_prob entropy mean variance covariance_matrix precision_matrix"),
    "MVNCovariance": (lambda D, m, a: D.MultivariateNormal(m, covariance_matrix=_spd(D.lib, a)),
                      [real(3), real(2, 3, 3) * 0.3], real(2, 3),
                      "log_prob entropy variance scale_tril"),
    "MVNPrecision": (lambda D, m, a: D.MultivariateNormal(m, precision_matrix=_spd(D.lib, a)),
                     [real(3), real(3, 3) * 0.3], real(4, 3), "log_prob entropy variance"),
    "TanhNormal": (lambda D, m, s: D.TransformedDistribution(
        D.Normal(m, s), [D.AffineTransform(0.5, 2.0), D.TanhTransform()]),
        [real(3), pos(3)], unit(3) * 1.6 - 0.8, "log_prob"),
    "ComposeExpSigmoid": (lambda D, m, s: D.TransformedDistribution(
        D.Normal(m, s), D.ComposeTransform([D.SigmoidTransform(), D.ExpTransform()])),
        [real(3), pos(3)], pos(3, low=1.1, high=2.5), "log_prob cdf icdf"),
    "AffineVector": (lambda D, m, s, b: D.TransformedDistribution(
        D.Independent(D.Normal(m, s), 1), D.AffineTransform(b, s * 2, event_dim=1)),
        [real(2, 3), pos(2, 3), real(3)], real(2, 3), "log_prob"),
    "RelaxedBernoulli": (lambda D, t, z: D.RelaxedBernoulli(t, logits=z), [pos(3), real(3)],
                         unit(3), "log_prob"),
    "RelaxedOneHot": (lambda D, t, z: D.RelaxedOneHotCategorical(t, logits=z),
                      [pos(1), real(2, 4)], None, "log_prob"),
    "Mixture": (lambda D, z, m, s: D.MixtureSameFamily(D.Categorical(logits=z),
                                                       D.Normal(m, s)),
                [real(2, 3), real(2, 3), pos(2, 3)], real(5, 2), "log_prob mean variance cdf"),
    "MixtureMVN": (lambda D, z, m: D.MixtureSameFamily(
        D.Categorical(logits=z), D.Independent(D.Normal(m, m * 0 + 1.5), 1)),
        [real(3), real(3, 2)], real(4, 2), "log_prob mean variance"),
}
_SIMPLEX = RNG.dirichlet(np.ones(4), 2)
VALUES = {"Uniform": lambda lo, w: lo + 0.3 * w, "Dirichlet": lambda c: _SIMPLEX,
          "RelaxedOneHot": lambda t, z: _SIMPLEX}
PROBABILITIES = unit(3)


class _Lib:
    """``lib.distributions`` with ``lib`` itself at ``.lib`` (the builders need both)."""

    def __init__(self, lib):
        self.lib, self.module = lib, lib.distributions

    def __getattr__(self, name):
        return getattr(self.module, name)


def _stat(lib, name, what, params):
    build, _, value, _ = CASES[name]
    d = build(_Lib(lib), *params)
    if value is None:
        value = VALUES[name](*(p.detach().numpy() for p in params))
    if what in ("log_prob", "cdf"):
        return getattr(d, what)(lib.tensor(value))
    if what == "icdf":
        return d.icdf(lib.tensor(PROBABILITIES))
    return d.entropy() if what == "entropy" else getattr(d, what)


def _compare(fn, arrays, atol=1e-9, rtol=1e-7):
    """``fn(lib, tensors)`` with dualgraph and torch: the value and the gradients of all
    ``arrays`` for a random cotangent."""
    ours = [dg.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = fn(dg, ours), fn(torch, theirs)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), atol=atol,
                               rtol=rtol)
    cotangent = RNG.standard_normal(tuple(ref.shape))
    if not ref.requires_grad:
        return
    (out * dg.tensor(cotangent)).sum().backward()
    (ref * torch.tensor(cotangent)).sum().backward()
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if b.grad is None:
            continue
        assert a.grad is not None, f"no gradient for parameter {i}"
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=atol, rtol=rtol,
                                   err_msg=f"gradient of parameter {i}")


@pytest.mark.parametrize("name", list(CASES))
def test_statistics_match_torch(name):
    _, params, _, whats = CASES[name]
    for what in whats.split():
        try:
            _compare(lambda lib, ts: _stat(lib, name, what, ts), params)
        except AssertionError as error:
            raise AssertionError(f"{name}.{what}: {error}") from None
